//! The core's finished spans ([`nrllm_core::spans`]) as one OTLP export request's bytes, with
//! the ids the core gave them: derived from the run's stored trace, so that one run is one
//! trace whichever process ends its spans.
//!
//! The request's head — this process's resource and the `nrllm` scope — is encoded once, at
//! start, by `opentelemetry-proto`'s own messages. Each span is written straight from its
//! record into the request's bytes: the core made the span, its ids and its times already, so
//! no tracer, sampler or SDK span has anything left to decide, and building each span as
//! `opentelemetry-proto`'s `Span` first (a dozen allocations, then as many frees) took the
//! export thread most of its time (BENCHMARKS.md, session 36). The tests decode what is
//! written with `opentelemetry-proto`'s messages.

use std::time::{SystemTime, UNIX_EPOCH};

use nrllm_core::spans::{Attr, SpanRecord};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, status, SpanFlags};
use prost::encoding::{double, fixed32, fixed64, int64, uint64};
use prost::Message as _;

/// W3C trace flags: the trace is sampled.
const SAMPLED: u32 = 0x01;
/// OTLP's span flags: whether the parent is remote is known, and that it is.
const HAS_IS_REMOTE: u32 = SpanFlags::ContextHasIsRemoteMask as u32;
const IS_REMOTE: u32 = SpanFlags::ContextIsRemoteMask as u32;
const STATUS_ERROR: u64 = status::StatusCode::Error as u64;

/// A text attribute (of the resource).
pub(crate) fn text(key: &str, text: String) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(text)),
        }),
        ..KeyValue::default()
    }
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    })
}

/// Protobuf's length-delimited fields written from borrowed bytes, on `prost`'s own varints
/// and keys (its `bytes` and `string` encoders take owned values); scalar fields go through
/// `prost::encoding`'s own (`uint64`, `int64`, `double`, `fixed64`, `fixed32`).
mod wire {
    use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};

    /// A field of `len` bytes (a string, bytes, a message) as written: key, length, bytes.
    pub(super) fn len_field(field: u32, len: usize) -> usize {
        key_len(field) + encoded_len_varint(len as u64) + len
    }

    /// The key and the length of a field of `len` bytes, which the caller writes next.
    pub(super) fn len_head(out: &mut Vec<u8>, field: u32, len: usize) {
        encode_key(field, WireType::LengthDelimited, out);
        encode_varint(len as u64, out);
    }

    pub(super) fn bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
        len_head(out, field, bytes.len());
        out.extend_from_slice(bytes);
    }
}

/// The length of an attribute's `AnyValue` message.
fn value_len(attr: &Attr) -> usize {
    match attr {
        Attr::Static(text) => wire::len_field(1, text.len()),
        Attr::Text(text) => wire::len_field(1, text.len()),
        Attr::Int(number) => int64::encoded_len(3, number),
        Attr::Float(number) => double::encoded_len(4, number),
        Attr::Texts(texts) => wire::len_field(5, array_len(texts)),
    }
}

/// The length of an `ArrayValue` of texts.
fn array_len(texts: &[String]) -> usize {
    texts
        .iter()
        .map(|text| wire::len_field(1, wire::len_field(1, text.len())))
        .sum()
}

/// Writes `attr` as an `AnyValue` message's fields.
fn write_value(out: &mut Vec<u8>, attr: &Attr) {
    match attr {
        Attr::Static(text) => wire::bytes(out, 1, text.as_bytes()),
        Attr::Text(text) => wire::bytes(out, 1, text.as_bytes()),
        Attr::Int(number) => int64::encode(3, number, out),
        Attr::Float(number) => double::encode(4, number, out),
        Attr::Texts(texts) => {
            wire::len_head(out, 5, array_len(texts));
            for text in texts {
                wire::len_head(out, 1, wire::len_field(1, text.len()));
                wire::bytes(out, 1, text.as_bytes());
            }
        }
    }
}

