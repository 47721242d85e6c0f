//! A small OTLP receiver that keeps the spans it is sent, over HTTP/protobuf (`POST /v1/traces`)
//! or gRPC (`TraceService/Export`): what the tests read a run's trace from, and where the
//! benchmark's exporter sends. It speaks the real wire format (OpenTelemetry's own protobuf
//! types); it is not a collector.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message as _;
use serde_json::Value;
use tokio::sync::Notify;

/// A span as received, flattened: ids in lower-case hex (empty: none).
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub service: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub name: String,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    pub attributes: BTreeMap<String, Value>,
    /// The spans it links to: (trace id, span id).
    pub links: Vec<(String, String)>,
    /// Its status says it failed.
    pub error: bool,
}

impl Received {
    /// Attribute `key` as text, if it is text.
    pub fn text(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).and_then(Value::as_str)
    }

    /// Attribute `key` as a whole number, if it is one.
    pub fn int(&self, key: &str) -> Option<i64> {
        self.attributes.get(key).and_then(Value::as_i64)
    }
}

#[derive(Default)]
struct Kept {
    spans: Mutex<Vec<Received>>,
    /// Export requests received (each a batch).
    requests: Mutex<u64>,
    arrived: Notify,
}

impl Kept {
    fn keep(&self, request: ExportTraceServiceRequest) {
        let received = flatten(request);
        if let Ok(mut spans) = self.spans.lock() {
            spans.extend(received);
        }
        if let Ok(mut requests) = self.requests.lock() {
            *requests += 1;
        }
        self.arrived.notify_waiters();
    }
}

/// A receiver listening on 127.0.0.1; it stops with the runtime that started it.
#[derive(Clone)]
pub struct Receiver {
    /// Where it listens: `http://<addr>` is the OTLP endpoint to set.
    pub addr: SocketAddr,
    kept: Arc<Kept>,
}

impl Receiver {
    /// A receiver of OTLP/HTTP with protobuf bodies.
    pub async fn http() -> std::io::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let receiver = Receiver {
            addr: listener.local_addr()?,
            kept: Arc::default(),
        };
        let kept = Arc::clone(&receiver.kept);
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: Bytes| {
                let kept = Arc::clone(&kept);
                async move {
                    match ExportTraceServiceRequest::decode(body) {
                        Ok(request) => {
                            kept.keep(request);
                            let response = ExportTraceServiceResponse::default().encode_to_vec();
                            (
                                StatusCode::OK,
                                [("content-type", "application/x-protobuf")],
                                response,
                            )
                        }
                        Err(_) => (
                            StatusCode::BAD_REQUEST,
                            [("content-type", "text/plain")],
                            b"not an ExportTraceServiceRequest".to_vec(),
                        ),
                    }
                }
            }),
        );
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(receiver)
    }

    /// A receiver of OTLP/gRPC.
    pub async fn grpc() -> std::io::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let receiver = Receiver {
            addr: listener.local_addr()?,
            kept: Arc::default(),
        };
        let service = TraceServiceServer::new(Grpc(Arc::clone(&receiver.kept)));
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
        });
        Ok(receiver)
    }

    /// The endpoint to export to.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.kept
            .spans
            .lock()
            .map(|spans| spans.clone())
            .unwrap_or_default()
    }

    /// How many spans, and how many export requests, came so far.
    pub fn counts(&self) -> (usize, u64) {
        let spans = self.kept.spans.lock().map(|s| s.len()).unwrap_or(0);
        let requests = self.kept.requests.lock().map(|r| *r).unwrap_or(0);
        (spans, requests)
    }

    /// The spans once `done` holds of them, or those there are after `limit`.
    pub async fn wait_for(
        &self,
        done: impl Fn(&[Received]) -> bool,
        limit: Duration,
    ) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let arrived = self.kept.arrived.notified();
            let spans = self.spans();
            if done(&spans) || tokio::time::Instant::now() >= deadline {
                return spans;
            }
            let _ = tokio::time::timeout_at(deadline, arrived).await;
        }
    }
}

struct Grpc(Arc<Kept>);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.keep(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn flatten(request: ExportTraceServiceRequest) -> Vec<Received> {
    let mut received = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|resource| {
                resource
                    .attributes
                    .iter()
                    .find(|kv| kv.key == "service.name")
            })
            .and_then(|kv| value(kv).as_str().map(str::to_owned))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                received.push(Received {
                    service: service.clone(),
                    trace_id: const_hex::encode(&span.trace_id),
                    span_id: const_hex::encode(&span.span_id),
                    parent_span_id: const_hex::encode(&span.parent_span_id),
                    name: span.name,
                    start_unix_ns: span.start_time_unix_nano,
                    end_unix_ns: span.end_time_unix_nano,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), value(kv)))
                        .collect(),
                    links: span
                        .links
                        .iter()
                        .map(|link| {
                            (
                                const_hex::encode(&link.trace_id),
                                const_hex::encode(&link.span_id),
                            )
                        })
                        .collect(),
                    // STATUS_CODE_ERROR
                    error: span.status.is_some_and(|status| status.code == 2),
                });
            }
        }
    }
    received
}

fn value(kv: &KeyValue) -> Value {
    kv.value
        .as_ref()
        .and_then(|any| any.value.as_ref())
        .map_or(Value::Null, any_value)
}

fn any_value(value: &AnyValue) -> Value {
    match value {
        AnyValue::StringValue(text) => Value::from(text.clone()),
        AnyValue::BoolValue(flag) => Value::from(*flag),
        AnyValue::IntValue(number) => Value::from(*number),
        AnyValue::DoubleValue(number) => Value::from(*number),
        AnyValue::ArrayValue(array) => Value::Array(
            array
                .values
                .iter()
                .filter_map(|item| item.value.as_ref().map(any_value))
                .collect(),
        ),
        _ => Value::Null,
    }
}
