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

/// Token counts, as the provider reports them, in one shape for every provider: `prompt_tokens`
/// is every input token the model read, cached or not (Anthropic's cache reads and writes are
/// added to its `input_tokens`); `completion_tokens` is every output token, reasoning included
/// (Gemini's `thoughtsTokenCount` is added to its `candidatesTokenCount`). The parts below are
/// *inside* those two counts, so a step written before they were kept reads as it did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Responses whose usage the provider did not report: their tokens are not in the counts
    /// above, which are then a lower bound (never read as zero).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unreported: u32,
    /// Of `prompt_tokens`, those read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "no_tokens")]
    pub cached_input_tokens: u64,
    /// Of `prompt_tokens`, those written to the provider's prompt cache (Anthropic).
    #[serde(default, skip_serializing_if = "no_tokens")]
    pub cache_write_tokens: u64,
    /// Of `completion_tokens`, those the model spent reasoning.
    #[serde(default, skip_serializing_if = "no_tokens")]
    pub reasoning_tokens: u64,
}

fn is_zero(count: &u32) -> bool {
    *count == 0
}

fn no_tokens(count: &u64) -> bool {
    *count == 0
}

impl Usage {
    /// Reported token counts.
    pub fn tokens(prompt_tokens: u64, completion_tokens: u64) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            ..Usage::default()
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

    /// The input tokens read at the full input price: neither read from nor written to a cache.
    pub fn uncached_input_tokens(&self) -> u64 {
        self.prompt_tokens
            .saturating_sub(self.cached_input_tokens)
            .saturating_sub(self.cache_write_tokens)
    }

    /// The output tokens that are not reasoning.
    pub fn answer_tokens(&self) -> u64 {
        self.completion_tokens.saturating_sub(self.reasoning_tokens)
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.unreported = self.unreported.saturating_add(other.unreported);
        self.cached_input_tokens += other.cached_input_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

/// A configuration's prices, in dollars per million tokens. A part of the usage without a price
/// of its own (cached input, cache writes, reasoning) is priced as the count it is inside
/// (input, or output).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Prices {
    pub input: Option<f64>,
    pub output: Option<f64>,
    pub cached_input: Option<f64>,
    pub cache_write: Option<f64>,
    pub reasoning: Option<f64>,
}

impl Prices {
    /// Whether any price is set (a run's cost is shown only then).
    pub fn is_set(&self) -> bool {
        self.input.is_some() || self.output.is_some()
    }

    /// What `usage` costs, in millionths of a dollar (dollars per million tokens are
    /// millionths of a dollar per token):
    /// `uncached input × input + cached × cached_input + cache writes × cache_write
    ///  + (output − reasoning) × output + reasoning × reasoning`.
    /// `None` when no price is set.
    pub fn cost_micros(&self, usage: &Usage) -> Option<i64> {
        if !self.is_set() {
            return None;
        }
        let input = self.input.unwrap_or(0.0);
        let output = self.output.unwrap_or(0.0);
        let parts = [
            (usage.uncached_input_tokens(), input),
            (
                usage.cached_input_tokens,
                self.cached_input.unwrap_or(input),
            ),
            (usage.cache_write_tokens, self.cache_write.unwrap_or(input)),
            (usage.answer_tokens(), output),
            (usage.reasoning_tokens, self.reasoning.unwrap_or(output)),
        ];
        let micros: f64 = parts
            .iter()
            .map(|(tokens, price)| *tokens as f64 * price)
            .sum();
        Some(micros.round() as i64)
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
    /// The model that answered, as the provider names it (a dated version of the one asked
    /// for, say); none when it does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
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
            model: None,
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
            model: None,
        }
    }

    /// The same turn, answered by `model` (as the provider named it; cut to 200 characters).
    pub fn answered_by(mut self, model: Option<String>) -> ChatResponse {
        self.model = model
            .filter(|model| !model.is_empty())
            .map(|model| model.chars().take(200).collect());
        self
    }

    /// A turn of tool calls.
    pub fn calls(tool_calls: Vec<ToolCall>, usage: Usage) -> ChatResponse {
        ChatResponse {
            content: None,
            tool_calls,
            usage,
            finish_reason: FinishReason::ToolCalls,
            raw: None,
            model: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(prompt: u64, cached: u64, writes: u64, completion: u64, reasoning: u64) -> Usage {
        Usage {
            cached_input_tokens: cached,
            cache_write_tokens: writes,
            reasoning_tokens: reasoning,
            ..Usage::tokens(prompt, completion)
        }
    }

    #[test]
    fn each_part_of_the_usage_is_priced_by_its_own_price_or_its_counts() {
        let prices = Prices {
            input: Some(3.0),
            output: Some(15.0),
            cached_input: Some(0.3),
            cache_write: Some(3.75),
            reasoning: None,
        };
        // 1,000 input of which 600 cached and 200 written; 500 output of which 100 reasoning.
        let used = usage(1_000, 600, 200, 500, 100);
        // 200 × 3 + 600 × 0.3 + 200 × 3.75 + 400 × 15 + 100 × 15 (reasoning as output).
        assert_eq!(
            prices.cost_micros(&used),
            Some(600 + 180 + 750 + 6_000 + 1_500)
        );
        let reasoning = Prices {
            reasoning: Some(60.0),
            ..prices
        };
        assert_eq!(
            reasoning.cost_micros(&used),
            Some(600 + 180 + 750 + 6_000 + 6_000)
        );
        // Without prices for the parts, the total is priced as before they were kept.
        let plain = Prices {
            input: Some(3.0),
            output: Some(15.0),
            ..Prices::default()
        };
        assert_eq!(plain.cost_micros(&used), Some(1_000 * 3 + 500 * 15));
        assert_eq!(Prices::default().cost_micros(&used), None);
    }

    #[test]
    fn a_run_costs_what_its_steps_cost_and_old_steps_read_as_before() {
        let prices = Prices {
            input: Some(2.5),
            output: Some(10.0),
            cached_input: Some(1.25),
            ..Prices::default()
        };
        let steps = [usage(800, 400, 0, 90, 30), usage(1_200, 800, 0, 40, 0)];
        let mut run = Usage::default();
        for step in steps {
            run += step;
        }
        let each: i64 = steps.iter().filter_map(|u| prices.cost_micros(u)).sum();
        assert_eq!(prices.cost_micros(&run), Some(each));
        // A step journaled before the parts were kept has none of them.
        let old: Usage =
            serde_json::from_str(r#"{"prompt_tokens": 7, "completion_tokens": 3}"#).unwrap();
        assert_eq!(old, Usage::tokens(7, 3));
        assert_eq!(
            serde_json::to_string(&Usage::tokens(7, 3)).unwrap(),
            r#"{"prompt_tokens":7,"completion_tokens":3}"#
        );
    }
}
