//! A streamed Messages response (`stream: true`): `message_start` (the message and its input
//! usage), then per content block `content_block_start`, its `content_block_delta`s (`text_delta`,
//! `input_json_delta` — a tool call's input as JSON text in fragments — `thinking_delta`,
//! `signature_delta`) and `content_block_stop`; `message_delta` (the stop reason and the output
//! usage so far), `message_stop`; `ping`s between, and `error` (e.g. `overloaded_error`). Folded
//! into the `message` body the non-streaming endpoint answers.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::stream::{append_text, event_json, failed_mid_response, ReadUsage, StreamFold};
use nrllm_core::provider::{Delta, ProviderError, ProviderErrorKind, Usage};

/// The events read so far.
#[derive(Debug, Default)]
pub struct Events {
    provider: String,
    /// Reads the usage the stream reported (the wire format's own reading).
    read_usage: ReadUsage,
    /// `message_start`'s message, without its content.
    message: Map<String, Value>,
    /// The content blocks by index, each as it started; a tool call's input text beside it.
    blocks: BTreeMap<u64, (Value, String)>,
    /// Which tool call (by its place among the calls) each `tool_use` block is.
    calls: BTreeMap<u64, usize>,
    usage: Map<String, Value>,
    stop_reason: Option<Value>,
    done: bool,
}

impl Events {
    /// A fold for a stream from `provider` (named in errors), whose usage `read_usage` reads.
    pub fn new(provider: &str, read_usage: ReadUsage) -> Events {
        Events {
            provider: provider.to_owned(),
            read_usage,
            ..Events::default()
        }
    }

    fn start(&mut self, event: &Value) {
        if let Some(Value::Object(message)) = event.get("message") {
            for (key, value) in message {
                match key.as_str() {
                    "content" => {}
                    "usage" => self.add_usage(value),
                    _ => {
                        self.message.insert(key.clone(), value.clone());
                    }
                }
            }
        }
    }

    fn add_usage(&mut self, usage: &Value) {
        if let Value::Object(usage) = usage {
            for (key, value) in usage {
                if !value.is_null() {
                    self.usage.insert(key.clone(), value.clone());
                }
            }
        }
    }

    fn block_start(&mut self, index: u64, block: &Value) -> Vec<Delta> {
        let mut block = block.clone();
        let kind = block
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut deltas = Vec::new();
        if kind == "tool_use" {
            let call = self.calls.len();
            self.calls.insert(index, call);
            let text = |key: &str| block.get(key).and_then(Value::as_str).map(str::to_owned);
            deltas.push(Delta::ToolCall {
                index: call,
                id: text("id"),
                name: text("name"),
                arguments: String::new(),
            });
            // The input comes as JSON text in the deltas that follow.
            block["input"] = json!({});
        }
        self.blocks.insert(index, (block, String::new()));
        deltas
    }

    fn block_delta(&mut self, index: u64, delta: &Value) -> Vec<Delta> {
        let Some((block, input)) = self.blocks.get_mut(&index) else {
            return Vec::new();
        };
        let text = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or_default();
        let mut append = |key: &str, more: &str| append_text(block, key, more);
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") if !text("text").is_empty() => {
                append("text", text("text"));
                vec![Delta::Text {
                    text: text("text").to_owned(),
                }]
            }
            Some("thinking_delta") if !text("thinking").is_empty() => {
                append("thinking", text("thinking"));
                vec![Delta::Thinking {
                    text: text("thinking").to_owned(),
                }]
            }
            Some("signature_delta") => {
                append("signature", text("signature"));
                Vec::new()
            }
            Some("input_json_delta") => {
                input.push_str(text("partial_json"));
                match self.calls.get(&index) {
                    Some(call) => vec![Delta::ToolCall {
                        index: *call,
                        id: None,
                        name: None,
                        arguments: text("partial_json").to_owned(),
                    }],
                    None => Vec::new(),
                }
            }
            _ => Vec::new(),
        }
    }

    fn error(&self, event: &Value) -> ProviderError {
        let kind = event
            .pointer("/error/type")
            .and_then(Value::as_str)
            .unwrap_or("error");
        let message = event.pointer("/error/message").and_then(Value::as_str);
        // Overloaded, rate limited or failed is worth another try; a refused request is not.
        let kind_of = match kind {
            "invalid_request_error"
            | "authentication_error"
            | "permission_error"
            | "not_found_error"
            | "request_too_large" => ProviderErrorKind::Permanent,
            _ => ProviderErrorKind::Transient,
        };
        failed_mid_response(&self.provider, kind_of, Some(kind), message)
    }
}

impl StreamFold for Events {
    fn event(&mut self, name: &str, data: &str) -> Result<Vec<Delta>, ProviderError> {
        let Some(event) = event_json::<Value>(data, &self.provider)? else {
            return Ok(Vec::new());
        };
        // The data names its type too; a server that leaves out `event:` lines is read by it.
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(name)
            .to_owned();
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        Ok(match kind.as_str() {
            "message_start" => {
                self.start(&event);
                Vec::new()
            }
            "content_block_start" => match event.get("content_block") {
                Some(block) => self.block_start(index, block),
                None => Vec::new(),
            },
            "content_block_delta" => match event.get("delta") {
                Some(delta) => self.block_delta(index, delta),
                None => Vec::new(),
            },
            "message_delta" => {
                if let Some(reason) = event.pointer("/delta/stop_reason") {
                    self.stop_reason = Some(reason.clone());
                }
                if let Some(usage) = event.get("usage") {
                    self.add_usage(usage);
                }
                Vec::new()
            }
            "message_stop" => {
                self.done = true;
                Vec::new()
            }
            "error" => return Err(self.error(&event)),
            // `ping`, `content_block_stop` and events a later API version adds.
            _ => Vec::new(),
        })
    }

    fn complete(&self) -> bool {
        self.done
    }

    fn usage(&self) -> Option<Usage> {
        (!self.usage.is_empty())
            .then(|| (self.read_usage.0)(&Value::Object(self.usage.clone())))
            .flatten()
    }

    fn finish(self: Box<Self>) -> Value {
        let content: Vec<Value> = self
            .blocks
            .into_values()
            .map(|(mut block, input)| {
                if !input.trim().is_empty() {
                    // Text that is not JSON stays text: the call is answered with an error.
                    block["input"] = serde_json::from_str(&input).unwrap_or(Value::String(input));
                }
                block
            })
            .collect();
        let mut body = self.message;
        body.insert("content".into(), Value::Array(content));
        body.insert(
            "stop_reason".into(),
            self.stop_reason.unwrap_or(Value::Null),
        );
        if !self.usage.is_empty() {
            body.insert("usage".into(), Value::Object(self.usage));
        }
        Value::Object(body)
    }
}
