//! `/runs`: run history, newest first, with a status filter and paging.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::nrllm_runs_list;
use crate::components::{ErrorBanner, StatusBadge, BUTTON_SECONDARY, INPUT};
use crate::page_data::{RunList, RunStatus};
use crate::times::Moment;

/// The history page.
#[component]
pub fn RunsPage() -> impl IntoView {
    let query = use_query_map();
    let filter = move || {
        let q = query.read();
        (
            q.get("status"),
            q.get("before").and_then(|b| b.parse::<i64>().ok()),
        )
    };
    let page = Resource::new(filter, |(status, before)| {
        nrllm_runs_list(status, before, Some(25))
    });
    view! {
        <h1 class="text-2xl font-semibold">"Runs"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || {
                let status = filter().0.unwrap_or_default();
                Suspend::new(async move {
                    match page.await {
                        Ok(page) => view! { <RunsTable page status /> }.into_any(),
                        Err(err) => view! { <ErrorBanner error=Some(err) /> }.into_any(),
                    }
                })
            }}
        </Suspense>
    }
}

#[component]
fn RunsTable(page: RunList, status: String) -> impl IntoView {
    let options = RunStatus::all()
        .map(|s| view! { <option value=s.as_str() selected={status == s.as_str()}>{s.label()}</option> })
        .collect_view();
    let rows = page
        .runs
        .iter()
        .map(|run| {
            view! {
                <tr class="border-t border-slate-100 dark:border-slate-800" data-testid="run-row">
                    <td class="py-2 pr-3"><StatusBadge status=run.status /></td>
                    <td class="py-2 pr-3"><a href=format!("/runs/{}", run.id) class="text-indigo-700 underline dark:text-indigo-300">{run.prompt.clone()}</a></td>
                    <td class="py-2 pr-3 text-sm text-slate-500"><Moment ms=run.created_at_ms utc=run.created_at.clone() /></td>
                    <td class="py-2 pr-3 text-right text-sm">{run.rounds}</td>
                    <td class="py-2 text-right text-sm">{run.total_tokens_text()}</td>
                </tr>
            }
        })
        .collect_view();
    let empty = page.runs.is_empty();
    // Only a known status goes back into the link (the filter came from the URL).
    let status_param = RunStatus::parse(&status)
        .map(RunStatus::as_str)
        .unwrap_or("");
    let next = page
        .next_before
        .map(|before| format!("/runs?status={status_param}&before={before}"));
    view! {
        <form method="get" action="/runs" class="mt-4 flex items-end gap-2">
            <div>
                <label for="status" class="text-sm font-medium">"Status"</label>
                <select id="status" name="status" class=INPUT>
                    <option value="">"All"</option>
                    {options}
                </select>
            </div>
            <button type="submit" class=BUTTON_SECONDARY>"Filter"</button>
        </form>
        {if empty {
            view! { <p class="mt-6 text-slate-600" data-testid="no-runs">"No runs yet."</p> }.into_any()
        } else {
            view! {
                <div class="mt-4 overflow-x-auto">
                    <table class="w-full text-left">
                        <thead class="text-xs uppercase text-slate-500">
                            <tr><th class="py-2">"Status"</th><th>"Prompt"</th><th>"Started"</th><th class="text-right">"Rounds"</th><th class="text-right">"Tokens"</th></tr>
                        </thead>
                        <tbody>{rows}</tbody>
                    </table>
                </div>
            }.into_any()
        }}
        {next.map(|href| view! { <a href=href class="mt-4 inline-block underline" data-testid="older">"Older runs"</a> })}
    }
}
