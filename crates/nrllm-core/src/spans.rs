//! The spans of a run, for the operators' tracing tools (OpenTelemetry's GenAI conventions).
//!
//! The core knows nothing of OpenTelemetry: it makes each span as a value ([`SpanRecord`]: its
//! ids, times, attributes) and hands it, finished, to the process's [`SpanExport`], installed
//! once at start (the app's exports over OTLP). A run is one trace across suspends, processes
//! and instances because every span's ids derive from the run's stored trace ([`RunTrace`]):
//! - `invoke_agent <agent>`, the root, with the stored root span id and the run's start, made
//!   when the run ends;
//! - `chat <model>` for each model request: `gen_ai.provider.name`, `gen_ai.request.model`,
//!   temperature and max tokens, `gen_ai.response.model`, `gen_ai.usage.*`,
//!   `gen_ai.response.finish_reasons`;
//! - `execute_tool <tool>` for each call that runs: `gen_ai.tool.name`, `gen_ai.tool.call.id`
//!   and, for a call run on a decision, `nrllm.effect_key`;
//! - `nrllm.wait <approval|input|budget>` from the step that began a wait to its decision:
//!   `nrllm.approval.decision`, `decided_by`, `rule`, `digest`, `waited_ms`.
//!
//! Requests made inside a `chat` or `execute_tool` span (to the provider, to a tool's server)
//! carry a `traceparent` naming it ([`outbound_traceparent`]). Message contents go on spans only
//! when the export asks for them ([`SpanExport::message_contents`]), each cut to
//! [`MAX_CONTENT_BYTES`]. Without an export nothing here is made: a check of a `OnceLock`.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::provider::{ChatResponse, FinishReason, ModelOptions, ProviderError};
use crate::run_store::RunRecord;
use crate::tool::ToolError;
use crate::trace::{lower_hex, RunTrace, TraceParent};
use nrllm_types::RunStatus;

/// The most of one message content put on a span, in bytes (the rest is cut, marked `…`).
pub const MAX_CONTENT_BYTES: usize = 16 * 1024;
/// The longest text of ours (a name, a summary) put on a span, in bytes.
const MAX_TEXT_BYTES: usize = 1024;

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    /// Text known when the program was built (no allocation).
    Static(&'static str),
    Text(String),
    Int(i64),
    Float(f64),
    Texts(Vec<String>),
}

/// A finished span, as the export receives it (ids as bytes, as OTLP sends them).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanRecord {
    pub name: String,
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// None: a root (its trace begins here).
    pub parent_span_id: Option<[u8; 8]>,
    /// Whether the trace is sampled (the caller's flag, for a run started under a caller).
    pub sampled: bool,
    /// A request to another service (a model): `client`; else `internal`.
    pub client: bool,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<(&'static str, Attr)>,
    /// A span of another trace it points to: (trace id, span id).
    pub link: Option<([u8; 16], [u8; 8])>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// Where a process's finished spans go. Implemented by the app over OpenTelemetry.
pub trait SpanExport: Send + Sync {
    /// Sends `span` on (batched: this must not wait).
    fn export(&self, span: SpanRecord);
    /// Whether message contents go on spans (off unless an operator turned them on).
    fn message_contents(&self) -> bool;
}

static EXPORT: OnceLock<Arc<dyn SpanExport>> = OnceLock::new();

/// Installs this process's span export; `false` if one was installed already (it stays).
pub fn install(export: Arc<dyn SpanExport>) -> bool {
    EXPORT.set(export).is_ok()
}

fn export() -> Option<&'static Arc<dyn SpanExport>> {
    EXPORT.get()
}

/// Whether this process exports spans.
pub fn exporting() -> bool {
    export().is_some()
}

tokio::task_local! {
    /// The span the task is in (a model request, a tool call).
    static OUTBOUND: TraceParent;
}

/// The `traceparent` an outgoing request made now (to a model, to a tool's server) carries:
/// the `chat` or `execute_tool` span it is made in; none outside them or without an export.
pub fn outbound_traceparent() -> Option<String> {
    OUTBOUND.try_with(TraceParent::header).ok()
}

/// A span being timed: finished by [`OpenSpan::end`].
pub(crate) struct OpenSpan {
    record: SpanRecord,
}

