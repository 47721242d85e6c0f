//! The Anthropic Messages adapter streaming, against a local server that writes the real event
//! sequence (`message_start`, content blocks with `text_delta`, `input_json_delta`,
//! `thinking_delta` and `signature_delta`, `message_delta`, `message_stop`, with `ping`s between)
//! cut into hostile pieces: the assembled response is the one the non-streaming path reads from
//! the same exchange, and an `error` event mid-stream is retried as a whole response.

mod mock_http;

use std::sync::Mutex;

use mock_http::{config, journaled, pieces, MockServer, Reply};
use nrllm_core::provider::{
    ignore_deltas, ignore_retries, ChatRequest, Delta, FinishReason, ModelOptions, Provider,
    ProviderErrorKind, RetryNotice, Usage,
};
use nrllm_core::transcript::Message;
use nrllm_providers::anthropic::{Anthropic, AnthropicProvider};
use serde_json::{json, Value};

fn provider(server: &MockServer, retries: u32) -> AnthropicProvider {
    AnthropicProvider::new(
        config(server, ("anthropic", "/v1", "claude-test"), retries),
        Anthropic,
    )
    .unwrap()
}

fn hello() -> ChatRequest {
    ChatRequest {
        messages: vec![
            Message::system("Be brief."),
            Message::user("Rename the page"),
        ],
        tools: Vec::new(),
        tool_choice: Default::default(),
        options: ModelOptions::default(),
    }
}

/// Server-sent events as Anthropic writes them: an `event:` line naming the type, then its data.
fn stream(events: &[Value]) -> String {
    events
        .iter()
        .map(|event| {
            let name = event["type"].as_str().unwrap();
            format!("event: {name}\ndata: {event}\n\n")
        })
        .collect()
}

