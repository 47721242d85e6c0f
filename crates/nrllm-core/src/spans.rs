//! The spans of a run, for the operators' tracing tools (OpenTelemetry's GenAI conventions).
//!
//! The core only makes `tracing` spans and says when a wait or a run ended; it knows nothing of
//! OpenTelemetry. A process that exports spans installs a [`SpanExport`] once, at start (as it
//! installs its `tracing` subscriber): the export makes each segment's span a child of the run's
//! stored root span ([`RunTrace`]), names spans in outgoing `traceparent` headers, and emits the
//! root span (when the run ends) and each wait's span (when its decision is made) with their
//! stored ids and start times, so that one run is one trace across suspends, processes and
//! instances. Without an export, nothing here costs more than a `tracing` span.
//!
//! Spans made here:
//! - `chat` around each model request: `gen_ai.provider.name`, `gen_ai.request.model`,
//!   temperature and max tokens, and once answered `gen_ai.usage.*` and
//!   `gen_ai.response.finish_reasons`;
//! - `execute_tool` around each tool call that runs: `gen_ai.tool.name`, `gen_ai.tool.call.id`
//!   and, for a call that runs on a decision, `nrllm.effect_key`.
//!
//! Message contents (the messages sent, the answer, a call's arguments and result) go on those
//! spans only when the export asks for them ([`SpanExport::message_contents`]), each cut to
//! [`MAX_CONTENT_BYTES`], and never into the log.

use std::sync::{Arc, OnceLock};

use tracing::field::Empty;
use uuid::Uuid;

use crate::provider::{ChatResponse, FinishReason, ModelOptions};
use crate::run_store::RunRecord;
use crate::trace::RunTrace;
use nrllm_types::RunStatus;

/// The most of one message content put on a span, in bytes (the rest is cut, marked `…`).
pub const MAX_CONTENT_BYTES: usize = 16 * 1024;

/// A wait for a person that ended: from the step that began it to the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitEnded {
    pub run_id: Uuid,
    /// `approval`, `input` or `budget`.
    pub kind: &'static str,
    pub started_ms: i64,
    pub ended_ms: i64,
    /// The decision's verdict (`approved`, `denied`, `mixed`, `expired`, …).
    pub decision: String,
    /// Who decided (an operator's name, a token's, or the deadline).
    pub decided_by: String,
    /// The rules added with the decision (their scopes), if any.
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

/// A run that ended: what its root span (`invoke_agent`) says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnded {
    pub run_id: Uuid,
    /// The name of the run's configuration (the agent).
    pub agent: String,
    /// The model its configuration names, if any.
    pub model: Option<String>,
    pub status: RunStatus,
    pub started_ms: i64,
    pub ended_ms: i64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Why it failed or stopped, as the operator reads it.
    pub summary: Option<String>,
}

impl RunEnded {
    /// What `run` (ended) says of itself.
    pub fn of(run: &RunRecord) -> RunEnded {
        let configuration = run.configuration.as_ref();
        RunEnded {
            run_id: run.id,
            agent: configuration.map_or_else(String::new, |c| c.provider.clone()),
            model: configuration
                .map(|c| c.model.clone())
                .filter(|model| !model.is_empty()),
            status: run.status,
            started_ms: run.created_at_ms,
            ended_ms: run.finished_at_ms.unwrap_or(run.updated_at_ms),
            input_tokens: run.counters.usage.prompt_tokens,
            output_tokens: run.counters.usage.completion_tokens,
            summary: run.error_summary.clone(),
        }
    }
}

