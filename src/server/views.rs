//! Turns stored runs and events into the page models of `crate::model`.

use nrllm_core::clock::format_utc;
use nrllm_core::clock::now_ms;
use nrllm_core::events::{transcript_at, Event};
use nrllm_core::preview::PreviewOutcome;
use nrllm_core::question::Question;
use nrllm_core::registry::ToolRegistry;
use nrllm_core::rules::{ApprovalRule, RuleScope};
use nrllm_core::service::PendingTurn;
use nrllm_core::store::{RunRecord, RunStatus, SequencedEvent, StoredEvent};
use nrllm_core::tool::Effect;
use nrllm_core::transcript::{ToolCall, ToolOutcome};
use nrllm_core::{Choice, SuspendedState};

use super::diff;
use crate::model::{
    CallState, ChildView, FieldView, PendingCallView, PreviewView, QuestionView, RuleView,
    RunSummary, RunView, StepDetail, StepTab, StepView, STEP_WINDOW,
};

fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// Pretty JSON for a call's raw argument text (as given if it is not JSON).
pub fn pretty_arguments(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .map(|value| pretty(&value))
        .unwrap_or_else(|_| arguments.to_owned())
}

/// The summary of a run.
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
    let wall_ms = match (run.finished_at_ms, run.status) {
        (Some(finished), _) => Some(finished - started),
        (None, RunStatus::Running) => Some(now_ms() - started),
        _ => Some(run.updated_at_ms - started),
    };
    // A run waiting for its next decision shows no earlier one here (the step list has those).
    let decision = match (&run.decision, &run.decided_by, run.decided_at_ms) {
        (Some(decision), Some(by), Some(at)) if !RunStatus::WAITING.contains(&run.status) => {
            Some(format!("{decision} by {by} at {}", format_utc(at)))
        }
        _ => None,
    };
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
        estimated_cost: run
            .estimated_cost_micros
            .map(|micros| format!("${:.4}", micros as f64 / 1_000_000.0)),
        wall_ms,
        truncated: run.truncated,
        termination_reason: run.termination_reason.clone(),
        error_summary: run.error_summary.clone(),
        final_answer: run.final_answer.clone(),
        decision,
        waiting_for_ms: RunStatus::WAITING
            .contains(&run.status)
            .then(|| now_ms() - run.updated_at_ms),
        deadline: run
            .approval_deadline_ms
            .filter(|_| RunStatus::WAITING.contains(&run.status))
            .map(|deadline| deadline_text(deadline, now_ms())),
        pending_tools,
        queue_position: None,
        model_options: configuration
            .map(|c| model_options_text(&c.settings))
            .unwrap_or_default(),
        parent: configuration
            .and_then(|c| c.continues.as_ref())
            .map(|c| (c.parent.to_string(), c.note.clone())),
        cancel_requested: run
            .cancel_requested
            .as_ref()
            .filter(|_| run.status == RunStatus::Running)
            .map(|request| {
                let why = request
                    .reason
                    .as_deref()
                    .map(|reason| format!(" (\"{reason}\")"))
                    .unwrap_or_default();
                format!(
                    "{} asked to cancel this run{why}; it stops at its next step.",
                    request.by
                )
            }),
    }
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

fn calls_text(calls: &[ToolCall]) -> String {
    let list: Vec<serde_json::Value> = calls
        .iter()
        .map(|c| {
            let arguments = serde_json::from_str::<serde_json::Value>(&c.arguments)
                .unwrap_or_else(|_| serde_json::Value::String(c.arguments.clone()));
            serde_json::json!({"id": c.id, "tool": c.name, "arguments": arguments})
        })
        .collect();
    pretty(&list)
}

