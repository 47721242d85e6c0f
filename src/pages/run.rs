//! `/runs/:id`: one run — summary strip, the approval panel while it waits, the answer, and the
//! steps (live while running) beside the selected step's detail. Every decision is a plain form
//! post and every step and tab a link (`?step=N&tab=…`), so all of it works without JavaScript;
//! the page carries a digest of the pending turn and its previews, so a decision made on a stale
//! page, or on a target that changed since, is refused.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::api::{nrllm_run_get, NrllmRunCancel, NrllmRunFork, NrllmRunRetry};
use crate::approval::ApprovalPanel;
use crate::budget::{BudgetPanel, BudgetStrip};
use crate::components::{
    duration_text, page_title, url_error, ErrorBanner, StatusBadge, TextArea, BUTTON_PRIMARY,
    BUTTON_SECONDARY, INPUT,
};
use crate::error::AppError;
use crate::field;
use crate::forms::{action, CsrfField};
use crate::islands::{ApprovalGuard, LiveSteps, StepRow};
use crate::page_data::{RunStatus, RunSummary, RunView, StepDetail};
use crate::pages::rules::RuleList;
use crate::pages::NotFound;
use crate::question::QuestionPanel;
use crate::times::{Moment, WithMoment};

/// The run page.
#[component]
pub fn RunPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let request = move || {
        let q = query.read();
        (
            params.read().get("id").unwrap_or_default(),
            q.get("step").and_then(|s| s.parse::<i64>().ok()),
            q.get("tab"),
            q.get("steps_before").and_then(|s| s.parse::<i64>().ok()),
        )
    };
    let run = Resource::new(request, |(id, step, tab, steps_before)| {
        nrllm_run_get(id, step, tab, steps_before)
    });
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
    let running = summary.status.is_live();
    // Live updates continue the list only when it ends with the latest step.
    let live = running && run.latest;
    let waiting = summary.status == RunStatus::WaitingForApproval;
    view! {
        <Title text=page_title(&format!("Run: {}", summary.prompt)) />
        <ErrorBanner error=url_error() />
        <SummaryStrip summary=summary.clone() />
        <p class="mt-1 text-xs text-slate-500 dark:text-slate-400" data-testid="model-options">{summary.model_options.clone()}</p>
        {run_notes(&run)}
        <BudgetStrip run=run.clone() />
        {(summary.status == RunStatus::WaitingForInput).then(|| view! {
            <QuestionPanel run=run.clone() />
        })}
        {(summary.status == RunStatus::WaitingForBudget).then(|| view! {
            <BudgetPanel run=run.clone() />
        })}
        {waiting.then(|| view! {
            <ApprovalPanel run=run.clone() shortcuts=true />
            <ApprovalGuard keys=true />
        })}
        {run_outcome(&run)}
        {steps_pane(&run, live)}
        {cancel_form(&run)}
    }
}

