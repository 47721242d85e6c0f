//! The Gemini adapter streaming (`streamGenerateContent?alt=sse`), against a local server that
//! writes each chunk as Gemini does (a whole `GenerateContentResponse` per event, text in
//! fragments, a function call whole with its `thoughtSignature`, usage with the finish reason) cut
//! into hostile pieces: the assembled response is the one the non-streaming path reads from the
//! same exchange, signatures kept; an error chunk is retried, a stream without a finish reason
//! broke off.

mod mock_http;

use std::sync::Mutex;

use mock_http::{config, events, journaled, pieces, MockServer, Reply};
use nrllm_core::provider::{
    ignore_deltas, ignore_retries, ChatRequest, ChatResponse, Delta, ModelOptions, Provider,
    ProviderErrorKind, RetryNotice, Usage,
};
use nrllm_core::transcript::{Message, ToolCall};
use nrllm_providers::gemini::{Gemini, GeminiProvider};
use serde_json::{json, Value};

fn provider(server: &MockServer, retries: u32) -> GeminiProvider {
    GeminiProvider::new(
        config(server, ("gemini", "/v1beta", "gemini-test"), retries),
        Gemini,
    )
    .unwrap()
}

fn hello() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::user("Rename the home page")],
        tools: Vec::new(),
        tool_choice: Default::default(),
        options: ModelOptions::default(),
    }
}

fn chunk(parts: Value, finish: Option<&str>, usage: Option<(u64, u64)>) -> String {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(finish) = finish {
        candidate["finishReason"] = json!(finish);
    }
    let mut chunk =
        json!({"candidates": [candidate], "modelVersion": "gemini-test", "responseId": "r-1"});
    if let Some((prompt, candidates)) = usage {
        chunk["usageMetadata"] = json!({"promptTokenCount": prompt, "candidatesTokenCount": candidates,
            "thoughtsTokenCount": 4, "totalTokenCount": prompt + candidates + 4});
    }
    chunk.to_string()
}

fn call_ids_aside(mut response: ChatResponse) -> (ChatResponse, Vec<String>) {
    let ids = response.tool_calls.iter().map(|c| c.id.clone()).collect();
    for call in &mut response.tool_calls {
        call.id = String::new();
    }
    (response, ids)
}