/// Writes `(key, attr)` as a `KeyValue` field numbered `field`.
fn write_attribute(out: &mut Vec<u8>, field: u32, (key, attr): &(&'static str, Attr)) {
    let value = value_len(attr);
    wire::len_head(
        out,
        field,
        wire::len_field(1, key.len()) + wire::len_field(2, value),
    );
    wire::bytes(out, 1, key.as_bytes());
    wire::len_head(out, 2, value);
    write_value(out, attr);
}

/// Writes `span` as a `Span` message's fields; `false` (nothing written) for a span of a trace
/// its caller did not sample (as OpenTelemetry's default sampler, parent-based, would decide) or
/// with an id of zeros.
fn write_span(out: &mut Vec<u8>, span: &SpanRecord) -> bool {
    if !span.sampled || span.trace_id == [0; 16] || span.span_id == [0; 8] {
        return false;
    }
    wire::bytes(out, 1, &span.trace_id);
    wire::bytes(out, 2, &span.span_id);
    // The parent is made elsewhere: by the caller, or, for a run's spans, as the run ends (in
    // whichever process that is).
    let mut flags = SAMPLED | HAS_IS_REMOTE;
    if let Some(parent) = span.parent_span_id.filter(|id| *id != [0; 8]) {
        wire::bytes(out, 4, &parent);
        flags |= IS_REMOTE;
    }
    wire::bytes(out, 5, span.name.as_bytes());
    let kind = match span.client {
        true => SpanKind::Client,
        false => SpanKind::Internal,
    };
    uint64::encode(6, &(kind as u64), out);
    fixed64::encode(7, &nanos(span.start), out);
    fixed64::encode(8, &nanos(span.end), out);
    for attribute in &span.attributes {
        write_attribute(out, 9, attribute);
    }
    if let Some((trace, linked)) = span.link.filter(|(t, s)| *t != [0; 16] && *s != [0; 8]) {
        let link_flags = SAMPLED | HAS_IS_REMOTE;
        let len =
            wire::len_field(1, 16) + wire::len_field(2, 8) + fixed32::encoded_len(6, &link_flags);
        wire::len_head(out, 13, len);
        wire::bytes(out, 1, &trace);
        wire::bytes(out, 2, &linked);
        fixed32::encode(6, &link_flags, out);
    }
    match &span.error {
        Some(message) => {
            let len = wire::len_field(2, message.len()) + uint64::encoded_len(3, &STATUS_ERROR);
            wire::len_head(out, 15, len);
            wire::bytes(out, 2, message.as_bytes());
            uint64::encode(3, &STATUS_ERROR, out);
        }
        None => wire::len_head(out, 15, 0),
    }
    fixed32::encode(16, &flags, out);
    true
}

/// Export requests of this process: its resource and the `nrllm` scope, encoded once, and the
/// buffers each batch's spans are written in.
pub(crate) struct Requests {
    /// The `Resource` message.
    resource: Vec<u8>,
    /// The `InstrumentationScope` message.
    scope: Vec<u8>,
    /// A batch's spans, each a `ScopeSpans.spans` field.
    spans: Vec<u8>,
    /// One span's fields.
    span: Vec<u8>,
}

impl Requests {
    pub(crate) fn new(resource: Vec<KeyValue>) -> Requests {
        Requests {
            resource: Resource {
                attributes: resource,
                ..Resource::default()
            }
            .encode_to_vec(),
            scope: InstrumentationScope {
                name: "nrllm".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                ..InstrumentationScope::default()
            }
            .encode_to_vec(),
            spans: Vec::new(),
            span: Vec::new(),
        }
    }

    /// `spans` as one `ExportTraceServiceRequest` (one resource, one scope); none if no span is
    /// exported.
    pub(crate) fn request(&mut self, spans: &[SpanRecord]) -> Option<Vec<u8>> {
        self.spans.clear();
        for span in spans {
            self.span.clear();
            if write_span(&mut self.span, span) {
                wire::bytes(&mut self.spans, 2, &self.span);
            }
        }
        if self.spans.is_empty() {
            return None;
        }
        let scope_spans = wire::len_field(1, self.scope.len()) + self.spans.len();
        let resource_spans =
            wire::len_field(1, self.resource.len()) + wire::len_field(2, scope_spans);
        let mut request = Vec::with_capacity(wire::len_field(1, resource_spans));
        wire::len_head(&mut request, 1, resource_spans);
        wire::bytes(&mut request, 1, &self.resource);
        wire::len_head(&mut request, 2, scope_spans);
        wire::bytes(&mut request, 1, &self.scope);
        request.extend_from_slice(&self.spans);
        Some(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{span, Span, Status};
    use std::time::Duration;

    const TRACE: [u8; 16] = [0x4b; 16];
    const LINKED: [u8; 16] = [0x0a; 16];

    fn record() -> SpanRecord {
        SpanRecord {
            name: "chat demo".into(),
            trace_id: TRACE,
            span_id: [0x0f; 8],
            parent_span_id: Some([0x11; 8]),
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
            link: Some((LINKED, [0xb7; 8])),
            error: Some("transient".into()),
        }
    }

    /// `spans` as the request's bytes, read back by `opentelemetry-proto`'s messages.
    fn sent(spans: &[SpanRecord]) -> Option<ExportTraceServiceRequest> {
        let resource = vec![text("service.name", "test".into())];
        let body = Requests::new(resource).request(spans)?;
        Some(ExportTraceServiceRequest::decode(body.as_slice()).expect("a request that decodes"))
    }

    fn only_span(spans: &[SpanRecord]) -> Option<Span> {
        let request = sent(spans)?;
        let mut all: Vec<Span> = request
            .resource_spans
            .into_iter()
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans)
            .collect();
        assert_eq!(all.len(), 1);
        all.pop()
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
        let span = only_span(&[record()]).expect("a sampled span is exported");
        assert_eq!(span.trace_id, TRACE);
        assert_eq!(span.span_id, [0x0f; 8]);
        assert_eq!(span.parent_span_id, [0x11; 8]);
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
        assert_eq!(span.links[0].trace_id, LINKED);
        assert_eq!(span.links[0].span_id, [0xb7; 8]);
        assert_eq!(span.links[0].flags, 0x101);
        let status = span.status.expect("a status");
        assert_eq!(status.code, status::StatusCode::Error as i32);
        assert_eq!(status.message, "transient");
    }

    #[test]
    fn values_of_every_size_and_sign_read_back_as_written() {
        let long = "é".repeat(20_000);
        let texts: Vec<String> = (0..200).map(|n| "x".repeat(n)).collect();
        let attributes = vec![
            ("empty", Attr::Text(String::new())),
            ("long", Attr::Text(long.clone())),
            ("zero", Attr::Int(0)),
            ("negative", Attr::Int(-1)),
            ("least", Attr::Int(i64::MIN)),
            ("most", Attr::Int(i64::MAX)),
            ("float", Attr::Float(-1.25e300)),
            ("texts", Attr::Texts(texts.clone())),
            ("none", Attr::Texts(Vec::new())),
        ];
        let span = only_span(&[SpanRecord {
            name: long.clone(),
            attributes,
            error: Some(long.clone()),
            start: UNIX_EPOCH + Duration::from_nanos(u64::MAX),
            ..record()
        }])
        .expect("exported");
        assert_eq!(span.name, long);
        assert_eq!(span.start_time_unix_nano, u64::MAX);
        assert_eq!(span.status.as_ref().unwrap().message, long);
        let value = |key| attribute(&span, key).cloned();
        use any_value::Value::*;
        assert_eq!(value("empty"), Some(StringValue(String::new())));
        assert_eq!(value("long"), Some(StringValue(long)));
        assert_eq!(value("zero"), Some(IntValue(0)));
        assert_eq!(value("negative"), Some(IntValue(-1)));
        assert_eq!(value("least"), Some(IntValue(i64::MIN)));
        assert_eq!(value("most"), Some(IntValue(i64::MAX)));
        assert_eq!(value("float"), Some(DoubleValue(-1.25e300)));
        let Some(ArrayValue(read)) = value("texts") else {
            panic!("an array");
        };
        let read: Vec<_> = read.values.into_iter().map(|v| v.value).collect();
        let written: Vec<_> = texts.into_iter().map(|t| Some(StringValue(t))).collect();
        assert_eq!(read, written);
        let Some(ArrayValue(none)) = value("none") else {
            panic!("an empty array is still an array");
        };
        assert!(none.values.is_empty());
        assert_eq!(span.attributes.len(), 9);
    }

    #[test]
    fn a_root_has_no_parent_and_a_span_of_an_unsampled_trace_or_zero_ids_is_not_exported() {
        let root = SpanRecord {
            parent_span_id: None,
            link: None,
            error: None,
            client: false,
            ..record()
        };
        let span = only_span(&[root]).expect("a root is exported");
        assert!(span.parent_span_id.is_empty());
        assert_eq!(span.flags, 0x101);
        assert_eq!(span.kind, span::SpanKind::Internal as i32);
        assert_eq!(span.status, Some(Status::default()));
        assert!(span.links.is_empty());
        let unsampled = SpanRecord {
            sampled: false,
            ..record()
        };
        let zero_span = SpanRecord {
            span_id: [0; 8],
            ..record()
        };
        let zero_trace = SpanRecord {
            trace_id: [0; 16],
            ..record()
        };
        assert!(sent(&[unsampled.clone(), zero_span.clone(), zero_trace.clone()]).is_none());
        let kept = only_span(&[unsampled, record(), zero_span, zero_trace]).unwrap();
        assert_eq!(kept.span_id, [0x0f; 8]);
    }

    #[test]
    fn a_request_is_one_resource_and_the_nrllm_scope() {
        let request = sent(&[record(), record()]).expect("two spans");
        assert_eq!(request.resource_spans.len(), 1);
        let resource_spans = &request.resource_spans[0];
        assert_eq!(
            resource_spans.resource.as_ref().unwrap().attributes,
            vec![text("service.name", "test".into())]
        );
        assert_eq!(resource_spans.scope_spans.len(), 1);
        let scope = resource_spans.scope_spans[0].scope.as_ref().unwrap();
        assert_eq!(scope.name, "nrllm");
        assert_eq!(scope.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(resource_spans.scope_spans[0].spans.len(), 2);
    }

    #[test]
    fn the_buffers_start_empty_for_each_batch() {
        let mut requests = Requests::new(Vec::new());
        let first = requests.request(&[record(), record()]).unwrap();
        let second = requests.request(&[record()]).unwrap();
        let spans = |body: &[u8]| {
            ExportTraceServiceRequest::decode(body)
                .unwrap()
                .resource_spans[0]
                .scope_spans[0]
                .spans
                .len()
        };
        assert_eq!((spans(&first), spans(&second)), (2, 1));
    }
}