impl OpenSpan {
    /// A span of GenAI operation `operation` on `subject` (`chat gpt-4o`) under the run's root
    /// span, starting now; none without an export or a trace.
    fn operation(
        trace: Option<&RunTrace>,
        (operation, subject): (&'static str, &str),
        client: bool,
    ) -> Option<OpenSpan> {
        let mut span = OpenSpan::under(trace, format!("{operation} {subject}"), client)?;
        span.set("gen_ai.operation.name", Attr::Static(operation));
        Some(span)
    }

    /// A span named `name` under the run's root span, starting now; none without an export or
    /// a trace.
    fn under(trace: Option<&RunTrace>, name: String, client: bool) -> Option<OpenSpan> {
        export()?;
        let trace = trace?;
        let (trace_id, root) = trace.ids()?;
        let now = SystemTime::now();
        Some(OpenSpan {
            record: SpanRecord {
                name,
                trace_id,
                span_id: crate::trace::random_span_id(),
                parent_span_id: Some(root),
                sampled: trace.sampled,
                client,
                start: now,
                end: now,
                attributes: Vec::with_capacity(10),
                link: None,
                error: None,
            },
        })
    }

    fn set(&mut self, key: &'static str, value: Attr) {
        self.record.attributes.push((key, value));
    }

    fn text(&mut self, key: &'static str, value: &str) {
        self.set(key, Attr::Text(bounded(value.to_owned(), MAX_TEXT_BYTES)));
    }

    /// The span, as requests made in it name it.
    fn parent(&self) -> TraceParent {
        let record = &self.record;
        TraceParent {
            trace_id: record.trace_id,
            span_id: record.span_id,
            sampled: record.sampled,
        }
    }

    fn failed(&mut self, kind: &str) {
        self.text("error.type", kind);
        self.record.error = Some(kind.to_owned());
    }

    /// Puts message contents on the span as `key`, when the export asks for them; `contents`
    /// is made only then.
    fn contents(&mut self, key: &'static str, contents: impl FnOnce() -> String) {
        if export().is_some_and(|export| export.message_contents()) {
            self.set(key, Attr::Text(bounded(contents(), MAX_CONTENT_BYTES)));
        }
    }

    fn end(self) {
        self.end_at(SystemTime::now());
    }

    fn end_at(mut self, end: SystemTime) {
        self.record.end = end;
        if let Some(export) = export() {
            export.export(self.record);
        }
    }
}

/// Runs `work` inside `span` (its requests name it), if there is one.
async fn within<F: Future>(span: Option<&OpenSpan>, work: F) -> F::Output {
    match span {
        Some(span) => OUTBOUND.scope(span.parent(), work).await,
        None => work.await,
    }
}

/// The name the GenAI conventions give a provider.
fn provider_name(provider: &str) -> &str {
    match provider {
        "gemini" => "gcp.gemini",
        other => other,
    }
}

/// What a model request is asked with, for its span.
pub(crate) struct ChatAsked<'a> {
    pub(crate) trace: Option<&'a RunTrace>,
    pub(crate) provider: &'a str,
    pub(crate) model: &'a str,
    pub(crate) options: &'a ModelOptions,
    pub(crate) messages: &'a (dyn Fn() -> String + Sync),
}

/// Makes a model request (`work`) in its `chat` span.
pub(crate) async fn chat<F>(asked: ChatAsked<'_>, work: F) -> Result<ChatResponse, ProviderError>
where
    F: Future<Output = Result<ChatResponse, ProviderError>>,
{
    let mut span = OpenSpan::operation(asked.trace, ("chat", asked.model), true);
    if let Some(span) = &mut span {
        span.text("gen_ai.provider.name", provider_name(asked.provider));
        span.text("gen_ai.request.model", asked.model);
        if let Some(temperature) = asked.options.temperature {
            span.set("gen_ai.request.temperature", Attr::Float(temperature));
        }
        if let Some(max_tokens) = asked.options.max_tokens {
            span.set(
                "gen_ai.request.max_tokens",
                Attr::Int(i64::from(max_tokens)),
            );
        }
        span.contents("gen_ai.input.messages", asked.messages);
    }
    let answer = within(span.as_ref(), work).await;
    if let Some(mut span) = span {
        chat_answered(&mut span, asked.model, answer.as_ref());
        span.end();
    }
    answer
}

fn chat_answered(span: &mut OpenSpan, model: &str, answer: Result<&ChatResponse, &ProviderError>) {
    let response = match answer {
        Ok(response) => response,
        Err(error) => {
            span.failed(match error.kind {
                crate::provider::ProviderErrorKind::Transient => "transient",
                crate::provider::ProviderErrorKind::Permanent => "permanent",
                crate::provider::ProviderErrorKind::ContextLength => "context_length",
            });
            return;
        }
    };
    span.text(
        "gen_ai.response.model",
        response.model.as_deref().unwrap_or(model),
    );
    let count = |tokens: u64| Attr::Int(i64::try_from(tokens).unwrap_or(i64::MAX));
    span.set(
        "gen_ai.usage.input_tokens",
        count(response.usage.prompt_tokens),
    );
    span.set(
        "gen_ai.usage.output_tokens",
        count(response.usage.completion_tokens),
    );
    let reason = match &response.finish_reason {
        FinishReason::Stop => "stop",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Length => "length",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::Other(other) => other.as_str(),
    };
    span.set(
        "gen_ai.response.finish_reasons",
        Attr::Texts(vec![bounded(reason.to_owned(), 64)]),
    );
    span.contents("gen_ai.output.messages", || {
        serde_json::json!([{
            "role": "assistant",
            "content": response.content,
            "tool_calls": response.tool_calls,
        }])
        .to_string()
    });
}

/// What a tool call is run with, for its span.
pub(crate) struct ToolCalled<'a> {
    pub(crate) trace: Option<&'a RunTrace>,
    pub(crate) name: &'a str,
    pub(crate) call_id: &'a str,
    pub(crate) effect_key: Option<&'a str>,
    pub(crate) arguments: &'a serde_json::Value,
}

