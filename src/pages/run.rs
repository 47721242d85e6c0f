//! `/runs/:id`: one run — summary strip, step list (live while running), the answer, and the
//! approval panel while it waits. Every decision is a plain form post, so all of it works without
//! JavaScript; the page carries a digest of the pending turn so a decision made on a stale page is
//! refused.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use crate::api::nrllm_run_get;
use crate::components::{
    duration_text, url_error, ErrorBanner, StatusBadge, BUTTON_APPROVE, BUTTON_DENY,
    BUTTON_PRIMARY, BUTTON_SECONDARY, INPUT,
};
use crate::error::AppError;
use crate::islands::{DecisionShortcuts, LiveSteps};
use crate::model::{PendingCallView, PreviewView, RunSummary, RunView};
use crate::pages::NotFound;

/// The run page.
#[component]
pub fn RunPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("id").unwrap_or_default();
    let run = Resource::new(id, nrllm_run_get);
    view! {
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match run.await {
                    Ok(view) => view! { <RunDetail run=view /> }.into_any(),
                    Err(AppError::NotFound(message)) => view! { <NotFound message /> }.into_any(),
                    Err(AppError::Invalid { .. }) => view! { <NotFound message="There is no such run." /> }.into_any(),
                    Err(err) => view! { <ErrorBanner error=Some(err) /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn RunDetail(run: RunView) -> impl IntoView {
    let summary = run.summary.clone();
    let live = summary.status == "running" || summary.status == "queued";
    let waiting = summary.status == "waiting_for_approval";
    let cancellable =
        waiting || summary.status == "queued" || summary.status == "waiting_for_input";
    let id = summary.id.clone();
    view! {
        <ErrorBanner error=url_error() />
        <SummaryStrip summary=summary.clone() />
        {live.then(|| view! {
            <p class="mt-2 text-sm text-slate-600 dark:text-slate-400" data-testid="running-note">
                "The run is working. Steps appear as they happen; "
                <a href=format!("/runs/{id}") class="underline">"refresh"</a>
                " if they don't."
            </p>
        })}
        {waiting.then(|| view! { <ApprovalPanel run=run.clone() /> })}
        {summary.final_answer.clone().map(|answer| view! {
            <section class="mt-4 rounded-lg border border-emerald-200 bg-emerald-50 p-4 dark:border-emerald-900 dark:bg-emerald-950">
                <h2 class="text-sm font-semibold">"Answer"</h2>
                <p class="mt-1 whitespace-pre-wrap" data-testid="final-answer">{answer}</p>
            </section>
        })}
        {summary.error_summary.clone().map(|message| view! {
            <section role="alert" class="mt-4 rounded-lg border border-rose-200 bg-rose-50 p-4 dark:border-rose-900 dark:bg-rose-950">
                <h2 class="text-sm font-semibold">"The run failed"</h2>
                <p class="mt-1" data-testid="run-error">{message}</p>
            </section>
        })}
        <section class="mt-4 rounded-lg border border-slate-200 bg-white p-4 dark:border-slate-800 dark:bg-slate-900">
            <div class="flex items-center justify-between">
                <h2 class="font-semibold">"Steps"</h2>
                <a href=format!("/runs/{}/export.json", summary.id) class="text-sm underline" download="">"Export JSON"</a>
            </div>
            <LiveSteps run_id=summary.id.clone() steps=run.steps.clone() live />
        </section>
        {cancellable.then(|| view! {
            <form method="post" action="/api/nrllm_run_cancel" class="mt-4">
                <input type="hidden" name="run_id" value=summary.id.clone() />
                <button type="submit" class=BUTTON_SECONDARY>"Cancel this run"</button>
            </form>
        })}
    }
}

#[component]
fn SummaryStrip(summary: RunSummary) -> impl IntoView {
    let pending = if summary.pending_tools.is_empty() {
        String::new()
    } else {
        format!(" (+{} pending)", summary.pending_tools.len())
    };
    let facts = [
        Some(format!("rounds {}", summary.rounds)),
        Some(format!("tool calls {}{pending}", summary.tool_calls)),
        Some(format!(
            "tokens {} ({} + {})",
            summary.total_tokens, summary.prompt_tokens, summary.completion_tokens
        )),
        summary.estimated_cost.clone(),
        summary.wall_ms.map(duration_text),
        summary
            .termination_reason
            .clone()
            .map(|r| format!("ended: {r}")),
        summary
            .truncated
            .then(|| "truncated at the round limit".to_owned()),
        summary.decision.clone(),
    ]
    .into_iter()
    .flatten()
    .map(|fact| view! { <li>{fact}</li> })
    .collect_view();
    view! {
        <header class="rounded-lg border border-slate-200 bg-white p-4 dark:border-slate-800 dark:bg-slate-900">
            <div class="flex flex-wrap items-center gap-3">
                <h1 class="text-lg font-semibold" data-testid="run-prompt">{summary.prompt.clone()}</h1>
                <StatusBadge status=summary.status.clone() />
                <span class="text-sm text-slate-500">{format!("{}/{}", summary.configuration, summary.model)}</span>
            </div>
            <ul class="mt-2 flex flex-wrap gap-x-4 gap-y-1 text-sm text-slate-600 dark:text-slate-400" data-testid="summary">
                {facts}
            </ul>
            <p class="mt-1 font-mono text-xs text-slate-500">{format!("run {} · started {} by {}", summary.id, summary.created_at, summary.requested_by)}</p>
        </header>
    }
}

#[component]
fn Preview(preview: PreviewView) -> impl IntoView {
    match preview {
        PreviewView::Change { target, lines } => {
            let lines = lines
                .into_iter()
                .map(|line| {
                    let class = match line.op {
                        '-' => "bg-rose-50 text-rose-900 dark:bg-rose-950 dark:text-rose-200",
                        '+' => "bg-emerald-50 text-emerald-900 dark:bg-emerald-950 dark:text-emerald-200",
                        _ => "text-slate-600 dark:text-slate-400",
                    };
                    view! { <div class=class>{format!("{} {}", line.op, line.text)}</div> }
                })
                .collect_view();
            view! {
                <div class="mt-2" data-testid="preview">
                    <p class="text-xs font-medium text-slate-500">{format!("Effect on {target}")}</p>
                    <pre class="mt-1 overflow-auto whitespace-pre-wrap rounded border border-slate-200 p-2 text-xs dark:border-slate-700">{lines}</pre>
                </div>
            }
            .into_any()
        }
        PreviewView::Text { text } => view! {
            <div class="mt-2" data-testid="preview">
                <p class="text-xs font-medium text-slate-500">"Effect"</p>
                <pre class="mt-1 whitespace-pre-wrap rounded border border-slate-200 p-2 text-xs dark:border-slate-700">{text}</pre>
            </div>
        }
        .into_any(),
        PreviewView::Unavailable { reason } => view! {
            <p class="mt-2 text-xs text-amber-800 dark:text-amber-300" data-testid="preview">{format!("No preview: {reason}")}</p>
        }
        .into_any(),
    }
}

#[component]
fn PendingCall(index: usize, call: PendingCallView) -> impl IntoView {
    let name = |field: &str| format!("calls[{index}][{field}]");
    let id = |field: &str| format!("call-{index}-{field}");
    view! {
        <li class="rounded-md border border-slate-200 p-3 dark:border-slate-700" data-testid="pending-call" data-tool=call.tool.clone()>
            <input type="hidden" name=name("call_id") value=call.call_id.clone() />
            <div class="flex flex-wrap items-center gap-2">
                <span class="font-mono font-semibold">{call.tool.clone()}</span>
                {if call.gated {
                    view! { <span class="rounded bg-amber-100 px-1 text-xs text-amber-900 dark:bg-amber-900/40 dark:text-amber-200">"needs approval"</span> }.into_any()
                } else {
                    view! { <span class="rounded bg-slate-100 px-1 text-xs dark:bg-slate-800">"held with this turn"</span> }.into_any()
                }}
            </div>
            <pre class="mt-2 overflow-auto whitespace-pre-wrap rounded bg-slate-50 p-2 text-xs dark:bg-slate-950" data-testid="call-arguments">{call.arguments.clone()}</pre>
            {call.preview.clone().map(|preview| view! { <Preview preview /> })}
            <fieldset class="mt-3 flex flex-wrap gap-4 text-sm">
                <legend class="sr-only">{format!("Decision for {}", call.tool)}</legend>
                <label class="flex items-center gap-1">
                    <input type="radio" name=name("choice") value="approve" checked=true id=id("approve") />" Approve"
                </label>
                <label class="flex items-center gap-1">
                    <input type="radio" name=name("choice") value="deny" id=id("deny") />" Deny"
                </label>
                <label class="flex items-center gap-1">
                    <input type="radio" name=name("choice") value="edit" id=id("edit") />" Approve with edited arguments"
                </label>
            </fieldset>
            <div class="mt-2 grid gap-2 sm:grid-cols-2">
                <div>
                    <label for=id("arguments") class="text-xs font-medium">"Edited arguments (JSON, used with “edited”)"</label>
                    <textarea id=id("arguments") name=name("arguments") rows="4" class=format!("{INPUT} font-mono text-xs")>{call.arguments.clone()}</textarea>
                </div>
                <div>
                    <label for=id("reason") class="text-xs font-medium">"Reason if denied (the model reads it)"</label>
                    <input id=id("reason") name=name("reason") class=INPUT />
                </div>
            </div>
        </li>
    }
}

#[component]
fn ApprovalPanel(run: RunView) -> impl IntoView {
    let count = run.pending.len();
    let calls = run
        .pending
        .iter()
        .cloned()
        .enumerate()
        .map(|(index, call)| view! { <PendingCall index call /> })
        .collect_view();
    view! {
        <section class="mt-4 rounded-lg border-2 border-amber-300 bg-amber-50/50 p-4 dark:border-amber-800 dark:bg-amber-950/30" data-testid="approval-panel">
            <h2 class="font-semibold">{format!("Needs your decision — {count} call(s) hold this turn")}</h2>
            <form method="post" action="/api/nrllm_tool_resume" class="mt-3 space-y-3">
                <input type="hidden" name="run_id" value=run.summary.id.clone() />
                <input type="hidden" name="digest" value=run.digest.clone().unwrap_or_default() />
                <ol class="space-y-3">{calls}</ol>
                <div>
                    <label for="reason" class="text-sm font-medium">"Reason (shown to the model when you deny all)"</label>
                    <input id="reason" name="reason" class=INPUT />
                </div>
                <div class="flex flex-wrap items-center gap-2">
                    <button type="submit" name="decision" value="approve_all" id="approve-all" class=BUTTON_APPROVE>"Approve all (a)"</button>
                    <button type="submit" name="decision" value="deny_all" id="deny-all" class=BUTTON_DENY>"Deny all (d)"</button>
                    <button type="submit" name="decision" value="per_call" id="decide-per-call" class=BUTTON_PRIMARY>"Apply the choices above"</button>
                    <DecisionShortcuts />
                </div>
            </form>
        </section>
    }
}
