//! A streamed chat completion (`stream: true`, `stream_options.include_usage`): `chat.completion
//! .chunk` events, each with a `delta` of the answer's text, of thinking (`reasoning_content` or
//! `reasoning`, as vLLM, DeepSeek and OpenRouter send it) or of tool calls by `index` (the id and
//! name first, then the arguments' text in fragments), the finish reason, usage in the last chunk,
//! and `[DONE]`. Folded into the `chat.completion` body the non-streaming endpoint answers.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::stream::{event_json, failed_mid_response, ReadUsage, StreamFold};
use nrllm_core::provider::{Delta, ProviderError, ProviderErrorKind, Usage};

/// The chunks read so far.
#[derive(Debug, Default)]
pub struct Chunks {
    provider: String,
    /// Reads the usage the stream reported (the wire format's own reading).
    read_usage: ReadUsage,
    /// The first chunk's `id`, `model` and `created`, for the assembled body.
    head: Map<String, Value>,
    text: String,
    calls: BTreeMap<usize, Call>,
    finish_reason: Option<String>,
    usage: Option<Value>,
    done: bool,
}

#[derive(Debug, Default)]
struct Call {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

impl Chunks {
    /// A fold for a stream from `provider` (named in errors), whose usage `read_usage` reads.
    pub fn new(provider: &str, read_usage: ReadUsage) -> Chunks {
        Chunks {
            provider: provider.to_owned(),
            read_usage,
            ..Chunks::default()
        }
    }

    fn chunk(&mut self, chunk: &Value) -> Vec<Delta> {
        if self.head.is_empty() {
            for key in ["id", "model", "created", "system_fingerprint"] {
                if let Some(value) = chunk.get(key) {
                    self.head.insert(key.to_owned(), value.clone());
                }
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|usage| usage.is_object()) {
            self.usage = Some(usage.clone());
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return Vec::new();
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        let Some(delta) = choice.get("delta") else {
            return Vec::new();
        };
        let mut deltas = Vec::new();
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            if !text.is_empty() {
                self.text.push_str(text);
                deltas.push(Delta::Text { text: text.into() });
            }
        }
        let thinking = ["reasoning_content", "reasoning"]
            .iter()
            .find_map(|key| delta.get(*key).and_then(Value::as_str));
        if let Some(text) = thinking.filter(|text| !text.is_empty()) {
            deltas.push(Delta::Thinking { text: text.into() });
        }
        let calls = delta.get("tool_calls").and_then(Value::as_array);
        for call in calls.into_iter().flatten() {
            deltas.push(self.call(call));
        }
        deltas
    }

    /// A fragment of a tool call, by its `index` (a server that leaves the index out sends each
    /// call whole, in order).
    fn call(&mut self, fragment: &Value) -> Delta {
        let index = fragment
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .unwrap_or(self.calls.len());
        let text = |key: &str| {
            fragment
                .pointer(key)
                .and_then(Value::as_str)
                .filter(|text| !text.is_empty())
                .map(str::to_owned)
        };
        let (id, name) = (text("/id"), text("/function/name"));
        let arguments = match fragment.pointer("/function/arguments") {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Null) | None => String::new(),
            // Some servers send the arguments as an object, whole.
            Some(other) => other.to_string(),
        };
        let call = self.calls.entry(index).or_default();
        if id.is_some() {
            call.id.clone_from(&id);
        }
        if name.is_some() {
            // The name comes whole, once (a server that repeats it repeats it whole).
            call.name.clone_from(&name);
        }
        call.arguments.push_str(&arguments);
        Delta::ToolCall {
            index,
            id,
            name,
            arguments,
        }
    }

    fn error(&self, error: &Value) -> ProviderError {
        let message = error.get("message").and_then(Value::as_str);
        failed_mid_response(&self.provider, ProviderErrorKind::Transient, None, message)
    }
}

impl StreamFold for Chunks {
    fn event(&mut self, _event: &str, data: &str) -> Result<Vec<Delta>, ProviderError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(Vec::new());
        }
        let Some(chunk) = event_json::<Value>(data, &self.provider)? else {
            return Ok(Vec::new());
        };
        if let Some(error) = chunk.get("error") {
            return Err(self.error(error));
        }
        Ok(self.chunk(&chunk))
    }

    fn complete(&self) -> bool {
        self.done
    }

    fn usage(&self) -> Option<Usage> {
        self.usage.as_ref().and_then(self.read_usage.0)
    }

    fn finish(self: Box<Self>) -> Value {
        let calls: Vec<Value> = self
            .calls
            .into_values()
            .map(|call| {
                let mut value = json!({
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                });
                if let Some(id) = call.id {
                    value["id"] = Value::String(id);
                }
                value
            })
            .collect();
        let mut message = json!({
            "role": "assistant",
            "content": (!self.text.is_empty()).then_some(self.text),
        });
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(calls);
        }
        let mut body = self.head;
        body.insert("object".into(), json!("chat.completion"));
        body.insert(
            "choices".into(),
            json!([{"index": 0, "message": message, "finish_reason": self.finish_reason}]),
        );
        if let Some(usage) = self.usage {
            body.insert("usage".into(), usage);
        }
        Value::Object(body)
    }
}
