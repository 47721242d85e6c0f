//! The OpenAI-compatible adapter on the wire, against a local server: the exact JSON we send,
//! what we read back, the transcript after suspend → approve/deny → resume, and every failure
//! an operator can meet (400, 401, 429 with Retry-After, 500 then success, timeout, invalid JSON,
//! a truncated body). Nothing leaves 127.0.0.1.

mod mock_http;

use std::sync::Arc;
use std::time::Duration;

use mock_http::{MockServer, Reply};
use nrllm_runtime::events::NullSink;
use nrllm_runtime::provider::{ChatRequest, ModelOptions, Provider, ProviderErrorKind};
use nrllm_runtime::providers::http::{HttpSettings, RetryPolicy};
use nrllm_runtime::providers::openai::{OpenAiConfig, OpenAiProvider};
use nrllm_runtime::testing::{probe_registry, Probe};
use nrllm_runtime::transcript::{validate, Message, Tail};
use nrllm_runtime::{
    CallDecision, Choice, Decision, LoopOutcome, RunContext, RunInput, ToolLoop, ToolLoopService,
};
use serde_json::{json, Value};

fn provider(server: &MockServer, retries: u32, timeout: Duration) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig {
        name: "openai".into(),
        base_url: format!("{}/v1", server.base_url),
        model: "gpt-test".into(),
        api_key: Some("sk-test-secret-key-123".into()),
        max_completion_tokens: true,
        http: HttpSettings {
            connect_timeout: Duration::from_secs(2),
            request_timeout: timeout,
            retry: RetryPolicy {
                max_retries: retries,
                base_delay: Duration::from_millis(10),
                max_delay: Duration::from_millis(50),
            },
        },
    })
    .unwrap()
}

fn answer(content: &str) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-test",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}})
}

fn calls(calls: Value) -> Value {
    json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": calls},
        "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 20, "completion_tokens": 9}})
}

fn request(messages: Vec<Message>) -> ChatRequest {
    ChatRequest {
        messages,
        tools: Vec::new(),
        options: ModelOptions {
            temperature: Some(0.5),
            max_tokens: Some(256),
        },
    }
}