/// Runs a tool call (`work`) in its `execute_tool` span (a question for the operator is not
/// a failure).
pub(crate) async fn tool<F>(called: ToolCalled<'_>, work: F) -> Result<String, ToolError>
where
    F: Future<Output = Result<String, ToolError>>,
{
    let mut span = OpenSpan::operation(called.trace, ("execute_tool", called.name), false);
    if let Some(span) = &mut span {
        span.set("gen_ai.tool.type", Attr::Static("function"));
        span.text("gen_ai.tool.name", called.name);
        span.text("gen_ai.tool.call.id", called.call_id);
        if let Some(key) = called.effect_key {
            span.text("nrllm.effect_key", key);
        }
        span.contents("gen_ai.tool.call.arguments", || {
            called.arguments.to_string()
        });
    }
    let outcome = within(span.as_ref(), work).await;
    if let Some(mut span) = span {
        match &outcome {
            Ok(text) => span.contents("gen_ai.tool.call.result", || text.clone()),
            Err(ToolError::Asks(_)) => {}
            Err(_) => span.failed("tool_error"),
        }
        span.end();
    }
    outcome
}

/// A wait for a person that ended: from the step that began it to the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitEnded {
    /// `approval`, `input` or `budget`.
    pub kind: &'static str,
    pub started_ms: i64,
    pub ended_ms: i64,
    /// The decision's verdict (`approved`, `denied`, `mixed`, `expired`, `cancelled`).
    pub decision: String,
    /// Who decided (an operator's name, a token's, the deadline).
    pub decided_by: String,
    /// The rules added with the decision, if any.
    pub rules: Vec<String>,
    /// The digest of the turn the decider saw, when the decision carried one.
    pub digest: Option<String>,
}

impl WaitEnded {
    /// How long the run waited.
    pub fn waited_ms(&self) -> i64 {
        (self.ended_ms - self.started_ms).max(0)
    }
}

