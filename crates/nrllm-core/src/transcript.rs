//! The canonical transcript: OpenAI-shaped chat messages that every provider adapter converts from.
//!
//! Tool-call arguments are kept as the raw JSON text the model produced, exactly as the OpenAI
//! wire format carries them, so a call with malformed arguments can still be stored, shown to an
//! operator and answered with an `Error:` result instead of being lost.

use serde::{Deserialize, Serialize};

/// One chat message. Serialises to the OpenAI chat shape (`{"role": "...", ...}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// The system prompt.
    System { content: String },
    /// A message from the user.
    User { content: String },
    /// One model turn: optional text and zero or more tool calls.
    Assistant {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, answering the call with the same id.
    Tool {
        tool_call_id: String,
        content: String,
        /// How the call was answered. Formats that flag a failed call (Anthropic's `is_error`,
        /// Gemini's error response) read this, never the text.
        #[serde(default, skip_serializing_if = "ToolOutcome::is_ok")]
        outcome: ToolOutcome,
    },
}

/// How a tool call was answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolOutcome {
    /// The tool ran and returned its result.
    #[default]
    Ok,
    /// The call failed: bad arguments, a tool error, or a tool the run may not use.
    Error,
    /// An operator denied the call; it did not run.
    Denied,
}

impl ToolOutcome {
    /// The call ran and succeeded.
    pub fn is_ok(&self) -> bool {
        *self == ToolOutcome::Ok
    }

    /// The outcome of a result recorded before outcomes were kept, told from its text (the way
    /// results were written then: `Error: …`, `denied by the operator…`). Only for reading old
    /// data; everything written now carries its outcome.
    pub fn from_legacy_text(content: &str) -> ToolOutcome {
        if content.starts_with("denied by the operator") {
            ToolOutcome::Denied
        } else if content.starts_with("Error:") {
            ToolOutcome::Error
        } else {
            ToolOutcome::Ok
        }
    }
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
        }
    }

    /// An assistant message with text only.
    pub fn assistant_text(content: impl Into<String>) -> Self {
        Message::Assistant {
            content: Some(content.into()),
            tool_calls: Vec::new(),
        }
    }

    /// A successful tool result answering `tool_call_id`.
    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message::tool_answer(tool_call_id, content, ToolOutcome::Ok)
    }

    /// A tool result answering `tool_call_id`, with how the call went.
    pub fn tool_answer(
        tool_call_id: impl Into<String>,
        content: impl Into<String>,
        outcome: ToolOutcome,
    ) -> Self {
        Message::Tool {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
            outcome,
        }
    }

    /// The message's role as the wire format names it.
    pub fn role(&self) -> &'static str {
        match self {
            Message::System { .. } => "system",
            Message::User { .. } => "user",
            Message::Assistant { .. } => "assistant",
            Message::Tool { .. } => "tool",
        }
    }

    /// The tool calls of an assistant turn; empty for every other message.
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Message::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }
}

/// One tool call made by the model: `{"id", "type": "function", "function": {"name", "arguments"}}`
/// on the wire, flat in Rust.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "WireToolCall", try_from = "WireToolCall")]
pub struct ToolCall {
    /// Provider-assigned (or synthesised) id; tool results refer to it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as raw JSON text, exactly as the model produced them.
    pub arguments: String,
    /// An opaque token the provider attached to the call and wants back with it in later
    /// requests (Gemini's `thoughtSignature`); `None` for most providers.
    pub signature: Option<String>,
}

impl ToolCall {
    /// A call with arguments given as a JSON value.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: &serde_json::Value,
    ) -> Self {
        ToolCall::with_raw_arguments(id, name, arguments.to_string())
    }

    /// A call with arguments as the raw text the model produced (which may not be JSON).
    pub fn with_raw_arguments(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
            signature: None,
        }
    }

    /// The arguments parsed as JSON. A model can emit malformed JSON, so this can fail.
    pub fn parsed_arguments(&self) -> Result<serde_json::Value, serde_json::Error> {
        if self.arguments.trim().is_empty() {
            return Ok(serde_json::Value::Object(Default::default()));
        }
        serde_json::from_str(&self.arguments)
    }
}

