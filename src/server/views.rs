//! Turns stored runs and events into the page models of `crate::model`.

use nrllm_runtime::events::Event;
use nrllm_runtime::registry::ToolRegistry;
use nrllm_runtime::service::{format_utc, now_ms, pending_digest};
use nrllm_runtime::store::{RunRecord, RunStatus, SequencedEvent, StoredEvent};
use nrllm_runtime::tool::{Preview, ToolContext};
use nrllm_runtime::transcript::ToolCall;
use nrllm_runtime::{Choice, SuspendedState};

use crate::model::{DiffLine, PendingCallView, PreviewView, RunSummary, RunView, StepView};

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
        .filter(|_| run.status == RunStatus::WaitingForApproval)
        .and_then(|text| SuspendedState::from_json(text).ok())
        .map(|state| state.pending.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    let started = run.started_at_ms.unwrap_or(run.created_at_ms);
    let wall_ms = match (run.finished_at_ms, run.status) {
        (Some(finished), _) => Some(finished - started),
        (None, RunStatus::Running) => Some(now_ms() - started),
        _ => Some(run.updated_at_ms - started),
    };
    let decision = match (&run.decision, &run.decided_by, run.decided_at_ms) {
        (Some(decision), Some(by), Some(at)) => {
            Some(format!("{decision} by {by} at {}", format_utc(at)))
        }
        _ => None,
    };
    RunSummary {
        id: run.id.to_string(),
        status: run.status.as_str().to_owned(),
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
        waiting_for_ms: (run.status == RunStatus::WaitingForApproval)
            .then(|| now_ms() - run.updated_at_ms),
        pending_tools,
    }
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

/// One step row for an event.
pub fn step(sequence: i64, event: &Event, registry: &ToolRegistry) -> StepView {
    let raw = ("Raw".to_owned(), pretty(event));
    let mut view = StepView {
        sequence,
        kind: event.kind().to_owned(),
        title: String::new(),
        round: event.round(),
        duration_ms: event.duration_ms(),
        tokens: None,
        ok: true,
        tabs: Vec::new(),
    };
    match event {
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
            view.title = title;
        }
        Event::Request {
            messages,
            tools_offered,
            ..
        } => {
            view.title = format!(
                "request: {} message(s), {} tool(s) offered",
                messages.len(),
                tools_offered.len()
            );
            let specs: Vec<_> = tools_offered
                .iter()
                .filter_map(|name| registry.get(name).map(|tool| tool.spec().clone()))
                .collect();
            view.tabs.push(("Messages".into(), pretty(messages)));
            view.tabs.push(("Tool specs".into(), pretty(&specs)));
        }
        Event::Llm {
            content,
            tool_calls,
            usage,
            raw: provider_raw,
            ..
        } => {
            view.tokens = Some(usage.total());
            view.title = if tool_calls.is_empty() {
                "model answered".to_owned()
            } else {
                format!("model requests tools: {}", names(tool_calls))
            };
            if let Some(content) = content {
                view.tabs.push(("Result".into(), content.clone()));
            }
            if !tool_calls.is_empty() {
                view.tabs.push(("Arguments".into(), calls_text(tool_calls)));
            }
            if let Some(provider_raw) = provider_raw {
                view.tabs
                    .push(("Provider response".into(), pretty(provider_raw)));
            }
        }
        Event::ProviderRetry {
            retry,
            wait_ms,
            reason,
            ..
        } => {
            view.ok = false;
            view.title = format!(
                "retry {retry} in {}: {reason}",
                if *wait_ms < 1000 {
                    format!("{wait_ms} ms")
                } else {
                    format!("{:.1} s", *wait_ms as f64 / 1000.0)
                }
            );
        }
        Event::LlmFailed { message, .. } => {
            view.ok = false;
            view.title = format!("model failed: {message}");
        }
        Event::Tool {
            name,
            arguments,
            result,
            is_error,
            executed,
            on_resume,
            ..
        } => {
            view.ok = !is_error;
            let outcome = match (executed, is_error) {
                (false, _) if result.starts_with("denied by the operator") => "denied",
                (false, _) => "not run",
                (true, true) => "error",
                (true, false) => "ok",
            };
            view.title = format!(
                "{name}: {outcome}{}",
                if *on_resume {
                    " (after the decision)"
                } else {
                    ""
                }
            );
            view.tabs
                .push(("Arguments".into(), pretty_arguments(arguments)));
            view.tabs.push(("Result".into(), result.clone()));
        }
        Event::ApprovalRequested { calls, gated, .. } => {
            view.title = format!(
                "approval requested: {} ({} gated)",
                names(calls),
                gated.len()
            );
            view.tabs.push(("Arguments".into(), calls_text(calls)));
        }
        Event::ApprovalDecided {
            decided_by,
            choices,
        } => {
            let list: Vec<String> = choices
                .iter()
                .map(|c| {
                    let what = match &c.choice {
                        Choice::Approve => "approve".to_owned(),
                        Choice::ApproveEdited { .. } => "approve with edited arguments".to_owned(),
                        Choice::Deny {
                            reason: Some(reason),
                        } => format!("deny (\"{reason}\")"),
                        Choice::Deny { reason: None } => "deny".to_owned(),
                    };
                    format!("{} {what}", c.tool)
                })
                .collect();
            view.title = format!("decided by {decided_by}: {}", list.join(", "));
        }
    }
    view.tabs.push(raw);
    view
}

