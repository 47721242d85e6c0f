//! `/approvals`: the inbox — every run waiting for a decision, oldest first, each with its prompt,
//! who started it and when, and the same approval panel as the run page (arguments, previews,
//! per-call choices and reasons). Filter by configuration and by tool; page on past the first 50.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::nrllm_approvals_list;
use crate::approval::{ApprovalPanel, QuestionPanel};
use crate::components::{duration_text, url_error, ErrorBanner, BUTTON_SECONDARY, INPUT};
use crate::islands::ApprovalGuard;
use crate::page_data::{ApprovalsPage as Page, RunStatus};
use crate::times::Moment;

/// The approvals inbox.
#[component]
pub fn ApprovalsPage() -> impl IntoView {
    let query = use_query_map();
    let filter = move || {
        let q = query.read();
        (q.get("configuration"), q.get("tool"), q.get("after"))
    };
    let page = Resource::new(filter, |(configuration, tool, after)| {
        nrllm_approvals_list(configuration, tool, after, None)
    });
    view! {
        <h1 class="text-2xl font-semibold">"Approvals"</h1>
        <ErrorBanner error=url_error() />
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || {
                let (configuration, tool, _) = filter();
                Suspend::new(async move {
                    match page.await {
                        Ok(page) => view! {
                            <Inbox page configuration=configuration.unwrap_or_default() tool=tool.unwrap_or_default() />
                        }.into_any(),
                        Err(err) => view! { <ErrorBanner error=Some(err) /> }.into_any(),
                    }
                })
            }}
        </Suspense>
    }
}

#[component]
fn Inbox(page: Page, configuration: String, tool: String) -> impl IntoView {
    let option = |value: &String, current: &str| {
        view! { <option value=value.clone() selected=value == current>{value.clone()}</option> }
    };
    let configurations = page
        .configurations
        .iter()
        .map(|c| option(c, &configuration))
        .collect_view();
    let tools = page.tools.iter().map(|t| option(t, &tool)).collect_view();
    // Only values the server offered go back into links (the filter came from the URL).
    let known = |value: &str, list: &[String]| {
        list.iter()
            .find(|v| *v == value)
            .cloned()
            .unwrap_or_default()
    };
    let next = page.next_after.clone().map(|after| {
        format!(
            "/approvals?configuration={}&tool={}&after={after}",
            known(&configuration, &page.configurations),
            known(&tool, &page.tools)
        )
    });
    let empty = page.runs.is_empty();
    let items = page
        .runs
        .into_iter()
        .map(|run| {
            let waited = run.summary.waiting_for_ms.map(duration_text).unwrap_or_default();
            let started = format!("started by {} at ", run.summary.requested_by);
            let rest = format!(" · {} · waiting for {waited}", run.summary.configuration);
            let (at_ms, at) = (run.summary.created_at_ms, run.summary.created_at.clone());
            view! {
                <li class="rounded-lg border border-slate-200 bg-white p-4 dark:border-slate-800 dark:bg-slate-900" data-testid="inbox-item">
                    <a href=format!("/runs/{}", run.summary.id) class="font-medium text-indigo-700 underline dark:text-indigo-300">{run.summary.prompt.clone()}</a>
                    <p class="mt-1 text-xs text-slate-500" data-testid="inbox-facts">{started}<Moment ms=at_ms utc=at />{rest}</p>
                    <p class="mt-1 text-sm">"Pending: " <span class="font-mono" data-testid="inbox-tools">{run.summary.pending_tools.join(", ")}</span></p>
                    {if run.summary.status == RunStatus::WaitingForInput {
                        view! { <QuestionPanel run /> }.into_any()
                    } else {
                        view! { <ApprovalPanel run shortcuts=false /> }.into_any()
                    }}
                </li>
            }
        })
        .collect_view();
    view! {
        <form method="get" action="/approvals" class="mt-4 flex flex-wrap items-end gap-2" data-testid="inbox-filter">
            <div>
                <label for="filter-configuration" class="text-sm font-medium">"Configuration"</label>
                <select id="filter-configuration" name="configuration" class=INPUT>
                    <option value="">"All"</option>
                    {configurations}
                </select>
            </div>
            <div>
                <label for="filter-tool" class="text-sm font-medium">"Tool"</label>
                <select id="filter-tool" name="tool" class=INPUT>
                    <option value="">"All"</option>
                    {tools}
                </select>
            </div>
            <button type="submit" class=BUTTON_SECONDARY>"Filter"</button>
        </form>
        {if empty {
            view! { <p class="mt-6 text-slate-600" data-testid="inbox-empty">"Nothing is waiting for a decision."</p> }.into_any()
        } else {
            view! {
                <ol class="mt-4 space-y-3">{items}</ol>
                <ApprovalGuard keys=false />
            }.into_any()
        }}
        {next.map(|href| view! { <a href=href class="mt-4 inline-block underline" data-testid="inbox-next">"More waiting runs"</a> })}
    }
}