#[derive(Serialize, Deserialize)]
struct WireToolCall {
    id: String,
    #[serde(rename = "type", default = "function_kind")]
    kind: String,
    function: WireFunction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signature: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

fn function_kind() -> String {
    "function".to_owned()
}

impl From<ToolCall> for WireToolCall {
    fn from(call: ToolCall) -> Self {
        WireToolCall {
            id: call.id,
            kind: function_kind(),
            function: WireFunction {
                name: call.name,
                arguments: call.arguments,
            },
            signature: call.signature,
        }
    }
}

impl TryFrom<WireToolCall> for ToolCall {
    type Error = String;

    fn try_from(wire: WireToolCall) -> Result<Self, Self::Error> {
        if wire.kind != "function" {
            return Err(format!("unsupported tool call type `{}`", wire.kind));
        }
        Ok(ToolCall {
            id: wire.id,
            name: wire.function.name,
            arguments: wire.function.arguments,
            signature: wire.signature,
        })
    }
}

/// Why a transcript breaks the rules every provider enforces.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranscriptError {
    /// A tool message that answers no open call of the preceding assistant turn, or answers out of order.
    #[error("message {index}: tool result `{tool_call_id}` does not answer the next open call of the preceding assistant turn")]
    UnexpectedToolResult { index: usize, tool_call_id: String },
    /// An assistant turn whose calls were not all answered before the next non-tool message.
    #[error("message {index}: tool call `{tool_call_id}` was never answered")]
    UnansweredCall { index: usize, tool_call_id: String },
    /// Two calls share one id.
    #[error("message {index}: tool call id `{tool_call_id}` is used twice")]
    DuplicateCallId { index: usize, tool_call_id: String },
}

/// Whether the last assistant turn may still have unanswered calls (a suspended transcript) or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Every call must be answered (what a provider receives).
    Complete,
    /// The final assistant turn may still wait for all of its results (a suspended state).
    PendingAllowed,
}