#[tokio::test]
async fn a_plain_answer_sends_the_exact_request_and_reads_usage() {
    let server = MockServer::start(vec![Reply::ok(answer("Hello."))]).await;
    let response = provider(&server, 0, Duration::from_secs(5))
        .complete(&request(vec![
            Message::system("Be brief."),
            Message::user("Hi"),
        ]))
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("Hello."));
    assert_eq!(
        (
            response.usage.prompt_tokens,
            response.usage.completion_tokens
        ),
        (12, 5)
    );
    assert!(response.tool_calls.is_empty());
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(
        sent.header("authorization"),
        Some("Bearer sk-test-secret-key-123")
    );
    assert_eq!(
        sent.body,
        json!({"model": "gpt-test", "messages": [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"}], "temperature": 0.5, "max_completion_tokens": 256})
    );
}

#[tokio::test]
async fn tool_calls_come_back_parallel_with_missing_ids_synthesised() {
    let server = MockServer::start(vec![Reply::ok(calls(json!([
        {"id": "call_a", "type": "function", "function": {"name": "read_note", "arguments": "{\"text\":\"a\"}"}},
        {"type": "function", "function": {"name": "write_note", "arguments": {"text": "b"}}}
    ])))])
    .await;
    let registry = probe_registry(&Probe::default());
    let mut chat = request(vec![Message::user("do both")]);
    chat.tools = registry.gate(&Default::default(), false).specs();
    let response = provider(&server, 0, Duration::from_secs(5))
        .complete(&chat)
        .await
        .unwrap();
    assert_eq!(response.tool_calls.len(), 2);
    assert_eq!(response.tool_calls[0].id, "call_a");
    assert!(
        response.tool_calls[1].id.starts_with("call_"),
        "{}",
        response.tool_calls[1].id
    );
    assert_ne!(response.tool_calls[1].id, "call_a");
    assert_eq!(response.tool_calls[1].arguments, "{\"text\":\"b\"}");
    let sent = &server.requests()[0].body;
    assert_eq!(sent["tool_choice"], "auto");
    assert_eq!(sent["tools"][0]["type"], "function");
    assert_eq!(sent["tools"][0]["function"]["name"], "read_note");
    assert_eq!(
        sent["tools"][0]["function"]["parameters"]["required"],
        json!(["text"])
    );
}

/// Runs suspend → decision → resume through the loop against the server, and returns what the
/// server received on the request after the decision.
async fn resume_transcript(decision: Decision) -> (Vec<Value>, Probe) {
    let server = MockServer::start(vec![
        Reply::ok(calls(json!([
            {"id": "r1", "type": "function", "function": {"name": "read_note", "arguments": "{\"text\":\"x\"}"}},
            {"id": "w1", "type": "function", "function": {"name": "write_note", "arguments": "{\"text\":\"y\"}"}}
        ]))),
        Reply::ok(answer("Done.")),
    ])
    .await;
    let probe = Probe::default();
    let tool_loop = ToolLoop::new(
        Arc::new(provider(&server, 0, Duration::from_secs(5))),
        Arc::new(probe_registry(&probe)),
    );
    let input = RunInput {
        messages: vec![Message::user("read and write")],
        ..RunInput::default()
    };
    let ctx = RunContext::default();
    let LoopOutcome::Suspended(state) = tool_loop.run(input, &ctx, &NullSink).await.unwrap() else {
        panic!("a write suspends the run")
    };
    let state = nrllm_runtime::SuspendedState::from_json(&state.to_json()).unwrap();
    let outcome = tool_loop
        .resume(&state, &decision, &ctx, &NullSink)
        .await
        .unwrap();
    assert!(matches!(outcome, LoopOutcome::Completed(_)));
    let sent = server.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .clone();
    // The wire transcript reads back as ours and keeps the rules: every call answered once, in order.
    let messages: Vec<Message> = serde_json::from_value(Value::Array(sent.clone())).unwrap();
    assert_eq!(validate(&messages, Tail::Complete), Ok(()));
    (sent, probe)
}

#[tokio::test]
async fn after_approval_every_tool_call_is_answered_once_with_matching_ids() {
    let (sent, probe) = resume_transcript(Decision::ApproveAll).await;
    let tool_ids: Vec<&str> = sent
        .iter()
        .filter_map(|m| m["tool_call_id"].as_str())
        .collect();
    assert_eq!(tool_ids, ["r1", "w1"]);
    assert_eq!(sent[1]["tool_calls"][1]["id"], "w1");
    assert_eq!(probe.count("write_note"), 1);
}

#[tokio::test]
async fn after_a_per_call_denial_the_refusal_answers_its_call() {
    let decision = Decision::PerCall {
        calls: vec![
            CallDecision {
                call_id: "r1".into(),
                choice: Choice::Approve,
            },
            CallDecision {
                call_id: "w1".into(),
                choice: Choice::Deny {
                    reason: Some("not now".into()),
                },
            },
        ],
    };
    let (sent, probe) = resume_transcript(decision).await;
    let denied = sent.iter().find(|m| m["tool_call_id"] == "w1").unwrap();
    assert_eq!(denied["content"], "denied by the operator: not now");
    assert_eq!(probe.count("write_note"), 0);
}

#[tokio::test]
async fn a_400_is_not_retried_and_carries_the_providers_message() {
    let server = MockServer::start(vec![Reply::status(
        400,
        r#"{"error":{"message":"Invalid schema for function 'x'","type":"invalid_request_error"}}"#,
    )])
    .await;
    let err = provider(&server, 3, Duration::from_secs(5))
        .complete(&request(vec![Message::user("Hi")]))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Permanent);
    assert_eq!(
        err.message,
        "openai: the request was refused (HTTP 400): Invalid schema for function 'x'"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_401_says_the_key_was_refused_without_showing_it() {
    let server = MockServer::start(vec![Reply::status(
        401,
        r#"{"error":{"message":"Incorrect API key provided: sk-test-secret-key-123."}}"#,
    )])
    .await;
    let err = provider(&server, 3, Duration::from_secs(5))
        .complete(&request(vec![Message::user("Hi")]))
        .await
        .unwrap_err();
    assert!(
        err.message
            .starts_with("openai: the API key was refused (HTTP 401)"),
        "{}",
        err.message
    );
    assert!(
        !err.message.contains("sk-test-secret-key-123"),
        "{}",
        err.message
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_429_with_retry_after_and_a_500_are_retried_until_success() {
    let server = MockServer::start(vec![
        Reply::Json(
            429,
            vec![("retry-after".into(), "0".into())],
            r#"{"error":{"message":"slow down"}}"#.into(),
        ),
        Reply::status(500, r#"{"error":{"message":"overloaded"}}"#),
        Reply::ok(answer("Finally.")),
    ])
    .await;
    let response = provider(&server, 3, Duration::from_secs(5))
        .complete(&request(vec![Message::user("Hi")]))
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("Finally."));
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn retries_stop_at_the_cap_with_a_transient_error() {
    let server = MockServer::start(vec![
        Reply::status(503, "upstream down"),
        Reply::status(503, "upstream down"),
        Reply::status(503, "upstream down"),
    ])
    .await;
    let err = provider(&server, 2, Duration::from_secs(5))
        .complete(&request(vec![Message::user("Hi")]))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient);
    assert_eq!(
        err.message,
        "openai: the provider failed (HTTP 503): upstream down (after 2 retries)"
    );
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_timeout_is_retried_and_then_reported() {
    let server = MockServer::start(vec![Reply::Hang, Reply::Hang]).await;
    let err = provider(&server, 1, Duration::from_millis(300))
        .complete(&request(vec![Message::user("Hi")]))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient);
    assert_eq!(
        err.message,
        "openai: no answer within the time limit (after 1 retries)"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn invalid_json_and_truncated_bodies_are_errors_not_panics() {
    let server = MockServer::start(vec![Reply::status(200, "<html>oops</html>")]).await;
    let err = provider(&server, 0, Duration::from_secs(5))
        .complete(&request(vec![Message::user("Hi")]))
        .await
        .unwrap_err();
    assert_eq!(err.message, "openai: the response is not valid JSON");

    let server = MockServer::start(vec![Reply::Truncated(r#"{"choices": [{"mess"#.into())]).await;
    let err = provider(&server, 0, Duration::from_secs(5))
        .complete(&request(vec![Message::user("Hi")]))
        .await
        .unwrap_err();
    assert!(err.message.starts_with("openai: "), "{}", err.message);

    let server = MockServer::start(vec![Reply::ok(json!({"unexpected": true}))]).await;
    let err = provider(&server, 0, Duration::from_secs(5))
        .complete(&request(vec![Message::user("Hi")]))
        .await
        .unwrap_err();
    assert_eq!(err.message, "openai: the response has no choices");
}

#[tokio::test]
async fn tool_arguments_that_are_not_json_go_back_to_the_model_as_an_error() {
    let server = MockServer::start(vec![
        Reply::ok(calls(json!([
            {"id": "c1", "type": "function", "function": {"name": "read_note", "arguments": "{\"text\": unquoted}"}}
        ]))),
        Reply::ok(answer("Sorry.")),
    ])
    .await;
    let probe = Probe::default();
    let tool_loop = ToolLoop::new(
        Arc::new(provider(&server, 0, Duration::from_secs(5))),
        Arc::new(probe_registry(&probe)),
    );
    let input = RunInput {
        messages: vec![Message::user("read")],
        ..RunInput::default()
    };
    let outcome = tool_loop
        .run(input, &RunContext::default(), &NullSink)
        .await
        .unwrap();
    assert!(matches!(outcome, LoopOutcome::Completed(_)));
    let sent = &server.requests()[1].body["messages"];
    let result = sent[2]["content"].as_str().unwrap();
    assert!(
        result.starts_with("Error: invalid arguments: arguments: not valid JSON"),
        "{result}"
    );
    assert!(probe.calls().is_empty());
}
