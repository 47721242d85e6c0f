//! `/approvals`: every run waiting for a decision, oldest first, with its age and pending tools;
//! approve or deny from here, or open the run.

use leptos::prelude::*;

use crate::api::nrllm_approvals_list;
use crate::components::{duration_text, url_error, ErrorBanner, BUTTON_APPROVE, BUTTON_DENY};

/// The approvals inbox.
#[component]
pub fn ApprovalsPage() -> impl IntoView {
    let waiting = Resource::new(|| (), |_| nrllm_approvals_list());
    view! {
        <h1 class="text-2xl font-semibold">"Approvals"</h1>
        <ErrorBanner error=url_error() />
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match waiting.await {
                    Ok(runs) if runs.is_empty() => view! {
                        <p class="mt-6 text-slate-600" data-testid="inbox-empty">"Nothing is waiting for a decision."</p>
                    }.into_any(),
                    Ok(runs) => {
                        let items = runs.into_iter().map(|run| {
                            let waited = run.summary.waiting_for_ms.map(duration_text).unwrap_or_default();
                            let tools = run.summary.pending_tools.join(", ");
                            view! {
                                <li class="rounded-lg border border-slate-200 bg-white p-4 dark:border-slate-800 dark:bg-slate-900" data-testid="inbox-item">
                                    <div class="flex flex-wrap items-baseline justify-between gap-2">
                                        <a href=format!("/runs/{}", run.summary.id) class="font-medium text-indigo-700 underline dark:text-indigo-300">{run.summary.prompt.clone()}</a>
                                        <span class="text-xs text-slate-500">{format!("waiting for {waited} · started {}", run.summary.created_at)}</span>
                                    </div>
                                    <p class="mt-1 text-sm">"Pending: " <span class="font-mono" data-testid="inbox-tools">{tools}</span></p>
                                    <form method="post" action="/api/nrllm_tool_resume" class="mt-2 flex flex-wrap items-center gap-2">
                                        <input type="hidden" name="run_id" value=run.summary.id.clone() />
                                        <input type="hidden" name="digest" value=run.digest.clone().unwrap_or_default() />
                                        <input name="reason" aria-label="Reason if denied" placeholder="Reason if denied"
                                            class="rounded-md border border-slate-300 px-2 py-1 text-sm dark:border-slate-700 dark:bg-slate-950" />
                                        <button type="submit" name="decision" value="approve_all" class=BUTTON_APPROVE>"Approve"</button>
                                        <button type="submit" name="decision" value="deny_all" class=BUTTON_DENY>"Deny"</button>
                                    </form>
                                </li>
                            }
                        }).collect_view();
                        view! { <ol class="mt-4 space-y-3">{items}</ol> }.into_any()
                    }
                    Err(err) => view! { <ErrorBanner error=Some(err) /> }.into_any(),
                }
            })}
        </Suspense>
    }
}