/// Step rows for stored events (rows of unknown kinds are shown by kind only).
pub fn steps(events: &[StoredEvent], registry: &ToolRegistry) -> Vec<StepView> {
    events
        .iter()
        .map(|stored| match stored.event() {
            Some(event) => step(stored.sequence, &event, registry),
            None => StepView {
                sequence: stored.sequence,
                kind: stored.kind.clone(),
                title: stored.kind.clone(),
                round: stored.round.and_then(|r| u32::try_from(r).ok()),
                duration_ms: stored.duration_ms.and_then(|d| u64::try_from(d).ok()),
                tokens: None,
                ok: true,
                tabs: vec![("Raw".into(), pretty(&stored.payload))],
            },
        })
        .collect()
}

/// A live event as a step row.
pub fn live_step(event: &SequencedEvent, registry: &ToolRegistry) -> StepView {
    step(event.sequence, &event.event, registry)
}

/// A line diff of `before` and `after` (longest common subsequence; texts here are small).
pub fn diff_lines(before: &str, after: &str) -> Vec<DiffLine> {
    let a: Vec<&str> = if before.is_empty() {
        Vec::new()
    } else {
        before.lines().collect()
    };
    let b: Vec<&str> = if after.is_empty() {
        Vec::new()
    } else {
        after.lines().collect()
    };
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut lines = Vec::new();
    let line = |op: char, text: &str| DiffLine {
        op,
        text: text.to_owned(),
    };
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            lines.push(line(' ', a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            // Removals come before additions, as in a unified diff.
            lines.push(line('-', a[i]));
            i += 1;
        } else {
            lines.push(line('+', b[j]));
            j += 1;
        }
    }
    lines
}

/// The pending calls of a waiting run, with each gated tool's preview.
pub async fn pending_calls(
    state: &SuspendedState,
    registry: &ToolRegistry,
    run_id: &str,
) -> Vec<PendingCallView> {
    let mut views = Vec::with_capacity(state.pending.len());
    for call in &state.pending {
        let gated = state.gated.contains(&call.id);
        let preview = match (registry.get(&call.name), call.parsed_arguments()) {
            (Some(tool), Ok(arguments)) if gated => {
                let ctx = ToolContext {
                    run_id: run_id.to_owned(),
                    actor: String::new(),
                    call_id: call.id.clone(),
                };
                match tool.preview(&arguments, &ctx).await {
                    Ok(Some(Preview::Change {
                        target,
                        before,
                        after,
                    })) => Some(PreviewView::Change {
                        target,
                        lines: diff_lines(&before, &after),
                    }),
                    Ok(Some(Preview::Text { text })) => Some(PreviewView::Text { text }),
                    Ok(None) => None,
                    Err(err) => Some(PreviewView::Unavailable {
                        reason: err.model_text().trim_start_matches("Error: ").to_owned(),
                    }),
                }
            }
            (None, _) if gated => Some(PreviewView::Unavailable {
                reason: format!("the tool `{}` is no longer registered", call.name),
            }),
            (_, Err(_)) if gated => Some(PreviewView::Unavailable {
                reason: "the model's arguments are not valid JSON".into(),
            }),
            _ => None,
        };
        views.push(PendingCallView {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: pretty_arguments(&call.arguments),
            gated,
            preview,
        });
    }
    views
}

/// The whole page model of one run.
pub async fn run_view(run: &RunRecord, events: &[StoredEvent], registry: &ToolRegistry) -> RunView {
    let waiting = run
        .suspended_state
        .as_deref()
        .filter(|_| run.status == RunStatus::WaitingForApproval)
        .and_then(|text| SuspendedState::from_json(text).ok());
    let (pending, digest) = match &waiting {
        Some(state) => (
            pending_calls(state, registry, &run.id.to_string()).await,
            Some(pending_digest(run.id, run.version, state)),
        ),
        None => (Vec::new(), None),
    };
    RunView {
        summary: summary(run),
        steps: steps(events, registry),
        pending,
        digest,
        last_sequence: run
            .last_sequence
            .max(events.last().map(|e| e.sequence).unwrap_or(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diff_marks_removed_and_added_lines() {
        let lines = diff_lines(
            "title: Welcome\nstatus: published\n\nbody",
            "title: Hello\nstatus: published\n\nbody",
        );
        let ops: String = lines.iter().map(|l| l.op).collect();
        assert_eq!(ops, "-+   ");
        assert_eq!(lines[0].text, "title: Welcome");
        assert_eq!(lines[1].text, "title: Hello");
        let created = diff_lines("", "a\nb");
        assert_eq!(created.iter().map(|l| l.op).collect::<String>(), "++");
        let deleted = diff_lines("a", "");
        assert_eq!(deleted.iter().map(|l| l.op).collect::<String>(), "-");
    }

    #[test]
    fn a_retry_is_a_step_that_says_why_and_how_long_it_waits() {
        let retry = |wait_ms| Event::ProviderRetry {
            round: 2,
            retry: 1,
            wait_ms,
            reason: "openai: rate limited (HTTP 429): slow down".into(),
        };
        let view = step(7, &retry(1500), &ToolRegistry::new());
        assert_eq!(view.kind, "provider_retry");
        assert_eq!(view.round, Some(2));
        assert!(!view.ok);
        assert_eq!(
            view.title,
            "retry 1 in 1.5 s: openai: rate limited (HTTP 429): slow down"
        );
        let quick = step(8, &retry(250), &ToolRegistry::new());
        assert!(
            quick.title.starts_with("retry 1 in 250 ms: "),
            "{}",
            quick.title
        );
    }
}