#[tokio::test]
async fn text_thoughts_and_a_signed_call_assemble_into_the_response_read_whole() {
    let data = [
        chunk(
            json!([{"text": "Thinking about ", "thought": true}]),
            None,
            None,
        ),
        chunk(json!([{"text": "the slug.", "thought": true}]), None, None),
        chunk(json!([{"text": "Je renomme « Accueil » "}]), None, None),
        chunk(json!([{"text": "— 日本語も 🎉"}]), None, None),
        chunk(
            json!([{"functionCall": {"name": "update_page", "args": {"slug": "home", "title": "Café"}},
                "thoughtSignature": "c2lnbmF0dXJl"}]),
            Some("STOP"),
            Some((21, 13)),
        ),
    ];
    let body = events(data.iter().map(String::as_str));
    assert!((1..body.len() / 6).any(|k| !body.is_char_boundary(k * 6)));
    let whole = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "Thinking about the slug.", "thought": true},
            {"text": "Je renomme « Accueil » — 日本語も 🎉"},
            {"functionCall": {"name": "update_page", "args": {"slug": "home", "title": "Café"}},
                "thoughtSignature": "c2lnbmF0dXJl"}]},
            "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 21, "candidatesTokenCount": 13, "thoughtsTokenCount": 4,
            "totalTokenCount": 38},
        "modelVersion": "gemini-test", "responseId": "r-1"});
    let server = MockServer::start(vec![
        Reply::Stream(pieces(&body, 6)),
        Reply::ok(whole.clone()),
    ])
    .await;
    let provider = provider(&server, 0);
    let deltas = Mutex::new(Vec::new());
    let streamed = provider
        .stream(&hello(), &ignore_retries, &|d| {
            deltas.lock().unwrap().push(d)
        })
        .await
        .unwrap();
    let read_whole = provider.complete(&hello(), &ignore_retries).await.unwrap();
    // Gemini sends no call ids: each reading makes its own.
    let (streamed_journaled, streamed_ids) = call_ids_aside(journaled(&streamed));
    let (whole_journaled, _) = call_ids_aside(journaled(&read_whole));
    assert_eq!(streamed_journaled, whole_journaled);
    assert_eq!(streamed_ids.len(), 1);
    let call: &ToolCall = &streamed.tool_calls[0];
    assert_eq!(
        call.signature.as_deref(),
        Some("c2lnbmF0dXJl"),
        "the signature is kept"
    );
    assert_eq!(
        (
            streamed.usage.completion_tokens,
            streamed.usage.reasoning_tokens
        ),
        (17, 4),
        "thinking tokens billed as output, and counted apart"
    );
    assert_eq!(streamed.usage, read_whole.usage);
    // The raw view holds the assembled response, signatures included; the thought text was
    // shown live and is not kept (either way).
    let mut kept = whole.clone();
    kept["candidates"][0]["content"]["parts"][0]["text"] =
        json!("[24 characters of thinking: shown live, not kept]");
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
    assert_eq!(thinking, "Thinking about the slug.");
    assert!(deltas.iter().any(|d| matches!(d,
        Delta::ToolCall { index: 0, name: Some(name), arguments, .. }
            if name == "update_page" && serde_json::from_str::<Value>(arguments).unwrap()["title"] == "Café")));
    let requests = server.requests();
    assert_eq!(
        requests[0].path,
        "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
    );
    assert_eq!(
        requests[1].path,
        "/v1beta/models/gemini-test:generateContent"
    );
    assert_eq!(
        requests[0].body, requests[1].body,
        "the same request body either way"
    );
}

#[tokio::test]
async fn an_error_chunk_is_retried_and_a_stream_without_a_finish_reason_broke_off() {
    let error = events(
        [
            chunk(json!([{"text": "Half"}]), None, None),
            json!({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}})
                .to_string(),
        ]
        .iter()
        .map(String::as_str),
    );
    // Gemini may report usage so far on any chunk: a stream cut after one is counted by it.
    let cut = events([chunk(json!([{"text": "Cut"}]), None, Some((5, 1))).as_str()]);
    let good = events([chunk(json!([{"text": "Whole."}]), Some("STOP"), Some((3, 2))).as_str()]);
    let server = MockServer::start(vec![
        Reply::Stream(pieces(&error, 11)),
        Reply::Stream(pieces(&cut, 11)),
        Reply::Stream(pieces(&good, 11)),
    ])
    .await;
    let retries = Mutex::new(Vec::<RetryNotice>::new());
    let response = provider(&server, 3)
        .stream(
            &hello(),
            &|n| retries.lock().unwrap().push(n),
            &ignore_deltas,
        )
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("Whole."));
    let retries = retries.into_inner().unwrap();
    assert_eq!(retries.len(), 2);
    assert!(
        retries[0].reason.contains("The model is overloaded."),
        "{}",
        retries[0].reason
    );
    assert!(retries[1]
        .reason
        .contains("ended before the response was complete"));
    assert_eq!(retries[0].spent, Some(Usage::unreported()));
    assert_eq!(
        retries[1].spent,
        Some(Usage {
            reasoning_tokens: 4,
            ..Usage::tokens(5, 1 + 4)
        }),
        "thinking counts as output, and apart"
    );

    let refused = events(
        [
            json!({"error": {"code": 400, "message": "Bad schema", "status": "INVALID_ARGUMENT"}})
                .to_string(),
        ]
        .iter()
        .map(String::as_str),
    );
    let server = MockServer::start(vec![Reply::Stream(pieces(&refused, 11))]).await;
    let err = provider(&server, 3)
        .stream(&hello(), &ignore_retries, &ignore_deltas)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Permanent);
}
