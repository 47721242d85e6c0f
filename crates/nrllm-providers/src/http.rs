//! The one HTTP engine every wire format uses: a client with connect and request timeouts;
//! retries with exponential backoff and jitter on 429, 5xx and connection failures, honouring
//! every wait the provider asks for (`Retry-After` in seconds or as an HTTP date, or a hint in the
//! error body that the format reads), each capped; error classification; and errors an operator
//! can read — the provider's own message, cut short, with the API key never in it.

use std::time::{Duration, SystemTime};

use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use nrllm_core::provider::{
    DeltaObserver, ProviderError, ProviderErrorKind, RetryNotice, RetryObserver,
};
use nrllm_core::retry::retry_delay;

use crate::stream::{is_event_stream, read_events, NewFold};

/// When and how often to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The first retry's delay; each further retry doubles it.
    pub base_delay: Duration,
    /// No wait is longer than this, whatever the provider asks for.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based): the provider's hint if it gave one, else
    /// the one retry delay ([`nrllm_core::retry::retry_delay`], spread by `seed`); never above
    /// the cap.
    pub fn delay(&self, retry: u32, hint: Option<Duration>, seed: u64) -> Duration {
        match hint {
            Some(wait) => wait.min(self.max_delay),
            None => retry_delay(self.base_delay, retry, self.max_delay, seed),
        }
    }
}

/// The longest a streamed response may take in all (each read still waits at most the request
/// timeout: a stream that goes silent that long broke off).
pub const MAX_STREAM_DURATION: Duration = Duration::from_secs(30 * 60);

/// Timeouts and retries for one provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpSettings {
    pub connect_timeout: Duration,
    /// The longest a response read whole may take; for a streamed one, the longest wait for
    /// its next bytes.
    pub request_timeout: Duration,
    pub retry: RetryPolicy,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(120),
            retry: RetryPolicy::default(),
        }
    }
}

/// An API key. It is a `secrecy` secret: its `Debug` never shows it, so a logged configuration
/// cannot leak it, and it is read only where a header carries it.
#[derive(Clone)]
pub struct ApiKey(SecretString);

impl ApiKey {
    /// The key itself, for the one header that carries it.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

impl From<String> for ApiKey {
    fn from(key: String) -> Self {
        ApiKey(SecretString::from(key))
    }
}

impl From<&str> for ApiKey {
    fn from(key: &str) -> Self {
        ApiKey::from(key.to_owned())
    }
}

/// A wait the provider asked for, and where it said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitHint {
    pub wait: Duration,
    /// For the step list: `Retry-After: 2`, `retryDelay 2s`, …
    pub source: String,
}

/// The provider's `Retry-After` header: seconds, or an HTTP date (a date in the past is no wait).
pub fn retry_after(headers: &reqwest::header::HeaderMap, now: SystemTime) -> Option<WaitHint> {
    let text = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    let wait = match text.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Duration::from_secs_f64(secs),
        Ok(_) => return None,
        Err(_) => httpdate::parse_http_date(text)
            .ok()?
            .duration_since(now)
            .unwrap_or_default(),
    };
    Some(WaitHint {
        wait,
        source: format!("Retry-After: {text}"),
    })
}

/// Reads a wait hint from an error body (a format's own convention), given the body as JSON.
pub type BodyHint<'a> = &'a (dyn Fn(&Value) -> Option<WaitHint> + Send + Sync);

/// Posts JSON to one provider endpoint.
#[derive(Debug, Clone)]
pub struct Engine {
    client: reqwest::Client,
    settings: HttpSettings,
    /// The provider's name, for messages (`openai`, …).
    provider: String,
    /// The API key, so that it can be scrubbed from anything shown.
    secret: Option<ApiKey>,
}

/// A seed for spreading retries: enough randomness from the sub-second clock.
fn jitter_seed() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::from(d.subsec_nanos()))
        .unwrap_or_default()
}

