//! Anthropic Messages. The system prompt is lifted to `system`; tools go out as
//! `{name, description, input_schema}`; an assistant turn's tool calls become `tool_use` blocks;
//! consecutive tool results are merged into one user message of `tool_result` blocks keyed by
//! `tool_use_id` — the shape the API requires after every tool-using turn — each flagged
//! `is_error` by its outcome. Responses are streamed (`anthropic/stream.rs`) unless the
//! configuration says not to.

mod stream;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::http::ApiKey;
use crate::stream::{ReadUsage, StreamFold};
use crate::{arguments_object, synthesised_id, turn_text, HttpProvider, WireFormat};
use nrllm_core::provider::{
    ChatRequest, ChatResponse, FinishReason, ProviderError, ToolChoice, Usage,
};
use nrllm_core::transcript::{Message, ToolCall};

/// The API version this adapter speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// Anthropic requires a completion limit; this one is used when the run sets none.
pub const DEFAULT_MAX_TOKENS: u32 = 1024;

/// The Anthropic Messages format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Anthropic;

/// An Anthropic Messages provider.
pub type AnthropicProvider = HttpProvider<Anthropic>;

/// A Messages request.
#[derive(Debug, Serialize)]
pub struct Request {
    model: String,
    max_tokens: u32,
    messages: Vec<Turn>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice>,
}

#[derive(Debug, Serialize)]
struct Turn {
    role: &'static str,
    content: Vec<Block>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        content: String,
        is_error: bool,
    },
}

#[derive(Debug, Serialize)]
struct WireTool {
    name: String,
    description: String,
    input_schema: Value,
}

#[derive(Debug, Serialize)]
struct WireToolChoice {
    #[serde(rename = "type")]
    kind: &'static str,
}

/// A Messages response.
#[derive(Debug, Deserialize)]
pub struct Response {
    #[serde(default)]
    model: Option<String>,
    content: Option<Vec<ResponseBlock>>,
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ResponseBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: Option<String>,
        #[serde(default)]
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    /// Anthropic's cache reads and writes are *not* inside its `input_tokens`: they are added to
    /// our prompt count, of which they are parts.
    fn from(usage: WireUsage) -> Usage {
        let cached = usage.cache_read_input_tokens.unwrap_or(0);
        let writes = usage.cache_creation_input_tokens.unwrap_or(0);
        Usage {
            cached_input_tokens: cached,
            cache_write_tokens: writes,
            ..Usage::tokens(usage.input_tokens + cached + writes, usage.output_tokens)
        }
    }
}

/// A usage object as a stream reports it so far.
fn reported_usage(usage: &Value) -> Option<Usage> {
    WireUsage::deserialize(usage).ok().map(Usage::from)
}

impl WireFormat for Anthropic {
    type Request = Request;
    type Response = Response;
    const PATH: &'static str = "/messages";

    fn headers(&self, key: Option<&ApiKey>) -> Vec<(&'static str, String)> {
        let mut headers = vec![("anthropic-version", ANTHROPIC_VERSION.to_owned())];
        if let Some(key) = key {
            headers.insert(0, ("x-api-key", key.expose().to_owned()));
        }
        headers
    }

    fn request(&self, model: &str, request: &ChatRequest) -> Request {
        let mut system = Vec::new();
        let mut turns: Vec<Turn> = Vec::new();
        for message in &request.messages {
            match message {
                Message::System { content } => system.push(content.clone()),
                Message::User { content } => turns.push(Turn {
                    role: "user",
                    content: vec![Block::Text {
                        text: content.clone(),
                    }],
                }),
                Message::Assistant {
                    content,
                    tool_calls,
                } => turns.push(assistant_turn(content, tool_calls)),
                Message::Tool {
                    tool_call_id,
                    content,
                    outcome,
                } => {
                    let block = Block::ToolResult {
                        tool_use_id: tool_call_id.clone(),
                        content: content.clone(),
                        is_error: !outcome.is_ok(),
                    };
                    // Consecutive results share one user message.
                    match turns.last_mut().filter(|last| {
                        last.role == "user"
                            && last
                                .content
                                .iter()
                                .all(|b| matches!(b, Block::ToolResult { .. }))
                    }) {
                        Some(last) => last.content.push(block),
                        None => turns.push(Turn {
                            role: "user",
                            content: vec![block],
                        }),
                    }
                }
            }
        }
        let tools: Vec<WireTool> = request
            .tools
            .iter()
            .map(|t| WireTool {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: t.parameters.clone(),
            })
            .collect();
        let tool_choice = (!tools.is_empty() && request.tool_choice == ToolChoice::Disabled)
            .then_some(WireToolChoice { kind: "none" });
        Request {
            model: model.to_owned(),
            max_tokens: request.options.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            messages: turns,
            system: (!system.is_empty()).then(|| system.join("\n\n")),
            temperature: request.options.temperature.map(|t| t.min(1.0)),
            tools,
            tool_choice,
        }
    }

    fn fold(&self, provider: &str) -> Option<Box<dyn StreamFold>> {
        Some(Box::new(stream::Events::new(
            provider,
            ReadUsage(reported_usage),
        )))
    }

    fn stream_body(&self, body: &mut Value) {
        body["stream"] = Value::Bool(true);
    }

    fn without_thinking(&self, body: &mut Value) {
        let blocks = body["content"].as_array_mut().into_iter().flatten();
        for block in blocks.filter(|block| block["type"] == "thinking") {
            crate::thinking_set_aside(block.get_mut("thinking"));
        }
    }

    fn response(&self, response: Response, provider: &str) -> Result<ChatResponse, ProviderError> {
        let blocks = response.content.ok_or_else(|| {
            ProviderError::permanent(format!("{provider}: the response has no content"))
        })?;
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for (index, block) in blocks.into_iter().enumerate() {
            match block {
                ResponseBlock::Text { text: chunk } => text.push_str(&chunk),
                ResponseBlock::ToolUse { id, name, input } => {
                    let input = if input.is_null() {
                        Value::Object(Default::default())
                    } else {
                        input
                    };
                    tool_calls.push(ToolCall::new(
                        id.unwrap_or_else(|| synthesised_id("toolu_", index)),
                        name,
                        &input,
                    ));
                }
                ResponseBlock::Other => {}
            }
        }
        let finish_reason = match response.stop_reason.as_deref() {
            Some("end_turn") | Some("stop_sequence") | None => FinishReason::Stop,
            Some("tool_use") => FinishReason::ToolCalls,
            Some("max_tokens") => FinishReason::Length,
            Some(other) => FinishReason::Other(other.to_owned()),
        };
        let usage = response.usage.map_or(Usage::unreported(), Usage::from);
        Ok(ChatResponse::turn(text, tool_calls, usage, finish_reason).answered_by(response.model))
    }
}

/// The model's own turn: its text (if any) and its tool calls as `tool_use` blocks (never empty).
fn assistant_turn(content: &Option<String>, tool_calls: &[ToolCall]) -> Turn {
    let mut blocks: Vec<Block> = turn_text(content)
        .map(|text| Block::Text { text })
        .into_iter()
        .collect();
    blocks.extend(tool_calls.iter().map(|call| Block::ToolUse {
        id: call.id.clone(),
        name: call.name.clone(),
        input: arguments_object(call),
    }));
    if blocks.is_empty() {
        blocks.push(Block::Text {
            text: String::new(),
        });
    }
    Turn {
        role: "assistant",
        content: blocks,
    }
}
