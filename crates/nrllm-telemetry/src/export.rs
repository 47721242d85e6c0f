//! The core's finished spans ([`nrllm_core::spans`]) as OTLP's own messages
//! (`opentelemetry-proto`), with the ids the core gave them: derived from the run's stored
//! trace, so that one run is one trace whichever process ends its spans.
//!
//! A record becomes its protobuf `Span` in one step, its texts moved rather than copied: the
//! core made the span, its ids and its times already, so no tracer, sampler or SDK span has
//! anything left to decide, and the batch is one resource and one scope. (Through the SDK's
//! `SpanData`, its batch processor and `opentelemetry-otlp`, each span was built twice more
//! and took more CPU: BENCHMARKS.md, session 35.)

use std::time::{SystemTime, UNIX_EPOCH};

use nrllm_core::spans::{Attr, SpanRecord};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, SpanFlags, Status,
};

/// W3C trace flags: the trace is sampled.
const SAMPLED: u32 = 0x01;

/// A trace id (16 bytes) or span id (8) from lower-case hex; none unless it is one, and not
/// all zeros.
fn id<const N: usize>(hex: &str) -> Option<Vec<u8>> {
    let bytes: [u8; N] = const_hex::decode_to_array(hex).ok()?;
    (bytes != [0; N]).then(|| bytes.to_vec())
}

fn any(value: any_value::Value) -> Option<AnyValue> {
    Some(AnyValue { value: Some(value) })
}

fn value(attr: Attr) -> Option<AnyValue> {
    any(match attr {
        Attr::Static(text) => any_value::Value::StringValue(text.to_owned()),
        Attr::Text(text) => any_value::Value::StringValue(text),
        Attr::Int(number) => any_value::Value::IntValue(number),
        Attr::Float(number) => any_value::Value::DoubleValue(number),
        Attr::Texts(texts) => any_value::Value::ArrayValue(ArrayValue {
            values: texts
                .into_iter()
                .filter_map(|text| any(any_value::Value::StringValue(text)))
                .collect(),
        }),
    })
}

/// A text attribute.
pub(crate) fn text(key: &str, text: String) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: any(any_value::Value::StringValue(text)),
        ..KeyValue::default()
    }
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    })
}

/// `span` as OTLP sends it; none for a span of a trace its caller did not sample (as
/// OpenTelemetry's default sampler, parent-based, would decide) or with ids that are not ids.
pub(crate) fn span_proto(span: SpanRecord) -> Option<Span> {
    if !span.sampled {
        return None;
    }
    let trace_id = id::<16>(&span.trace_id)?;
    let span_id = id::<8>(&span.span_id)?;
    let parent_span_id = span
        .parent_span_id
        .as_deref()
        .and_then(id::<8>)
        .unwrap_or_default();
    // The parent is made elsewhere: by the caller, or, for a run's spans, as the run ends (in
    // whichever process that is).
    let remote = match parent_span_id.is_empty() {
        true => 0,
        false => SpanFlags::ContextIsRemoteMask as u32,
    };
    let links = span
        .link
        .and_then(|(trace, linked)| {
            Some(span::Link {
                trace_id: id::<16>(&trace)?,
                span_id: id::<8>(&linked)?,
                flags: SAMPLED | SpanFlags::ContextHasIsRemoteMask as u32,
                ..span::Link::default()
            })
        })
        .into_iter()
        .collect();
    Some(Span {
        trace_id,
        span_id,
        parent_span_id,
        flags: SAMPLED | SpanFlags::ContextHasIsRemoteMask as u32 | remote,
        name: span.name,
        kind: match span.client {
            true => span::SpanKind::Client,
            false => span::SpanKind::Internal,
        } as i32,
        start_time_unix_nano: nanos(span.start),
        end_time_unix_nano: nanos(span.end),
        attributes: span
            .attributes
            .into_iter()
            .map(|(key, attr)| KeyValue {
                key: key.to_owned(),
                value: value(attr),
                ..KeyValue::default()
            })
            .collect(),
        links,
        status: Some(match span.error {
            Some(message) => Status {
                message,
                code: status::StatusCode::Error as i32,
            },
            None => Status::default(),
        }),
        ..Span::default()
    })
}

