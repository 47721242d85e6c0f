//! A run's steps as the run page shows them: the list, a step's title and its detail tabs.

use nrllm_core::events::{transcript_at, Event};
use nrllm_core::registry::ToolRegistry;
use nrllm_core::run_store::{SequencedEvent, StoredEvent};
use nrllm_core::transcript::{ToolCall, ToolOutcome};
use nrllm_core::Choice;

use super::json::*;
use super::pending::*;
use crate::page_data::{StepDetail, StepSpent, StepTab, StepView};
use crate::server::diff;

/// One step row for an event: what happened, in one line.
pub fn step(sequence: i64, event: &Event) -> StepView {
    let (title, ok) = step_title(event);
    StepView {
        sequence,
        kind: event.kind().to_owned(),
        title,
        round: event.round(),
        duration_ms: event.duration_ms(),
        tokens: match event {
            Event::Llm { usage, .. }
            | Event::ProviderRetry {
                usage: Some(usage), ..
            }
            | Event::LlmFailed {
                usage: Some(usage), ..
            } if usage.is_complete() => Some(usage.total()),
            _ => None,
        },
        ok,
        spent: None,
    }
}

/// What `event` used toward its run's budget, its cost under `prices` (none for a step that
/// used nothing).
pub fn step_spent(event: &Event, prices: &nrllm_core::provider::Prices) -> Option<StepSpent> {
    let (usage, requests, tool_calls) = match event {
        Event::Llm { usage, .. } => (*usage, 1, 0),
        Event::ProviderRetry {
            usage: Some(usage), ..
        }
        | Event::LlmFailed {
            usage: Some(usage), ..
        } => (*usage, 0, 0),
        Event::Tool { .. } => (nrllm_core::provider::Usage::default(), 0, 1),
        _ => return None,
    };
    Some(StepSpent {
        input_tokens: usage.prompt_tokens,
        output_tokens: usage.completion_tokens,
        requests,
        tool_calls,
        cost_micros: prices
            .cost_micros(&usage)
            .and_then(|c| u64::try_from(c).ok())
            .unwrap_or(0),
    })
}

/// How fast a streamed response came: its first token, then its output tokens a second
/// (empty for a response given whole).
fn pace(event: &Event) -> String {
    let Event::Llm {
        first_token_ms: Some(first),
        duration_ms,
        usage,
        ..
    } = event
    else {
        return String::new();
    };
    let writing_ms = duration_ms.saturating_sub(*first);
    // Unreported usage gives no rate (its count is not the response's).
    let tokens = if usage.is_complete() {
        usage.completion_tokens
    } else {
        0
    };
    let rate = match (tokens, writing_ms) {
        (0, _) | (_, 0) => String::new(),
        (tokens, ms) => format!(", {:.0} tokens/s", tokens as f64 * 1000.0 / ms as f64),
    };
    format!(" (first token after {first} ms{rate})")
}

/// A step's one-line title, and whether it went as it should.
fn step_title(event: &Event) -> (String, bool) {
    match event {
        Event::Assembled {
            system_prompt,
            skills_included,
            skills_dropped,
            messages,
        } => (
            assembled_title(*messages, *system_prompt, skills_included, skills_dropped),
            true,
        ),
        Event::Request {
            first,
            messages,
            tools_offered,
            ..
        } => (
            request_title(*first, messages.len(), tools_offered.len()),
            true,
        ),
        Event::Llm { .. } => (answered_title(event), true),
        Event::ProviderRetry {
            retry,
            wait_ms,
            reason,
            hint,
            usage,
            ..
        } => (
            retry_title(*retry, *wait_ms, reason, hint.as_deref()) + &spent_text(usage),
            false,
        ),
        Event::LlmFailed { message, usage, .. } => (
            format!("model failed: {message}{}", spent_text(usage)),
            false,
        ),
        Event::Tool { .. } => tool_title(event),
        Event::ApprovalRequested { .. }
        | Event::ApprovalCounted { .. }
        | Event::ApprovalDecided { .. } => (approval_title(event), true),
        Event::ApprovalExpired { choices, .. } => {
            let tools: Vec<&str> = choices.iter().map(|c| c.tool.as_str()).collect();
            let not_run = tools.join(", ");
            let text = format!("expired: nobody decided before the deadline; not run: {not_run}");
            (text, false)
        }
        Event::Recovered { resumes_at } => {
            (format!("recovered after a restart: {resumes_at}"), true)
        }
        Event::OutcomeUnknown { calls, .. } => {
            let tools: Vec<&str> = calls.iter().map(|c| c.tool.as_str()).collect();
            let tools = tools.join(", ");
            (
                format!("outcome unknown after a restart: {tools} — waiting for an operator"),
                false,
            )
        }
        Event::BudgetReached { .. } | Event::BudgetDecided { .. } => budget_title(event),
        Event::Cancelled { .. } => cancelled_title(event),
        Event::InputAsked { .. } | Event::InputReplied { .. } => super::asked::input_title(event),
        Event::Ended {
            reason,
            explanation,
        } => (format!("ended ({reason}): {explanation}"), false),
    }
}