fn message_start(input_tokens: u64) -> Value {
    json!({"type": "message_start", "message": {"id": "msg_9", "type": "message", "role": "assistant",
        "model": "claude-test", "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1}}})
}

fn delta(index: u64, delta: Value) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": delta})
}

fn ends(stop_reason: &str, output_tokens: u64) -> [Value; 2] {
    [
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": output_tokens}}),
        json!({"type": "message_stop"}),
    ]
}

#[tokio::test]
async fn thinking_text_and_a_tool_call_stream_and_assemble_into_the_message_read_whole() {
    let mut events = vec![
        message_start(40),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": "The user wants "}),
        ),
        json!({"type": "ping"}),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": "a rename."}),
        ),
        delta(
            0,
            json!({"type": "signature_delta", "signature": "EqQBCgIYAh=="}),
        ),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        delta(
            1,
            json!({"type": "text_delta", "text": "Je renomme « Accueil » "}),
        ),
        delta(1, json!({"type": "text_delta", "text": "— 日本語も 🎉"})),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "content_block_start", "index": 2, "content_block":
            {"type": "tool_use", "id": "toolu_01", "name": "update_page", "input": {}}}),
        delta(2, json!({"type": "input_json_delta", "partial_json": ""})),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "{\"slug\": \"ho"}),
        ),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "me\", \"title\": \"Café\"}"}),
        ),
        json!({"type": "content_block_stop", "index": 2}),
    ];
    // Cache reads and writes come with message_start, beside input_tokens.
    events[0]["message"]["usage"]["cache_read_input_tokens"] = json!(300);
    events[0]["message"]["usage"]["cache_creation_input_tokens"] = json!(20);
    events.extend(ends("tool_use", 52));
    let text = "Je renomme « Accueil » — 日本語も 🎉";
    let whole = json!({"id": "msg_9", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [
            {"type": "thinking", "thinking": "The user wants a rename.", "signature": "EqQBCgIYAh=="},
            {"type": "text", "text": text},
            {"type": "tool_use", "id": "toolu_01", "name": "update_page", "input": {"slug": "home", "title": "Café"}}],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 40, "output_tokens": 52, "cache_read_input_tokens": 300,
            "cache_creation_input_tokens": 20}});
    let body = stream(&events);
    assert!((1..body.len() / 5).any(|k| !body.is_char_boundary(k * 5)));
    let server = MockServer::start(vec![
        Reply::Stream(pieces(&body, 5)),
        Reply::ok(whole.clone()),
    ])
    .await;
    let provider = provider(&server, 0);
    let deltas = Mutex::new(Vec::new());
    let streamed = provider
        .stream(&hello(), &ignore_retries, &|delta| {
            deltas.lock().unwrap().push(delta)
        })
        .await
        .unwrap();
    let read_whole = provider.complete(&hello(), &ignore_retries).await.unwrap();
    assert_eq!(journaled(&streamed), journaled(&read_whole));
    assert_eq!(streamed.content.as_deref(), Some(text));
    assert_eq!(streamed.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        (
            streamed.usage.prompt_tokens,
            streamed.usage.cached_input_tokens,
            streamed.usage.cache_write_tokens,
            streamed.usage.completion_tokens
        ),
        (360, 300, 20, 52)
    );
    assert_eq!(streamed.usage, read_whole.usage);
    assert_eq!(
        streamed.tool_calls[0].parsed_arguments().unwrap(),
        json!({"slug": "home", "title": "Café"})
    );
    // The raw view holds the assembled message, its signature included; the thinking text was
    // shown live and is not kept (either way).
    let mut kept = whole.clone();
    kept["content"][0]["thinking"] = json!("[24 characters of thinking: shown live, not kept]");
    assert_eq!(streamed.raw.as_ref(), Some(&kept));
    assert_eq!(read_whole.raw.as_ref(), Some(&kept));
    let deltas = deltas.into_inner().unwrap();
    let thinking: String = deltas
        .iter()
        .filter_map(|d| match d {
            Delta::Thinking { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(thinking, "The user wants a rename.");
    let arguments: String = deltas
        .iter()
        .filter_map(|d| match d {
            Delta::ToolCall {
                index: 0,
                arguments,
                ..
            } => Some(arguments.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(arguments, "{\"slug\": \"home\", \"title\": \"Café\"}");
    assert!(deltas.iter().any(|d| matches!(d,
        Delta::ToolCall { index: 0, id: Some(id), name: Some(name), .. } if id == "toolu_01" && name == "update_page")));
    let requests = server.requests();
    assert_eq!(requests[0].body["stream"], true);
    assert_eq!(requests[1].body.get("stream"), None);
}

#[tokio::test]
async fn an_overloaded_error_mid_stream_is_retried_and_a_refusal_is_not() {
    let mut broken = vec![
        message_start(10),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        delta(0, json!({"type": "text_delta", "text": "Half"})),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ];
    let mut good = vec![
        message_start(10),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        delta(0, json!({"type": "text_delta", "text": "Whole."})),
        json!({"type": "content_block_stop", "index": 0}),
    ];
    good.extend(ends("end_turn", 3));
    let server = MockServer::start(vec![
        Reply::Stream(pieces(&stream(&broken), 9)),
        Reply::Stream(pieces(&stream(&good), 9)),
    ])
    .await;
    let retries = Mutex::new(Vec::<RetryNotice>::new());
    let response = provider(&server, 2)
        .stream(
            &hello(),
            &|n| retries.lock().unwrap().push(n),
            &ignore_deltas,
        )
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("Whole."));
    let retries = retries.into_inner().unwrap();
    assert_eq!(retries.len(), 1);
    assert!(
        retries[0].reason.contains("overloaded_error"),
        "{}",
        retries[0].reason
    );
    assert_eq!(
        retries[0].spent,
        Some(Usage::tokens(10, 1)),
        "the broken attempt's usage, as message_start reported it, goes with the retry"
    );
    assert_eq!(
        response.usage,
        Usage::tokens(10, 3),
        "the response's own usage"
    );

    broken[3] =
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}});
    let server = MockServer::start(vec![Reply::Stream(pieces(&stream(&broken), 9))]).await;
    let err = provider(&server, 2)
        .stream(&hello(), &ignore_retries, &ignore_deltas)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Permanent);
    assert_eq!(err.spent, Some(Usage::tokens(10, 1)));
    assert_eq!(server.requests().len(), 1, "a refusal is not retried");
}

#[tokio::test]
async fn a_stream_without_message_stop_broke_off() {
    let events = [
        message_start(10),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        delta(0, json!({"type": "text_delta", "text": "Cut"})),
    ];
    let server = MockServer::start(vec![Reply::Stream(pieces(&stream(&events), 64))]).await;
    let err = provider(&server, 0)
        .stream(&hello(), &ignore_retries, &ignore_deltas)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient);
    assert!(err
        .message
        .contains("ended before the response was complete"));
}
