//! A waiting run as its inbox row shows it: what waits and for whom, read from the suspended
//! state alone (no previews: those are computed when the row's panel opens).

use nrllm_core::clock::format_utc;
use nrllm_core::question::Question;
use nrllm_core::run_store::RunRecord;
use nrllm_core::SuspendedState;

use crate::page_data::inbox::{InboxCall, InboxRow};

/// Characters of a prompt a row shows at most.
pub const ROW_PROMPT_CHARS: usize = 200;

/// Characters of a call's one-line summary at most.
pub const CALL_SUMMARY_CHARS: usize = 120;

/// `text` on one line (runs of white space as one space), cut to `max` characters with `…`.
pub fn one_line(text: &str, max: usize) -> String {
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
        if line.chars().count() > max {
            break;
        }
    }
    match line.chars().count() > max {
        true => line.chars().take(max - 1).collect::<String>() + "…",
        false => line,
    }
}

/// A call's arguments on one line: `key=value` pairs of an object (strings quoted, other values
/// as compact JSON) joined by ` · `; anything else as it came. Cut short.
pub fn arguments_summary(arguments: &str) -> String {
    let text = match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(serde_json::Value::Object(fields)) => fields
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(" · "),
        Ok(other) => other.to_string(),
        Err(_) => arguments.to_owned(),
    };
    one_line(&text, CALL_SUMMARY_CHARS)
}

/// The calls of `state`'s turn that wait for a person: each undecided call, and each question
/// (its question's text as its summary).
fn waiting_calls(state: &SuspendedState) -> Vec<InboxCall> {
    let undecided: Vec<&str> = state.undecided().iter().map(|c| c.id.as_str()).collect();
    state
        .pending
        .iter()
        .filter(|call| undecided.contains(&call.id.as_str()) || state.questions.contains(&call.id))
        .map(|call| {
            let question = state
                .questions
                .contains(&call.id)
                .then(|| Question::of(call))
                .flatten();
            InboxCall {
                tool: call.name.clone(),
                summary: match question {
                    Some(question) => one_line(&question.question, CALL_SUMMARY_CHARS),
                    None => arguments_summary(&call.arguments),
                },
            }
        })
        .collect()
}

/// The inbox row of waiting run `run`; `open_href` is the link that opens its panel.
pub fn inbox_row(run: &RunRecord, open_href: String) -> InboxRow {
    let configuration = run.configuration.as_ref();
    let calls = run
        .suspended_state
        .as_deref()
        .and_then(|text| SuspendedState::from_json(text).ok())
        .map(|state| waiting_calls(&state))
        .unwrap_or_default();
    InboxRow {
        id: run.id.to_string(),
        status: run.status,
        prompt: one_line(
            &configuration.map(|c| c.prompt.clone()).unwrap_or_default(),
            ROW_PROMPT_CHARS,
        ),
        configuration: configuration
            .map(|c| c.provider.clone())
            .unwrap_or_default(),
        requested_by: run.requested_by.clone(),
        waiting_since: format_utc(run.updated_at_ms),
        waiting_since_ms: run.updated_at_ms,
        deadline: run.approval_deadline_ms.map(format_utc),
        deadline_ms: run.approval_deadline_ms,
        calls,
        open_href,
        approvals: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nrllm_core::run_store::RunStatus;
    use nrllm_core::state::STATE_SCHEMA_VERSION;
    use nrllm_core::transcript::{Message, ToolCall};

    #[test]
    fn a_line_is_one_line_and_cut_with_an_ellipsis() {
        assert_eq!(one_line("  a\n\n b\tc ", 10), "a b c");
        let cut = one_line(&"word ".repeat(100), 20);
        assert_eq!(cut.chars().count(), 20);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn arguments_read_as_key_value_pairs_on_one_line() {
        assert_eq!(
            arguments_summary(r#"{"slug": "home", "count": 2, "tags": ["a"]}"#),
            r#"count=2 · slug="home" · tags=["a"]"#
        );
        assert_eq!(arguments_summary("not json\nat all"), "not json at all");
        let long = format!(r#"{{"body": "{}"}}"#, "x".repeat(500));
        assert_eq!(arguments_summary(&long).chars().count(), CALL_SUMMARY_CHARS);
    }

    #[test]
    fn a_row_names_the_calls_that_wait_and_the_question_asked_without_previews() {
        let question = ToolCall::new(
            "q",
            "ask_operator",
            &serde_json::json!({"question": "Which\npage?"}),
        );
        let gated = ToolCall::new("w", "update_page", &serde_json::json!({"slug": "home"}));
        let read = ToolCall::new("r", "get_page", &serde_json::json!({"slug": "home"}));
        let pending = vec![question, gated, read];
        let state = SuspendedState {
            schema_version: STATE_SCHEMA_VERSION,
            messages: vec![
                Message::user("go"),
                Message::Assistant {
                    content: None,
                    tool_calls: pending.clone(),
                },
            ],
            pending,
            gated: vec!["w".into()],
            counters: Default::default(),
            settings: Default::default(),
            recorded_messages: 0,
            answered: Vec::new(),
            unknown: Vec::new(),
            ruled: Vec::new(),
            questions: vec!["q".into()],
            budget: None,
            approvals_required: 1,
            elicited: None,
            waiting_since_ms: None,
        };
        let mut run = super::super::tests::record(3);
        run.status = RunStatus::WaitingForApproval;
        run.suspended_state = Some(state.to_json());
        run.updated_at_ms = 1_000;
        run.approval_deadline_ms = Some(61_000);
        let row = inbox_row(&run, "/approvals?open=x".into());
        let calls: Vec<_> = row
            .calls
            .iter()
            .map(|c| (c.tool.as_str(), c.summary.as_str()))
            .collect();
        // The read-only call runs without anyone: it is not among what waits.
        assert_eq!(
            calls,
            [
                ("ask_operator", "Which page?"),
                ("update_page", r#"slug="home""#)
            ]
        );
        assert_eq!(row.deadline_ms, Some(61_000));
        assert_eq!(row.waiting_since_ms, 1_000);
        assert_eq!(row.open_href, "/approvals?open=x");
    }
}