/// Checks that every tool call is answered exactly once, in call order, directly after its turn,
/// and that every tool message answers such a call.
pub fn validate(messages: &[Message], tail: Tail) -> Result<(), TranscriptError> {
    let mut seen_ids = std::collections::HashSet::new();
    // Calls of the latest assistant turn that still wait for their result, in order.
    let mut open: std::collections::VecDeque<(usize, &str)> = Default::default();
    let mut open_turn_answered = 0usize;
    for (index, message) in messages.iter().enumerate() {
        match message {
            Message::Tool { tool_call_id, .. } => match open.front() {
                Some((_, id)) if id == tool_call_id => {
                    open.pop_front();
                    open_turn_answered += 1;
                }
                _ => {
                    return Err(TranscriptError::UnexpectedToolResult {
                        index,
                        tool_call_id: tool_call_id.clone(),
                    })
                }
            },
            other => {
                if let Some((call_index, id)) = open.front() {
                    return Err(TranscriptError::UnansweredCall {
                        index: *call_index,
                        tool_call_id: (*id).to_owned(),
                    });
                }
                open_turn_answered = 0;
                for call in other.tool_calls() {
                    if !seen_ids.insert(call.id.as_str()) {
                        return Err(TranscriptError::DuplicateCallId {
                            index,
                            tool_call_id: call.id.clone(),
                        });
                    }
                    open.push_back((index, call.id.as_str()));
                }
            }
        }
    }
    match (open.front(), tail) {
        (None, _) => Ok(()),
        // A suspended turn holds all of its calls: none of them may have been answered yet.
        (Some(_), Tail::PendingAllowed) if open_turn_answered == 0 => Ok(()),
        (Some((index, id)), _) => Err(TranscriptError::UnansweredCall {
            index: *index,
            tool_call_id: (*id).to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> ToolCall {
        ToolCall::new(id, "get_page", &json!({"slug": "home"}))
    }

    fn turn(ids: &[&str]) -> Message {
        Message::Assistant {
            content: None,
            tool_calls: ids.iter().map(|id| call(id)).collect(),
        }
    }

    #[test]
    fn messages_serialise_in_the_openai_shape() {
        let value = serde_json::to_value(turn(&["call_1"])).unwrap();
        assert_eq!(
            value,
            json!({"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_page", "arguments": "{\"slug\":\"home\"}"}}]})
        );
        let value = serde_json::to_value(Message::tool_result("call_1", "ok")).unwrap();
        assert_eq!(
            value,
            json!({"role": "tool", "tool_call_id": "call_1", "content": "ok"})
        );
    }

    #[test]
    fn a_transcript_round_trips_through_json() {
        let messages = vec![
            Message::system("be careful"),
            Message::user("rename home"),
            turn(&["a", "b"]),
            Message::tool_result("a", "done"),
            Message::tool_result("b", "Error: nope"),
            Message::assistant_text("Renamed."),
        ];
        let text = serde_json::to_string(&messages).unwrap();
        let back: Vec<Message> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, messages);
    }

    #[test]
    fn a_providers_call_signature_is_kept_and_only_written_when_present() {
        let mut signed = call("g1");
        signed.signature = Some("c2lnbmVk".into());
        let value = serde_json::to_value(&signed).unwrap();
        assert_eq!(value["signature"], "c2lnbmVk");
        assert_eq!(serde_json::from_value::<ToolCall>(value).unwrap(), signed);
        let plain = serde_json::to_value(call("o1")).unwrap();
        assert!(plain.get("signature").is_none(), "{plain}");
    }

    #[test]
    fn an_unknown_tool_call_type_is_rejected() {
        let bad = json!({"role": "assistant", "tool_calls": [{"id": "x", "type": "code",
            "function": {"name": "f", "arguments": "{}"}}]});
        assert!(serde_json::from_value::<Message>(bad).is_err());
    }

    #[test]
    fn malformed_arguments_are_kept_and_reported_on_parse() {
        let call = ToolCall::with_raw_arguments("x", "f", "{not json");
        assert!(call.parsed_arguments().is_err());
        let empty = ToolCall {
            arguments: String::new(),
            ..call
        };
        assert_eq!(empty.parsed_arguments().unwrap(), json!({}));
    }

    #[test]
    fn validate_accepts_answered_calls_in_order() {
        let messages = vec![
            Message::user("u"),
            turn(&["a", "b"]),
            Message::tool_result("a", "1"),
            Message::tool_result("b", "2"),
            Message::assistant_text("done"),
        ];
        assert_eq!(validate(&messages, Tail::Complete), Ok(()));
    }

    #[test]
    fn validate_rejects_out_of_order_missing_and_stray_results() {
        let swapped = vec![
            Message::user("u"),
            turn(&["a", "b"]),
            Message::tool_result("b", "2"),
            Message::tool_result("a", "1"),
        ];
        assert!(matches!(
            validate(&swapped, Tail::Complete),
            Err(TranscriptError::UnexpectedToolResult { index: 2, .. })
        ));
        let missing = vec![
            Message::user("u"),
            turn(&["a", "b"]),
            Message::tool_result("a", "1"),
            Message::user("again"),
        ];
        assert!(matches!(
            validate(&missing, Tail::Complete),
            Err(TranscriptError::UnansweredCall { index: 1, .. })
        ));
        let stray = vec![Message::user("u"), Message::tool_result("zz", "?")];
        assert!(validate(&stray, Tail::Complete).is_err());
        let duplicate = vec![
            Message::user("u"),
            turn(&["a"]),
            Message::tool_result("a", "1"),
            turn(&["a"]),
            Message::tool_result("a", "1"),
        ];
        assert!(matches!(
            validate(&duplicate, Tail::Complete),
            Err(TranscriptError::DuplicateCallId { index: 3, .. })
        ));
    }

    #[test]
    fn a_pending_tail_is_allowed_only_when_wholly_unanswered() {
        let pending = vec![Message::user("u"), turn(&["a", "b"])];
        assert_eq!(validate(&pending, Tail::PendingAllowed), Ok(()));
        assert!(validate(&pending, Tail::Complete).is_err());
        let half = vec![
            Message::user("u"),
            turn(&["a", "b"]),
            Message::tool_result("a", "1"),
        ];
        assert!(validate(&half, Tail::PendingAllowed).is_err());
    }
}