/// Where the run stands besides its steps: its place in the queue, a cancel asked for, its
/// webhooks, the run it goes on from and the runs that go on from it, and its rules.
fn run_notes(run: &RunView) -> AnyView {
    let summary = run.summary.clone();
    let running = summary.status.is_live();
    let queued = summary.status == RunStatus::Queued;
    let id = summary.id.clone();
    view! {
    {queued.then(|| view! {
        <p class="mt-2 text-sm text-slate-600 dark:text-slate-400" data-testid="queued-note">
            {match summary.queue_position {
                Some(1) => "Queued: next in line. It starts as soon as an instance has room; ".to_owned(),
                Some(n) => format!("Queued: {n} in line. It starts when an instance has room; "),
                None => "Queued. It starts when an instance has room; ".to_owned(),
            }}
            "this page follows it."
        </p>
    })}
    {(running && !queued).then(|| view! {
        <p class="mt-2 text-sm text-slate-600 dark:text-slate-400" data-testid="running-note">
            "The run is working. Steps appear as they happen; "
            <a href=format!("/runs/{id}") class="underline">"refresh"</a>
            " if they don't."
        </p>
    })}
    {summary.cancel_requested.clone().map(|text| view! {
        <p class="mt-2 text-sm text-amber-800 dark:text-amber-300" data-testid="cancel-requested">{text}</p>
    })}
    {(!run.webhooks.is_empty()).then(|| view! {
        <ul class="mt-2 text-sm text-slate-600 dark:text-slate-400" data-testid="webhooks">
            {run.webhooks.iter().map(|hook| view! {
                <li data-testid="webhook" data-state=hook.state.clone()
                    class=if hook.state == "failed" { "text-rose-700 dark:text-rose-400" } else { "" }>
                    {hook.text.clone()}
                </li>
            }).collect_view()}
        </ul>
    })}
    {(!run.notifications.is_empty()).then(|| view! {
        <ul class="mt-2 text-sm text-slate-600 dark:text-slate-400" data-testid="notifications">
            {run.notifications.iter().map(|note| view! {
                <li data-testid="notification" data-state=note.state.clone()
                    class=if note.state == "failed" { "text-rose-700 dark:text-rose-400" } else { "" }>
                    {note.text.clone()}
                </li>
            }).collect_view()}
        </ul>
    })}
    {summary.parent.clone().map(|(parent, note)| view! {
        <p class="mt-2 text-sm text-slate-600 dark:text-slate-400" data-testid="parent">
            "Goes on from " <a href=format!("/runs/{parent}") class="underline">{format!("run {}", &parent[..8.min(parent.len())])}</a>
            {format!(": {note}.")}
        </p>
    })}
    {run.trace.clone().map(trace_line)}
    {(!run.children.is_empty()).then(|| view! {
        <section class="mt-2 text-sm" data-testid="children">
            <h2 class="font-semibold">"Runs that go on from this one"</h2>
            <ul class="mt-1 space-y-1">
                {run.children.iter().map(|child| view! {
                    <li data-testid="child">
                        <a href=format!("/runs/{}", child.id) class="underline">{format!("run {}", &child.id[..8.min(child.id.len())])}</a>
                        " " <StatusBadge status=child.status />
                        {format!(" — {}; by {} at ", child.note, child.requested_by)}
                        <Moment ms=child.created_at_ms utc=child.created_at.clone() />
                    </li>
                }).collect_view()}
            </ul>
        </section>
    })}
    {(!run.rules.is_empty()).then(|| view! {
        <section class="mt-3" data-testid="run-rules">
            <h2 class="text-sm font-semibold">"Approval rules for this run"</h2>
            <RuleList rules=run.rules.clone() />
        </section>
    })}
    }
    .into_any()
}

/// The run's answer, or why it failed (with a retry for a provider failure, which asks the model
/// again from the journal: no tool re-runs).
fn run_outcome(run: &RunView) -> AnyView {
    let summary = run.summary.clone();
    let retryable = summary.termination_reason.as_deref() == Some("provider_failed");
    view! {
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
            {retryable.then(|| view! {
                <form method="post" action={action::<NrllmRunRetry>()} class="mt-3 flex items-center gap-3">
                    <CsrfField />
                    <input type="hidden" name=field!(NrllmRunRetry, run_id) value=summary.id.clone() />
                    <button type="submit" class=BUTTON_PRIMARY data-testid="retry">"Retry"</button>
                    <span class="text-sm text-slate-600 dark:text-slate-400">
                        "Starts a new run that asks the model again from this run's journal; no tool of this run runs again."
                    </span>
                </form>
            })}
        </section>
    })}
    }
    .into_any()
}