/// One export request: `spans` of this process (`resource`), under the `nrllm` scope.
pub(crate) fn request(resource: &[KeyValue], spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: resource.to_vec(),
                ..Resource::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "nrllm".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..InstrumentationScope::default()
                }),
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
                ("gen_ai.request.temperature", Attr::Float(0.5)),
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

    fn attribute<'a>(span: &'a Span, key: &str) -> Option<&'a any_value::Value> {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .and_then(|value| value.value.as_ref())
    }

    #[test]
    fn a_record_keeps_its_ids_times_parent_link_attributes_and_failure() {
        let span = span_proto(record()).expect("a sampled span is exported");
        assert_eq!(const_hex::encode(&span.trace_id), TRACE);
        assert_eq!(const_hex::encode(&span.span_id), "00f067aa0ba902b7");
        assert_eq!(const_hex::encode(&span.parent_span_id), "1111111111111111");
        // Sampled, and its parent is remote (made by another span's end, or the caller).
        assert_eq!(span.flags, 0x301);
        assert_eq!(span.kind, span::SpanKind::Client as i32);
        assert_eq!(span.name, "chat demo");
        assert_eq!(span.start_time_unix_nano, 10_000_000_000);
        assert_eq!(span.end_time_unix_nano, 12_000_000_000);
        assert_eq!(span.attributes.len(), 4);
        assert_eq!(
            attribute(&span, "gen_ai.operation.name"),
            Some(&any_value::Value::StringValue("chat".into()))
        );
        assert_eq!(
            attribute(&span, "gen_ai.usage.input_tokens"),
            Some(&any_value::Value::IntValue(7))
        );
        assert_eq!(
            attribute(&span, "gen_ai.request.temperature"),
            Some(&any_value::Value::DoubleValue(0.5))
        );
        let Some(any_value::Value::ArrayValue(reasons)) =
            attribute(&span, "gen_ai.response.finish_reasons")
        else {
            panic!("finish reasons are an array: {span:?}");
        };
        assert_eq!(
            reasons.values[0].value,
            Some(any_value::Value::StringValue("stop".into()))
        );
        assert_eq!(span.links.len(), 1);
        assert_eq!(
            const_hex::encode(&span.links[0].trace_id),
            "0af7651916cd43dd8448eb211c80319c"
        );
        let status = span.status.expect("a status");
        assert_eq!(status.code, status::StatusCode::Error as i32);
        assert_eq!(status.message, "transient");
    }

    #[test]
    fn a_root_has_no_parent_and_a_span_of_an_unsampled_trace_or_bad_ids_is_not_exported() {
        let root = SpanRecord {
            parent_span_id: None,
            link: None,
            error: None,
            client: false,
            ..record()
        };
        let span = span_proto(root).expect("a root is exported");
        assert!(span.parent_span_id.is_empty());
        assert_eq!(span.flags, 0x101);
        assert_eq!(span.kind, span::SpanKind::Internal as i32);
        assert_eq!(span.status, Some(Status::default()));
        assert!(span.links.is_empty());
        let unsampled = SpanRecord {
            sampled: false,
            ..record()
        };
        assert!(span_proto(unsampled).is_none());
        let zero = SpanRecord {
            span_id: "0000000000000000".into(),
            ..record()
        };
        assert!(span_proto(zero).is_none());
        let garbled = SpanRecord {
            trace_id: "not hex".into(),
            ..record()
        };
        assert!(span_proto(garbled).is_none());
        let short = SpanRecord {
            span_id: "00f067aa".into(),
            ..record()
        };
        assert!(span_proto(short).is_none());
    }

    #[test]
    fn a_request_is_one_resource_and_the_nrllm_scope() {
        let resource = vec![text("service.name", "test".into())];
        let spans: Vec<Span> = [record(), record()]
            .into_iter()
            .filter_map(span_proto)
            .collect();
        let request = request(&resource, spans);
        assert_eq!(request.resource_spans.len(), 1);
        let resource_spans = &request.resource_spans[0];
        assert_eq!(
            resource_spans.resource.as_ref().unwrap().attributes,
            resource
        );
        assert_eq!(resource_spans.scope_spans.len(), 1);
        assert_eq!(
            resource_spans.scope_spans[0].scope.as_ref().unwrap().name,
            "nrllm"
        );
        assert_eq!(resource_spans.scope_spans[0].spans.len(), 2);
    }
}
