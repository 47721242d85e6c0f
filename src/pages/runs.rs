//! `/runs`: run history, newest first — status (with why it ended), prompt, configuration, who
//! started it and who decided, cost, duration and when — filtered by status, configuration,
//! requester, a range of days and words of the prompt or the answer; paged by key; downloadable
//! as CSV or JSON with the same filters.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;
use leptos_router::location::Url;

use crate::api::nrllm_runs_list;
use crate::components::{duration_text, ErrorBanner, StatusBadge, BUTTON_SECONDARY, INPUT};
use crate::page_data::{RunList, RunStatus, RunSummary};
use crate::times::Moment;

/// The run list's filter fields, as the URL carries them (and `after`, the page's cursor).
const FIELDS: [&str; 7] = [
    "status",
    "configuration",
    "requester",
    "from",
    "to",
    "q",
    "after",
];

/// The history page.
#[component]
pub fn RunsPage() -> impl IntoView {
    let query = use_query_map();
    let fields = move || {
        let q = query.read();
        FIELDS.map(|name| q.get(name))
    };
    let page = Resource::new(fields, |f| {
        let [status, configuration, requester, from, to, q, after] = f;
        nrllm_runs_list(
            status,
            None,
            Some(25),
            configuration,
            requester,
            from,
            to,
            q,
            after,
        )
    });
    view! {
        <h1 class="text-2xl font-semibold">"Runs"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || {
                let shown = fields();
                Suspend::new(async move {
                    match page.await {
                        Ok(page) => view! { <RunsTable page shown /> }.into_any(),
                        Err(err) => view! {
                            <Filters shown />
                            <ErrorBanner error=Some(err) />
                        }.into_any(),
                    }
                })
            }}
        </Suspense>
    }
}

/// The filters as a query string (without the cursor), each value escaped.
fn filters_query(shown: &[Option<String>; 7]) -> String {
    FIELDS
        .iter()
        .zip(shown)
        .take(6)
        .filter_map(|(name, value)| {
            let value = value.as_deref().filter(|v| !v.trim().is_empty())?;
            Some(format!("{name}={}", Url::escape(value)))
        })
        .collect::<Vec<_>>()
        .join("&")
}

#[component]
fn Filters(shown: [Option<String>; 7]) -> impl IntoView {
    let [status, configuration, requester, from, to, q, _] = shown;
    let status = status.unwrap_or_default();
    let options = RunStatus::all()
        .map(|s| view! { <option value=s.as_str() selected={status == s.as_str()}>{s.label()}</option> })
        .collect_view();
    let text = |id: &'static str,
                label: &'static str,
                kind: &'static str,
                value: Option<String>| {
        view! {
            <div>
                <label for=id class="text-sm font-medium">{label}</label>
                <input id=id name=id.trim_start_matches("runs-") type=kind class=INPUT value=value.unwrap_or_default() maxlength="200" />
            </div>
        }
    };
    view! {
        <form method="get" action="/runs" class="mt-4 flex flex-wrap items-end gap-2" role="search" data-testid="runs-filter">
            {text("runs-q", "Words", "search", q)}
            <div>
                <label for="runs-status" class="text-sm font-medium">"Status"</label>
                <select id="runs-status" name="status" class=INPUT>
                    <option value="">"All"</option>
                    {options}
                </select>
            </div>
            {text("runs-configuration", "Configuration", "text", configuration)}
            {text("runs-requester", "Started by", "text", requester)}
            {text("runs-from", "From (UTC day)", "date", from)}
            {text("runs-to", "To (UTC day)", "date", to)}
            <button type="submit" class=BUTTON_SECONDARY>"Filter"</button>
        </form>
    }
}

#[component]
fn RunRow(run: RunSummary) -> impl IntoView {
    let ended = run
        .termination_reason
        .clone()
        .filter(|_| run.status.is_terminal());
    let decided = run.decided_by.clone().unwrap_or_default();
    view! {
        <tr class="border-t border-slate-100 align-top dark:border-slate-800" data-testid="run-row">
            <td class="py-2 pr-3">
                <StatusBadge status=run.status />
                {ended.map(|reason| view! { <div class="mt-1 text-xs text-slate-500" data-testid="run-reason">{reason}</div> })}
            </td>
            <td class="max-w-md py-2 pr-3"><a href=format!("/runs/{}", run.id) class="text-indigo-700 underline dark:text-indigo-300">{run.prompt.clone()}</a></td>
            <td class="py-2 pr-3 text-sm" data-testid="run-configuration">{run.configuration.clone()}</td>
            <td class="py-2 pr-3 text-sm" data-testid="run-requester">{run.requested_by.clone()}</td>
            <td class="py-2 pr-3 text-sm" data-testid="run-decider">{decided}</td>
            <td class="py-2 pr-3 text-right text-sm" data-testid="run-cost">{run.estimated_cost.clone().unwrap_or_default()}</td>
            <td class="py-2 pr-3 text-right text-sm" data-testid="run-duration">{run.wall_ms.map(duration_text).unwrap_or_default()}</td>
            <td class="py-2 pr-3 text-sm text-slate-500"><Moment ms=run.created_at_ms utc=run.created_at.clone() /></td>
            <td class="py-2 pr-3 text-right text-sm">{run.rounds}</td>
            <td class="py-2 text-right text-sm">{run.total_tokens_text()}</td>
        </tr>
    }
}

#[component]
fn RunsTable(page: RunList, shown: [Option<String>; 7]) -> impl IntoView {
    let filters = filters_query(&shown);
    let joined = |rest: &str| match (filters.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_owned(),
        (false, true) => filters.clone(),
        (false, false) => format!("{filters}&{rest}"),
    };
    let next = page
        .next_after
        .as_deref()
        .map(|after| format!("/runs?{}", joined(&format!("after={}", Url::escape(after)))));
    let downloads = format!("?{}", joined(""));
    let empty = page.runs.is_empty();
    let rows = page
        .runs
        .into_iter()
        .map(|run| view! { <RunRow run /> })
        .collect_view();
    let heading = |text: &'static str| view! { <th scope="col" class="py-2 pr-3">{text}</th> };
    view! {
        <Filters shown />
        <p class="mt-2 text-sm">
            "Download these runs: "
            <a href=format!("/runs/export.csv{downloads}") class="underline" data-testid="export-csv">"CSV"</a>
            " · "
            <a href=format!("/runs/export.json{downloads}") class="underline" data-testid="export-json">"JSON"</a>
        </p>
        {if empty {
            view! { <p class="mt-6 text-slate-600" data-testid="no-runs">"No runs match."</p> }.into_any()
        } else {
            view! {
                <div class="mt-4 overflow-x-auto">
                    <table class="w-full text-left">
                        <thead class="text-xs uppercase text-slate-500">
                            <tr>
                                {heading("Status")}{heading("Prompt")}{heading("Configuration")}
                                {heading("Started by")}{heading("Decided by")}
                                <th scope="col" class="py-2 pr-3 text-right">"Cost"</th>
                                <th scope="col" class="py-2 pr-3 text-right">"Duration"</th>
                                {heading("Started")}
                                <th scope="col" class="py-2 pr-3 text-right">"Rounds"</th>
                                <th scope="col" class="py-2 text-right">"Tokens"</th>
                            </tr>
                        </thead>
                        <tbody>{rows}</tbody>
                    </table>
                </div>
            }.into_any()
        }}
        {next.map(|href| view! { <a href=href class="mt-4 inline-block underline" data-testid="older">"Older runs"</a> })}
    }
}
