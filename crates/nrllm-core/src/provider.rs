//! The provider trait: one chat completion with tools. Adapters for real providers convert the
//! canonical transcript to their wire format; the loop only ever sees this trait.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool::ToolSpec;
use crate::transcript::{Message, ToolCall};

/// Sampling options for one request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelOptions {
    /// 0–2; `None` leaves the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Completion token limit; `None` leaves the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// The options above that came from the run's configuration's defaults (`temperature`,
    /// `max_tokens`), not from whoever started the run — for the run page; never sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from_configuration: Vec<String>,
}

/// Whether the model may call the tools it is shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The tools are declared (some formats require that once tools were used) but must not be
    /// called: the final round after the round cap.
    Disabled,
}

/// One request to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    /// The tools declared this round.
    pub tools: Vec<ToolSpec>,
    /// Whether they may be called.
    #[serde(default)]
    pub tool_choice: ToolChoice,
    pub options: ModelOptions,
}

/// Token counts, as the provider reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Responses whose usage the provider did not report: their tokens are not in the counts
    /// above, which are then a lower bound (never read as zero).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unreported: u32,
}

fn is_zero(count: &u32) -> bool {
    *count == 0
}

impl Usage {
    /// Reported token counts.
    pub fn tokens(prompt_tokens: u64, completion_tokens: u64) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            unreported: 0,
        }
    }

    /// One response whose usage the provider did not report.
    pub fn unreported() -> Usage {
        Usage {
            unreported: 1,
            ..Usage::default()
        }
    }

    /// Prompt plus completion tokens (of the responses that reported them).
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }

    /// Whether every response counted reported its usage.
    pub fn is_complete(&self) -> bool {
        self.unreported == 0
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.unreported = self.unreported.saturating_add(other.unreported);
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    ToolCalls,
    Length,
    ContentFilter,
    Other(String),
}

/// One model turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub finish_reason: FinishReason,
    /// The provider's raw response body, when captured (never containing credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<Value>,
}

impl ChatResponse {
    /// A plain text answer.
    pub fn text(content: impl Into<String>, usage: Usage) -> ChatResponse {
        ChatResponse {
            content: Some(content.into()),
            tool_calls: Vec::new(),
            usage,
            finish_reason: FinishReason::Stop,
            raw: None,
        }
    }

    /// A turn as a wire format reads it: its text (none if empty), calls, usage and finish.
    pub fn turn(
        text: String,
        tool_calls: Vec<ToolCall>,
        usage: Usage,
        finish_reason: FinishReason,
    ) -> ChatResponse {
        ChatResponse {
            content: (!text.is_empty()).then_some(text),
            tool_calls,
            usage,
            finish_reason,
            raw: None,
        }
    }

    /// A turn of tool calls.
    pub fn calls(tool_calls: Vec<ToolCall>, usage: Usage) -> ChatResponse {
        ChatResponse {
            content: None,
            tool_calls,
            usage,
            finish_reason: FinishReason::ToolCalls,
            raw: None,
        }
    }
}

/// What the caller should do about a failed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderErrorKind {
    /// Worth retrying later (rate limit, 5xx, network).
    Transient,
    /// Will fail again as sent (bad request, auth, unknown model).
    Permanent,
    /// The transcript is too long for the model.
    ContextLength,
}

/// A failed completion. `message` is safe to show an operator (no keys, no internal detail).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("{message}")]
pub struct ProviderError {
    pub kind: ProviderErrorKind,
    pub message: String,
    /// What the failed attempt used, when it got as far as a response (a stream that broke off
    /// after it began): the usage the provider reported so far, or [`Usage::unreported`]. The
    /// run counts it, so its cost stays the sum of its steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent: Option<Usage>,
}

impl ProviderError {
    /// A failure of `kind` with a safe message.
    pub fn new(kind: ProviderErrorKind, message: impl Into<String>) -> ProviderError {
        ProviderError {
            kind,
            message: message.into(),
            spent: None,
        }
    }

    /// A permanent failure with a safe message.
    pub fn permanent(message: impl Into<String>) -> ProviderError {
        ProviderError::new(ProviderErrorKind::Permanent, message)
    }

    /// A transient failure with a safe message.
    pub fn transient(message: impl Into<String>) -> ProviderError {
        ProviderError::new(ProviderErrorKind::Transient, message)
    }
}

/// A retry a provider is about to make, for the step list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryNotice {
    /// 1 for the first retry.
    pub retry: u32,
    /// How long the provider waits before it.
    pub wait_ms: u64,
    /// What went wrong with the previous attempt (safe to show: no keys).
    pub reason: String,
    /// The provider's own hint the wait follows (`Retry-After: 2`, Gemini's `retryDelay`), if
    /// it gave one; otherwise the wait is the backoff's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// What the previous attempt used (see [`ProviderError::spent`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent: Option<Usage>,
}

/// Told about each retry as it is about to happen.
pub type RetryObserver<'a> = &'a (dyn Fn(RetryNotice) + Send + Sync);

/// A piece of a model's response as it is written: shown live, never journaled (the response is
/// journaled whole, once it is complete).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Delta {
    /// More of the answer's text.
    Text { text: String },
    /// More of the model's thinking (shown live only).
    Thinking { text: String },
    /// A tool call forming, by its place in the response: its id and name when they arrive, and
    /// the next fragment of its arguments' JSON text.
    ToolCall {
        index: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        arguments: String,
    },
}

/// Told about each piece of a response as it is written.
pub type DeltaObserver<'a> = &'a (dyn Fn(Delta) + Send + Sync);

/// A delta observer that ignores every piece.
pub fn ignore_deltas(_delta: Delta) {}

/// A chat-completion backend.
#[async_trait]
pub trait Provider: Send + Sync {
    /// Short name for logs and the step list (`demo`, `openai`, …).
    fn name(&self) -> &str;
    /// The model the provider talks to.
    fn model(&self) -> &str;
    /// One completion, telling `on_retry` before every retry it makes (a provider that never
    /// retries never calls it).
    async fn complete(
        &self,
        request: &ChatRequest,
        on_retry: RetryObserver<'_>,
    ) -> Result<ChatResponse, ProviderError>;

    /// [`Provider::complete`], telling `on_delta` each piece of the response as it is written.
    /// The response is the one `complete` would give for the same exchange. A provider that does
    /// not stream gives it whole (and tells nothing).
    async fn stream(
        &self,
        request: &ChatRequest,
        on_retry: RetryObserver<'_>,
        _on_delta: DeltaObserver<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        self.complete(request, on_retry).await
    }
}

/// A retry observer that ignores every retry.
pub fn ignore_retries(_notice: RetryNotice) {}
