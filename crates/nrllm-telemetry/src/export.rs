//! The core's finished spans ([`nrllm_core::spans`]) as OpenTelemetry spans, with the ids the
//! core gave them: derived from the run's stored trace, so that one run is one trace whichever
//! process ends its spans.

use std::cell::Cell;

use nrllm_core::spans::{Attr, SpanExport, SpanRecord};
use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer,
};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracer};

/// The span export over an OpenTelemetry tracer (batched by its provider).
pub struct OtelSpans {
    pub(crate) tracer: SdkTracer,
    pub(crate) message_contents: bool,
}

thread_local! {
    /// The ids the next span started on this thread takes.
    static NEXT_IDS: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// The span ids of the process: random, except for a span started inside [`StoredIds::with`],
/// which takes the ids it was given (the SDK has no other way to emit a span whose ids were
/// fixed before — in the core, or in another process).
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

fn span_context(trace_id: TraceId, span_id: &str, sampled: bool) -> Option<SpanContext> {
    let span_id = SpanId::from_hex(span_id).ok()?;
    let flags = match sampled {
        true => TraceFlags::SAMPLED,
        false => TraceFlags::default(),
    };
    let context = SpanContext::new(trace_id, span_id, flags, true, TraceState::default());
    context.is_valid().then_some(context)
}

fn value(attr: Attr) -> Value {
    match attr {
        Attr::Static(text) => Value::from(text),
        Attr::Text(text) => Value::from(text),
        Attr::Int(number) => Value::I64(number),
        Attr::Float(number) => Value::F64(number),
        Attr::Texts(texts) => Value::Array(Array::String(
            texts.into_iter().map(StringValue::from).collect(),
        )),
    }
}

impl SpanExport for OtelSpans {
    fn export(&self, span: SpanRecord) {
        let (Ok(trace_id), Ok(span_id)) = (
            TraceId::from_hex(&span.trace_id),
            SpanId::from_hex(&span.span_id),
        ) else {
            return;
        };
        let parent = match span
            .parent_span_id
            .as_deref()
            .and_then(|parent| span_context(trace_id, parent, span.sampled))
        {
            Some(parent) => Context::new().with_remote_span_context(parent),
            None => Context::new(),
        };
        let links = span
            .link
            .and_then(|(trace, linked)| {
                span_context(TraceId::from_hex(&trace).ok()?, &linked, true)
            })
            .map(|linked| vec![Link::with_context(linked)])
            .unwrap_or_default();
        let builder = self
            .tracer
            .span_builder(span.name)
            .with_kind(match span.client {
                true => SpanKind::Client,
                false => SpanKind::Internal,
            })
            .with_start_time(span.start)
            .with_attributes(
                span.attributes
                    .into_iter()
                    .map(|(key, attr)| KeyValue::new(key, value(attr))),
            )
            .with_links(links);
        let mut started = StoredIds::with((trace_id, span_id), || {
            builder.start_with_context(&self.tracer, &parent)
        });
        if let Some(error) = span.error {
            started.set_status(Status::error(error));
        }
        started.end_with_timestamp(span.end);
    }

    fn message_contents(&self) -> bool {
        self.message_contents
    }
}
