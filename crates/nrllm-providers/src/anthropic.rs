//! Anthropic Messages. The system prompt is lifted to `system`; tools go out as
//! `{name, description, input_schema}`; an assistant turn's tool calls become `tool_use` blocks;
//! consecutive tool results are merged into one user message of `tool_result` blocks keyed by
//! `tool_use_id` — the shape the API requires after every tool-using turn.

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{arguments_object, reads_as_error};
use crate::http::{ApiKey, HttpSettings, JsonClient};
use nrllm_core::provider::{
    ChatRequest, ChatResponse, FinishReason, Provider, ProviderError, RetryObserver, ToolChoice,
    Usage,
};
use nrllm_core::transcript::{Message, ToolCall};

/// The API version this adapter speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// Anthropic requires a completion limit; this one is used when the run sets none.
pub const DEFAULT_MAX_TOKENS: u32 = 1024;

/// How to reach the Messages API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnthropicConfig {
    pub name: String,
    /// Up to `/v1` (e.g. `https://api.anthropic.com/v1`).
    pub base_url: String,
    pub model: String,
    pub api_key: ApiKey,
    pub http: HttpSettings,
}

/// An Anthropic Messages provider.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    config: AnthropicConfig,
    client: JsonClient,
}

impl AnthropicProvider {
    /// A provider for `config`.
    pub fn new(config: AnthropicConfig) -> Result<AnthropicProvider, ProviderError> {
        let client = JsonClient::new(&config.name, config.http, Some(config.api_key.clone()))?;
        Ok(AnthropicProvider { config, client })
    }

    /// The request body for `request`, exactly as sent.
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let mut system = Vec::new();
        let mut messages: Vec<Value> = Vec::new();
        for message in &request.messages {
            match message {
                Message::System { content } => system.push(content.clone()),
                Message::User { content } => messages.push(json!({
                    "role": "user", "content": [{"type": "text", "text": content}],
                })),
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    let mut blocks = Vec::new();
                    if let Some(text) = content.as_deref().filter(|t| !t.is_empty()) {
                        blocks.push(json!({"type": "text", "text": text}));
                    }
                    for call in tool_calls {
                        let input = arguments_object(call);
                        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                    }
                    if blocks.is_empty() {
                        blocks.push(json!({"type": "text", "text": ""}));
                    }
                    messages.push(json!({"role": "assistant", "content": blocks}));
                }
                Message::Tool {
                    tool_call_id,
                    content,
                } => {
                    let block = json!({
                        "type": "tool_result", "tool_use_id": tool_call_id, "content": content,
                        "is_error": reads_as_error(content),
                    });
                    // Consecutive results share one user message.
                    let merged = messages.last_mut().filter(|last| {
                        last["role"] == "user"
                            && last["content"].as_array().is_some_and(|blocks| {
                                blocks.iter().all(|b| b["type"] == "tool_result")
                            })
                    });
                    match merged {
                        Some(last) => {
                            if let Some(blocks) = last["content"].as_array_mut() {
                                blocks.push(block);
                            }
                        }
                        None => messages.push(json!({"role": "user", "content": [block]})),
                    }
                }
            }
        }
        let mut body = json!({
            "model": self.config.model,
            "max_tokens": request.options.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            "messages": messages,
        });
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        if let Some(temperature) = request.options.temperature {
            body["temperature"] = json!(temperature.min(1.0));
        }
        if !request.tools.is_empty() {
            body["tools"] = Value::Array(
                request
                    .tools
                    .iter()
                    .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                    .collect(),
            );
            if request.tool_choice == ToolChoice::Disabled {
                body["tool_choice"] = json!({"type": "none"});
            }
        }
        body
    }
}

/// Reads a Messages response.
pub fn parse_response(body: &Value, provider: &str) -> Result<ChatResponse, ProviderError> {
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            ProviderError::permanent(format!("{provider}: the response has no content"))
        })?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            ),
            Some("tool_use") => tool_calls.push(ToolCall::new(
                block
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("toolu_{}", uuid::Uuid::new_v4().simple())),
                block
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                block.get("input").unwrap_or(&json!({})),
            )),
            _ => {}
        }
    }
    let finish_reason = match body.get("stop_reason").and_then(Value::as_str) {
        Some("end_turn") | Some("stop_sequence") => FinishReason::Stop,
        Some("tool_use") => FinishReason::ToolCalls,
        Some("max_tokens") => FinishReason::Length,
        Some(other) => FinishReason::Other(other.to_owned()),
        None => FinishReason::Stop,
    };
    Ok(ChatResponse {
        content: (!text.is_empty()).then_some(text),
        tool_calls,
        usage: Usage {
            prompt_tokens: body
                .pointer("/usage/input_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            completion_tokens: body
                .pointer("/usage/output_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        },
        finish_reason,
        raw: Some(body.clone()),
    })
}

#[async_trait]
impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        self.complete_observed(request, &|_| {}).await
    }

    async fn complete_observed(
        &self,
        request: &ChatRequest,
        on_retry: RetryObserver<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let url = format!("{}/messages", self.config.base_url.trim_end_matches('/'));
        let headers = [
            ("x-api-key", self.config.api_key.expose().to_owned()),
            ("anthropic-version", ANTHROPIC_VERSION.to_owned()),
        ];
        let body = self
            .client
            .post(&url, &headers, &self.request_body(request), on_retry)
            .await?;
        parse_response(&body, &self.config.name)
    }
}
