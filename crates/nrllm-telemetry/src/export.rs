//! The core's spans ([`nrllm_core::spans`]) as OpenTelemetry spans: each segment of a run is
//! made a child of the run's stored root span, and the root span and each wait's span are
//! emitted with their stored ids and start times, whichever process ends them.

use std::cell::Cell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nrllm_core::spans::{RunEnded, SpanExport, WaitEnded};
use nrllm_core::trace::RunTrace;
use nrllm_types::RunStatus;
use opentelemetry::trace::{
    Link, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer,
};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracer};
use tracing_opentelemetry::OpenTelemetrySpanExt;

thread_local! {
    /// The ids the next span started on this thread takes (a run's stored root span).
    static NEXT_IDS: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// The span ids of the process: random, except for a span started inside [`StoredIds::with`],
/// which takes the ids it was given (the SDK has no other way to emit a span whose id was
/// fixed before, in another process perhaps).
#[derive(Debug, Default)]
pub(crate) struct StoredIds(RandomIdGenerator);

impl StoredIds {
    /// `start()`, with the span it starts taking `ids` (its trace id only when it has no parent).
    fn with<T>(ids: (TraceId, SpanId), start: impl FnOnce() -> T) -> T {
        NEXT_IDS.with(|next| next.set(Some(ids)));
        let started = start();
        NEXT_IDS.with(|next| next.set(None));
        started
    }
}

impl IdGenerator for StoredIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT_IDS
            .with(Cell::get)
            .map_or_else(|| self.0.new_trace_id(), |(trace_id, _)| trace_id)
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_IDS
            .with(Cell::get)
            .map_or_else(|| self.0.new_span_id(), |(_, span_id)| span_id)
    }
}

/// The longest text of ours (a summary, a name) put on a span.
const MAX_TEXT: usize = 1024;

/// The span export over an OpenTelemetry tracer.
pub struct OtelSpans {
    pub(crate) tracer: SdkTracer,
    pub(crate) message_contents: bool,
}

/// `trace`'s root span as a parent (it lives in another process, or later in this one).
fn root_context(trace: &RunTrace) -> Option<SpanContext> {
    span_context(&trace.trace_id, &trace.span_id, trace.sampled)
}

fn span_context(trace_id: &str, span_id: &str, sampled: bool) -> Option<SpanContext> {
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    let flags = match sampled {
        true => TraceFlags::SAMPLED,
        false => TraceFlags::default(),
    };
    let context = SpanContext::new(trace_id, span_id, flags, true, TraceState::default());
    context.is_valid().then_some(context)
}

fn time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

fn text(value: &str) -> String {
    value.chars().take(MAX_TEXT).collect()
}

fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The attributes of a run's root span.
fn root_attributes(run: &RunEnded) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", "invoke_agent"),
        KeyValue::new("gen_ai.agent.name", text(&run.agent)),
        KeyValue::new("nrllm.run.id", run.run_id.to_string()),
        KeyValue::new("nrllm.run.status", run.status.as_str()),
        KeyValue::new("gen_ai.usage.input_tokens", int(run.input_tokens)),
        KeyValue::new("gen_ai.usage.output_tokens", int(run.output_tokens)),
    ];
    if let Some(model) = &run.model {
        attributes.push(KeyValue::new("gen_ai.request.model", text(model)));
    }
    attributes
}

/// The attributes of a wait's span (`nrllm.approval.*`).
fn wait_attributes(wait: &WaitEnded) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("nrllm.run.id", wait.run_id.to_string()),
        KeyValue::new("nrllm.approval.kind", wait.kind),
        KeyValue::new("nrllm.approval.decision", text(&wait.decision)),
        KeyValue::new("nrllm.approval.decided_by", text(&wait.decided_by)),
        KeyValue::new("nrllm.approval.waited_ms", wait.waited_ms()),
    ];
    if !wait.rules.is_empty() {
        attributes.push(KeyValue::new(
            "nrllm.approval.rule",
            strings(wait.rules.iter().map(|rule| text(rule)).collect()),
        ));
    }
    if let Some(digest) = &wait.digest {
        attributes.push(KeyValue::new("nrllm.approval.digest", text(digest)));
    }
    attributes
}

fn strings(values: Vec<String>) -> Value {
    Value::Array(Array::String(
        values.into_iter().map(StringValue::from).collect(),
    ))
}

impl SpanExport for OtelSpans {
    fn adopt(&self, span: &tracing::Span, trace: &RunTrace) {
        if let Some(root) = root_context(trace) {
            let _ = span.set_parent(Context::new().with_remote_span_context(root));
        }
    }

    fn traceparent(&self, span: &tracing::Span) -> Option<String> {
        let context = span.context();
        let span_context = context.span().span_context().clone();
        span_context.is_valid().then(|| {
            format!(
                "00-{}-{}-{:02x}",
                span_context.trace_id(),
                span_context.span_id(),
                span_context.trace_flags().to_u8()
            )
        })
    }

    fn message_contents(&self) -> bool {
        self.message_contents
    }

    fn attribute(&self, span: &tracing::Span, key: &'static str, value: String) {
        span.set_attribute(key, value);
    }

    fn attribute_list(&self, span: &tracing::Span, key: &'static str, values: Vec<String>) {
        span.set_attribute(key, strings(values));
    }

    fn wait_ended(&self, trace: &RunTrace, wait: &WaitEnded) {
        let Some(root) = root_context(trace) else {
            return;
        };
        let parent = Context::new().with_remote_span_context(root);
        let mut span = self
            .tracer
            .span_builder(format!("nrllm.wait {}", wait.kind))
            .with_kind(SpanKind::Internal)
            .with_start_time(time(wait.started_ms))
            .with_attributes(wait_attributes(wait))
            .start_with_context(&self.tracer, &parent);
        opentelemetry::trace::Span::end_with_timestamp(&mut span, time(wait.ended_ms));
    }

    fn run_ended(&self, trace: &RunTrace, run: &RunEnded) {
        let (Ok(trace_id), Ok(span_id)) = (
            TraceId::from_hex(&trace.trace_id),
            SpanId::from_hex(&trace.span_id),
        ) else {
            return;
        };
        // Under the caller's span, when the run was started under one.
        let parent = match trace
            .parent_span_id
            .as_deref()
            .and_then(|parent| span_context(&trace.trace_id, parent, trace.sampled))
        {
            Some(parent) => Context::new().with_remote_span_context(parent),
            None => Context::new(),
        };
        let links = trace
            .link
            .as_ref()
            .and_then(|link| span_context(&link.trace_id, &link.span_id, true))
            .map(|linked| vec![Link::with_context(linked)])
            .unwrap_or_default();
        let builder = self
            .tracer
            .span_builder(format!("invoke_agent {}", text(&run.agent)))
            .with_kind(SpanKind::Internal)
            .with_start_time(time(run.started_ms))
            .with_attributes(root_attributes(run))
            .with_links(links);
        let mut span = StoredIds::with((trace_id, span_id), || {
            builder.start_with_context(&self.tracer, &parent)
        });
        if run.status == RunStatus::Failed {
            opentelemetry::trace::Span::set_status(
                &mut span,
                Status::error(text(run.summary.as_deref().unwrap_or("the run failed"))),
            );
        }
        // It ends as the run ended, or now if the segment that ended it closed since (a
        // parent never ends before its children).
        let ended = time(run.ended_ms).max(SystemTime::now());
        opentelemetry::trace::Span::end_with_timestamp(&mut span, ended);
    }
}
