//! `/system`: what an operator checks when something seems off — the version, the database and
//! its migrations, each configuration and whether it can be used (with the reason), the tools,
//! and the live streams this process holds.

use leptos::prelude::*;

use crate::api::nrllm_system_status;
use crate::components::{Card, ErrorBanner};
use crate::model::SystemView;

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
        </div>
    }
}
