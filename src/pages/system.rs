//! `/system`: what an operator checks when something seems off — the version, the database and
//! its migrations, each configuration and whether it can be used (with the reason), the tools,
//! the MCP servers (connected or failed, with the reason, and their tools), and the live
//! streams this process holds.

use leptos::prelude::*;

use crate::api::{nrllm_system_status, NrllmMcpAcceptHints, NrllmMcpReconnect, NrllmSpendCapRaise};
use crate::components::{Card, ErrorBanner, BUTTON_SECONDARY, INPUT};
use crate::field;
use crate::forms::{action, CsrfField};
use crate::page_data::system::{McpServerView, SpendRow, SpendToday, SystemView};
use nrllm_types::McpState;

/// The system page.
#[component]
pub fn SystemPage() -> impl IntoView {
    let status = Resource::new(|| (), |_| nrllm_system_status());
    view! {
        <h1 class="text-2xl font-semibold">"System"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match status.await {
                    Ok(view) => view! { <Status view /> }.into_any(),
                    Err(err) => view! { <ErrorBanner error=Some(err) /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn Status(view: SystemView) -> impl IntoView {
    let database = if view.database_ok {
        format!(
            "{}: answering, {} migrations applied",
            view.database, view.migrations
        )
    } else {
        format!(
            "{}: not answering (the cause is in the server log)",
            view.database
        )
    };
    let configurations = view
        .configurations
        .into_iter()
        .map(|c| {
            let state = match (&c.reason, c.available) {
                (_, true) => "available".to_owned(),
                (Some(reason), false) => format!("unavailable: {reason}"),
                (None, false) => "unavailable".to_owned(),
            };
            view! {
                <li data-testid="system-configuration">
                    <span class="font-mono">{format!("{} ({})", c.name, c.model)}</span>
                    " — " {state}
                </li>
            }
        })
        .collect_view();
    let can_reconnect = view.can_reconnect;
    let spend = view.spend;
    let notifications = view.notifications;
    let servers = if view.mcp_servers.is_empty() {
        view! { <p class="text-sm" data-testid="system-mcp-none">"No MCP server is configured."</p> }
            .into_any()
    } else {
        let servers = view
            .mcp_servers
            .into_iter()
            .map(|server| view! { <McpServer server can_reconnect /> })
            .collect_view();
        view! { <ul class="space-y-3 text-sm" data-testid="system-mcp">{servers}</ul> }.into_any()
    };
    view! {
        <div class="mt-4 grid gap-4 sm:grid-cols-2">
            <Card title="Server">
                <p data-testid="system-version">{format!("nrllm playground {}", view.version)}</p>
                <p class="mt-1" data-testid="system-database">{database}</p>
                <p class="mt-1" data-testid="system-live">{format!(
                    "{} run(s) running here, {} live step stream(s) open",
                    view.running_here, view.live_streams
                )}</p>
            </Card>
            <Card title="Model configurations">
                <ul class="space-y-1 text-sm">{configurations}</ul>
                <p class="mt-2 text-sm" data-testid="system-tools">{format!(
                    "Tools: {} of {} enabled",
                    view.tools_enabled, view.tools_total
                )}</p>
            </Card>
            <Card title="MCP servers">
                {servers}
                <p class="mt-2 text-xs text-slate-500">
                    "Servers are connected from "<code>"[[mcp_servers]]"</code>" in the settings file."
                </p>
            </Card>
            {notifications.map(|outbox| view! { <Outbox outbox /> })}
            <Card title="Spend today">
                <Spend spend />
            </Card>
        </div>
    }
}

/// How the notification outbox stands over the last day, and its latest failure.
#[component]
fn Outbox(outbox: crate::page_data::system::OutboxView) -> impl IntoView {
    view! {
        <Card title="Notifications (last day)">
            <p class="text-sm" data-testid="outbox">{format!(
                "{} sent, {} waiting to be sent ({} after a failed attempt), {} given up.",
                outbox.delivered, outbox.pending, outbox.retrying, outbox.failed
            )}</p>
            {outbox.last_error.map(|error| view! {
                <p class="mt-1 text-sm text-rose-700 dark:text-rose-400" data-testid="outbox-error">{format!("Last failure: {error}")}</p>
            })}
        </Card>
    }
}

/// Today's spend against the daily caps across runs, with a raise for the day per row
/// (administrators).
#[component]
fn Spend(spend: SpendToday) -> impl IntoView {
    let can_raise = spend.can_raise;
    let user_cap = match &spend.user_cap {
        Some(cap) => format!("Each user may spend {cap} a day."),
        None => "Users have no daily cap.".to_owned(),
    };
    let rows = spend
        .rows
        .into_iter()
        .map(|row| view! { <SpendLine row can_raise /> })
        .collect_view();
    view! {
        <p class="text-sm" data-testid="spend-day">{format!("{} (UTC). {user_cap}", spend.day)}</p>
        <ul class="mt-2 space-y-2 text-sm" data-testid="spend">{rows}</ul>
        <p class="mt-2 text-xs text-slate-500">
            "Caps are set by "<code>"[spend_caps]"</code>" and a configuration's "
            <code>"spend_cap_usd_per_day"</code>"; a run that reaches one waits, and goes on by itself once it has room."
        </p>
    }
}

#[component]
fn SpendLine(row: SpendRow, can_raise: bool) -> impl IntoView {
    let cap = match (&row.cap, &row.raised) {
        (Some(cap), Some(raised)) => format!("{} of {cap} (raised by {raised} today)", row.spent),
        (Some(cap), None) => format!("{} of {cap}", row.spent),
        (None, _) => format!("{} (no cap)", row.spent),
    };
    let input_id = format!("raise-{}-{}", row.scope, row.name);
    let label = format!(
        "Raise the {} {}'s cap today by (US dollars)",
        row.scope, row.name
    );
    let raise = (can_raise && row.cap.is_some()).then(|| {
        view! {
            <form method="post" action={action::<NrllmSpendCapRaise>()} class="mt-1 flex flex-wrap items-end gap-2">
                <CsrfField />
                <input type="hidden" name=field!(NrllmSpendCapRaise, scope) value=row.scope.clone() />
                <input type="hidden" name=field!(NrllmSpendCapRaise, name) value=row.name.clone() />
                <label for=input_id.clone() class="sr-only">{label}</label>
                <input id=input_id name=field!(NrllmSpendCapRaise, raise_by) inputmode="decimal" placeholder="US dollars" class=INPUT data-testid="spend-raise-by" />
                <button type="submit" class=BUTTON_SECONDARY data-testid="spend-raise">"Raise for today"</button>
            </form>
        }
    });
    let (scope_attr, name_attr) = (row.scope.clone(), row.name.clone());
    view! {
        <li data-testid="spend-row" data-scope=scope_attr data-name=name_attr data-reached=row.reached.to_string()>
            <span class="font-mono">{format!("{} {}", row.scope, row.name)}</span>
            " — " <span data-testid="spend-count">{cap}</span>
            {row.reached.then(|| view! { <span class="ml-1 font-medium text-amber-800 dark:text-amber-300">"reached: its runs wait"</span> })}
            {raise}
        </li>
    }
}

/// One MCP server: where it is, its state (with the reason it failed), and its tools.
#[component]
fn McpServer(server: McpServerView, can_reconnect: bool) -> impl IntoView {
    let state = match (server.state, &server.reason) {
        (McpState::Failed, Some(reason)) => format!("failed: {reason}"),
        (state, _) => state.to_string(),
    };
    let retry = server.retry_at.map(|at| format!("Tried again at {at}."));
    let any_held = server.tools.iter().any(|t| t.held.is_some());
    let list_changed = server.list_changed.clone();
    let held_calls = server.held_calls.clone();
    let tools = server
        .tools
        .into_iter()
        .map(|tool| {
            let what = match (&tool.refused, tool.waits, tool.rerun_after_crash) {
                (Some(reason), _, _) => format!("not joined: {reason}"),
                (None, true, true) => "waits for approval; re-run after a crash".to_owned(),
                (None, true, false) => "waits for approval".to_owned(),
                (None, false, _) => "no approval".to_owned(),
            };
            let held = tool.held.map(|held| view! { <span class="font-medium" data-testid="system-mcp-held">{format!(" — {held}")}</span> });
            view! {
                <li data-testid="system-mcp-tool">
                    <span class="font-mono">{tool.name}</span>" — "{what}{held}
                </li>
            }
        })
        .collect_view();
    let name = server.name.clone();
    let (name_attr, state_attr) = (server.name.clone(), server.state.as_str());
    view! {
        <li data-testid="system-mcp-server" data-name=name_attr data-state=state_attr>
            <p>
                <span class="font-mono font-semibold">{server.name}</span>
                " — " <span data-testid="system-mcp-state">{state}</span>
            </p>
            <p class="text-xs text-slate-500">{server.endpoint}</p>
            {server.server_info.map(|info| view! {
                <p class="text-xs text-slate-500">{format!("{info}, connected {} time(s)", server.connections)}</p>
            })}
            {retry.map(|retry| view! { <p class="text-xs text-slate-500">{retry}</p> })}
            {list_changed.map(|text| view! { <p class="text-xs text-slate-500" data-testid="system-mcp-list-changed">{text}</p> })}
            {held_calls.map(|text| view! { <p class="text-xs text-slate-500" data-testid="system-mcp-held-calls">{text}</p> })}
            <ul class="ml-4 mt-1 list-disc">{tools}</ul>
            {(can_reconnect && any_held).then(|| view! { <AcceptHints name=name.clone() /> })}
            {can_reconnect.then(|| view! {
                <form method="post" action={action::<NrllmMcpReconnect>()} class="mt-1">
                    <CsrfField />
                    <input type="hidden" name="name" value=name />
                    <button type="submit" class=BUTTON_SECONDARY data-testid="mcp-reconnect">"Reconnect"</button>
                </form>
            })}
        </li>
    }
}

/// Accepting the looser hints of a server's tools that kept their old gate (administrators).
#[component]
fn AcceptHints(name: String) -> impl IntoView {
    view! {
        <form method="post" action={action::<NrllmMcpAcceptHints>()} class="mt-1">
            <CsrfField />
            <input type="hidden" name="name" value=name />
            <button type="submit" class=BUTTON_SECONDARY data-testid="mcp-accept-hints">"Accept the looser hints: let these tools run as their server now says"</button>
        </form>
    }
}
