//! The server functions of runs: start one, read one, list them, cancel, retry and fork.

// A server function's arguments are its form fields, one per field; the client stubs the macro
// generates for them cannot carry an attribute of their own.
#![allow(clippy::too_many_arguments)]

use leptos::prelude::*;

use crate::error::AppError;
use crate::page_data::RunView;

/// Starts a run and returns its id; a browser is sent on to `/runs/<id>`. The run executes in
/// the background.
#[server(endpoint = "nrllm_tool_run")]
pub async fn nrllm_tool_run(
    prompt: String,
    configuration: Option<String>,
    system_prompt: Option<String>,
    max_rounds: Option<String>,
    temperature: Option<String>,
    max_tokens: Option<String>,
    tools: Option<Vec<String>>,
    choose_tools: Option<String>,
    skills: Option<String>,
    limit_input_tokens: Option<String>,
    limit_output_tokens: Option<String>,
    limit_cost_usd: Option<String>,
    limit_requests: Option<String>,
    limit_tool_calls: Option<String>,
    limit_seconds: Option<String>,
) -> Result<String, AppError> {
    use crate::server::{request::require, request::state, wants_html};
    let who = require(nrllm_types::Role::Operator)?;
    let form = crate::api::run_form::RunForm {
        prompt,
        configuration,
        system_prompt,
        max_rounds,
        temperature,
        max_tokens,
        tools,
        choose_tools,
        skills,
        limits: crate::api::run_form::FormLimits {
            input_tokens: limit_input_tokens,
            output_tokens: limit_output_tokens,
            cost_usd: limit_cost_usd,
            requests: limit_requests,
            tool_calls: limit_tool_calls,
            seconds: limit_seconds,
        },
    };
    let state = state()?;
    crate::api::checks::accepting(&state)?;
    let configuration = form.validate(&state)?;
    crate::api::checks::run_start_allowed(&state, &who)?;
    // A caller's trace context makes the run a child in the caller's trace.
    let trace = nrllm_core::trace::RunTrace::start(crate::server::request::trace_parent());
    let run = state
        .runs
        .create_traced(configuration, &who.name, trace)
        .await?;
    state.queue.wake();
    let id = run.id.to_string();
    if wants_html() {
        leptos_axum::redirect(&format!("/runs/{id}"));
    }
    Ok(id)
}

/// One run: summary, counters, pending calls (with previews), the latest steps (or those before
/// `steps_before`), and the detail of step `step` (the latest if absent) with tab `tab` selected.
#[server(endpoint = "nrllm_run_get")]
pub async fn nrllm_run_get(
    run_id: String,
    step: Option<i64>,
    tab: Option<String>,
    steps_before: Option<i64>,
) -> Result<RunView, AppError> {
    use crate::api::waiting;
    use crate::server::{present, request::state};
    let who = crate::server::request::require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    let id = crate::api::checks::parse_run_id(&run_id)?;
    let run = state
        .store
        .get(id)
        .await
        .map_err(|err| AppError::internal("reading a run", err))?
        .ok_or_else(|| AppError::NotFound(format!("There is no run {id}.")))?;
    let events = state
        .store
        .events(id, 0)
        .await
        .map_err(|err| AppError::internal("reading a run's events", err))?;
    let pending = state.runs.pending(&run).await;
    let detail = present::step_detail(&events, step, tab.as_deref(), &state.registry);
    let mut view = present::run_view(&run, &events, steps_before, pending.as_ref(), detail);
    (view.budget, view.budget_stop) = waiting::budget_view(&state, &run, pending.as_ref(), &events);
    let verdict = state
        .sql_store
        .verify_log(id)
        .await
        .map_err(|err| AppError::internal("verifying a run's log", err))?;
    view.decide_block = crate::api::checks::decide_block(&state, &run, &who).await?;
    view.approvals = crate::api::quorum::approvals_view(&state, &run, Some(&who.name)).await?;
    view.rules_for_configuration = who.role.allows(nrllm_types::Role::Admin);
    view.children = state
        .store
        .children(id, 100)
        .await
        .map_err(|err| AppError::internal("reading the runs that go on from a run", err))?
        .iter()
        .map(present::child_view)
        .collect();
    if let Some(configuration) = &run.configuration {
        view.rules = state
            .store
            .rules_for(id, &configuration.provider)
            .await
            .map_err(|err| AppError::internal("reading a run's approval rules", err))?
            .iter()
            .map(|rule| present::rule_view(rule, crate::api::rules::ssr::may_change(&who, rule)))
            .collect();
    }
    if run.status == nrllm_core::run_store::RunStatus::Queued {
        view.summary.queue_position = state
            .store
            .queue_position(id)
            .await
            .map_err(|err| AppError::internal("reading a run's place in the queue", err))?;
    }
    view.trace = run
        .trace
        .as_ref()
        .map(|trace| present::trace_view(trace, state.trace_url_template.as_deref()));
    view.webhooks = crate::server::webhook::run_webhooks(&state.webhook_store, id)
        .await
        .map_err(|err| AppError::internal("reading a run's webhook deliveries", err))?;
    view.notifications = crate::server::notify::run_notifications(&state.notify.store, id)
        .await
        .map_err(|err| AppError::internal("reading a run's notifications", err))?;
    view.log = verdict.map(|verdict| crate::page_data::LogCheck {
        verified: verdict.is_verified(),
        failed: verdict.is_failure(),
        text: verdict.describe(),
    });
    with_unpersisted(&state, (id, run.configuration.as_ref()), &mut view);
    Ok(view)
}