impl Engine {
    /// An engine for `provider`; `secret` is the API key (kept out of every message).
    pub fn new(
        provider: &str,
        settings: HttpSettings,
        secret: Option<ApiKey>,
    ) -> Result<Engine, ProviderError> {
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .read_timeout(settings.request_timeout)
            .build()
            .map_err(|err| {
                ProviderError::permanent(format!(
                    "{provider}: cannot set up the HTTP client: {err}"
                ))
            })?;
        Ok(Engine {
            client,
            settings,
            provider: provider.to_owned(),
            secret: secret.filter(|s| !s.expose().is_empty()),
        })
    }

    /// Replaces the API key (and anything shaped like a bearer key) in text meant for people.
    fn scrub(&self, text: &str) -> String {
        let mut text = text.to_owned();
        if let Some(secret) = &self.secret {
            text = text.replace(secret.expose(), "[redacted]");
        }
        text.split(' ')
            .map(|word| {
                if word.starts_with("sk-") && word.len() > 12 {
                    "[redacted]"
                } else {
                    word
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The provider's error message from an error body, short and scrubbed.
    fn provider_message(&self, body: &str) -> String {
        let parsed: Option<Value> = serde_json::from_str(body).ok();
        let message = parsed
            .as_ref()
            .and_then(|v| {
                v.pointer("/error/message")
                    .or_else(|| v.pointer("/message"))
                    .or_else(|| v.pointer("/error"))
                    .and_then(Value::as_str)
            })
            .unwrap_or(body);
        let mut short: String = message.chars().take(300).collect();
        if message.chars().count() > 300 {
            short.push('…');
        }
        self.scrub(short.trim())
    }

    /// What a request that got no response says: a timeout or an unreachable provider (both
    /// worth a retry).
    fn send_failure(&self, err: &reqwest::Error) -> ProviderError {
        let what = if err.is_timeout() {
            "no answer within the time limit".to_owned()
        } else if err.is_connect() {
            "cannot reach the provider (connection failed)".to_owned()
        } else {
            "cannot reach the provider (request failed)".to_owned()
        };
        ProviderError::transient(format!("{}: {what}", self.provider))
    }

    /// POSTs `body` as JSON with `headers`, retrying what is worth retrying (and telling
    /// `on_retry` before each retry, with the hint the wait follows); the response body as JSON.
    /// `body_hint` reads a wait the provider asks for in an error body.
    pub async fn post(
        &self,
        url: &str,
        headers: &[(&str, String)],
        body: &Value,
        on_retry: RetryObserver<'_>,
        body_hint: BodyHint<'_>,
    ) -> Result<Value, ProviderError> {
        self.exchange(url, headers, body, (on_retry, body_hint), None)
            .await
    }

    /// [`Engine::post`] for a streaming request: a response of server-sent events is folded by
    /// a fresh fold from `stream` (each attempt starts again), telling `on_delta` what each
    /// event adds; a plain JSON response is read as [`Engine::post`] reads it. A stream that
    /// breaks off is retried as a whole response, under the same rules.
    pub async fn post_stream(
        &self,
        url: &str,
        headers: &[(&str, String)],
        body: &Value,
        (on_retry, body_hint): (RetryObserver<'_>, BodyHint<'_>),
        stream: (NewFold<'_>, DeltaObserver<'_>),
    ) -> Result<Value, ProviderError> {
        self.exchange(url, headers, body, (on_retry, body_hint), Some(stream))
            .await
    }

    async fn exchange(
        &self,
        url: &str,
        headers: &[(&str, String)],
        body: &Value,
        (on_retry, body_hint): (RetryObserver<'_>, BodyHint<'_>),
        stream: Option<(NewFold<'_>, DeltaObserver<'_>)>,
    ) -> Result<Value, ProviderError> {
        let mut retries = 0;
        loop {
            let (error, hint) = match self.attempt(url, headers, body, body_hint, stream).await {
                Ok(body) => return Ok(body),
                Err(failure) => failure,
            };
            if error.kind != ProviderErrorKind::Transient
                || retries >= self.settings.retry.max_retries
            {
                let mut error = error;
                if retries > 0 {
                    error.message = format!("{} (after {retries} retries)", error.message);
                }
                return Err(error);
            }
            let wait =
                self.settings
                    .retry
                    .delay(retries, hint.as_ref().map(|h| h.wait), jitter_seed());
            let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
            tracing::warn!(provider = %self.provider, retry = retries + 1, wait_ms, error = %error.message, "retrying a provider request");
            on_retry(RetryNotice {
                retry: retries + 1,
                wait_ms,
                spent: error.spent,
                reason: error.message,
                hint: hint.map(|h| {
                    if h.wait > self.settings.retry.max_delay {
                        format!("{} (capped)", h.source)
                    } else {
                        h.source
                    }
                }),
            });
            tokio::time::sleep(wait).await;
            retries += 1;
        }
    }

    /// One request and its response: the body as JSON, or the failure and any wait the provider
    /// asked for. (A failure is returned once per request made over the network, so its size
    /// — a usage with the parts priced apart — is not worth a box.)
    #[allow(clippy::result_large_err)]
    async fn attempt(
        &self,
        url: &str,
        headers: &[(&str, String)],
        body: &Value,
        body_hint: BodyHint<'_>,
        stream: Option<(NewFold<'_>, DeltaObserver<'_>)>,
    ) -> Result<Value, (ProviderError, Option<WaitHint>)> {
        // A response read whole has the request timeout in all; a stream, between its pieces.
        let timeout = match stream {
            Some(_) => MAX_STREAM_DURATION,
            None => self.settings.request_timeout,
        };
        let mut request = self.client.post(url).json(body).timeout(timeout);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        // The request's own span (`chat`), when spans are exported.
        if let Some(traceparent) = nrllm_core::spans::outbound_traceparent() {
            request = request.header("traceparent", traceparent);
        }
        let response = request
            .send()
            .await
            .map_err(|err| (self.send_failure(&err), None))?;
        let status = response.status();
        let header_hint = retry_after(response.headers(), SystemTime::now());
        if let (true, Some((fold, on_delta))) = (status.is_success(), stream) {
            if let Some(fold) = fold().filter(|_| is_event_stream(response.headers())) {
                let folded = read_events(response, fold, on_delta, &self.provider).await;
                return folded
                    .map_err(|err| (self.scrubbed(err), None))
                    .and_then(|body| self.success(body.to_string()).map_err(|err| (err, None)));
            }
        }
        match response.text().await {
            Ok(text) if status.is_success() => self.success(text).map_err(|err| (err, None)),
            Ok(text) => {
                let hint = header_hint.or_else(|| {
                    serde_json::from_str::<Value>(&text)
                        .ok()
                        .and_then(|json| body_hint(&json))
                });
                Err((self.status_error(status.as_u16(), &text), hint))
            }
            Err(err) => Err((self.broke_off(&err), None)),
        }
    }

    /// A response whose body stopped before its end (worth a retry).
    fn broke_off(&self, err: &reqwest::Error) -> ProviderError {
        ProviderError::transient(format!(
            "{}: the response broke off ({})",
            self.provider,
            self.scrub(&err.to_string())
        ))
    }

    /// `err` with the key scrubbed from its message.
    fn scrubbed(&self, mut err: ProviderError) -> ProviderError {
        err.message = self.scrub(&err.message);
        err
    }

    /// A successful response's body (or a stream's, folded) as JSON. It becomes a step's raw
    /// payload: a key echoed back must not.
    fn success(&self, text: String) -> Result<Value, ProviderError> {
        let text = match &self.secret {
            Some(secret) if text.contains(secret.expose()) => {
                text.replace(secret.expose(), "[redacted]")
            }
            _ => text,
        };
        serde_json::from_str::<Value>(&text).map_err(|_| {
            ProviderError::permanent(format!("{}: the response is not valid JSON", self.provider))
        })
    }

    fn status_error(&self, status: u16, body: &str) -> ProviderError {
        let message = self.provider_message(body);
        let provider = &self.provider;
        // Gemini answers a bad key with 400 and the reason API_KEY_INVALID.
        let key_refused =
            matches!(status, 401 | 403) || (status == 400 && body.contains("API_KEY_INVALID"));
        let lowercase = message.to_lowercase();
        let too_long = ["context length", "too many tokens", "input token count"]
            .iter()
            .any(|phrase| lowercase.contains(phrase));
        match status {
            429 => ProviderError::transient(format!("{provider}: rate limited (HTTP 429): {message}")),
            500..=599 => ProviderError::transient(format!("{provider}: the provider failed (HTTP {status}): {message}")),
            _ if key_refused => ProviderError::permanent(format!(
                "{provider}: the API key was refused (HTTP {status}): {message}"
            )),
            _ if too_long => ProviderError::new(
                ProviderErrorKind::ContextLength,
                format!("{provider}: the conversation is too long for the model (HTTP {status}): {message}"),
            ),
            _ => ProviderError::permanent(format!("{provider}: the request was refused (HTTP {status}): {message}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_honours_hints_and_is_capped() {
        let policy = RetryPolicy {
            max_retries: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
        };
        // Seed 200 spreads by nothing, 0 to 80 %, 400 to 120 %.
        assert_eq!(policy.delay(0, None, 200), Duration::from_millis(100));
        assert_eq!(policy.delay(2, None, 200), Duration::from_millis(400));
        assert_eq!(policy.delay(2, None, 0), Duration::from_millis(320));
        assert_eq!(policy.delay(2, None, 400), Duration::from_millis(480));
        assert_eq!(policy.delay(10, None, 400), Duration::from_secs(2));
        assert_eq!(
            policy.delay(0, Some(Duration::from_secs(1)), 9),
            Duration::from_secs(1)
        );
        assert_eq!(
            policy.delay(0, Some(Duration::from_secs(90)), 0),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn retry_after_is_read_in_seconds_and_as_an_http_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_020_889);
        let header = |value: &str| {
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(reqwest::header::RETRY_AFTER, value.parse().unwrap());
            headers
        };
        let seconds = retry_after(&header("2"), now).unwrap();
        assert_eq!(seconds.wait, Duration::from_secs(2));
        assert_eq!(seconds.source, "Retry-After: 2");
        assert_eq!(
            retry_after(&header("0.5"), now).unwrap().wait,
            Duration::from_millis(500)
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(
            retry_after(&header(&date), now).unwrap().wait,
            Duration::from_secs(7)
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(
            retry_after(&header(&past), now).unwrap().wait,
            Duration::ZERO
        );
        assert_eq!(retry_after(&header("soon"), now), None);
        assert_eq!(retry_after(&header("-3"), now), None);
        assert_eq!(retry_after(&reqwest::header::HeaderMap::new(), now), None);
    }

    #[test]
    fn keys_never_reach_messages() {
        let engine = Engine::new(
            "openai",
            HttpSettings::default(),
            Some("sk-live-123456789abc".into()),
        )
        .unwrap();
        assert!(!format!("{engine:?}").contains("sk-live-123456789abc"));
        let message = engine.provider_message(
            r#"{"error":{"message":"Incorrect API key provided: sk-live-123456789abc."}}"#,
        );
        assert_eq!(message, "Incorrect API key provided: [redacted].");
        assert_eq!(
            engine.scrub("token sk-other-key-0987654321 here"),
            "token [redacted] here"
        );
        let long = engine.provider_message(&"x".repeat(1000));
        assert_eq!(long.chars().count(), 301);
    }
}
