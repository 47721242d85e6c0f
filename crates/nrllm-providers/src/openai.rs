//! OpenAI-compatible chat completions: OpenAI itself, and by base URL Ollama, vLLM, llama.cpp's
//! server, LM Studio, OpenRouter… Tools go out as `{type: "function", function: {…}}` with
//! `tool_choice: "auto"`; parallel tool calls, usage and the finish reason come back. Tool-call ids
//! that a local server leaves out are synthesised, and arguments sent as an object instead of a
//! string are accepted.

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::http::{ApiKey, HttpSettings, JsonClient};
use nrllm_core::provider::{
    ChatRequest, ChatResponse, FinishReason, Provider, ProviderError, RetryObserver, ToolChoice,
    Usage,
};
use nrllm_core::transcript::ToolCall;

/// How to reach one OpenAI-compatible endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// The configuration's name, for messages.
    pub name: String,
    /// Up to and including `/v1` (e.g. `https://api.openai.com/v1`, `http://127.0.0.1:11434/v1`).
    pub base_url: String,
    pub model: String,
    /// `None` for local servers without keys.
    pub api_key: Option<ApiKey>,
    /// Send `max_completion_tokens` (OpenAI's current name) instead of `max_tokens`.
    pub max_completion_tokens: bool,
    pub http: HttpSettings,
}

/// An OpenAI-compatible provider.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    config: OpenAiConfig,
    client: JsonClient,
}

impl OpenAiProvider {
    /// A provider for `config`.
    pub fn new(config: OpenAiConfig) -> Result<OpenAiProvider, ProviderError> {
        let client = JsonClient::new(&config.name, config.http, config.api_key.clone())?;
        Ok(OpenAiProvider { config, client })
    }

    /// The request body for `request`, exactly as sent.
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "messages": request.messages,
        });
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| {
                    json!({"type": "function", "function": {
                        "name": tool.name, "description": tool.description, "parameters": tool.parameters,
                    }})
                })
                .collect();
            body["tools"] = Value::Array(tools);
            body["tool_choice"] = json!(match request.tool_choice {
                ToolChoice::Auto => "auto",
                ToolChoice::Disabled => "none",
            });
        }
        if let Some(temperature) = request.options.temperature {
            body["temperature"] = json!(temperature);
        }
        if let Some(max_tokens) = request.options.max_tokens {
            let key = if self.config.max_completion_tokens {
                "max_completion_tokens"
            } else {
                "max_tokens"
            };
            body[key] = json!(max_tokens);
        }
        body
    }
}

/// Reads a chat-completions response.
pub fn parse_response(body: &Value, provider: &str) -> Result<ChatResponse, ProviderError> {
    let malformed =
        |what: &str| ProviderError::permanent(format!("{provider}: the response has no {what}"));
    let choice = body
        .pointer("/choices/0")
        .ok_or_else(|| malformed("choices"))?;
    let message = choice.get("message").ok_or_else(|| malformed("message"))?;
    let content = message
        .get("content")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .filter(|c| !c.is_empty());
    let mut tool_calls = Vec::new();
    for (index, call) in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let function = call
            .get("function")
            .ok_or_else(|| malformed("function in a tool call"))?;
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed("function name in a tool call"))?;
        let arguments = match function.get("arguments") {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| {
                format!(
                    "call_{}_{index}",
                    &uuid::Uuid::new_v4().simple().to_string()[..12]
                )
            });
        tool_calls.push(ToolCall::with_raw_arguments(id, name, arguments));
    }
    let usage = Usage {
        prompt_tokens: body
            .pointer("/usage/prompt_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        completion_tokens: body
            .pointer("/usage/completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    };
    let finish_reason = match choice.get("finish_reason").and_then(Value::as_str) {
        Some("stop") | None if tool_calls.is_empty() => FinishReason::Stop,
        Some("tool_calls") | Some("function_call") => FinishReason::ToolCalls,
        Some("length") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        Some(other) => FinishReason::Other(other.to_owned()),
        None => FinishReason::ToolCalls,
    };
    Ok(ChatResponse {
        content,
        tool_calls,
        usage,
        finish_reason,
        raw: Some(body.clone()),
    })
}

#[async_trait]
impl Provider for OpenAiProvider {
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
        let url = format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        );
        let mut headers = Vec::new();
        if let Some(key) = &self.config.api_key {
            headers.push(("authorization", format!("Bearer {}", key.expose())));
        }
        let body = self
            .client
            .post(&url, &headers, &self.request_body(request), on_retry)
            .await?;
        parse_response(&body, &self.config.name)
    }
}