/// Where a process's spans go. Implemented by the app over OpenTelemetry; see the module.
pub trait SpanExport: Send + Sync {
    /// Makes `span` (a segment of the run: its work in this process) a child of the run's
    /// root span in the run's trace.
    fn adopt(&self, span: &tracing::Span, trace: &RunTrace);
    /// A `traceparent` naming `span` as exported, for a request made inside it.
    fn traceparent(&self, span: &tracing::Span) -> Option<String>;
    /// Whether message contents go on spans (off unless an operator turned them on).
    fn message_contents(&self) -> bool;
    /// Puts `value` on `span` as attribute `key` (message contents: never logged).
    fn attribute(&self, span: &tracing::Span, key: &'static str, value: String);
    /// Puts `values` on `span` as the string-array attribute `key`.
    fn attribute_list(&self, span: &tracing::Span, key: &'static str, values: Vec<String>);
    /// Emits the span of a wait that ended, under the run's root span.
    fn wait_ended(&self, trace: &RunTrace, wait: &WaitEnded);
    /// Emits the run's root span, with its stored ids and start time.
    fn run_ended(&self, trace: &RunTrace, run: &RunEnded);
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

/// The `traceparent` an outgoing request made now (for a model, a tool's server, a webhook)
/// carries: the current span as exported; none when spans are not exported.
pub fn outbound_traceparent() -> Option<String> {
    export()?.traceparent(&tracing::Span::current())
}

/// Makes `span` a child of the run's root span, when spans are exported.
pub(crate) fn adopt(span: &tracing::Span, trace: Option<&RunTrace>) {
    if let (Some(export), Some(trace)) = (export(), trace) {
        export.adopt(span, trace);
    }
}

/// Emits the root span of `run`, which ended.
pub(crate) fn run_ended(run: &RunRecord) {
    if let (Some(export), Some(trace), true) = (export(), &run.trace, run.status.is_terminal()) {
        export.run_ended(trace, &RunEnded::of(run));
    }
}

/// What the span of `run`'s wait will say once its claim commits (`wait` fills it in for the
/// kind of wait), with the run's trace; none when spans are not exported.
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

/// Emits the span of a wait that ended.
pub(crate) fn wait_ended(trace: &RunTrace, wait: &WaitEnded) {
    if let Some(export) = export() {
        export.wait_ended(trace, wait);
    }
}

/// The name the GenAI conventions give a provider.
fn provider_name(provider: &str) -> &str {
    match provider {
        "gemini" => "gcp.gemini",
        other => other,
    }
}

/// The span of one model request.
pub(crate) fn chat_span(provider: &str, model: &str, options: &ModelOptions) -> tracing::Span {
    let span = tracing::info_span!(
        "chat",
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = %provider_name(provider),
        gen_ai.request.model = %model,
        gen_ai.request.temperature = Empty,
        gen_ai.request.max_tokens = Empty,
        gen_ai.response.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        error.type = Empty,
    );
    if let Some(temperature) = options.temperature {
        span.record("gen_ai.request.temperature", temperature);
    }
    if let Some(max_tokens) = options.max_tokens {
        span.record("gen_ai.request.max_tokens", i64::from(max_tokens));
    }
    span
}

/// Records on `span` how its model request went.
pub(crate) fn chat_answered(
    span: &tracing::Span,
    model: &str,
    answer: Result<&ChatResponse, &crate::provider::ProviderError>,
) {
    match answer {
        Ok(response) => {
            let answered_by = response.model.as_deref().unwrap_or(model);
            span.record("gen_ai.response.model", answered_by);
            // As signed numbers: an unsigned one is exported as text.
            let count = |tokens: u64| i64::try_from(tokens).unwrap_or(i64::MAX);
            span.record(
                "gen_ai.usage.input_tokens",
                count(response.usage.prompt_tokens),
            );
            span.record(
                "gen_ai.usage.output_tokens",
                count(response.usage.completion_tokens),
            );
            if let Some(export) = export() {
                let reason = match &response.finish_reason {
                    FinishReason::Stop => "stop",
                    FinishReason::ToolCalls => "tool_calls",
                    FinishReason::Length => "length",
                    FinishReason::ContentFilter => "content_filter",
                    FinishReason::Other(other) => other.as_str(),
                };
                export.attribute_list(
                    span,
                    "gen_ai.response.finish_reasons",
                    vec![bounded(reason.to_owned(), 64)],
                );
            }
        }
        Err(error) => {
            span.record("otel.status_code", "ERROR");
            span.record(
                "error.type",
                match error.kind {
                    crate::provider::ProviderErrorKind::Transient => "transient",
                    crate::provider::ProviderErrorKind::Permanent => "permanent",
                    crate::provider::ProviderErrorKind::ContextLength => "context_length",
                },
            );
        }
    }
}

/// The span of one tool call that runs (`effect_key`: a call run on a decision).
pub(crate) fn tool_span(name: &str, call_id: &str, effect_key: Option<&str>) -> tracing::Span {
    let span = tracing::info_span!(
        "execute_tool",
        otel.name = %format_args!("execute_tool {name}"),
        otel.status_code = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.type = "function",
        gen_ai.tool.name = %name,
        gen_ai.tool.call.id = %call_id,
        nrllm.effect_key = Empty,
        error.type = Empty,
    );
    if let Some(key) = effect_key {
        span.record("nrllm.effect_key", key);
    }
    span
}

/// Records on `span` that its call failed.
pub(crate) fn tool_failed(span: &tracing::Span, kind: &'static str) {
    span.record("otel.status_code", "ERROR");
    span.record("error.type", kind);
}

/// Puts message contents on `span` (`key`: a GenAI attribute), when the export asks for them;
/// `contents` is made only then.
pub(crate) fn contents(span: &tracing::Span, key: &'static str, contents: impl FnOnce() -> String) {
    if let Some(export) = export().filter(|export| export.message_contents()) {
        export.attribute(span, key, bounded(contents(), MAX_CONTENT_BYTES));
    }
}

/// `text` cut to at most `max` bytes (on a character boundary), marked `…` when cut.
fn bounded(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max.saturating_sub('…'.len_utf8());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
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
            run_id: Uuid::nil(),
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
}
