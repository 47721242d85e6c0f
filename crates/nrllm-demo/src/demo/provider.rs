//! The offline demo model as a provider: its prompts, its think time, its token estimates. It
//! streams like a real model: its answer word by word, a call's arguments in pieces, spread over
//! its think time.

use super::script::*;
use super::tasks::*;
use async_trait::async_trait;
use nrllm_core::provider::{
    ChatRequest, ChatResponse, Delta, DeltaObserver, FinishReason, Provider, ProviderError,
    RetryObserver, ToolChoice, Usage,
};
use nrllm_core::transcript::{Message, ToolCall};
use serde_json::Value;

/// The offline demo model.
#[derive(Debug, Default, Clone)]
pub struct DemoProvider {
    pub(super) think_time: std::time::Duration,
}

impl DemoProvider {
    /// A demo model that waits `think_time` before each answer, like a real model's latency
    /// (so live step lists can be watched and tested).
    pub fn with_think_time(think_time: std::time::Duration) -> DemoProvider {
        DemoProvider { think_time }
    }
}

pub(super) fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4).max(1)
}

#[async_trait]
impl Provider for DemoProvider {
    fn name(&self) -> &str {
        "demo"
    }

    fn model(&self) -> &str {
        "demo-1"
    }

    async fn complete(
        &self,
        request: &ChatRequest,
        _on_retry: RetryObserver<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        if !self.think_time.is_zero() {
            tokio::time::sleep(self.think_time).await;
        }
        Ok(answer(request))
    }

    async fn stream(
        &self,
        request: &ChatRequest,
        _on_retry: RetryObserver<'_>,
        on_delta: DeltaObserver<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let response = answer(request);
        let deltas = written(&response);
        let pause = self.think_time / u32::try_from(deltas.len().max(1)).unwrap_or(u32::MAX);
        for delta in deltas {
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            on_delta(delta);
        }
        Ok(response)
    }
}

/// The response as the demo model writes it: its text word by word (each word with the space
/// before it), each call's name and then its arguments in a few pieces.
fn written(response: &ChatResponse) -> Vec<Delta> {
    let mut deltas: Vec<Delta> = Vec::new();
    let text = response.content.as_deref().unwrap_or_default();
    let mut word = String::new();
    for c in text.chars() {
        if c == ' ' && !word.trim().is_empty() {
            deltas.push(Delta::Text {
                text: std::mem::take(&mut word),
            });
        }
        word.push(c);
    }
    if !word.is_empty() {
        deltas.push(Delta::Text { text: word });
    }
    for (index, call) in response.tool_calls.iter().enumerate() {
        deltas.push(Delta::ToolCall {
            index,
            id: Some(call.id.clone()),
            name: Some(call.name.clone()),
            arguments: String::new(),
        });
        let chars: Vec<char> = call.arguments.chars().collect();
        for piece in chars.chunks(chars.len().div_ceil(4).max(1)) {
            deltas.push(Delta::ToolCall {
                index,
                id: None,
                name: None,
                arguments: piece.iter().collect(),
            });
        }
    }
    deltas
}

/// The demo model's answer to `request`, at once.
fn answer(request: &ChatRequest) -> ChatResponse {
    let prompt_text = transcript_text(&request.messages);
    let prompt_tokens = estimate_tokens(&prompt_text);
    let task = parse_task(&task_text(&request.messages));
    // What was done for that task: the calls answered since it was asked.
    let asked = request
        .messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }))
        .unwrap_or(0);
    let done = steps(&request.messages[asked..]);
    let offered: Vec<String> = match request.tool_choice {
        ToolChoice::Auto => request.tools.iter().map(|t| t.name.clone()).collect(),
        ToolChoice::Disabled => Vec::new(),
    };
    // In the final, tool-less round the demo model sums up what it has.
    let next = if offered.is_empty() && !done.is_empty() {
        Next::Answer(format!(
            "I stopped after the round limit. So far: {}",
            done.iter()
                .map(outcome_sentence)
                .collect::<Vec<_>>()
                .join(" ")
        ))
    } else {
        next(&task, &done, &offered)
    };
    response(next, prompt_tokens, done.len())
}

/// All the text of a transcript (arguments of calls included), for a token estimate.
fn transcript_text(messages: &[Message]) -> String {
    messages
        .iter()
        .map(|m| match m {
            Message::System { content }
            | Message::User { content }
            | Message::Tool { content, .. } => content.clone(),
            Message::Assistant {
                content,
                tool_calls,
            } => format!(
                "{}{}",
                content.as_deref().unwrap_or_default(),
                tool_calls
                    .iter()
                    .map(|c| c.arguments.as_str())
                    .collect::<String>()
            ),
        })
        .collect()
}

/// The demo model's answer: its text, or its calls (numbered by round), with estimated usage.
fn response(next: Next, prompt_tokens: u64, round: usize) -> ChatResponse {
    let calls: Vec<(String, Value)> = match next {
        Next::Answer(text) => {
            return ChatResponse {
                usage: Usage::tokens(prompt_tokens, estimate_tokens(&text)),
                content: Some(text),
                tool_calls: Vec::new(),
                finish_reason: FinishReason::Stop,
                raw: None,
                model: None,
            }
        }
        Next::Call(calls) => calls
            .into_iter()
            .map(|(name, arguments)| (name.to_owned(), arguments))
            .collect(),
        Next::CallOffered(name, arguments) => vec![(name, arguments)],
    };
    let tool_calls: Vec<ToolCall> = calls
        .into_iter()
        .enumerate()
        .map(|(i, (name, arguments))| ToolCall::new(format!("demo_{round}_{i}"), name, &arguments))
        .collect();
    let completion: String = tool_calls
        .iter()
        .map(|c| format!("{}{}", c.name, c.arguments))
        .collect();
    ChatResponse {
        content: None,
        usage: Usage::tokens(prompt_tokens, estimate_tokens(&completion)),
        tool_calls,
        finish_reason: FinishReason::ToolCalls,
        raw: None,
        model: None,
    }
}
