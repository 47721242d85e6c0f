//! Finished spans wait in one queue and leave in batches, from one thread of the export's own:
//! a run's worker only pushes its record (no conversion, no channel message a span, no wake
//! until a batch is full); the thread writes a batch as one OTLP request's bytes
//! ([`crate::export`]) and sends them, on its own single-threaded runtime, over HTTP/protobuf
//! (`reqwest`) or gRPC (`tonic`).

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nrllm_core::spans::{SpanExport, SpanRecord};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

use crate::env::Batching;
use crate::export::Requests;

/// Spans waiting to leave.
#[derive(Default)]
struct Queue {
    spans: Vec<SpanRecord>,
    /// Spans dropped for a full queue since the last warning.
    dropped: u64,
    /// Shutdown asked: send what waits, then stop.
    closing: bool,
}

/// The core's span export: a queue the export thread empties.
pub struct OtlpSpans {
    queue: Mutex<Queue>,
    /// Wakes the export thread: a batch is full, or shutdown.
    ready: Condvar,
    batching: Batching,
    message_contents: bool,
}

impl OtlpSpans {
    pub(crate) fn new(batching: Batching, message_contents: bool) -> OtlpSpans {
        OtlpSpans {
            queue: Mutex::new(Queue {
                spans: Vec::with_capacity(batching.batch),
                ..Queue::default()
            }),
            ready: Condvar::new(),
            batching,
            message_contents,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic while the lock was held left nothing half-done in a Vec push or take.
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Asks the export thread to send what waits and stop.
    pub(crate) fn close(&self) {
        self.lock().closing = true;
        self.ready.notify_all();
    }

    /// The next batch to send, once one is full, the delay has passed or shutdown is asked;
    /// `None` when shut down with nothing left. Spans dropped since the last call are logged.
    fn next_batch(&self) -> Option<Vec<SpanRecord>> {
        let deadline = Instant::now() + self.batching.delay;
        let mut queue = self.lock();
        while queue.spans.len() < self.batching.batch && !queue.closing {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            queue = self
                .ready
                .wait_timeout(queue, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        if queue.dropped > 0 {
            tracing::warn!(
                dropped = queue.dropped,
                queue = self.batching.queue,
                "spans were dropped: the OTLP export's queue was full (OTEL_BSP_MAX_QUEUE_SIZE)"
            );
            queue.dropped = 0;
        }
        if queue.spans.is_empty() && queue.closing {
            return None;
        }
        let batch = match queue.spans.len() > self.batching.batch {
            true => queue.spans.drain(..self.batching.batch).collect(),
            false => std::mem::replace(&mut queue.spans, Vec::with_capacity(self.batching.batch)),
        };
        Some(batch)
    }
}

impl SpanExport for OtlpSpans {
    fn export(&self, span: SpanRecord) {
        if !span.sampled {
            return;
        }
        let mut queue = self.lock();
        if queue.spans.len() >= self.batching.queue {
            queue.dropped += 1;
            return;
        }
        queue.spans.push(span);
        let full = queue.spans.len() == self.batching.batch;
        drop(queue);
        if full {
            self.ready.notify_one();
        }
    }

    fn message_contents(&self) -> bool {
        self.message_contents
    }
}

/// How a request travels.
pub(crate) enum Transport {
    Http {
        client: reqwest::Client,
        url: String,
    },
    Grpc {
        client: Box<tonic::client::Grpc<tonic::transport::Channel>>,
        headers: tonic::metadata::MetadataMap,
    },
}

/// The gRPC method an OTLP trace export calls.
const EXPORT_METHOD: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// gRPC's codec for a request already encoded ([`Requests`]); the answer (at most a count of
/// spans the endpoint rejected) is not read.
#[derive(Clone, Copy, Default)]
struct Encoded;

impl Codec for Encoded {
    type Encode = Vec<u8>;
    type Decode = ();
    type Encoder = Encoded;
    type Decoder = Encoded;

    fn encoder(&mut self) -> Encoded {
        Encoded
    }

    fn decoder(&mut self) -> Encoded {
        Encoded
    }
}

impl Encoder for Encoded {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, body: Vec<u8>, out: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(out, &body);
        Ok(())
    }
}

impl Decoder for Encoded {
    type Item = ();
    type Error = tonic::Status;

    fn decode(&mut self, answer: &mut DecodeBuf<'_>) -> Result<Option<()>, tonic::Status> {
        let unread = bytes::Buf::remaining(answer);
        bytes::Buf::advance(answer, unread);
        Ok(Some(()))
    }
}

impl Transport {
    /// An OTLP/HTTP (protobuf) transport to `url`, each request with `headers`.
    pub(crate) fn http(
        url: String,
        headers: &[(String, String)],
        timeout: Duration,
    ) -> Result<Transport, String> {
        let mut map = reqwest::header::HeaderMap::new();
        map.insert(
            reqwest::header::CONTENT_TYPE,
            reqwest::header::HeaderValue::from_static("application/x-protobuf"),
        );
        for (key, value) in headers {
            let name = reqwest::header::HeaderName::from_bytes(key.as_bytes())
                .map_err(|_| format!("`{key}` is not a header name"))?;
            let value = reqwest::header::HeaderValue::from_str(value)
                .map_err(|_| format!("header `{key}` has a value no request can carry"))?;
            map.insert(name, value);
        }
        reqwest::Url::parse(&url).map_err(|err| format!("`{url}` is not a URL: {err}"))?;
        let client = reqwest::Client::builder()
            .default_headers(map)
            .timeout(timeout)
            .build()
            .map_err(|err| format!("the HTTP client could not be built: {err}"))?;
        Ok(Transport::Http { client, url })
    }

    /// An OTLP/gRPC transport to `url`, each request with `headers`. Call inside the runtime
    /// that will send (its connection is made on the first request).
    pub(crate) fn grpc(
        url: String,
        headers: &[(String, String)],
        timeout: Duration,
    ) -> Result<Transport, String> {
        if url.starts_with("https:") {
            return Err(format!(
                "`{url}`: gRPC over TLS is not built in; use http/protobuf for an https endpoint"
            ));
        }
        let mut metadata = tonic::metadata::MetadataMap::new();
        for (key, value) in headers {
            let name = tonic::metadata::MetadataKey::from_bytes(key.as_bytes())
                .map_err(|_| format!("`{key}` is not a header name"))?;
            let value = value
                .parse()
                .map_err(|_| format!("header `{key}` has a value no request can carry"))?;
            metadata.insert(name, value);
        }
        let channel = tonic::transport::Endpoint::from_shared(url.clone())
            .map_err(|err| format!("`{url}` is not a URL: {err}"))?
            .timeout(timeout)
            .connect_lazy();
        Ok(Transport::Grpc {
            client: Box::new(tonic::client::Grpc::new(channel)),
            headers: metadata,
        })
    }

    /// Sends one request (`body`, encoded); why not, if it failed.
    async fn send(&mut self, body: Vec<u8>) -> Result<(), String> {
        match self {
            Transport::Http { client, url } => {
                let response = client
                    .post(url.as_str())
                    .body(body)
                    .send()
                    .await
                    .map_err(|err| err.without_url().to_string())?;
                match response.status().is_success() {
                    true => Ok(()),
                    false => Err(format!("the endpoint answered {}", response.status())),
                }
            }
            Transport::Grpc { client, headers } => {
                let answered =
                    |status: tonic::Status| format!("the endpoint answered {:?}", status.code());
                client
                    .ready()
                    .await
                    .map_err(|err| format!("the endpoint could not be reached: {err}"))?;
                let mut request = tonic::Request::new(body);
                *request.metadata_mut() = headers.clone();
                client
                    .unary(
                        request,
                        http::uri::PathAndQuery::from_static(EXPORT_METHOD),
                        Encoded,
                    )
                    .await
                    .map(drop)
                    .map_err(answered)
            }
        }
    }
}

/// The export thread's loop: sends each batch as it comes, until shutdown has sent the last.
/// A failed request is logged (once a minute at most) and its spans are not sent again.
pub(crate) fn run(
    spans: &OtlpSpans,
    runtime: &tokio::runtime::Runtime,
    mut transport: Transport,
    resource: Vec<KeyValue>,
) {
    let mut requests = Requests::new(resource);
    let mut last_warning: Option<Instant> = None;
    let mut failed = 0_u64;
    while let Some(batch) = spans.next_batch() {
        let count = batch.len() as u64;
        let Some(body) = requests.request(&batch) else {
            continue;
        };
        drop(batch);
        if let Err(err) = runtime.block_on(transport.send(body)) {
            failed += count;
            if last_warning.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                tracing::warn!(%err, spans = failed, "the OTLP endpoint did not take spans");
                last_warning = Some(Instant::now());
                failed = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::root;
    use std::sync::Arc;

    fn batching(delay_ms: u64, queue: usize, batch: usize) -> Batching {
        Batching {
            delay: Duration::from_millis(delay_ms),
            queue,
            batch,
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_an_unsampled_span_never_waits() {
        let spans = OtlpSpans::new(batching(60_000, 3, 2), false);
        spans.export(root(0, false));
        for n in 0..5 {
            spans.export(root(n, true));
        }
        let queue = spans.lock();
        assert_eq!(queue.spans.len(), 3);
        assert_eq!(queue.dropped, 2);
        assert_eq!(queue.spans[0].name, "span 0");
    }

    #[test]
    fn a_full_batch_leaves_at_once_and_the_rest_waits_for_the_next() {
        let spans = OtlpSpans::new(batching(60_000, 10, 2), false);
        for n in 0..3 {
            spans.export(root(n, true));
        }
        let started = Instant::now();
        let batch = spans.next_batch().expect("a full batch");
        assert!(started.elapsed() < Duration::from_secs(30));
        assert_eq!(
            batch.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["span 0", "span 1"]
        );
        assert_eq!(spans.lock().spans.len(), 1);
    }

    #[test]
    fn a_lone_span_leaves_after_the_delay_and_shutdown_sends_the_rest_then_stops() {
        let spans = OtlpSpans::new(batching(30, 10, 5), false);
        spans.export(root(0, true));
        let started = Instant::now();
        assert_eq!(spans.next_batch().map(|b| b.len()), Some(1));
        assert!(started.elapsed() >= Duration::from_millis(30));

        let spans = Arc::new(OtlpSpans::new(batching(60_000, 10, 5), false));
        spans.export(root(1, true));
        let waiting = {
            let spans = Arc::clone(&spans);
            std::thread::spawn(move || (spans.next_batch(), spans.next_batch()))
        };
        std::thread::sleep(Duration::from_millis(20));
        spans.close();
        let (last, after) = waiting.join().unwrap();
        assert_eq!(last.map(|b| b.len()), Some(1));
        assert!(after.is_none());
    }
}
