//! Test support shared by this crate's tests, benchmarks, examples and consumers' tests: a scripted
//! provider that answers from a queue and records every request, and small tools that count their
//! executions.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::provider::{ChatRequest, ChatResponse, Provider, ProviderError, RetryObserver, Usage};
use crate::tool::{Preview, Tool, ToolContext, ToolError};
use crate::transcript::ToolCall;

/// A provider that returns queued responses in order and records each request it receives, so a
/// test can assert on the exact transcript sent. An empty queue is a permanent provider error.
#[derive(Debug, Default, Clone)]
pub struct ScriptedProvider {
    responses: Arc<Mutex<VecDeque<Result<ChatResponse, ProviderError>>>>,
    requests: Arc<Mutex<Vec<ChatRequest>>>,
}

impl ScriptedProvider {
    /// A provider that will answer with `responses`, in order.
    pub fn new(responses: impl IntoIterator<Item = ChatResponse>) -> ScriptedProvider {
        let provider = ScriptedProvider::default();
        for response in responses {
            provider.push(response);
        }
        provider
    }

    /// Queues one more response.
    pub fn push(&self, response: ChatResponse) {
        self.push_result(Ok(response));
    }

    /// Queues one more response or failure.
    pub fn push_result(&self, response: Result<ChatResponse, ProviderError>) {
        if let Ok(mut queue) = self.responses.lock() {
            queue.push_back(response);
        }
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &str {
        "script"
    }

    async fn complete(
        &self,
        request: &ChatRequest,
        _on_retry: RetryObserver<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        if let Ok(mut requests) = self.requests.lock() {
            requests.push(request.clone());
        }
        self.responses
            .lock()
            .ok()
            .and_then(|mut queue| queue.pop_front())
            .unwrap_or_else(|| Err(ProviderError::permanent("the script has no more responses")))
    }
}

/// A usage figure for scripted responses.
pub fn usage(prompt_tokens: u64, completion_tokens: u64) -> Usage {
    Usage::tokens(prompt_tokens, completion_tokens)
}

/// A tool-call turn with one call.
pub fn call_turn(id: &str, name: &str, arguments: serde_json::Value, usage: Usage) -> ChatResponse {
    ChatResponse::calls(vec![ToolCall::new(id, name, &arguments)], usage)
}

/// Records which probe tools ran, with what arguments.
#[derive(Debug, Default, Clone)]
pub struct Probe {
    calls: Arc<Mutex<Vec<(String, serde_json::Value)>>>,
    /// The effect key each `write_note` execution was given, in order.
    keys: Arc<Mutex<Vec<Option<String>>>>,
}

impl Probe {
    /// Every execution so far: tool name and arguments.
    pub fn calls(&self) -> Vec<(String, serde_json::Value)> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// How many times `name` ran.
    pub fn count(&self, name: &str) -> usize {
        self.calls
            .lock()
            .map(|calls| calls.iter().filter(|(n, _)| n == name).count())
            .unwrap_or_default()
    }

    /// The effect key each `write_note` execution was given, in order.
    pub fn effect_keys(&self) -> Vec<Option<String>> {
        self.keys.lock().map(|k| k.clone()).unwrap_or_default()
    }

    fn record(&self, name: &str, args: serde_json::Value) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.push((name.to_owned(), args));
        }
    }
}

/// Arguments of the note tools.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct NoteArgs {
    /// The note's text.
    pub text: String,
}

/// A read-only tool: returns the note it was given.
#[derive(Debug, Clone)]
pub struct ReadNote(pub Probe);

/// A side-effecting tool that needs approval.
#[derive(Debug, Clone)]
pub struct WriteNote(pub Probe);

/// A tool only offered to administrators.
#[derive(Debug, Clone)]
pub struct AdminNote(pub Probe);

#[async_trait]
impl Tool for ReadNote {
    type Args = NoteArgs;
    const NAME: &'static str = "read_note";
    const DESCRIPTION: &'static str = "Reads a note.";

    async fn call(&self, args: NoteArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        self.0.record(Self::NAME, json!({"text": args.text}));
        if args.text == "fail" {
            return Err(ToolError::internal(
                "the note store at /srv/notes is corrupt",
            ));
        }
        if args.text == "huge" {
            return Ok(format!("x{}", "é".repeat(40_000)));
        }
        if args.text == "huge refusal" {
            return Err(ToolError::Refused("n".repeat(80_000)));
        }
        Ok(format!("note: {}", args.text))
    }
}

