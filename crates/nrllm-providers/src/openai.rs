//! OpenAI-compatible chat completions: OpenAI itself, and by base URL Ollama, vLLM, llama.cpp's
//! server, LM Studio, OpenRouter… The canonical transcript is already this shape; tools go out as
//! `{type: "function", function: {…}}` with `tool_choice: "auto"`; parallel tool calls, usage and
//! the finish reason come back. Tool-call ids that a local server leaves out are synthesised, and
//! arguments sent as an object instead of a string are accepted. Responses are
//! streamed (`openai/stream.rs`) unless the configuration says not to.

mod stream;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::http::ApiKey;
use crate::stream::{ReadUsage, StreamFold};
use crate::{synthesised_id, HttpProvider, WireFormat};
use nrllm_core::provider::{
    ChatRequest, ChatResponse, FinishReason, ProviderError, ToolChoice, Usage,
};
use nrllm_core::transcript::{Message, ToolCall};

/// The OpenAI chat-completions format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenAi {
    /// Send `max_completion_tokens` (OpenAI's current name) instead of `max_tokens`.
    pub max_completion_tokens: bool,
}

/// An OpenAI-compatible provider.
pub type OpenAiProvider = HttpProvider<OpenAi>;

/// A chat-completions request.
#[derive(Debug, Serialize)]
pub struct Request {
    model: String,
    messages: Vec<WireMessage>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
}

/// A message as this format carries it: the canonical one without what only we keep (a tool
/// result's outcome: the model reads it in the text).
#[derive(Debug, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage {
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant {
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        tool_call_id: String,
        content: String,
    },
}

impl From<&Message> for WireMessage {
    fn from(message: &Message) -> Self {
        match message.clone() {
            Message::System { content } => WireMessage::System { content },
            Message::User { content } => WireMessage::User { content },
            Message::Assistant {
                content,
                tool_calls,
            } => WireMessage::Assistant {
                content,
                tool_calls,
            },
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => WireMessage::Tool {
                tool_call_id,
                content,
            },
        }
    }
}

#[derive(Debug, Serialize)]
struct WireTool {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction,
}

#[derive(Debug, Serialize)]
struct WireFunction {
    name: String,
    description: String,
    parameters: Value,
}

/// A chat-completions response.
#[derive(Debug, Deserialize)]
pub struct Response {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    message: Option<ResponseMessage>,
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ResponseMessage {
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ResponseCall>>,
}

#[derive(Debug, Deserialize)]
struct ResponseCall {
    id: Option<String>,
    function: Option<ResponseFunction>,
}

#[derive(Debug, Deserialize)]
struct ResponseFunction {
    name: Option<String>,
    /// A string of JSON, as the format says; some servers send the object itself.
    arguments: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Debug, Default, Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    /// OpenAI's cached tokens are inside its prompt count, its reasoning tokens inside its
    /// completion count, as ours are (servers that send `null` details send none).
    fn from(usage: WireUsage) -> Usage {
        Usage {
            cached_input_tokens: usage
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0)
                .min(usage.prompt_tokens),
            reasoning_tokens: usage
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0)
                .min(usage.completion_tokens),
            ..Usage::tokens(usage.prompt_tokens, usage.completion_tokens)
        }
    }
}

/// A usage object as a stream reports it.
fn reported_usage(usage: &Value) -> Option<Usage> {
    WireUsage::deserialize(usage).ok().map(Usage::from)
}

impl WireFormat for OpenAi {
    type Request = Request;
    type Response = Response;
    const PATH: &'static str = "/chat/completions";

    fn headers(&self, key: Option<&ApiKey>) -> Vec<(&'static str, String)> {
        key.map(|key| ("authorization", format!("Bearer {}", key.expose())))
            .into_iter()
            .collect()
    }

    fn request(&self, model: &str, request: &ChatRequest) -> Request {
        let tools: Vec<WireTool> = request
            .tools
            .iter()
            .map(|tool| WireTool {
                kind: "function",
                function: WireFunction {
                    name: tool.name.clone(),
                    description: tool.description.clone(),
                    parameters: tool.parameters.clone(),
                },
            })
            .collect();
        let tool_choice = (!tools.is_empty()).then_some(match request.tool_choice {
            ToolChoice::Auto => "auto",
            ToolChoice::Disabled => "none",
        });
        let limit = request.options.max_tokens;
        Request {
            model: model.to_owned(),
            messages: request.messages.iter().map(WireMessage::from).collect(),
            tools,
            tool_choice,
            temperature: request.options.temperature,
            max_tokens: limit.filter(|_| !self.max_completion_tokens),
            max_completion_tokens: limit.filter(|_| self.max_completion_tokens),
        }
    }

    fn fold(&self, provider: &str) -> Option<Box<dyn StreamFold>> {
        Some(Box::new(stream::Chunks::new(
            provider,
            ReadUsage(reported_usage),
        )))
    }

    fn stream_body(&self, body: &mut Value) {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }

    fn without_thinking(&self, body: &mut Value) {
        let messages = body["choices"].as_array_mut().into_iter().flatten();
        for message in messages.filter_map(|choice| choice.get_mut("message")) {
            for key in ["reasoning_content", "reasoning"] {
                crate::thinking_set_aside(message.get_mut(key));
            }
        }
    }

    fn response(&self, response: Response, provider: &str) -> Result<ChatResponse, ProviderError> {
        let malformed = |what: &str| {
            ProviderError::permanent(format!("{provider}: the response has no {what}"))
        };
        let choice = response
            .choices
            .into_iter()
            .next()
            .ok_or_else(|| malformed("choices"))?;
        let message = choice.message.ok_or_else(|| malformed("message"))?;
        let mut tool_calls = Vec::new();
        for (index, call) in message
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            let function = call
                .function
                .ok_or_else(|| malformed("function in a tool call"))?;
            let name = function
                .name
                .ok_or_else(|| malformed("function name in a tool call"))?;
            let arguments = match function.arguments {
                Some(Value::String(text)) => text,
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            let id = call
                .id
                .filter(|id| !id.is_empty())
                .unwrap_or_else(|| synthesised_id("call_", index));
            tool_calls.push(ToolCall::with_raw_arguments(id, name, arguments));
        }
        let finish_reason = match choice.finish_reason.as_deref() {
            Some("stop") | None if tool_calls.is_empty() => FinishReason::Stop,
            Some("tool_calls") | Some("function_call") => FinishReason::ToolCalls,
            Some("length") => FinishReason::Length,
            Some("content_filter") => FinishReason::ContentFilter,
            Some(other) => FinishReason::Other(other.to_owned()),
            None => FinishReason::ToolCalls,
        };
        let usage = response.usage.map_or(Usage::unreported(), Usage::from);
        Ok(ChatResponse::turn(
            message.content.unwrap_or_default(),
            tool_calls,
            usage,
            finish_reason,
        )
        .answered_by(response.model))
    }
}
