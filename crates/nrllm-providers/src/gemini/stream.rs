//! A streamed `streamGenerateContent?alt=sse` response: each event is a `GenerateContentResponse`
//! of its own, whose candidate brings the next parts — text in fragments (thought summaries
//! flagged `thought`), function calls whole, a `thoughtSignature` on the part it signs — and,
//! in the last, the finish reason and the usage. There is no terminator: a stream is complete
//! once a finish reason (or a blocked prompt) came. Folded into the response the non-streaming
//! endpoint answers: adjacent text fragments joined into one part, every signature kept on its
//! part.

use serde_json::{json, Map, Value};

use crate::stream::{append_text, event_json, failed_mid_response, ReadUsage, StreamFold};
use nrllm_core::provider::{Delta, ProviderError, ProviderErrorKind, Usage};

/// The chunks read so far.
#[derive(Debug, Default)]
pub struct Chunks {
    provider: String,
    /// Reads the usage the stream reported (the wire format's own reading).
    read_usage: ReadUsage,
    /// The latest chunk's fields other than its candidates (`usageMetadata`, `modelVersion`,
    /// `responseId`, `promptFeedback`).
    head: Map<String, Value>,
    parts: Vec<Value>,
    calls: usize,
    finish_reason: Option<Value>,
    blocked: bool,
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

    fn chunk(&mut self, chunk: Map<String, Value>) -> Vec<Delta> {
        let mut deltas = Vec::new();
        for (key, value) in chunk {
            match key.as_str() {
                "candidates" => {
                    let candidate = value.get(0).cloned().unwrap_or(Value::Null);
                    if let Some(reason) = candidate.get("finishReason").filter(|r| !r.is_null()) {
                        self.finish_reason = Some(reason.clone());
                    }
                    let parts = candidate
                        .pointer("/content/parts")
                        .and_then(Value::as_array);
                    for part in parts.into_iter().flatten() {
                        deltas.extend(self.part(part));
                    }
                }
                "promptFeedback" => {
                    self.blocked |= value.get("blockReason").is_some_and(|r| !r.is_null());
                    self.head.insert(key, value);
                }
                _ => {
                    self.head.insert(key, value);
                }
            }
        }
        deltas
    }

    /// One part: a text fragment joins the text part before it (of the same kind, unsigned);
    /// anything else is a part of its own.
    fn part(&mut self, part: &Value) -> Option<Delta> {
        let thought = part.get("thought").and_then(Value::as_bool) == Some(true);
        if let Some(call) = part.get("functionCall") {
            self.parts.push(part.clone());
            let text = |key: &str| call.get(key).and_then(Value::as_str).map(str::to_owned);
            let index = self.calls;
            self.calls += 1;
            return Some(Delta::ToolCall {
                index,
                id: text("id"),
                name: text("name"),
                arguments: call.get("args").map(Value::to_string).unwrap_or_default(),
            });
        }
        let text = part.get("text").and_then(Value::as_str).unwrap_or_default();
        let joins = self.parts.last_mut().filter(|last| {
            last.get("text").is_some()
                && last.get("thoughtSignature").is_none()
                && (last.get("thought").and_then(Value::as_bool) == Some(true)) == thought
        });
        match joins {
            Some(last) if part.get("text").is_some() => {
                append_text(last, "text", text);
                if let Some(signature) = part.get("thoughtSignature") {
                    last["thoughtSignature"] = signature.clone();
                }
            }
            _ => self.parts.push(part.clone()),
        }
        (!text.is_empty()).then(|| match thought {
            true => Delta::Thinking { text: text.into() },
            false => Delta::Text { text: text.into() },
        })
    }

    fn error(&self, error: &Value) -> ProviderError {
        let code = error.get("code").and_then(Value::as_u64).unwrap_or(500);
        let kind = match code {
            429 | 500..=599 => ProviderErrorKind::Transient,
            _ => ProviderErrorKind::Permanent,
        };
        let message = error.get("message").and_then(Value::as_str);
        failed_mid_response(&self.provider, kind, Some(&code.to_string()), message)
    }
}

impl StreamFold for Chunks {
    fn event(&mut self, _event: &str, data: &str) -> Result<Vec<Delta>, ProviderError> {
        let Some(chunk) = event_json::<Map<String, Value>>(data, &self.provider)? else {
            return Ok(Vec::new());
        };
        if let Some(error) = chunk.get("error") {
            return Err(self.error(error));
        }
        Ok(self.chunk(chunk))
    }

    fn complete(&self) -> bool {
        self.finish_reason.is_some() || self.blocked
    }

    fn usage(&self) -> Option<Usage> {
        self.head.get("usageMetadata").and_then(self.read_usage.0)
    }

    fn finish(self: Box<Self>) -> Value {
        let mut body = self.head;
        if !self.blocked || !self.parts.is_empty() {
            let mut candidate =
                json!({"content": {"role": "model", "parts": self.parts}, "index": 0});
            if let Some(reason) = self.finish_reason {
                candidate["finishReason"] = reason;
            }
            body.insert("candidates".into(), json!([candidate]));
        }
        Value::Object(body)
    }
}
