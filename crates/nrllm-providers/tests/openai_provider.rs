//! The OpenAI-compatible adapter on the wire, against a local server: the exact JSON we send and
//! what only this format has (ids left out by local servers, arguments as a string). The cases
//! every format shares — decisions, failures, retries — are in `provider_formats.rs`. Nothing
//! leaves 127.0.0.1 (the server is wiremock).

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
use nrllm_providers::http::{HttpSettings, RetryPolicy};
use nrllm_providers::openai::{OpenAi, OpenAiProvider};
use nrllm_providers::ProviderConfig;
use serde_json::{json, Value};
use wire::{Reply, WireServer};

fn provider(server: &WireServer, retries: u32, timeout: Duration) -> OpenAiProvider {
    OpenAiProvider::new(
        ProviderConfig {
            name: "openai".into(),
            base_url: format!("{}/v1", server.base_url),
            model: "gpt-test".into(),
            api_key: Some("sk-test-secret-key-123".into()),
            http: HttpSettings {
                connect_timeout: Duration::from_secs(2),
                request_timeout: timeout,
                retry: RetryPolicy {
                    max_retries: retries,
                    base_delay: Duration::from_millis(10),
                    max_delay: Duration::from_millis(50),
                },
            },
        },
        OpenAi {
            max_completion_tokens: true,
        },
    )
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
        tool_choice: Default::default(),
        options: ModelOptions {
            temperature: Some(0.2),
            max_tokens: Some(256),
            ..ModelOptions::default()
        },
    }
}

#[tokio::test]
async fn a_plain_answer_sends_the_exact_request_and_reads_usage() {
    let server = WireServer::start(vec![Reply::ok(answer("Hello."))]).await;
    let response = provider(&server, 0, Duration::from_secs(5))
        .complete(
            &request(vec![Message::system("Be brief."), Message::user("Hi")]),
            &ignore_retries,
        )
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("Hello."));
    assert_eq!(response.model.as_deref(), Some("gpt-test"));
    assert_eq!(
        (
            response.usage.prompt_tokens,
            response.usage.completion_tokens
        ),
        (12, 5)
    );
    assert!(response.tool_calls.is_empty());
    let sent = &server.requests().await[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(
        sent.header("authorization"),
        Some("Bearer sk-test-secret-key-123")
    );
    assert_eq!(
        sent.body,
        json!({"model": "gpt-test", "messages": [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"}], "temperature": 0.2, "max_completion_tokens": 256})
    );
}

#[tokio::test]
async fn tool_calls_come_back_parallel_with_missing_ids_synthesised() {
    let server = WireServer::start(vec![Reply::ok(calls(json!([
        {"id": "call_a", "type": "function", "function": {"name": "read_note", "arguments": "{\"text\":\"a\"}"}},
        {"type": "function", "function": {"name": "write_note", "arguments": {"text": "b"}}}
    ])))])
    .await;
    let registry = probe_registry(&Probe::default());
    let mut chat = request(vec![Message::user("do both")]);
    chat.tools = registry.gate(&Default::default(), false).specs();
    let response = provider(&server, 0, Duration::from_secs(5))
        .complete(&chat, &ignore_retries)
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
    let sent = &server.requests().await[0].body;
    assert_eq!(sent["tool_choice"], "auto");
    assert_eq!(sent["tools"][0]["type"], "function");
    assert_eq!(sent["tools"][0]["function"]["name"], "read_note");
    assert_eq!(
        sent["tools"][0]["function"]["parameters"]["required"],
        json!(["text"])
    );
}

#[tokio::test]
async fn the_request_after_a_decision_is_the_recorded_exchange() {
    let server = WireServer::start(vec![
        Reply::ok(calls(json!([
            {"id": "r1", "type": "function", "function": {"name": "read_note", "arguments": "{\"text\":\"x\"}"}},
            {"id": "w1", "type": "function", "function": {"name": "write_note", "arguments": "{\"text\":\"y\"}"}}
        ]))),
        Reply::ok(answer("Done.")),
    ])
    .await;
    let tool_loop = ToolLoop::new(
        Arc::new(provider(&server, 0, Duration::from_secs(5))),
        Arc::new(probe_registry(&Probe::default())),
    );
    let ctx = RunContext::default();
    let input = RunInput {
        messages: vec![Message::user("read and write")],
        ..RunInput::default()
    };
    let LoopOutcome::Suspended(state) = tool_loop.run(input, &ctx, &NullSink).await.unwrap() else {
        panic!("the write suspends the run")
    };
    let decision = Decision::PerCall {
        calls: vec![
            CallDecision {
                call_id: "r1".into(),
                choice: Choice::Approve,
            },
            CallDecision {
                call_id: "w1".into(),
                choice: Choice::Deny { reason: None },
            },
        ],
    };
    tool_loop
        .resume(&state, &decision, &ctx, &NullSink)
        .await
        .unwrap();
    let sent = &server.requests().await[1].body;
    assert_eq!(
        sent["messages"],
        json!([
            {"role": "user", "content": "read and write"},
            {"role": "assistant", "tool_calls": [
                {"id": "r1", "type": "function", "function": {"name": "read_note", "arguments": "{\"text\":\"x\"}"}},
                {"id": "w1", "type": "function", "function": {"name": "write_note", "arguments": "{\"text\":\"y\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "r1", "content": "note: x"},
            {"role": "tool", "tool_call_id": "w1", "content": "denied by the operator (no reason given)"}
        ])
    );
    assert_eq!(sent["tool_choice"], "auto");
    assert_eq!(sent["max_completion_tokens"], Value::Null);
}

#[tokio::test]
async fn tool_arguments_that_are_not_json_go_back_to_the_model_as_an_error() {
    let server = WireServer::start(vec![
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
    let sent = &server.requests().await[1].body["messages"];
    let result = sent[2]["content"].as_str().unwrap();
    assert!(
        result.starts_with("Error: invalid arguments: arguments: not valid JSON"),
        "{result}"
    );
    assert!(probe.calls().is_empty());
}
