//! Retries honour every wait a provider asks for: `Retry-After` in seconds and as an HTTP date,
//! Gemini's `RetryInfo.retryDelay` in the error body, Anthropic's `retry-after` on 529 — each
//! capped by the policy, and each retry's step says which hint it followed. A local server
//! (wiremock) plays the provider; nothing leaves 127.0.0.1.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use nrllm_core::provider::{ChatRequest, ModelOptions, Provider, RetryNotice};
use nrllm_core::transcript::Message;
use nrllm_providers::anthropic::Anthropic;
use nrllm_providers::gemini::Gemini;
use nrllm_providers::http::{HttpSettings, RetryPolicy};
use nrllm_providers::openai::OpenAi;
use nrllm_providers::{HttpProvider, ProviderConfig, WireFormat};
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

fn provider<F: WireFormat>(server: &MockServer, format: F, cap: Duration) -> HttpProvider<F> {
    HttpProvider::new(
        ProviderConfig {
            name: "test".into(),
            base_url: format!("{}/v1", server.uri()),
            model: "m".into(),
            api_key: Some("key-123".into()),
            http: HttpSettings {
                connect_timeout: Duration::from_secs(2),
                request_timeout: Duration::from_secs(10),
                retry: RetryPolicy {
                    max_retries: 2,
                    base_delay: Duration::from_millis(10),
                    max_delay: cap,
                },
            },
        },
        format,
    )
    .unwrap()
}

fn hi() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::user("Hi")],
        tools: Vec::new(),
        tool_choice: Default::default(),
        options: ModelOptions::default(),
    }
}

/// Answers `first` once, then `then` for every later request.
async fn server_with(first: ResponseTemplate, then: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(first)
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(then)
        .mount(&server)
        .await;
    server
}

/// Completes `request`, returning the retries it announced and how long it took.
async fn complete(provider: &dyn Provider) -> (Vec<RetryNotice>, Duration) {
    let notices = Mutex::new(Vec::new());
    let started = Instant::now();
    let observer = |notice: RetryNotice| notices.lock().unwrap().push(notice);
    provider
        .complete(&hi(), &observer)
        .await
        .expect("the retry succeeds");
    (notices.into_inner().unwrap(), started.elapsed())
}

#[tokio::test]
async fn a_gemini_429_that_asks_for_2_s_in_its_body_is_retried_after_at_least_2_s() {
    let quota = json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
        "message": "Quota exceeded", "details": [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2s"}]}});
    let answer = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]},
        "finishReason": "STOP"}]});
    let server = server_with(
        ResponseTemplate::new(429).set_body_json(quota),
        ResponseTemplate::new(200).set_body_json(answer),
    )
    .await;
    let provider = provider(&server, Gemini, Duration::from_secs(60));
    let (notices, took) = complete(&provider).await;
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].wait_ms, 2000);
    assert_eq!(notices[0].hint.as_deref(), Some("RetryInfo.retryDelay 2s"));
    assert!(took >= Duration::from_secs(2), "retried after {took:?}");
}

#[tokio::test]
async fn an_http_date_retry_after_is_honoured() {
    let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(3));
    let answer = json!({"choices": [{"message": {"role": "assistant", "content": "ok"},
        "finish_reason": "stop"}]});
    let server = server_with(
        ResponseTemplate::new(503).insert_header("retry-after", date.as_str()),
        ResponseTemplate::new(200).set_body_json(answer),
    )
    .await;
    let provider = provider(&server, OpenAi::default(), Duration::from_secs(60));
    let (notices, took) = complete(&provider).await;
    assert_eq!(notices.len(), 1);
    // The date has whole seconds: the wait is what is left of them, at least 1 s.
    assert!(notices[0].wait_ms >= 1000, "{:?}", notices[0]);
    assert_eq!(
        notices[0].hint.as_deref(),
        Some(format!("Retry-After: {date}").as_str())
    );
    assert!(
        took >= Duration::from_millis(notices[0].wait_ms),
        "{took:?}"
    );
}

#[tokio::test]
async fn anthropic_overloaded_529_with_retry_after_waits_as_asked_within_the_cap() {
    let overloaded = json!({"type": "error", "error": {"type": "overloaded_error",
        "message": "Overloaded"}});
    let answer = json!({"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"});
    let server = server_with(
        ResponseTemplate::new(529)
            .insert_header("retry-after", "30")
            .set_body_json(overloaded),
        ResponseTemplate::new(200).set_body_json(answer),
    )
    .await;
    // The provider asks for 30 s; the policy caps every wait at 300 ms.
    let provider = provider(&server, Anthropic, Duration::from_millis(300));
    let (notices, _) = complete(&provider).await;
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].wait_ms, 300);
    assert_eq!(notices[0].hint.as_deref(), Some("Retry-After: 30 (capped)"));
    assert!(
        notices[0].reason.contains("HTTP 529"),
        "{}",
        notices[0].reason
    );
}