#[async_trait]
impl Tool for WriteNote {
    type Args = NoteArgs;
    const NAME: &'static str = "write_note";
    const DESCRIPTION: &'static str = "Writes a note (a side effect).";
    const REQUIRES_APPROVAL: bool = true;

    async fn call(&self, args: NoteArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        self.0.record(Self::NAME, json!({"text": args.text}));
        if let Ok(mut keys) = self.0.keys.lock() {
            keys.push(ctx.effect_key.clone());
        }
        if args.text == "ask" {
            // A server that needs a title first (an MCP elicitation), then writes with it.
            return match &ctx.reply {
                None => {
                    let form = json!({"type": "object", "required": ["title"],
                        "properties": {"title": {"type": "string", "maxLength": 40}}});
                    crate::elicit::asked("probe", "title", "Which title?", &form, Some("s1".into()))
                        .map_err(ToolError::internal)
                        .and_then(|asked| Err(ToolError::Asks(Box::new(asked))))
                }
                Some(replied) => Ok(format!(
                    "wrote: ask ({}; state {})",
                    replied.reply.describe(),
                    replied.request_state.as_deref().unwrap_or("none")
                )),
            };
        }
        if args.text == "hang" {
            // An effect that never finishes (until the run is cancelled).
            std::future::pending::<()>().await;
        }
        Ok(format!("wrote: {}", args.text))
    }

    async fn preview(
        &self,
        args: NoteArgs,
        _ctx: &ToolContext,
    ) -> Result<Option<Preview>, ToolError> {
        Ok(Some(Preview::change("note", "", args.text)))
    }
}

#[async_trait]
impl Tool for AdminNote {
    type Args = NoteArgs;
    const NAME: &'static str = "admin_note";
    const DESCRIPTION: &'static str = "An administrator's note.";
    const ADMIN_ONLY: bool = true;

    async fn call(&self, args: NoteArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        self.0.record(Self::NAME, json!({"text": args.text}));
        Ok(format!("admin: {}", args.text))
    }
}

/// A registry with the three probe tools, all recording into `probe`.
pub fn probe_registry(probe: &Probe) -> crate::registry::ToolRegistry {
    let mut registry = crate::registry::ToolRegistry::new();
    // Distinct names: registration cannot fail.
    let _ = registry.register(ReadNote(probe.clone()));
    let _ = registry.register(WriteNote(probe.clone()));
    let _ = registry.register(AdminNote(probe.clone()));
    registry
}

/// Each day's spend in memory, for tests of the daily caps ([`crate::spend`]).
#[derive(Default)]
pub struct MemoryLedger {
    counts: std::sync::Mutex<
        std::collections::BTreeMap<(crate::spend::SpendKey, i64), crate::spend::DaySpend>,
    >,
}

impl MemoryLedger {
    /// Day `day`'s count of `key`.
    pub fn count(&self, day: i64, key: &crate::spend::SpendKey) -> crate::spend::DaySpend {
        let counts = self.counts.lock().unwrap();
        counts.get(&(key.clone(), day)).cloned().unwrap_or_default()
    }
}

#[async_trait]
impl crate::spend::SpendLedger for MemoryLedger {
    async fn add_spend(
        &self,
        day: i64,
        keys: &[crate::spend::SpendKey],
        micros: u64,
    ) -> Result<(), crate::run_store::StoreError> {
        let mut counts = self.counts.lock().unwrap();
        for key in keys {
            counts.entry((key.clone(), day)).or_default().spent_micros += micros;
        }
        Ok(())
    }

    async fn day_spend(
        &self,
        day: i64,
        keys: &[crate::spend::SpendKey],
    ) -> Result<Vec<crate::spend::DaySpend>, crate::run_store::StoreError> {
        Ok(keys.iter().map(|key| self.count(day, key)).collect())
    }

    async fn raise_cap(
        &self,
        day: i64,
        key: &crate::spend::SpendKey,
        micros: u64,
        _by: &str,
    ) -> Result<crate::spend::DaySpend, crate::run_store::StoreError> {
        let mut counts = self.counts.lock().unwrap();
        let count = counts.entry((key.clone(), day)).or_default();
        count.raised_micros += micros;
        Ok(count.clone())
    }

    async fn spend_of_day(
        &self,
        day: i64,
        limit: u32,
    ) -> Result<Vec<(crate::spend::SpendKey, crate::spend::DaySpend)>, crate::run_store::StoreError>
    {
        let counts = self.counts.lock().unwrap();
        Ok(counts
            .iter()
            .filter(|((_, d), _)| *d == day)
            .take(limit as usize)
            .map(|((key, _), count)| (key.clone(), count.clone()))
            .collect())
    }
}
