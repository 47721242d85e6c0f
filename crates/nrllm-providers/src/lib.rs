//! Real LLM providers over HTTP. Each adapter converts the canonical (OpenAI-shaped) transcript to
//! its wire format and back; what they share — timeouts, retries with backoff, error
//! classification and keeping keys out of messages — lives in [`http`].

pub mod anthropic;
pub mod gemini;
pub mod http;
pub mod openai;

use serde_json::{Map, Value};

use nrllm_core::transcript::ToolCall;

/// Whether a tool result tells the model its call failed: an `Error:` result, or a refusal.
pub(crate) fn reads_as_error(result: &str) -> bool {
    result.starts_with("Error:") || result.starts_with("denied by the operator")
}

/// A call's arguments as a JSON object, for wire formats that carry them as one. A call whose
/// arguments were not a JSON object was answered with an error; the format still needs an object.
pub(crate) fn arguments_object(call: &ToolCall) -> Value {
    call.parsed_arguments()
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()))
}
