//! Streaming responses. The events of a `text/event-stream` response are read with
//! `eventsource-stream` (which handles lines and characters split across network chunks) and
//! handed to the wire format's [`StreamFold`], which tells what each adds (the deltas shown live)
//! and, at the end, gives the body its non-streaming endpoint would have answered for the same
//! exchange. That body is then read exactly as a non-streaming one: a streamed step and the next
//! request's transcript are the same either way, and the step's raw view holds the assembled
//! response (its thinking text set aside, either way: thinking is shown live, never kept).

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

use nrllm_core::provider::{Delta, DeltaObserver, ProviderError, ProviderErrorKind, Usage};

/// The most event data one response may bring, in bytes: a stream that goes on past it is cut off
/// (and not retried).
pub const MAX_STREAM_BYTES: usize = 16 * 1024 * 1024;

/// A wire format's reading of one streamed response.
pub trait StreamFold: Send {
    /// One event (`event` is its type: `message` when the server gave none): what it adds. An
    /// error the provider reports inside the stream is `Err` (transient when it says the
    /// provider is busy or failed).
    fn event(&mut self, event: &str, data: &str) -> Result<Vec<Delta>, ProviderError>;
    /// The stream said the response is complete (`[DONE]`, `message_stop`, a finish reason).
    fn complete(&self) -> bool;
    /// The usage the stream reported so far, if any (for a stream that breaks off).
    fn usage(&self) -> Option<Usage>;
    /// The body the non-streaming endpoint would have answered.
    fn finish(self: Box<Self>) -> Value;
}

/// An event's data as JSON; `None` for empty data (a keep-alive). Data that is not JSON breaks the
/// stream (worth a retry).
pub(crate) fn event_json<T: DeserializeOwned>(
    data: &str,
    provider: &str,
) -> Result<Option<T>, ProviderError> {
    let data = data.trim();
    if data.is_empty() {
        return Ok(None);
    }
    serde_json::from_str(data).map(Some).map_err(|_| {
        ProviderError::transient(format!("{provider}: a streamed event is not valid JSON"))
    })
}

/// An error the provider reported inside a stream: `what` is its type or code if it gave one,
/// `message` its words (cut to 300 characters).
pub(crate) fn failed_mid_response(
    provider: &str,
    kind: ProviderErrorKind,
    what: Option<&str>,
    message: Option<&str>,
) -> ProviderError {
    let message: String = message
        .unwrap_or("an error in the stream")
        .chars()
        .take(300)
        .collect();
    let what = what.map(|what| format!(" ({what})")).unwrap_or_default();
    ProviderError::new(
        kind,
        format!("{provider}: the provider failed mid-response{what}: {message}"),
    )
}

/// Appends `more` to the text field `key` of a part or block being assembled, in place.
pub(crate) fn append_text(part: &mut Value, key: &str, more: &str) {
    match part.get_mut(key) {
        Some(Value::String(text)) => text.push_str(more),
        _ => part[key] = Value::String(more.to_owned()),
    }
}

/// A wire format's reading of a usage object (`None` if it is not one); by default, none.
#[derive(Debug, Clone, Copy)]
pub struct ReadUsage(pub fn(&Value) -> Option<Usage>);

impl Default for ReadUsage {
    fn default() -> ReadUsage {
        ReadUsage(|_| None)
    }
}

/// Makes a fresh fold for each attempt of a streaming request (`None`: read the response whole).
pub type NewFold<'a> = &'a (dyn Fn() -> Option<Box<dyn StreamFold>> + Send + Sync);

/// Whether a response is a stream of server-sent events (a server may answer a streaming
/// request with a plain JSON body, which is then read as one).
pub fn is_event_stream(headers: &reqwest::header::HeaderMap) -> bool {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().starts_with("text/event-stream"))
}

/// Reads `response`'s events into `fold`, telling `on_delta` what each adds; the folded body, or
/// why the stream failed (a stream that ends before it says it is complete broke off: worth a
/// retry), with what it had used (the usage reported so far, or unreported: the provider
/// answered, so it may have billed).
pub(crate) async fn read_events(
    response: reqwest::Response,
    mut fold: Box<dyn StreamFold>,
    on_delta: DeltaObserver<'_>,
    provider: &str,
) -> Result<Value, ProviderError> {
    match fold_events(response, &mut *fold, on_delta, provider).await {
        Ok(()) => Ok(fold.finish()),
        Err(mut error) => {
            error.spent = Some(fold.usage().unwrap_or_else(Usage::unreported));
            Err(error)
        }
    }
}

/// Folds `response`'s events until the stream says the response is complete.
async fn fold_events(
    response: reqwest::Response,
    fold: &mut dyn StreamFold,
    on_delta: DeltaObserver<'_>,
    provider: &str,
) -> Result<(), ProviderError> {
    let mut events = response.bytes_stream().eventsource();
    let mut bytes = 0usize;
    while let Some(event) = events.next().await {
        let event = event.map_err(|err| {
            ProviderError::transient(format!("{provider}: the stream broke off ({err})"))
        })?;
        bytes += event.data.len();
        if bytes > MAX_STREAM_BYTES {
            return Err(ProviderError::permanent(format!(
                "{provider}: the response is longer than {} MiB",
                MAX_STREAM_BYTES / (1024 * 1024)
            )));
        }
        for delta in fold.event(&event.event, &event.data)? {
            on_delta(delta);
        }
        if fold.complete() {
            return Ok(());
        }
    }
    Err(ProviderError::transient(format!(
        "{provider}: the stream ended before the response was complete"
    )))
}