fn time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// The kind of wait `run` is in, and its trace, when spans are exported.
pub(crate) fn wait_span(
    run: &RunRecord,
    wait: impl FnOnce(&'static str) -> WaitEnded,
) -> Option<(&RunTrace, WaitEnded)> {
    let kind = match run.status {
        RunStatus::WaitingForApproval => "approval",
        RunStatus::WaitingForInput => "input",
        RunStatus::WaitingForBudget => "budget",
        _ => return None,
    };
    export()?;
    Some((run.trace.as_ref()?, wait(kind)))
}

/// Exports the span of a wait that ended, under the run's root span.
pub(crate) fn wait_ended(trace: &RunTrace, wait: &WaitEnded) {
    let Some(mut span) = OpenSpan::under(Some(trace), format!("nrllm.wait {}", wait.kind), false)
    else {
        return;
    };
    span.record.start = time(wait.started_ms);
    span.set("nrllm.approval.kind", Attr::Static(wait.kind));
    span.text("nrllm.approval.decision", &wait.decision);
    span.text("nrllm.approval.decided_by", &wait.decided_by);
    span.set("nrllm.approval.waited_ms", Attr::Int(wait.waited_ms()));
    if !wait.rules.is_empty() {
        let rules = wait
            .rules
            .iter()
            .map(|r| bounded(r.clone(), MAX_TEXT_BYTES));
        span.set("nrllm.approval.rule", Attr::Texts(rules.collect()));
    }
    if let Some(digest) = &wait.digest {
        span.text("nrllm.approval.digest", digest);
    }
    span.end_at(time(wait.ended_ms));
}

/// Exports the root span of `run`, which ended: its stored id, under the caller's span when it
/// was started under one, from the run's start until now (the segment that ended it closes
/// first), linked to the run it was forked or retried from.
pub(crate) fn run_ended(run: &RunRecord) {
    let (Some(export), Some(trace), true) = (export(), &run.trace, run.status.is_terminal()) else {
        return;
    };
    let Some((trace_id, span_id)) = trace.ids() else {
        return;
    };
    let configuration = run.configuration.as_ref();
    let agent = configuration.map_or("", |c| c.provider.as_str());
    let mut attributes = vec![
        ("gen_ai.operation.name", Attr::Static("invoke_agent")),
        (
            "gen_ai.agent.name",
            Attr::Text(bounded(agent.to_owned(), MAX_TEXT_BYTES)),
        ),
        ("nrllm.run.id", Attr::Text(run.id.to_string())),
        ("nrllm.run.status", Attr::Static(run.status.as_str())),
    ];
    let usage = run.counters.usage;
    for (key, tokens) in [
        ("gen_ai.usage.input_tokens", usage.prompt_tokens),
        ("gen_ai.usage.output_tokens", usage.completion_tokens),
    ] {
        attributes.push((key, Attr::Int(i64::try_from(tokens).unwrap_or(i64::MAX))));
    }
    if let Some(model) = configuration
        .map(|c| c.model.as_str())
        .filter(|m| !m.is_empty())
    {
        attributes.push((
            "gen_ai.request.model",
            Attr::Text(bounded(model.to_owned(), MAX_TEXT_BYTES)),
        ));
    }
    let ended = time(run.finished_at_ms.unwrap_or(run.updated_at_ms));
    export.export(SpanRecord {
        name: bounded(format!("invoke_agent {agent}"), MAX_TEXT_BYTES),
        trace_id,
        span_id,
        parent_span_id: trace.parent_span_id.as_deref().and_then(lower_hex),
        sampled: trace.sampled,
        client: false,
        start: time(run.created_at_ms),
        end: ended.max(SystemTime::now()),
        attributes,
        link: trace
            .link
            .as_ref()
            .and_then(|link| Some((lower_hex(&link.trace_id)?, lower_hex(&link.span_id)?))),
        error: (run.status == RunStatus::Failed).then(|| {
            bounded(
                run.error_summary.clone().unwrap_or_else(|| "failed".into()),
                MAX_TEXT_BYTES,
            )
        }),
    });
}

/// `text` cut to at most `max` bytes (on a character boundary), marked `…` when cut.
fn bounded(mut text: String, max: usize) -> String {
    if text.len() > max {
        text.truncate(text.floor_char_boundary(max.saturating_sub('…'.len_utf8())));
        text.push('…');
    }
    text
}

/// The trace a run's model requests and tool calls make their spans under
/// ([`crate::tool_loop::RunContext::trace`]): none, and nothing copied, without an export.
pub(crate) fn carried(trace: Option<&RunTrace>) -> Option<RunTrace> {
    export().and(trace).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contents_are_cut_on_a_character_boundary_and_marked() {
        let text = "é".repeat(10);
        let cut = bounded(text.clone(), 8);
        assert!(cut.len() <= 8, "{cut}");
        assert!(cut.ends_with('…'));
        assert!(text.starts_with(cut.trim_end_matches('…')));
        assert_eq!(bounded("short".into(), 8), "short");
    }

    #[test]
    fn a_wait_never_lasts_less_than_nothing() {
        let wait = WaitEnded {
            kind: "approval",
            started_ms: 2_000,
            ended_ms: 1_500,
            decision: "approved".into(),
            decided_by: "ann".into(),
            rules: Vec::new(),
            digest: None,
        };
        assert_eq!(wait.waited_ms(), 0);
        assert_eq!(
            WaitEnded {
                ended_ms: 5_250,
                ..wait
            }
            .waited_ms(),
            3_250
        );
    }

    #[tokio::test]
    async fn a_request_outside_a_span_names_none_and_inside_names_it() {
        assert_eq!(outbound_traceparent(), None);
        let span = TraceParent {
            trace_id: [0xab; 16],
            span_id: [0xcd; 8],
            sampled: true,
        };
        let named = OUTBOUND.scope(span, async { outbound_traceparent() }).await;
        assert_eq!(
            named.as_deref(),
            Some("00-abababababababababababababababab-cdcdcdcdcdcdcdcd-01")
        );
    }
}