/// The steps (live while the run runs here and the list ends with the latest step) beside the
/// selected step's detail.
fn steps_pane(run: &RunView, live: bool) -> AnyView {
    let summary = run.summary.clone();
    let id = summary.id.clone();
    let selected = run.detail.as_ref().map(|d| d.step.sequence);
    let rows = run
        .steps
        .iter()
        .cloned()
        .map(|step| {
            let is_selected = Some(step.sequence) == selected;
            view! { <StepRow run_id=id.clone() step selected=is_selected /> }
        })
        .collect_view();
    view! {
    <div class="mt-4 grid gap-4 lg:grid-cols-2">
        <section class="rounded-lg border border-slate-200 bg-white p-4 dark:border-slate-800 dark:bg-slate-900">
            <div class="flex items-center justify-between">
                <h2 class="font-semibold">"Steps"</h2>
                <div class="flex items-center gap-3 text-sm">
                    {run.log.clone().map(|log| view! {
                        <span data-testid="log-check" data-verified=log.verified.to_string()
                            class=if log.verified { "text-emerald-700 dark:text-emerald-400" } else if log.failed { "font-semibold text-rose-700 dark:text-rose-400" } else { "text-slate-500 dark:text-slate-400" }>
                            {log.text}
                        </span>
                    })}
                    <a href=format!("/runs/{}/export.json", summary.id) class="underline" download="">"Export JSON"</a>
                </div>
            </div>
            {run.older_before.map(|before| view! {
                <a href=format!("/runs/{id}?steps_before={before}") class="mt-2 inline-block text-sm underline" data-testid="older-steps">"Older steps"</a>
            })}
            <LiveSteps run_id=summary.id.clone() after=run.last_sequence live budget=run.budget.clone()>
                <ol data-testid="steps" class="divide-y divide-transparent">{rows}</ol>
            </LiveSteps>
            {(!run.latest).then(|| view! {
                <a href=format!("/runs/{id}") class="mt-2 inline-block text-sm underline" data-testid="latest-steps">"Latest steps"</a>
            })}
        </section>
        <StepDetailPane run_id=summary.id.clone() detail=run.detail.clone() />
    </div>
    }
    .into_any()
}

/// Cancelling: queued and waiting runs at once, a running one at its next step (once).
fn cancel_form(run: &RunView) -> AnyView {
    let summary = run.summary.clone();
    let cancellable = RunStatus::CANCELLABLE.contains(&summary.status)
        || (summary.status == RunStatus::Running && summary.cancel_requested.is_none());
    view! {
    {cancellable.then(|| view! {
        <form method="post" action={action::<NrllmRunCancel>()} class="mt-4 flex flex-wrap items-end gap-3">
            <CsrfField />
            <input type="hidden" name=field!(NrllmRunCancel, run_id) value=summary.id.clone() />
            <label class="text-sm">
                "Why (optional, kept in the steps)"
                <input type="text" name=field!(NrllmRunCancel, reason) maxlength=crate::page_data::MAX_REASON_CHARS class=INPUT data-testid="cancel-reason" />
            </label>
            <button type="submit" class=BUTTON_SECONDARY data-testid="cancel">"Cancel this run"</button>
            {(summary.status == RunStatus::Running).then(|| view! {
                <span class="text-sm text-slate-600 dark:text-slate-400">
                    "It stops at its next step: a model call in flight is abandoned; an approved call in flight is marked outcome unknown."
                </span>
            })}
        </form>
    })}
    }
    .into_any()
}