fn names(calls: &[ToolCall]) -> String {
    calls
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One step row for an event: what happened, in one line.
pub fn step(sequence: i64, event: &Event) -> StepView {
    let mut view = StepView {
        sequence,
        kind: event.kind().to_owned(),
        title: String::new(),
        round: event.round(),
        duration_ms: event.duration_ms(),
        tokens: None,
        ok: true,
    };
    view.title = match event {
        Event::Assembled {
            system_prompt,
            skills_included,
            skills_dropped,
            messages,
        } => {
            let mut title = format!("assembled {messages} message(s)");
            if *system_prompt {
                title.push_str(" with a system prompt");
            }
            if !skills_included.is_empty() {
                title.push_str(&format!(", skills: {}", skills_included.join(", ")));
            }
            if !skills_dropped.is_empty() {
                title.push_str(&format!(
                    " (dropped over budget: {})",
                    skills_dropped.join(", ")
                ));
            }
            title
        }
        Event::Request {
            first,
            messages,
            tools_offered,
            ..
        } => format!(
            "request: {} message(s){}, {} tool(s) offered",
            first.unwrap_or(0) + messages.len(),
            match first {
                Some(first) if *first > 0 => format!(" ({} new)", messages.len()),
                _ => String::new(),
            },
            tools_offered.len()
        ),
        Event::Llm {
            tool_calls, usage, ..
        } => {
            view.tokens = Some(usage.total());
            if tool_calls.is_empty() {
                "model answered".to_owned()
            } else {
                format!("model requests tools: {}", names(tool_calls))
            }
        }
        Event::ProviderRetry {
            retry,
            wait_ms,
            reason,
            hint,
            ..
        } => {
            view.ok = false;
            format!(
                "retry {retry} in {}{}: {reason}",
                if *wait_ms < 1000 {
                    format!("{wait_ms} ms")
                } else {
                    format!("{:.1} s", *wait_ms as f64 / 1000.0)
                },
                match hint {
                    Some(hint) => format!(" (as the provider asked: {hint})"),
                    None => String::new(),
                }
            )
        }
        Event::LlmFailed { message, .. } => {
            view.ok = false;
            format!("model failed: {message}")
        }
        Event::Tool {
            name,
            executed,
            on_resume,
            note,
            ..
        } => {
            let outcome = event.tool_outcome().unwrap_or_default();
            view.ok = outcome.is_ok();
            let outcome = match (outcome, executed) {
                (ToolOutcome::Denied, _) => "denied",
                (_, false) => "not run",
                (ToolOutcome::Error, true) => "error",
                (ToolOutcome::Ok, true) => "ok",
            };
            format!(
                "{name}: {outcome}{}{}",
                if *on_resume {
                    " (after the decision)"
                } else {
                    ""
                },
                note.as_deref()
                    .map(|note| format!(" — {note}"))
                    .unwrap_or_default()
            )
        }
        Event::ApprovalRequested { calls, gated, .. } => format!(
            "approval requested: {} ({} gated)",
            names(calls),
            gated.len()
        ),
        Event::ApprovalDecided {
            decided_by,
            through_token,
            choices,
            ..
        } => {
            let list: Vec<String> = choices
                .iter()
                .map(|c| format!("{} {}", c.tool, choice_words(&c.choice)))
                .collect();
            let who = nrllm_core::authority::label(decided_by, through_token.as_deref());
            format!("decided by {who}: {}", list.join(", "))
        }
        Event::ApprovalExpired { choices, .. } => {
            view.ok = false;
            let tools: Vec<&str> = choices.iter().map(|c| c.tool.as_str()).collect();
            format!(
                "expired: nobody decided before the deadline; not run: {}",
                tools.join(", ")
            )
        }
        Event::Recovered { resumes_at } => format!("recovered after a restart: {resumes_at}"),
        Event::OutcomeUnknown { calls, .. } => {
            view.ok = false;
            format!(
                "outcome unknown after a restart: {} — waiting for an operator",
                calls
                    .iter()
                    .map(|c| c.tool.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
        Event::Cancelled {
            by,
            reason,
            abandoned,
            unknown,
        } => {
            let mut text = match reason {
                Some(reason) => format!("cancelled by {by}: {reason}"),
                None => format!("cancelled by {by}"),
            };
            if let Some(abandoned) = abandoned {
                text.push_str(&format!(" — while running; {abandoned}"));
            }
            if !unknown.is_empty() {
                view.ok = false;
                text.push_str(&format!(
                    "; outcome unknown (dispatched, no result journaled): {}",
                    unknown
                        .iter()
                        .map(|c| format!("{} (effect key {})", c.tool, c.effect_key))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            text
        }
        Event::Ended {
            reason,
            explanation,
        } => {
            view.ok = false;
            format!("ended ({reason}): {explanation}")
        }
    };
    view
}

/// How a call was decided, in words.
fn choice_words(choice: &Choice) -> String {
    match choice {
        Choice::Approve => "approved as is".to_owned(),
        Choice::ApproveEdited { .. } => "approved with edits".to_owned(),
        Choice::Deny {
            reason: Some(reason),
        } => format!("denied (\"{reason}\")"),
        Choice::Deny { reason: None } => "denied".to_owned(),
        Choice::Respond { .. } => "answered by the operator (not run)".to_owned(),
        Choice::Failed { .. } => "reported failed by the operator (not run)".to_owned(),
        Choice::Expired { .. } => "expired: nobody decided in time (not run)".to_owned(),
    }
}

fn tab(key: &str, label: &str, text: String) -> StepTab {
    StepTab {
        key: key.to_owned(),
        label: label.to_owned(),
        text,
    }
}

/// The detail tabs of one event. `earlier` are the run's events before it, in order (a request's
/// full transcript is rebuilt from them).
pub fn detail_tabs<'a>(
    event: &'a Event,
    earlier: impl IntoIterator<Item = &'a Event>,
    registry: &ToolRegistry,
) -> Vec<StepTab> {
    let mut tabs = Vec::new();
    match event {
        Event::Request {
            messages,
            tools_offered,
            ..
        } => {
            tabs.push(tab("messages", "Messages sent", pretty(messages)));
            let transcript = transcript_at(earlier.into_iter().chain([event]));
            tabs.push(tab("transcript", "Full transcript", pretty(&transcript)));
            let specs: Vec<_> = tools_offered
                .iter()
                .filter_map(|name| registry.get(name).map(|tool| tool.spec().clone()))
                .collect();
            tabs.push(tab("tools", "Tools offered", pretty(&specs)));
        }
        Event::Llm {
            content,
            tool_calls,
            ..
        } => {
            if !tool_calls.is_empty() {
                tabs.push(tab("arguments", "Arguments", calls_text(tool_calls)));
            }
            if let Some(content) = content {
                tabs.push(tab("result", "Result", content.clone()));
            }
        }
        Event::Tool {
            arguments, result, ..
        } => {
            tabs.push(tab("arguments", "Arguments", pretty_arguments(arguments)));
            tabs.push(tab("result", "Result", result.clone()));
        }
        Event::ApprovalRequested { calls, .. } => {
            tabs.push(tab("arguments", "Arguments", calls_text(calls)));
        }
        Event::ApprovalDecided { choices, .. } => {
            let text = choices
                .iter()
                .map(|c| {
                    let mut line =
                        format!("{} ({}): {}", c.tool, c.call_id, choice_words(&c.choice));
                    if let (Choice::ApproveEdited { arguments }, Some(original)) =
                        (&c.choice, &c.original_arguments)
                    {
                        let edited = pretty(arguments);
                        for diff_line in
                            diff::shown_diff(&pretty_arguments(original), &edited).lines
                        {
                            line.push_str(&format!("\n  {} {}", diff_line.op, diff_line.text));
                        }
                    }
                    line
                })
                .collect::<Vec<_>>()
                .join("\n");
            tabs.push(tab("result", "Decision", text));
        }
        Event::ApprovalExpired { choices, .. } => {
            let text = choices
                .iter()
                .map(|c| format!("{} ({}): {}", c.tool, c.call_id, choice_words(&c.choice)))
                .collect::<Vec<_>>()
                .join("\n");
            tabs.push(tab("result", "Decision", text));
        }
        Event::Assembled { .. }
        | Event::ProviderRetry { .. }
        | Event::LlmFailed { .. }
        | Event::Recovered { .. }
        | Event::OutcomeUnknown { .. }
        | Event::Cancelled { .. }
        | Event::Ended { .. } => {}
    }
    tabs.push(tab("raw", "Raw", pretty(event)));
    tabs
}

/// Step rows for stored events (rows of unknown kinds are shown by kind only).
pub fn steps(events: &[StoredEvent]) -> Vec<StepView> {
    events.iter().map(stored_step).collect()
}

fn stored_step(stored: &StoredEvent) -> StepView {
    match stored.event() {
        Some(event) => step(stored.sequence, &event),
        None => StepView {
            sequence: stored.sequence,
            kind: stored.kind.clone(),
            title: stored.kind.clone(),
            round: stored.round.and_then(|r| u32::try_from(r).ok()),
            duration_ms: stored.duration_ms.and_then(|d| u64::try_from(d).ok()),
            tokens: None,
            ok: true,
        },
    }
}

/// The detail of step `sequence` (the last one if `None`), with tab `tab` selected (the first if
/// `None` or unknown).
pub fn step_detail(
    events: &[StoredEvent],
    sequence: Option<i64>,
    tab: Option<&str>,
    registry: &ToolRegistry,
) -> Option<StepDetail> {
    let index = match sequence {
        Some(sequence) => events.iter().position(|e| e.sequence == sequence)?,
        None => events.len().checked_sub(1)?,
    };
    let stored = &events[index];
    let tabs = match stored.event() {
        Some(event) => {
            let earlier: Vec<Event> = events[..index]
                .iter()
                .filter(|e| e.kind == "request")
                .filter_map(StoredEvent::event)
                .collect();
            detail_tabs(&event, &earlier, registry)
        }
        None => vec![self::tab("raw", "Raw", pretty(&stored.payload))],
    };
    let selected = tab
        .filter(|key| tabs.iter().any(|t| t.key == *key))
        .or_else(|| tabs.first().map(|t| t.key.as_str()))
        .unwrap_or("raw")
        .to_owned();
    Some(StepDetail {
        step: stored_step(stored),
        tabs,
        selected,
    })
}

/// A live event as a step row.
pub fn live_step(event: &SequencedEvent) -> StepView {
    step(event.sequence, &event.event)
}

/// Where the whole diff of a pending call's preview can be downloaded.
pub fn preview_download(run_id: &str, call_id: &str) -> String {
    format!("/runs/{run_id}/calls/{call_id}/preview.diff")
}

/// The pending calls of a waiting run, with each gated call's preview.
pub fn pending_calls(pending: &PendingTurn, run_id: &str) -> Vec<PendingCallView> {
    pending
        .state
        .pending
        .iter()
        .zip(&pending.previews)
        .map(|(call, preview)| PendingCallView {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: pretty_arguments(&call.arguments),
            gated: preview.gated,
            state: match (
                pending.state.unknown.iter().find(|u| u.call_id == call.id),
                pending.state.answered.iter().find(|a| a.call_id == call.id),
            ) {
                (_, Some(answered)) => CallState::Answered {
                    result: answered.result.clone(),
                },
                (Some(unknown), None) => CallState::OutcomeUnknown {
                    dispatched_at: format_utc(unknown.dispatched_at_ms),
                    effect_key: unknown.effect_key.clone(),
                },
                (None, None) => CallState::Pending,
            },
            ruled: pending
                .state
                .ruled
                .iter()
                .find(|r| r.call_id == call.id)
                .map(|r| (r.allow, r.note.clone())),
            question: pending
                .state
                .questions
                .contains(&call.id)
                .then(|| Question::of(call))
                .flatten()
                .map(|q| question_view(&q)),
            argument_names: call
                .parsed_arguments()
                .ok()
                .and_then(|args| match args {
                    serde_json::Value::Object(map) => Some(
                        map.into_iter()
                            .filter(|(_, v)| !v.is_object() && !v.is_array() && !v.is_null())
                            .map(|(k, _)| k)
                            .take(20)
                            .collect(),
                    ),
                    _ => None,
                })
                .unwrap_or_default(),
            preview: match &preview.outcome {
                PreviewOutcome::None => None,
                PreviewOutcome::Unavailable(reason) => Some(PreviewView::Unavailable {
                    reason: reason.clone(),
                }),
                PreviewOutcome::Arguments(fields) => Some(PreviewView::Arguments {
                    fields: fields.clone(),
                }),
                PreviewOutcome::Ready(ready) => Some(match &ready.effect {
                    Effect::Change {
                        target,
                        before,
                        after,
                    } => {
                        let shown = diff::shown_diff(before, after);
                        PreviewView::Change {
                            target: target.clone(),
                            lines: shown.lines,
                            changed: shown.changed,
                            download: shown.too_large.then(|| preview_download(run_id, &call.id)),
                        }
                    }
                    Effect::Text { text } => PreviewView::Text { text: text.clone() },
                }),
            },
        })
        .collect()
}

/// An MCP server's status for the system page.
/// An MCP server as the system page shows it; its command, arguments or URL (which may hold a
/// secret) only to an administrator (`admin`).
pub fn mcp_server_view(status: nrllm_mcp::hub::Status, admin: bool) -> crate::model::McpServerView {
    use nrllm_mcp::hub::State;
    use nrllm_types::McpState;
    let (state, reason, retry_at_ms) = match status.state {
        State::Connected => (McpState::Connected, None, None),
        State::Connecting => (McpState::Connecting, None, None),
        State::Failed {
            reason,
            retry_at_ms,
        } => (McpState::Failed, Some(reason), retry_at_ms),
    };
    crate::model::McpServerView {
        name: status.name,
        endpoint: match admin {
            true => status.endpoint,
            false => "(its command or address is shown to administrators)".to_owned(),
        },
        state,
        // A failure names the command or address too.
        reason: reason.map(|reason| match admin {
            true => reason,
            false => "it could not be reached (an administrator sees why)".to_owned(),
        }),
        retry_at: retry_at_ms.map(format_utc),
        server_info: status.server_info,
        tools: status.tools,
        connections: status.connections,
    }
}

/// Every tool with its group, whether it needs approval and whether it is enabled.
pub fn tool_views(registry: &nrllm_core::registry::ToolRegistry) -> Vec<crate::model::ToolView> {
    registry
        .specs()
        .into_iter()
        .map(|spec| crate::model::ToolView {
            name: spec.name.clone(),
            description: spec.description.clone(),
            group: spec.group.clone(),
            requires_approval: spec.requires_approval,
            approval_per_call: spec.approval_per_call,
            enabled: registry.is_enabled(&spec.name),
        })
        .collect()
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
        rules_for_configuration: false,
        rules: Vec::new(),
        children: Vec::new(),
    }
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
    }
}

/// A question as its form shows it: choices as buttons, a schema's properties as fields (in the
/// schema's order), or free text.
pub fn question_view(question: &Question) -> QuestionView {
    let schema = question.schema.as_ref();
    let required: Vec<&str> = schema
        .and_then(|s| s["required"].as_array())
        .map(|list| list.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let fields = schema
        .and_then(|s| s["properties"].as_object())
        .map(|properties| {
            properties
                .iter()
                .take(30)
                .map(|(name, property)| {
                    let options: Vec<String> = property["enum"]
                        .as_array()
                        .map(|values| {
                            values
                                .iter()
                                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default();
                    let kind = match (property["type"].as_str(), options.is_empty()) {
                        (_, false) => "select",
                        (Some("boolean"), _) => "boolean",
                        (Some("integer"), _) => "integer",
                        (Some("number"), _) => "number",
                        _ => "text",
                    };
                    FieldView {
                        name: name.clone(),
                        label: property["description"].as_str().unwrap_or(name).to_owned(),
                        kind: kind.to_owned(),
                        options,
                        required: required.contains(&name.as_str()),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    QuestionView {
        text: question.question.clone(),
        choices: question.choices.clone().unwrap_or_default(),
        fields,
    }
}

/// One approval rule as listed; `removable` if the viewer may remove it.
pub fn rule_view(rule: &ApprovalRule, removable: bool) -> RuleView {
    let (run_id, configuration) = match &rule.scope {
        RuleScope::Run(id) => (Some(id.to_string()), None),
        RuleScope::Configuration(name) => (None, Some(name.clone())),
    };
    RuleView {
        id: rule.id,
        description: rule.describe(),
        run_id,
        configuration,
        tool: rule.tool.clone(),
        effect: rule.effect.as_str().to_owned(),
        created_by: rule.created_by.clone(),
        created: format_utc(rule.created_at_ms),
        removable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nrllm_core::transcript::Message;

    fn stored(sequence: i64, event: &Event) -> StoredEvent {
        StoredEvent {
            run_id: uuid::Uuid::nil(),
            sequence,
            kind: event.kind().to_owned(),
            round: event.round().map(i64::from),
            duration_ms: None,
            payload: serde_json::to_value(event).unwrap(),
            created_at_ms: 0,
        }
    }

    fn record(last_sequence: i64) -> RunRecord {
        RunRecord {
            id: uuid::Uuid::nil(),
            status: RunStatus::Completed,
            configuration: None,
            requested_by: "operator".into(),
            counters: Default::default(),
            truncated: false,
            estimated_cost_micros: None,
            termination_reason: None,
            error_summary: None,
            final_answer: None,
            suspended_state: None,
            decided_by: None,
            decided_at_ms: None,
            decision: None,
            decision_record: None,
            version: 1,
            last_sequence,
            created_at_ms: 0,
            updated_at_ms: 0,
            started_at_ms: None,
            finished_at_ms: None,
            approval_deadline_ms: None,
            queued_at_ms: None,
            approved_bases: None,
            cancel_requested: None,
        }
    }

    fn failure(round: u32) -> Event {
        Event::LlmFailed {
            round,
            message: "x".into(),
            duration_ms: 1,
        }
    }

    #[test]
    fn the_page_shows_a_window_of_the_latest_steps_and_links_the_older_ones() {
        let events: Vec<StoredEvent> = (1..=250).map(|i| stored(i, &failure(1))).collect();
        let latest = run_view(&record(250), &events, None, None, None);
        assert_eq!(latest.steps.len(), STEP_WINDOW);
        assert_eq!(latest.steps[0].sequence, 151);
        assert_eq!(latest.older_before, Some(151));
        assert!(latest.latest);
        let older = run_view(&record(250), &events, Some(151), None, None);
        assert_eq!(older.steps.first().map(|s| s.sequence), Some(51));
        assert_eq!(older.steps.last().map(|s| s.sequence), Some(150));
        assert_eq!(older.older_before, Some(51));
        assert!(!older.latest);
        let first = run_view(&record(250), &events, Some(51), None, None);
        assert_eq!(first.steps.len(), 50);
        assert_eq!(first.older_before, None);
    }

    #[test]
    fn a_request_step_shows_its_new_messages_and_rebuilds_the_whole_transcript() {
        let request = |first, messages: Vec<Message>| Event::Request {
            round: 1,
            first: Some(first),
            messages,
            tools_offered: Vec::new(),
        };
        let events = vec![
            stored(
                1,
                &request(0, vec![Message::system("sys"), Message::user("hi")]),
            ),
            stored(2, &failure(1)),
            stored(
                3,
                &request(2, vec![Message::assistant_text("a"), Message::user("more")]),
            ),
        ];
        let registry = ToolRegistry::new();
        let detail = step_detail(&events, Some(3), Some("transcript"), &registry).unwrap();
        assert_eq!(detail.selected, "transcript");
        assert_eq!(
            detail.step.title,
            "request: 4 message(s) (2 new), 0 tool(s) offered"
        );
        let text = |key: &str| {
            detail
                .tabs
                .iter()
                .find(|t| t.key == key)
                .map(|t| t.text.clone())
                .unwrap()
        };
        let transcript: Vec<Message> = serde_json::from_str(&text("transcript")).unwrap();
        assert_eq!(transcript.len(), 4);
        assert_eq!(transcript[0], Message::system("sys"));
        let new: Vec<Message> = serde_json::from_str(&text("messages")).unwrap();
        assert_eq!(new, [Message::assistant_text("a"), Message::user("more")]);
        // An unknown tab falls back to the first one; the latest step is the default.
        let latest = step_detail(&events, None, Some("nope"), &registry).unwrap();
        assert_eq!(latest.step.sequence, 3);
        assert_eq!(latest.selected, "messages");
    }

    #[test]
    fn the_deadline_says_when_and_how_long_is_left() {
        let at = 1_796_020_889_000; // 2026-11-30 06:41:29 UTC
        assert_eq!(
            deadline_text(at, at - 2 * 3_600_000 - 5 * 60_000),
            "Decide by 2026-11-30 06:41:29 UTC (2 h 5 min left); after that the turn expires and none of its calls runs."
        );
        assert!(deadline_text(at, at - 30_000).contains("(30 s left)"));
        assert!(deadline_text(at, at - 3 * 86_400_000).contains("(3 d 0 h left)"));
        assert!(deadline_text(at, at + 1)
            .starts_with("The time to decide ran out at 2026-11-30 06:41:29 UTC"));
    }

    #[test]
    fn an_edit_is_shown_as_a_diff_of_the_arguments_in_the_decision_step() {
        let decided = Event::ApprovalDecided {
            round: Some(2),
            decided_by: "bob".into(),
            through_token: None,
            choices: vec![nrllm_core::events::CallChoice {
                call_id: "c1".into(),
                tool: "update_page".into(),
                choice: Choice::ApproveEdited {
                    arguments: serde_json::json!({"slug": "home", "title": "Mine"}),
                },
                original_arguments: Some(r#"{"slug":"home","title":"Theirs"}"#.into()),
            }],
        };
        let view = step(9, &decided);
        assert_eq!(
            view.title,
            "decided by bob: update_page approved with edits"
        );
        assert_eq!(view.round, Some(2));
        let tabs = detail_tabs(&decided, [], &ToolRegistry::new());
        let decision = &tabs.iter().find(|t| t.key == "result").unwrap().text;
        assert!(decision.contains(r#"-   "title": "Theirs""#), "{decision}");
        assert!(decision.contains(r#"+   "title": "Mine""#), "{decision}");
    }

    #[test]
    fn a_retry_is_a_step_that_says_why_and_how_long_it_waits() {
        let retry = |wait_ms| Event::ProviderRetry {
            round: 2,
            retry: 1,
            wait_ms,
            reason: "openai: rate limited (HTTP 429): slow down".into(),
            hint: None,
        };
        let view = step(7, &retry(1500));
        assert_eq!(view.kind, "provider_retry");
        assert_eq!(view.round, Some(2));
        assert!(!view.ok);
        assert_eq!(
            view.title,
            "retry 1 in 1.5 s: openai: rate limited (HTTP 429): slow down"
        );
        let quick = step(8, &retry(250));
        assert!(
            quick.title.starts_with("retry 1 in 250 ms: "),
            "{}",
            quick.title
        );
        let hinted = Event::ProviderRetry {
            round: 2,
            retry: 1,
            wait_ms: 2000,
            reason: "gemini: rate limited (HTTP 429): quota".into(),
            hint: Some("RetryInfo.retryDelay 2s".into()),
        };
        assert_eq!(
            step(9, &hinted).title,
            "retry 1 in 2.0 s (as the provider asked: RetryInfo.retryDelay 2s): gemini: rate limited (HTTP 429): quota"
        );
    }
}
