//! A run as its page and the run list show it: the summary, the whole view, its children.

use nrllm_core::clock::format_utc;
use nrllm_core::clock::now_ms;
use nrllm_core::run_service::PendingTurn;
use nrllm_core::run_store::{RunRecord, RunStatus, StoredEvent};
use nrllm_core::SuspendedState;

use super::pending::*;
use super::steps::*;
use crate::page_data::{
    BudgetStopView, ChildView, LimitView, RunSummary, RunView, StepDetail, STEP_WINDOW,
};

/// The run's estimated cost (`at least` it, when some usage was not reported).
fn cost_text(run: &RunRecord) -> Option<String> {
    let at_least = match run.counters.usage.is_complete() {
        true => "",
        false => "at least ",
    };
    run.estimated_cost_micros
        .map(|micros| format!("{at_least}${:.4}", micros as f64 / 1_000_000.0))
}

/// The summary of a run.
/// "approved by bob at …": the run's last decision, if one was made.
pub fn decided(run: &RunRecord) -> Option<String> {
    match (&run.decision, &run.decided_by, run.decided_at_ms) {
        (Some(decision), Some(by), Some(at)) => {
            Some(format!("{decision} by {by} at {}", format_utc(at)))
        }
        _ => None,
    }
}

pub fn summary(run: &RunRecord) -> RunSummary {
    let configuration = run.configuration.as_ref();
    let pending_tools = run
        .suspended_state
        .as_deref()
        .filter(|_| RunStatus::WAITING.contains(&run.status))
        .and_then(|text| SuspendedState::from_json(text).ok())
        .map(|state| state.pending.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    let started = run.started_at_ms.unwrap_or(run.created_at_ms);
    // While it waits: by when to decide.
    let deadline = run
        .approval_deadline_ms
        .filter(|_| RunStatus::WAITING.contains(&run.status));
    let wall_ms = match (run.finished_at_ms, run.status) {
        (Some(finished), _) => Some(finished - started),
        (None, RunStatus::Running) => Some(now_ms() - started),
        _ => Some(run.updated_at_ms - started),
    };
    // A run waiting for its next decision shows no earlier one here (the step list has those).
    let decision = decided(run).filter(|_| !RunStatus::WAITING.contains(&run.status));
    RunSummary {
        id: run.id.to_string(),
        status: run.status,
        prompt: configuration.map(|c| c.prompt.clone()).unwrap_or_default(),
        configuration: configuration
            .map(|c| c.provider.clone())
            .unwrap_or_default(),
        model: configuration.map(|c| c.model.clone()).unwrap_or_default(),
        requested_by: run.requested_by.clone(),
        created_at: format_utc(run.created_at_ms),
        created_at_ms: run.created_at_ms,
        updated_at_ms: run.updated_at_ms,
        rounds: run.counters.iterations,
        tool_calls: run.counters.tool_calls,
        prompt_tokens: run.counters.usage.prompt_tokens,
        completion_tokens: run.counters.usage.completion_tokens,
        total_tokens: run.counters.usage.total(),
        unreported_usage: run.counters.usage.unreported,
        usage_parts: (
            run.counters.usage.cached_input_tokens,
            run.counters.usage.cache_write_tokens,
            run.counters.usage.reasoning_tokens,
        ),
        estimated_cost: cost_text(run),
        wall_ms,
        truncated: run.truncated,
        termination_reason: run.termination_reason.clone(),
        error_summary: run.error_summary.clone(),
        final_answer: run.final_answer.clone(),
        decided_by: decision.as_ref().and(run.decided_by.clone()),
        decided_at: decision
            .as_ref()
            .and(run.decided_at_ms)
            .map(|at| (at, format_utc(at))),
        decision,
        waiting_for_ms: RunStatus::WAITING
            .contains(&run.status)
            .then(|| now_ms() - run.updated_at_ms),
        deadline: deadline.map(|deadline| deadline_text(deadline, now_ms())),
        deadline_at: deadline.map(|deadline| (deadline, format_utc(deadline))),
        pending_tools,
        queue_position: None,
        model_options: configuration
            .map(|c| model_options_text(&c.settings))
            .unwrap_or_default(),
        parent: configuration
            .and_then(|c| c.continues.as_ref())
            .map(|c| (c.parent.to_string(), c.note.clone())),
        cancel_requested: cancel_text(run),
    }
}

/// "olga asked to cancel this run (\"why\"); …", while a running run has a cancel asked of it.
fn cancel_text(run: &RunRecord) -> Option<String> {
    let request = run
        .cancel_requested
        .as_ref()
        .filter(|_| run.status == RunStatus::Running)?;
    let why = request
        .reason
        .as_deref()
        .map(|reason| format!(" (\"{reason}\")"))
        .unwrap_or_default();
    Some(format!(
        "{} asked to cancel this run{why}; it stops at its next step.",
        request.by
    ))
}

/// The model options a run uses and where each came from.
pub fn model_options_text(settings: &nrllm_core::RunSettings) -> String {
    let options = &settings.model;
    let source = |name: &str| {
        if options.from_configuration.iter().any(|n| n == name) {
            "configuration"
        } else {
            "form"
        }
    };
    let temperature = match options.temperature {
        Some(t) => format!("temperature {t} ({})", source("temperature")),
        None => "temperature: the provider's default".to_owned(),
    };
    let max_tokens = match options.max_tokens {
        Some(n) => format!("max tokens {n} ({})", source("max_tokens")),
        None => "max tokens: the provider's default".to_owned(),
    };
    format!(
        "{temperature} · {max_tokens} · max rounds {}",
        settings.max_rounds
    )
}

/// "Decide by <time> (2 h 5 min left)", or that the time ran out.
pub fn deadline_text(deadline_ms: i64, now_ms: i64) -> String {
    let left = (deadline_ms - now_ms) / 1000;
    if left <= 0 {
        return format!(
            "The time to decide ran out at {}: the turn expires now, and none of its calls runs.",
            format_utc(deadline_ms)
        );
    }
    let left_text = match left {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min", s / 60),
        s if s < 86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        s => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    };
    format!(
        "Decide by {} ({left_text} left); after that the turn expires and none of its calls runs.",
        format_utc(deadline_ms)
    )
}

/// The whole page model of one run. `pending` is its turn waiting for a decision, if any; the
/// steps are the [`STEP_WINDOW`] before `steps_before` (the latest if `None`).
pub fn run_view(
    run: &RunRecord,
    events: &[StoredEvent],
    steps_before: Option<i64>,
    pending: Option<&PendingTurn>,
    detail: Option<StepDetail>,
) -> RunView {
    let run_id = run.id.to_string();
    let end = match steps_before {
        Some(before) => events.partition_point(|e| e.sequence < before),
        None => events.len(),
    };
    let start = end.saturating_sub(STEP_WINDOW);
    RunView {
        summary: summary(run),
        steps: steps(&events[start..end]),
        older_before: (start > 0).then(|| events[start].sequence),
        latest: end == events.len(),
        detail,
        pending: pending
            .map(|p| pending_calls(p, &run_id))
            .unwrap_or_default(),
        digest: pending.map(|p| p.digest.clone()),
        last_sequence: run
            .last_sequence
            .max(events.last().map(|e| e.sequence).unwrap_or(0)),
        log: None,
        decide_block: None,
        webhooks: Vec::new(),
        notifications: Vec::new(),
        rules_for_configuration: false,
        rules: Vec::new(),
        children: Vec::new(),
        budget: Vec::new(),
        budget_stop: None,
        approvals: None,
        trace: None,
    }
}

/// The run's budget as its page shows it: each limit set, used against its value (the counters
/// of its waiting state when it waits: they hold its running time), and where it stopped when it
/// waits at its budget. The limits are those it runs with now: its waiting state's, else those
/// the last raise among `events` gave it, else its configuration's. `cost_micros`: what it cost
/// so far, if its configuration has prices.
pub fn budget(
    run: &RunRecord,
    pending: Option<&PendingTurn>,
    events: &[StoredEvent],
    cost_micros: Option<i64>,
) -> (Vec<LimitView>, Option<BudgetStopView>) {
    use nrllm_core::events::Event;
    use nrllm_core::state::LimitKind;
    let raised = || {
        events.iter().rev().find_map(|e| match e.event() {
            Some(Event::BudgetDecided { raised, .. }) => raised,
            _ => None,
        })
    };
    let limits = pending
        .map(|p| p.state.settings.limits)
        .or_else(raised)
        .or_else(|| run.configuration.as_ref().map(|c| c.settings.limits));
    let Some(limits) = limits else {
        return (Vec::new(), None);
    };
    let counters = pending.map_or(run.counters, |p| p.state.counters);
    let views = LimitKind::ALL
        .into_iter()
        .filter_map(|kind| {
            let cap = limits.get(kind)?;
            let used = counters.used(kind, cost_micros);
            Some(LimitView {
                kind,
                label: kind.label().to_owned(),
                used_count: used,
                limit_count: cap,
                used: used.map_or_else(|| "—".to_owned(), |u| kind.show(u)),
                limit: kind.show(cap),
                reached: used.is_some_and(|u| u >= cap),
            })
        })
        .collect();
    let stop = pending.and_then(|p| p.state.budget).map(|stop| {
        // The least value shown in the unit typed: dollars and seconds rounded up.
        let least = match stop.limit {
            LimitKind::CostMicros | LimitKind::WallMs => {
                let scale = if stop.limit == LimitKind::WallMs {
                    1_000
                } else {
                    1_000_000
                };
                let rounded = stop.needed().div_ceil(scale / 100) * (scale / 100);
                format!("{:.2}", rounded as f64 / scale as f64)
            }
            _ => stop.needed().to_string(),
        };
        BudgetStopView {
            explanation: stop.explain(),
            limit: stop.limit.label().to_owned(),
            unit: stop.limit.unit().to_owned(),
            least,
            daily: stop.daily.is_some(),
        }
    });
    (views, stop)
}

/// A run that goes on from another, as that one lists it.
pub fn child_view(run: &RunRecord) -> ChildView {
    ChildView {
        id: run.id.to_string(),
        status: run.status,
        note: run
            .configuration
            .as_ref()
            .and_then(|c| c.continues.as_ref())
            .map(|c| c.note.clone())
            .unwrap_or_default(),
        requested_by: run.requested_by.clone(),
        created_at: format_utc(run.created_at_ms),
        created_at_ms: run.created_at_ms,
    }
}

/// A run's trace as its page shows it, with the link `template` makes (`{trace_id}` replaced).
pub fn trace_view(
    trace: &nrllm_core::trace::RunTrace,
    template: Option<&str>,
) -> crate::page_data::TraceView {
    crate::page_data::TraceView {
        trace_id: trace.trace_id.clone(),
        span_id: trace.span_id.clone(),
        parent_span_id: trace.parent_span_id.clone(),
        linked_trace_id: trace.link.as_ref().map(|link| link.trace_id.clone()),
        url: template.map(|template| template.replace("{trace_id}", &trace.trace_id)),
    }
}
