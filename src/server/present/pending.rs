//! A waiting turn as its panel shows it: each call with its preview, a question's form.

use nrllm_core::clock::format_utc;
use nrllm_core::preview::PreviewOutcome;
use nrllm_core::question::Question;
use nrllm_core::run_service::PendingTurn;
use nrllm_core::state::SuspendedState;
use nrllm_core::tool::Effect;
use nrllm_core::transcript::ToolCall;

use super::json::*;
use crate::page_data::{
    AskedBy, CallState, FieldView, PendingCallView, PreviewView, QuestionLink, QuestionView,
};
use crate::server::diff;

pub(super) fn calls_text(calls: &[ToolCall]) -> String {
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
            question: question_of(&pending.state, call),
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

/// The question `call` of the waiting turn `state` asks, if it asks one: the model's
/// (`ask_operator`), or its server's while the call ran (MCP elicitation).
fn question_of(state: &SuspendedState, call: &ToolCall) -> Option<QuestionView> {
    match &state.elicited {
        Some(wait) if wait.call_id == call.id => Some(QuestionView {
            asked_by: Some(AskedBy {
                server: wait.asked.server.clone(),
                tool: call.name.clone(),
                held: wait.asked.held_until_ms.is_some(),
            }),
            link: wait.asked.link.as_ref().map(|link| QuestionLink {
                url: link.url.clone(),
                host: link.host.clone(),
            }),
            ..question_view(&wait.question())
        }),
        _ => state
            .questions
            .contains(&call.id)
            .then(|| Question::of(call))
            .flatten()
            .map(|q| question_view(&q)),
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
                        label: property["title"]
                            .as_str()
                            .or(property["description"].as_str())
                            .unwrap_or(name)
                            .to_owned(),
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
        asked_by: None,
        link: None,
    }
}
