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
    /// The process that sent it (`service.instance.id`).
    pub instance: String,
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

/// An export request as far as counting its spans needs: each span's bytes are skipped, not
/// read (the same wire format: fields 1, 2 and 2 of the request, resource and scope).
#[derive(Clone, PartialEq, prost::Message)]
struct Counted {
    #[prost(message, repeated, tag = "1")]
    resource_spans: Vec<CountedResource>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct CountedResource {
    #[prost(message, repeated, tag = "2")]
    scope_spans: Vec<CountedScope>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct CountedScope {
    #[prost(bytes = "bytes", repeated, tag = "2")]
    spans: Vec<prost::bytes::Bytes>,
}

#[derive(Default)]
struct Kept {
    spans: Mutex<Vec<Received>>,
    /// Spans and export requests (each a batch) received.
    counts: Mutex<(usize, u64)>,
    /// Only count the spans (a benchmark's receiver: what it keeps would grow without end).
    count_only: bool,
    arrived: Notify,
}

impl Kept {
    /// Keeps (or only counts) the spans of an export request's `body`; `false` if it is not one.
    fn body(&self, body: Bytes) -> bool {
        if self.count_only {
            let Ok(counted) = Counted::decode(body) else {
                return false;
            };
            let count = counted
                .resource_spans
                .iter()
                .flat_map(|resource| &resource.scope_spans)
                .map(|scope| scope.spans.len())
                .sum();
            self.counted(count);
            return true;
        }
        match ExportTraceServiceRequest::decode(body) {
            Ok(request) => {
                self.keep(request);
                true
            }
            Err(_) => false,
        }
    }

    fn keep(&self, request: ExportTraceServiceRequest) {
        let received = flatten(request);
        let count = received.len();
        if let Ok(mut spans) = self.spans.lock() {
            spans.extend(received);
        }
        self.counted(count);
    }

    fn counted(&self, spans: usize) {
        if let Ok(mut counts) = self.counts.lock() {
            counts.0 += spans;
            counts.1 += 1;
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
        Receiver::http_keeping(true).await
    }

    /// A receiver of OTLP/HTTP that only counts what it is sent ([`Receiver::counts`]), on a
    /// thread and runtime of its own, as a collector elsewhere would be: for a benchmark (its
    /// spans would fill the memory, and its work is not the measured server's).
    pub fn http_counting() -> std::io::Result<Receiver> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (started, receiver) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("otlp-receiver".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let _ = started.send(Receiver::http_keeping(false).await);
                    std::future::pending::<()>().await;
                })
            })?;
        receiver
            .recv()
            .map_err(|_| std::io::Error::other("the receiver's thread ended"))?
    }

    async fn http_keeping(keep: bool) -> std::io::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let receiver = Receiver {
            addr: listener.local_addr()?,
            kept: Arc::new(Kept {
                count_only: !keep,
                ..Kept::default()
            }),
        };
        let kept = Arc::clone(&receiver.kept);
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: Bytes| {
                let kept = Arc::clone(&kept);
                async move {
                    match kept.body(body) {
                        true => (
                            StatusCode::OK,
                            [("content-type", "application/x-protobuf")],
                            ExportTraceServiceResponse::default().encode_to_vec(),
                        ),
                        false => (
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
        self.kept
            .counts
            .lock()
            .map(|counts| *counts)
            .unwrap_or((0, 0))
    }

    /// Waits until `spans` spans came, or `limit` passed: how many came.
    pub async fn wait_for_count(&self, spans: usize, limit: Duration) -> usize {
        self.until(limit, || self.counts().0, |count| *count >= spans)
            .await
    }

    /// The spans once `done` holds of them, or those there are after `limit`.
    pub async fn wait_for(
        &self,
        done: impl Fn(&[Received]) -> bool,
        limit: Duration,
    ) -> Vec<Received> {
        self.until(limit, || self.spans(), |spans| done(spans))
            .await
    }

    /// What `look` sees once `done` holds of it (looked at again as each request arrives), or
    /// after `limit`.
    async fn until<T>(
        &self,
        limit: Duration,
        look: impl Fn() -> T,
        done: impl Fn(&T) -> bool,
    ) -> T {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let arrived = self.kept.arrived.notified();
            let seen = look();
            if done(&seen) || tokio::time::Instant::now() >= deadline {
                return seen;
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
        let resource = |key: &str| {
            resource_spans
                .resource
                .as_ref()
                .and_then(|resource| resource.attributes.iter().find(|kv| kv.key == key))
                .and_then(|kv| value(kv).as_str().map(str::to_owned))
                .unwrap_or_default()
        };
        let (service, instance) = (resource("service.name"), resource("service.instance.id"));
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                received.push(Received {
                    service: service.clone(),
                    instance: instance.clone(),
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
