//! The Anthropic Messages adapter on the wire, against a local server: the exact JSON we send
//! (system lifted, tool_use / tool_result blocks, merged results), what we read back, and the
//! transcript after suspend → per-call decision → resume.

mod wire;

use std::sync::Arc;
use std::time::Duration;

use nrllm_core::events::NullSink;
use nrllm_core::provider::{ignore_retries, ChatRequest, ModelOptions, Provider};
use nrllm_core::testing::{probe_registry, Probe};
use nrllm_core::transcript::Message;
use nrllm_core::{
    CallDecision, Choice, Decision, LoopOutcome, RunContext, RunInput, ToolLoop, ToolLoopService,
};
use nrllm_providers::anthropic::{Anthropic, AnthropicProvider};
use nrllm_providers::http::{HttpSettings, RetryPolicy};
use nrllm_providers::ProviderConfig;
use serde_json::{json, Value};
use wire::{Reply, WireServer};

fn provider(server: &WireServer) -> AnthropicProvider {
    AnthropicProvider::new(
        ProviderConfig {
            name: "anthropic".into(),
            base_url: format!("{}/v1", server.base_url),
            model: "claude-test".into(),
            api_key: Some("ak-test-secret-999".into()),
            http: HttpSettings {
                connect_timeout: Duration::from_secs(2),
                request_timeout: Duration::from_secs(5),
                retry: RetryPolicy {
                    max_retries: 1,
                    base_delay: Duration::from_millis(10),
                    max_delay: Duration::from_millis(50),
                },
            },
        },
        Anthropic,
    )
    .unwrap()
}

fn text(text: &str) -> Value {
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 30, "output_tokens": 7}})
}

#[tokio::test]
async fn a_plain_answer_lifts_the_system_prompt_and_maps_usage() {
    let server = WireServer::start(vec![Reply::ok(text("Hello."))]).await;
    let response = provider(&server)
        .complete(
            &ChatRequest {
                messages: vec![Message::system("Be brief."), Message::user("Hi")],
                tools: Vec::new(),
                tool_choice: Default::default(),
                options: ModelOptions {
                    temperature: Some(0.2),
                    max_tokens: None,
                    ..ModelOptions::default()
                },
            },
            &ignore_retries,
        )
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("Hello."));
    assert_eq!(response.model.as_deref(), Some("claude-test"));
    assert_eq!(
        (
            response.usage.prompt_tokens,
            response.usage.completion_tokens
        ),
        (30, 7)
    );
    let sent = &server.requests().await[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some("ak-test-secret-999"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    // Exactly as written (not 0.20000000298023224, an f32 widened).
    assert_eq!(
        sent.body,
        json!({"model": "claude-test", "max_tokens": 1024, "system": "Be brief.", "temperature": 0.2,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]})
    );
}

#[tokio::test]
async fn tool_use_blocks_round_trip_and_results_merge_after_a_decision() {
    let server = WireServer::start(vec![
        Reply::ok(json!({"content": [
            {"type": "text", "text": "Let me do both."},
            {"type": "tool_use", "id": "toolu_r", "name": "read_note", "input": {"text": "x"}},
            {"type": "tool_use", "id": "toolu_w", "name": "write_note", "input": {"text": "y"}}
        ], "stop_reason": "tool_use", "usage": {"input_tokens": 50, "output_tokens": 20}})),
        Reply::ok(text("Read it; the write was refused.")),
    ])
    .await;
    let probe = Probe::default();
    let tool_loop = ToolLoop::new(
        Arc::new(provider(&server)),
        Arc::new(probe_registry(&probe)),
    );
    let ctx = RunContext::default();
    let input = RunInput {
        system_prompt: Some("Careful.".into()),
        messages: vec![Message::user("read and write")],
        ..RunInput::default()
    };
    let LoopOutcome::Suspended(state) = tool_loop.run(input, &ctx, &NullSink).await.unwrap() else {
        panic!("the write suspends the run")
    };
    let first = &server.requests().await[0].body;
    assert_eq!(first["tools"][1]["name"], "write_note");
    assert_eq!(
        first["tools"][1]["input_schema"]["required"],
        json!(["text"])
    );
    let decision = Decision::PerCall {
        calls: vec![
            CallDecision {
                call_id: "toolu_r".into(),
                choice: Choice::Approve,
            },
            CallDecision {
                call_id: "toolu_w".into(),
                choice: Choice::Deny {
                    reason: Some("no".into()),
                },
            },
        ],
    };
    let outcome = tool_loop
        .resume(&state, &decision, &ctx, &NullSink)
        .await
        .unwrap();
    assert!(matches!(outcome, LoopOutcome::Completed(_)));
    let sent = &server.requests().await[1].body;
    assert_eq!(sent["system"], "Careful.");
    let messages = sent["messages"].as_array().unwrap();
    // user, assistant (text + two tool_use), one user message with both results in call order.
    assert_eq!(messages.len(), 3, "{sent}");
    assert_eq!(
        messages[1]["content"],
        json!([
            {"type": "text", "text": "Let me do both."},
            {"type": "tool_use", "id": "toolu_r", "name": "read_note", "input": {"text": "x"}},
            {"type": "tool_use", "id": "toolu_w", "name": "write_note", "input": {"text": "y"}}
        ])
    );
    assert_eq!(
        messages[2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_r", "content": "note: x", "is_error": false},
            {"type": "tool_result", "tool_use_id": "toolu_w", "content": "denied by the operator: no", "is_error": true}
        ]})
    );
    assert_eq!(probe.count("write_note"), 0);
    assert_eq!(probe.count("read_note"), 1);
}

#[tokio::test]
async fn an_overloaded_answer_is_retried_and_errors_never_show_the_key() {
    let server = WireServer::start(vec![
        Reply::status(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
        Reply::ok(text("ok")),
    ])
    .await;
    let chat = ChatRequest {
        messages: vec![Message::user("Hi")],
        tools: Vec::new(),
        tool_choice: Default::default(),
        options: ModelOptions::default(),
    };
    assert_eq!(
        provider(&server)
            .complete(&chat, &ignore_retries)
            .await
            .unwrap()
            .content
            .as_deref(),
        Some("ok")
    );
    assert_eq!(server.requests().await.len(), 2);

    let server = WireServer::start(vec![Reply::status(
        401,
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key ak-test-secret-999"}}"#,
    )])
    .await;
    let err = provider(&server)
        .complete(&chat, &ignore_retries)
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        "anthropic: the API key was refused (HTTP 401): invalid x-api-key [redacted]"
    );
}