/// One call's decision in the decision step's detail, with an edit shown as a diff of its
/// arguments.
fn decided_line(c: &nrllm_core::events::CallChoice) -> String {
    let mut line = format!("{} ({}): {}", c.tool, c.call_id, choice_words(&c.choice));
    if let (Choice::ApproveEdited { arguments }, Some(original)) =
        (&c.choice, &c.original_arguments)
    {
        let edited = pretty(arguments);
        for diff_line in diff::shown_diff(&pretty_arguments(original), &edited).lines {
            line.push_str(&format!("\n  {} {}", diff_line.op, diff_line.text));
        }
    }
    line
}

/// "assembled 3 message(s) with a system prompt, skills: …".
fn assembled_title(
    messages: usize,
    system_prompt: bool,
    skills_included: &[String],
    skills_dropped: &[String],
) -> String {
    let mut title = format!("assembled {messages} message(s)");
    if system_prompt {
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

/// "decided by alice: write_page approved, …".
fn decided_title(
    decided_by: &str,
    through_token: Option<&str>,
    choices: &[nrllm_core::events::CallChoice],
) -> String {
    let who = nrllm_core::authority::label(decided_by, through_token);
    format!("decided by {who}: {}", choice_list(choices))
}

/// "write_page approved, send_message denied".
fn choice_list(choices: &[nrllm_core::events::CallChoice]) -> String {
    let list: Vec<String> = choices
        .iter()
        .map(|c| format!("{} {}", c.tool, choice_words(&c.choice)))
        .collect();
    list.join(", ")
}

/// The title of an approval's step: requested, counted (M-of-N), decided.
fn approval_title(event: &Event) -> String {
    match event {
        Event::ApprovalRequested {
            calls,
            gated,
            approvals_required,
            ..
        } => {
            let gated = gated.len();
            let needs = match approvals_required {
                n if *n > 1 => format!("; needs {n} approvals from different people"),
                _ => String::new(),
            };
            format!(
                "approval requested: {} ({gated} gated){needs}",
                names(calls)
            )
        }
        Event::ApprovalCounted {
            by,
            through_token,
            count,
            required,
            choices,
            ..
        } => counted_title(by, through_token.as_deref(), (*count, *required), choices),
        Event::ApprovalDecided {
            decided_by,
            through_token,
            choices,
            ..
        } => decided_title(decided_by, through_token.as_deref(), choices),
        _ => String::new(),
    }
}

/// "approval 1 of 2 by alice: write_page approved, …" (nothing ran yet).
fn counted_title(
    by: &str,
    through_token: Option<&str>,
    (count, required): (u32, u32),
    choices: &[nrllm_core::events::CallChoice],
) -> String {
    let who = nrllm_core::authority::label(by, through_token);
    format!(
        "approval {count} of {required} by {who}: {}; waiting for more",
        choice_list(choices)
    )
}

/// "request: 7 message(s) (2 new), 4 tool(s) offered".
fn request_title(first: Option<usize>, new: usize, tools: usize) -> String {
    let fresh = match first {
        Some(first) if first > 0 => format!(" ({new} new)"),
        _ => String::new(),
    };
    let total = first.unwrap_or(0) + new;
    format!("request: {total} message(s){fresh}, {tools} tool(s) offered")
}

/// "retry 2 in 1.5 s: …", with the hint the wait follows.
fn retry_title(retry: u32, wait_ms: u64, reason: &str, hint: Option<&str>) -> String {
    let wait = if wait_ms < 1000 {
        format!("{wait_ms} ms")
    } else {
        format!("{:.1} s", wait_ms as f64 / 1000.0)
    };
    let hint = hint
        .map(|hint| format!(" (as the provider asked: {hint})"))
        .unwrap_or_default();
    format!("retry {retry} in {wait}{hint}: {reason}")
}

/// A model response's title: what it asks for, how fast it came, and whether its usage is
/// known.
fn answered_title(event: &Event) -> String {
    let Event::Llm {
        tool_calls, usage, ..
    } = event
    else {
        return String::new();
    };
    let unreported = match usage.is_complete() {
        true => "",
        false => "; the provider did not report its usage",
    };
    let what = match tool_calls.is_empty() {
        true => "model answered".to_owned(),
        false => format!("model requests tools: {}", names(tool_calls)),
    };
    format!("{what}{}{unreported}", pace(event))
}

/// The title of a budget step: where the run stopped, or what a person decided.
fn budget_title(event: &Event) -> (String, bool) {
    match event {
        Event::BudgetReached { stop, .. } => (
            format!("budget reached — {}: waiting for a person", stop.explain()),
            false,
        ),
        Event::BudgetDecided {
            decided_by,
            through_token,
            raised,
            stop,
            ..
        } => {
            let who = nrllm_core::authority::label(decided_by, through_token.as_deref());
            if let (Some(daily), Some(_)) = (stop.daily, raised) {
                return (
                    format!(
                        "{who}: {} has room again, the run goes on",
                        daily.describe()
                    ),
                    true,
                );
            }
            let what = match raised.and_then(|limits| limits.get(stop.limit)) {
                Some(cap) => format!(
                    "raised the limit on {} to {}",
                    stop.limit.label(),
                    stop.limit.show(cap)
                ),
                None if raised.is_some() => format!("lifted the limit on {}", stop.limit.label()),
                None => "stopped the run at its budget".to_owned(),
            };
            (format!("{who} {what}"), raised.is_some())
        }
        _ => (event.kind().to_owned(), true),
    }
}

/// What a failed attempt used, for its step's title (empty when it got no response).
fn spent_text(usage: &Option<nrllm_core::provider::Usage>) -> String {
    match usage {
        None => String::new(),
        Some(usage) if usage.is_complete() => format!(
            "; the broken attempt used {} tokens ({} + {})",
            usage.total(),
            usage.prompt_tokens,
            usage.completion_tokens
        ),
        Some(_) => "; the provider did not report what the broken attempt used".to_owned(),
    }
}

/// A tool step's title (its name, how it ended, and a note), and whether it went well.
fn tool_title(event: &Event) -> (String, bool) {
    let Event::Tool {
        name,
        executed,
        on_resume,
        note,
        ..
    } = event
    else {
        return (String::new(), true);
    };
    let outcome = event.tool_outcome().unwrap_or_default();
    let words = match (outcome, executed) {
        (ToolOutcome::Denied, _) => "denied",
        (_, false) => "not run",
        (ToolOutcome::Error, true) => "error",
        (ToolOutcome::Ok, true) => "ok",
    };
    let after = if *on_resume {
        " (after the decision)"
    } else {
        ""
    };
    let note = note
        .as_deref()
        .map(|note| format!(" — {note}"))
        .unwrap_or_default();
    (format!("{name}: {words}{after}{note}"), outcome.is_ok())
}

/// A cancel's title: who and why, what was abandoned, and any call whose outcome is unknown
/// (which makes it a step that did not go well).
fn cancelled_title(event: &Event) -> (String, bool) {
    let Event::Cancelled {
        by,
        reason,
        abandoned,
        unknown,
    } = event
    else {
        return (String::new(), true);
    };
    let mut text = match reason {
        Some(reason) => format!("cancelled by {by}: {reason}"),
        None => format!("cancelled by {by}"),
    };
    if let Some(abandoned) = abandoned {
        text.push_str(&format!(" — while running; {abandoned}"));
    }
    if unknown.is_empty() {
        return (text, true);
    }
    let calls: Vec<String> = unknown
        .iter()
        .map(|c| format!("{} (effect key {})", c.tool, c.effect_key))
        .collect();
    text.push_str(&format!(
        "; outcome unknown (dispatched, no result journaled): {}",
        calls.join(", ")
    ));
    (text, false)
}

/// How a call was decided, in words.
pub(super) fn choice_words(choice: &Choice) -> String {
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

pub(super) fn names(calls: &[ToolCall]) -> String {
    calls
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
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
        Event::ApprovalDecided { choices, .. } | Event::ApprovalCounted { choices, .. } => {
            let text: Vec<String> = choices.iter().map(decided_line).collect();
            tabs.push(tab("result", "Decision", text.join("\n")));
        }
        Event::ApprovalExpired { choices, .. } => {
            let text = choices
                .iter()
                .map(|c| format!("{} ({}): {}", c.tool, c.call_id, choice_words(&c.choice)))
                .collect::<Vec<_>>()
                .join("\n");
            tabs.push(tab("result", "Decision", text));
        }
        Event::InputAsked { .. } | Event::InputReplied { .. } => {
            tabs.extend(super::asked::input_tabs(event));
        }
        Event::Assembled { .. }
        | Event::BudgetReached { .. }
        | Event::BudgetDecided { .. }
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

pub(super) fn stored_step(stored: &StoredEvent) -> StepView {
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
            spent: None,
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

/// A live event as a step row, with what it used toward the run's budget under `prices`.
pub fn live_step(event: &SequencedEvent, prices: &nrllm_core::provider::Prices) -> StepView {
    StepView {
        spent: step_spent(&event.event, prices),
        ..step(event.sequence, &event.event)
    }
}