/// The selected step's detail: its tabs as links, the selected tab's text.
#[component]
fn StepDetailPane(run_id: String, detail: Option<StepDetail>) -> impl IntoView {
    let Some(detail) = detail else {
        return view! {
            <section id="detail" class="rounded-lg border border-slate-200 bg-white p-4 text-sm text-slate-600 dark:border-slate-800 dark:bg-slate-900" data-testid="step-detail">
                "No steps yet."
            </section>
        }
        .into_any();
    };
    let sequence = detail.step.sequence;
    let tabs = detail
        .tabs
        .iter()
        .map(|tab| {
            let current = tab.key == detail.selected;
            let class = if current {
                "rounded px-2 py-1 text-xs font-medium bg-indigo-100 text-indigo-900 dark:bg-indigo-900 dark:text-indigo-100"
            } else {
                "rounded px-2 py-1 text-xs font-medium text-slate-600 underline hover:bg-slate-100 dark:text-slate-300 dark:hover:bg-slate-800"
            };
            view! {
                <a href=format!("/runs/{run_id}?step={sequence}&tab={}#detail", tab.key) class=class
                    aria-current=current.then_some("page") data-testid="detail-tab">{tab.label.clone()}</a>
            }
        })
        .collect_view();
    let text = detail
        .tabs
        .iter()
        .find(|t| t.key == detail.selected)
        .map(|t| t.text.clone())
        .unwrap_or_default();
    view! {
        <section id="detail" class="rounded-lg border border-slate-200 bg-white p-4 dark:border-slate-800 dark:bg-slate-900" data-testid="step-detail">
            <h2 class="font-semibold">
                <span class="font-mono text-xs text-slate-500">{format!("#{sequence} {} ", detail.step.kind)}</span>
                <span data-testid="detail-title">{detail.step.title.clone()}</span>
            </h2>
            <nav class="mt-2 flex flex-wrap gap-1" aria-label="Step detail">{tabs}</nav>
            <pre class="mt-2 max-h-[32rem] overflow-auto whitespace-pre-wrap break-words rounded bg-slate-50 p-2 text-xs dark:bg-slate-950" data-testid="detail-text">{text}</pre>
            <details class="mt-3 text-sm" data-testid="fork">
                    <summary class="cursor-pointer font-medium">"Fork from here"</summary>
                    <form method="post" action={action::<NrllmRunFork>()} class="mt-2 space-y-2">
                        <CsrfField />
                        <input type="hidden" name=field!(NrllmRunFork, run_id) value=run_id.clone() />
                        <input type="hidden" name=field!(NrllmRunFork, step) value=sequence.to_string() />
                        <p class="text-xs text-slate-600 dark:text-slate-400">
                            {format!("A new run starts with steps 1–{sequence} copied from this one (nothing of them runs again). If this step left calls undecided, the new run asks for a decision on them again; otherwise it asks the model, with your prompt if you write one.")}
                        </p>
                        <label for="fork-prompt" class="block text-xs font-medium">"New prompt (optional)"</label>
                        <TextArea id="fork-prompt" name=field!(NrllmRunFork, prompt) rows=2 class=INPUT maxlength=20_000 />
                        <button type="submit" class=BUTTON_SECONDARY data-testid="fork-submit">"Fork from this step"</button>
                    </form>
                </details>
        </section>
    }
    .into_any()
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
        Some(summary.tokens_fact()),
        summary.estimated_cost.clone(),
        summary.wall_ms.map(duration_text),
        summary
            .termination_reason
            .clone()
            .map(|r| format!("ended: {r}")),
        summary
            .truncated
            .then(|| "truncated at the round limit".to_owned()),
    ]
    .into_iter()
    .flatten()
    .map(|fact| view! { <li>{fact}</li> })
    .collect_view();
    let decision = summary
        .decision
        .clone()
        .map(|text| match summary.decided_at.clone() {
            Some((ms, utc)) => {
                view! { <li data-testid="decision"><WithMoment text ms utc /></li> }.into_any()
            }
            None => view! { <li data-testid="decision">{text}</li> }.into_any(),
        });
    view! {
        <header class="rounded-lg border border-slate-200 bg-white p-4 dark:border-slate-800 dark:bg-slate-900">
            <div class="flex flex-wrap items-center gap-3">
                <h1 class="line-clamp-3 break-words text-lg font-semibold" data-testid="run-prompt">{summary.prompt.clone()}</h1>
                <StatusBadge status=summary.status />
                <span class="text-sm text-slate-500">{format!("{}/{}", summary.configuration, summary.model)}</span>
            </div>
            <ul class="mt-2 flex flex-wrap gap-x-4 gap-y-1 text-sm text-slate-600 dark:text-slate-400" data-testid="summary">
                {facts}
                {decision}
            </ul>
            <p class="mt-1 font-mono text-xs text-slate-500">
                {format!("run {} · started ", summary.id)}
                <Moment ms=summary.created_at_ms utc=summary.created_at.clone() />
                {format!(" by {}", summary.requested_by)}
            </p>
        </header>
    }
}

/// Where the run stands in its distributed trace, with a link to it where one is configured.
fn trace_line(trace: crate::page_data::TraceView) -> impl IntoView {
    view! {
        <p class="mt-2 text-xs text-slate-500 dark:text-slate-400" data-testid="trace">
            "Trace " <code>{trace.trace_id.clone()}</code>
            {trace.url.clone().map(|url| view! {
                " (" <a href=url class="underline" target="_blank" rel="noopener noreferrer">"open in your tracing tool"</a> ")"
            })}
            {trace.linked_trace_id.clone().map(|linked| view! {
                ", linked to trace " <code>{linked}</code>
            })}
        </p>
    }
}
