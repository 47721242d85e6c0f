//! The core's finished spans ([`nrllm_core::spans`]) as OpenTelemetry spans, with the ids the
//! core gave them: derived from the run's stored trace, so that one run is one trace whichever
//! process ends its spans.
//!
//! A finished span goes straight to the SDK's batch processor as its `SpanData`: the core made
//! the span, its ids and its times already, so no tracer, sampler or id generator has anything
//! left to decide. (Through a tracer, the export cost about twice as much: BENCHMARKS.md.)

use std::borrow::Cow;

use nrllm_core::spans::{Attr, SpanExport, SpanRecord};
use opentelemetry::trace::{
    Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Array, InstrumentationScope, Key, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SpanData, SpanEvents, SpanLinks, SpanProcessor,
};

/// The span export over the SDK's batch processor (and the OTLP exporter behind it).
#[derive(Debug)]
pub struct OtelSpans {
    pub(crate) processor: BatchSpanProcessor,
    pub(crate) scope: InstrumentationScope,
    pub(crate) message_contents: bool,
}

fn span_context(trace_id: TraceId, span_id: &str) -> Option<SpanContext> {
    let span_id = SpanId::from_hex(span_id).ok()?;
    let context = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    );
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

/// `span` as the SDK exports it, under `scope`; none for a span of a trace its caller did not
/// sample (as the SDK's default sampler, parent-based, would decide) or with ids that are not
/// ids.
pub(crate) fn span_data(span: SpanRecord, scope: &InstrumentationScope) -> Option<SpanData> {
    if !span.sampled {
        return None;
    }
    let trace_id = TraceId::from_hex(&span.trace_id).ok()?;
    let context = span_context(trace_id, &span.span_id)?;
    let parent_span_id = span
        .parent_span_id
        .as_deref()
        .and_then(|parent| SpanId::from_hex(parent).ok())
        .unwrap_or(SpanId::INVALID);
    let mut links = SpanLinks::default();
    if let Some(linked) = span
        .link
        .and_then(|(trace, linked)| span_context(TraceId::from_hex(&trace).ok()?, &linked))
    {
        links.links.push(Link::with_context(linked));
    }
    Some(SpanData {
        span_context: context,
        parent_span_id,
        // The parent is made elsewhere: by the caller, or, for a run's spans, as the run ends
        // (in whichever process that is).
        parent_span_is_remote: parent_span_id != SpanId::INVALID,
        span_kind: match span.client {
            true => SpanKind::Client,
            false => SpanKind::Internal,
        },
        name: Cow::Owned(span.name),
        start_time: span.start,
        end_time: span.end,
        attributes: span
            .attributes
            .into_iter()
            .map(|(key, attr)| KeyValue::new(Key::from_static_str(key), value(attr)))
            .collect(),
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links,
        status: match span.error {
            Some(error) => Status::error(error),
            None => Status::Unset,
        },
        instrumentation_scope: scope.clone(),
    })
}

impl SpanExport for OtelSpans {
    fn export(&self, span: SpanRecord) {
        if let Some(data) = span_data(span, &self.scope) {
            self.processor.on_end(data);
        }
    }

    fn message_contents(&self) -> bool {
        self.message_contents
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    fn record() -> SpanRecord {
        SpanRecord {
            name: "chat demo".into(),
            trace_id: TRACE.into(),
            span_id: "00f067aa0ba902b7".into(),
            parent_span_id: Some("1111111111111111".into()),
            sampled: true,
            client: true,
            start: UNIX_EPOCH + Duration::from_secs(10),
            end: UNIX_EPOCH + Duration::from_secs(12),
            attributes: vec![
                ("gen_ai.operation.name", Attr::Static("chat")),
                ("gen_ai.usage.input_tokens", Attr::Int(7)),
                (
                    "gen_ai.response.finish_reasons",
                    Attr::Texts(vec!["stop".into()]),
                ),
            ],
            link: Some((
                "0af7651916cd43dd8448eb211c80319c".into(),
                "b7ad6b7169203331".into(),
            )),
            error: Some("transient".into()),
        }
    }

    #[test]
    fn a_record_keeps_its_ids_times_parent_link_attributes_and_failure() {
        let scope = InstrumentationScope::builder("nrllm").build();
        let data = span_data(record(), &scope).expect("a sampled span is exported");
        assert_eq!(data.span_context.trace_id().to_string(), TRACE);
        assert_eq!(data.span_context.span_id().to_string(), "00f067aa0ba902b7");
        assert_eq!(data.parent_span_id.to_string(), "1111111111111111");
        assert!(data.parent_span_is_remote);
        assert_eq!(data.span_kind, SpanKind::Client);
        assert_eq!(data.name, "chat demo");
        assert_eq!(
            data.end_time.duration_since(data.start_time).ok(),
            Some(Duration::from_secs(2))
        );
        assert_eq!(data.attributes.len(), 3);
        assert_eq!(
            data.attributes[1],
            KeyValue::new("gen_ai.usage.input_tokens", 7_i64)
        );
        assert_eq!(data.links.len(), 1);
        assert_eq!(
            data.links[0].span_context.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(data.status, Status::error("transient"));
        assert_eq!(data.instrumentation_scope.name(), "nrllm");
    }

    #[test]
    fn a_root_has_no_parent_and_a_span_of_an_unsampled_trace_or_bad_ids_is_not_exported() {
        let scope = InstrumentationScope::builder("nrllm").build();
        let root = SpanRecord {
            parent_span_id: None,
            link: None,
            error: None,
            ..record()
        };
        let data = span_data(root, &scope).expect("a root is exported");
        assert_eq!(data.parent_span_id, SpanId::INVALID);
        assert!(!data.parent_span_is_remote);
        assert_eq!(data.status, Status::Unset);
        assert!(data.links.is_empty());
        let unsampled = SpanRecord {
            sampled: false,
            ..record()
        };
        assert!(span_data(unsampled, &scope).is_none());
        let zero = SpanRecord {
            span_id: "0000000000000000".into(),
            ..record()
        };
        assert!(span_data(zero, &scope).is_none());
        let garbled = SpanRecord {
            trace_id: "not hex".into(),
            ..record()
        };
        assert!(span_data(garbled, &scope).is_none());
    }
}