/// A running segment's steps are not committed yet: `view` shows what this server has seen of
/// them, when it ends with the latest step.
#[cfg(feature = "ssr")]
fn with_unpersisted(
    state: &crate::server::AppState,
    (id, configuration): (uuid::Uuid, Option<&nrllm_core::run_store::RunConfiguration>),
    view: &mut RunView,
) {
    if !view.latest {
        return;
    }
    let last = view.last_sequence;
    let prices = state.live.prices(configuration);
    for event in state
        .live
        .unpersisted(id)
        .iter()
        .filter(|e| e.sequence > last)
    {
        let step = crate::server::present::live_step(event, &prices);
        // The budget counts what the journal holds: these steps are not in it yet.
        for limit in &mut view.budget {
            limit.add(&step.spent.unwrap_or_default());
        }
        view.steps.push(step);
        view.last_sequence = event.sequence;
    }
}

/// Cancels a queued or waiting run; `reason` goes into its steps with who cancelled it.
#[server(endpoint = "nrllm_run_cancel")]
pub async fn nrllm_run_cancel(
    run_id: String,
    reason: Option<String>,
) -> Result<crate::page_data::RunStatus, AppError> {
    use crate::server::{request::require, request::state, wants_html};
    let who = require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    let id = crate::api::checks::parse_run_id(&run_id)?;
    let reason = reason
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty());
    crate::api::checks::at_most(
        "reason",
        reason.as_deref(),
        crate::page_data::MAX_REASON_CHARS,
    )?;
    let run = state.runs.cancel(id, &who, reason.as_deref()).await?;
    if wants_html() {
        leptos_axum::redirect(&format!("/runs/{id}"));
    }
    Ok(run.status)
}

/// Starts a new run that goes on from a failed run's journal (its model call is asked again;
/// no tool of the failed run runs again); returns the new run's id.
#[server(endpoint = "nrllm_run_retry")]
pub async fn nrllm_run_retry(run_id: String) -> Result<String, AppError> {
    use crate::server::{request::require, request::state, wants_html};
    let who = require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    crate::api::checks::accepting(&state)?;
    let id = crate::api::checks::parse_run_id(&run_id)?;
    // A retry starts a run: it counts toward the caller's starts a minute.
    crate::api::checks::run_start_allowed(&state, &who)?;
    let run = state.runs.retry(id, &who).await?;
    state.queue.wake();
    let new_id = run.id.to_string();
    if wants_html() {
        leptos_axum::redirect(&format!("/runs/{new_id}"));
    }
    Ok(new_id)
}

/// Forks a run at its step `step` (a sequence number): a new run whose steps up to there are
/// copies of this run's and whose transcript is its journal up to there; it goes on with the
/// turn that step left undecided (decided again), or asks the model — with `prompt` as a new user
/// message if given. Nothing the parent ran runs again. Returns the new run's id; a browser is
/// sent on to it.
#[server(endpoint = "nrllm_run_fork")]
pub async fn nrllm_run_fork(
    run_id: String,
    step: String,
    prompt: Option<String>,
) -> Result<String, AppError> {
    use crate::server::{request::require, request::state, wants_html};
    use nrllm_core::run_service::ForkError;
    let who = require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    crate::api::checks::accepting(&state)?;
    let id = crate::api::checks::parse_run_id(&run_id)?;
    let at: i64 = step
        .trim()
        .parse()
        .map_err(|_| AppError::invalid("step", "a step's number"))?;
    let prompt = prompt.filter(|p| !p.trim().is_empty());
    crate::api::checks::at_most(
        "prompt",
        prompt.as_deref(),
        crate::api::checks::MAX_PROMPT_CHARS,
    )?;
    // A fork starts a run: it counts toward the caller's starts a minute.
    crate::api::checks::run_start_allowed(&state, &who)?;
    let run = state
        .runs
        .fork(id, at, prompt.as_deref(), &who, false)
        .await
        .map_err(|err| match err {
            ForkError::NotFound(_) => AppError::NotFound(format!("There is no run {id}.")),
            ForkError::NoStep(_) | ForkError::BeforeFirstRequest => {
                AppError::invalid("step", err.to_string())
            }
            ForkError::PromptOnPendingTurn => AppError::invalid("prompt", err.to_string()),
            ForkError::Service(err) => AppError::from(err),
        })?;
    state.queue.wake();
    tracing::info!(by = %who.name, parent = %id, at, run_id = %run.id, "run forked");
    let new_id = run.id.to_string();
    if wants_html() {
        leptos_axum::redirect(&format!("/runs/{new_id}"));
    }
    Ok(new_id)
}
