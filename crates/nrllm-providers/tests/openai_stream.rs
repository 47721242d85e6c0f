//! The OpenAI-compatible adapter streaming, against a local server that writes server-sent events
//! in hostile pieces (cut inside a line, a JSON string and a UTF-8 character): the assembled
//! response is the one the non-streaming path reads from the same exchange, the deltas add up to
//! it, and a stream that breaks (an error event, no `[DONE]`) is retried as a whole response.

mod mock_http;

use std::sync::Mutex;

use mock_http::{config, events, journaled, pieces, MockServer, Reply};
use nrllm_core::provider::{
    ignore_deltas, ignore_retries, ChatRequest, ChatResponse, Delta, FinishReason, ModelOptions,
    Provider, ProviderErrorKind, RetryNotice, Usage,
};
use nrllm_core::transcript::Message;
use nrllm_providers::openai::{OpenAi, OpenAiProvider};
use serde_json::{json, Value};

fn provider(server: &MockServer, retries: u32) -> OpenAiProvider {
    OpenAiProvider::new(
        config(server, ("openai", "/v1", "gpt-test"), retries),
        OpenAi::default(),
    )
    .unwrap()
}

fn hello() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::user("Say hello")],
        tools: Vec::new(),
        tool_choice: Default::default(),
        options: ModelOptions::default(),
    }
}

/// A chunk of the stream: its `delta` and finish reason.
fn chunk(delta: Value, finish: Option<&str>) -> String {
    json!({"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
}

/// The last chunk: usage only, no choices (`stream_options.include_usage`).
fn usage_chunk(prompt: u64, completion: u64) -> String {
    json!({"id": "chatcmpl-9", "object": "chat.completion.chunk", "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
    .to_string()
}

/// Streams `response` through a server that cuts every event into 7-byte pieces, and reads the
/// same exchange whole; both responses, the deltas told, and the requests sent.
async fn both_ways(
    stream: &str,
    whole: Value,
) -> (ChatResponse, ChatResponse, Vec<Delta>, Vec<Value>) {
    assert!(
        (1..stream.len() / 7).any(|k| !stream.is_char_boundary(k * 7)),
        "the pieces cut through a UTF-8 character somewhere"
    );
    let server = MockServer::start(vec![Reply::Stream(pieces(stream, 7)), Reply::ok(whole)]).await;
    let provider = provider(&server, 0);
    let deltas = Mutex::new(Vec::new());
    let streamed = provider
        .stream(&hello(), &ignore_retries, &|delta| {
            deltas.lock().unwrap().push(delta)
        })
        .await
        .unwrap();
    let read_whole = provider.complete(&hello(), &ignore_retries).await.unwrap();
    let requests = server.requests().into_iter().map(|r| r.body).collect();
    (streamed, read_whole, deltas.into_inner().unwrap(), requests)
}

#[tokio::test]
async fn a_streamed_answer_is_the_answer_read_whole_and_its_deltas_add_up_to_it() {
    let text = ["Grüße", " aus ", "日本", " 🎉 — fin."];
    let mut data: Vec<String> = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    data.extend(text.iter().map(|t| chunk(json!({"content": t}), None)));
    data.push(chunk(json!({}), Some("stop")));
    // Cached input and reasoning are inside the counts, in their details.
    let usage = json!({"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19,
        "prompt_tokens_details": {"cached_tokens": 8}, "completion_tokens_details": {"reasoning_tokens": 3}});
    data.push(
        json!({"id": "chatcmpl-9", "object": "chat.completion.chunk", "choices": [], "usage": usage})
            .to_string(),
    );
    data.push("[DONE]".into());
    let stream = events(data.iter().map(String::as_str));
    let whole = json!({"id": "chatcmpl-9", "object": "chat.completion", "model": "gpt-test",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text.concat()}, "finish_reason": "stop"}],
        "usage": usage});
    let (streamed, read_whole, deltas, requests) = both_ways(&stream, whole).await;
    assert_eq!(journaled(&streamed), journaled(&read_whole));
    assert_eq!(streamed.content.as_deref(), Some(text.concat().as_str()));
    assert_eq!(
        (
            streamed.usage.prompt_tokens,
            streamed.usage.cached_input_tokens,
            streamed.usage.completion_tokens,
            streamed.usage.reasoning_tokens
        ),
        (12, 8, 7, 3)
    );
    assert_eq!(streamed.usage, read_whole.usage);
    assert_eq!(streamed.finish_reason, FinishReason::Stop);
    let told: String = deltas
        .iter()
        .map(|delta| match delta {
            Delta::Text { text } => text.as_str(),
            other => panic!("only text was written: {other:?}"),
        })
        .collect();
    assert_eq!(told, text.concat());
    assert_eq!(deltas.len(), text.len(), "one delta per chunk of text");
    // The step's raw view holds the assembled response.
    let raw = streamed.raw.unwrap();
    assert_eq!(raw["choices"][0]["message"]["content"], text.concat());
    assert_eq!(raw["usage"]["completion_tokens"], 7);
    // The streaming request asks for a stream and its usage; the other is sent as before.
    assert_eq!(requests[0]["stream"], true);
    assert_eq!(requests[0]["stream_options"]["include_usage"], true);
    assert_eq!(requests[1].get("stream"), None);
    let mut without = requests[0].clone();
    without.as_object_mut().unwrap().remove("stream");
    without.as_object_mut().unwrap().remove("stream_options");
    assert_eq!(without, requests[1], "the same request otherwise");
}

#[tokio::test]
async fn parallel_tool_calls_interleaved_by_index_assemble_into_the_calls_read_whole() {
    let call = |index: u64, id: Option<&str>, name: Option<&str>, arguments: &str| {
        let mut function = json!({"arguments": arguments});
        if let Some(name) = name {
            function["name"] = json!(name);
        }
        let mut call = json!({"index": index, "type": "function", "function": function});
        if let Some(id) = id {
            call["id"] = json!(id);
        }
        chunk(json!({"tool_calls": [call]}), None)
    };
    let data = [
        chunk(json!({"role": "assistant", "content": null}), None),
        call(0, Some("call_a"), Some("update_page"), ""),
        call(1, Some("call_b"), Some("send_message"), ""),
        call(0, None, None, "{\"slug\": \"ho"),
        call(1, None, None, "{\"to\": \"zoë@example.com\", "),
        call(0, None, None, "me\", \"title\": \"Café ☕\"}"),
        call(1, None, None, "\"body\": \"hi\"}"),
        chunk(json!({}), Some("tool_calls")),
        usage_chunk(30, 21),
        "[DONE]".to_owned(),
    ];
    let stream = events(data.iter().map(String::as_str));
    let whole = json!({"id": "chatcmpl-9", "object": "chat.completion", "model": "gpt-test",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "update_page",
                "arguments": "{\"slug\": \"home\", \"title\": \"Café ☕\"}"}},
            {"id": "call_b", "type": "function", "function": {"name": "send_message",
                "arguments": "{\"to\": \"zoë@example.com\", \"body\": \"hi\"}"}}]},
            "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 21}});
    let (streamed, read_whole, deltas, _) = both_ways(&stream, whole).await;
    assert_eq!(journaled(&streamed), journaled(&read_whole));
    let names: Vec<&str> = streamed
        .tool_calls
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["update_page", "send_message"]);
    assert_eq!(
        streamed.tool_calls[0].parsed_arguments().unwrap(),
        json!({"slug": "home", "title": "Café ☕"})
    );
    // The deltas say which call each fragment belongs to.
    let second: String = deltas
        .iter()
        .filter_map(|delta| match delta {
            Delta::ToolCall {
                index: 1,
                arguments,
                ..
            } => Some(arguments.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(second, "{\"to\": \"zoë@example.com\", \"body\": \"hi\"}");
    assert!(deltas.iter().any(|delta| matches!(delta,
        Delta::ToolCall { index: 0, id: Some(id), name: Some(name), .. } if id == "call_a" && name == "update_page")));
}

/// A full streamed answer of `text`.
fn answer_stream(text: &str) -> String {
    let data = [
        chunk(json!({"content": text}), Some("stop")),
        usage_chunk(3, 2),
        "[DONE]".to_owned(),
    ];
    events(data.iter().map(String::as_str))
}

#[tokio::test]
async fn a_stream_that_breaks_is_retried_as_a_whole_response() {
    let partial = events([chunk(json!({"content": "Half an ans"}), None).as_str()]);
    let error = events(
        [
            chunk(json!({"content": "Some"}), None),
            json!({"error": {"message": "The server is overloaded", "type": "server_error"}})
                .to_string(),
        ]
        .iter()
        .map(String::as_str),
    );
    let server = MockServer::start(vec![
        // No [DONE]: the connection closes mid-response.
        Reply::Stream(pieces(&partial, 5)),
        // An error event after some text.
        Reply::Stream(pieces(&error, 5)),
        Reply::Stream(pieces(&answer_stream("Whole."), 5)),
    ])
    .await;
    let retries = Mutex::new(Vec::<RetryNotice>::new());
    let response = provider(&server, 2)
        .stream(
            &hello(),
            &|notice| retries.lock().unwrap().push(notice),
            &ignore_deltas,
        )
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("Whole."));
    let retries = retries.into_inner().unwrap();
    assert_eq!(retries.len(), 2);
    assert!(
        retries[0]
            .reason
            .contains("ended before the response was complete"),
        "{}",
        retries[0].reason
    );
    assert!(
        retries[1].reason.contains("The server is overloaded"),
        "{}",
        retries[1].reason
    );
    // OpenAI reports usage only at the end: what the broken attempts used is unknown, not 0.
    for retry in &retries {
        assert_eq!(retry.spent, Some(Usage::unreported()));
    }
    assert_eq!(response.usage, Usage::tokens(3, 2));
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_stream_may_take_longer_than_the_request_timeout_but_not_go_silent_that_long() {
    let mut settings = mock_http::quick(0);
    settings.request_timeout = std::time::Duration::from_millis(400);
    let provider = |server: &MockServer| {
        let mut config = config(server, ("openai", "/v1", "gpt-test"), 0);
        config.http = settings;
        OpenAiProvider::new(config, OpenAi::default()).unwrap()
    };
    // Twenty pieces 100 ms apart: two seconds in all, never 400 ms without a byte.
    let steady = answer_stream("Slow but steady.");
    let piece = steady.len().div_ceil(20);
    let server = MockServer::start(vec![Reply::Paced(
        pieces(&steady, piece),
        std::time::Duration::from_millis(100),
    )])
    .await;
    let response = provider(&server)
        .stream(&hello(), &ignore_retries, &ignore_deltas)
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("Slow but steady."));
    // A stream that goes silent for longer broke off.
    let server = MockServer::start(vec![Reply::Paced(
        pieces(&steady, steady.len() / 2 + 1),
        std::time::Duration::from_millis(900),
    )])
    .await;
    let err = provider(&server)
        .stream(&hello(), &ignore_retries, &ignore_deltas)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient);
    assert!(err.message.contains("broke off"), "{}", err.message);
}

#[tokio::test]
async fn a_stream_without_usage_records_it_as_unreported_never_as_zero() {
    let stream = events(
        [
            chunk(json!({"content": "No usage here."}), Some("stop")),
            "[DONE]".to_owned(),
        ]
        .iter()
        .map(String::as_str),
    );
    let whole = json!({"choices": [{"index": 0, "message": {"role": "assistant",
        "content": "No usage here."}, "finish_reason": "stop"}]});
    let server =
        MockServer::start(vec![Reply::Stream(pieces(&stream, 11)), Reply::ok(whole)]).await;
    let streamed = provider(&server, 0)
        .stream(&hello(), &ignore_retries, &ignore_deltas)
        .await
        .unwrap();
    let read_whole = provider(&server, 0)
        .complete(&hello(), &ignore_retries)
        .await
        .unwrap();
    for response in [streamed, read_whole] {
        assert_eq!(response.content.as_deref(), Some("No usage here."));
        assert_eq!(response.usage, Usage::unreported());
        assert!(!response.usage.is_complete());
    }
}

#[tokio::test]
async fn a_broken_stream_out_of_retries_is_a_transient_failure_naming_it() {
    let partial = events([chunk(json!({"content": "Half"}), None).as_str()]);
    let server = MockServer::start(vec![Reply::Stream(pieces(&partial, 64))]).await;
    let err = provider(&server, 0)
        .stream(&hello(), &ignore_retries, &ignore_deltas)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient);
    assert_eq!(
        err.message,
        "openai: the stream ended before the response was complete"
    );
    assert_eq!(err.spent, Some(Usage::unreported()));
}

#[tokio::test]
async fn a_server_that_answers_a_streaming_request_whole_is_read_as_whole() {
    let whole = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "At once."},
        "finish_reason": "stop"}], "usage": {"prompt_tokens": 4, "completion_tokens": 2}});
    let server = MockServer::start(vec![Reply::ok(whole)]).await;
    let deltas = Mutex::new(0);
    let response = provider(&server, 0)
        .stream(&hello(), &ignore_retries, &|_| *deltas.lock().unwrap() += 1)
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("At once."));
    assert_eq!(response.usage.completion_tokens, 2);
    assert_eq!(*deltas.lock().unwrap(), 0);
    assert_eq!(server.requests()[0].body["stream"], true);
}

#[tokio::test]
async fn a_provider_set_not_to_stream_sends_the_request_whole() {
    let whole = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Plain."},
        "finish_reason": "stop"}], "usage": {"prompt_tokens": 4, "completion_tokens": 2}});
    let server = MockServer::start(vec![Reply::ok(whole)]).await;
    let response = provider(&server, 0)
        .streaming(false)
        .stream(&hello(), &ignore_retries, &ignore_deltas)
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("Plain."));
    assert_eq!(server.requests()[0].body.get("stream"), None);
}

#[tokio::test]
async fn reasoning_text_is_shown_live_and_never_kept() {
    let stream = events(
        [
            chunk(json!({"reasoning_content": "Think "}), None),
            chunk(json!({"reasoning_content": "first."}), None),
            chunk(json!({"content": "Done."}), Some("stop")),
            usage_chunk(3, 2),
            "[DONE]".to_owned(),
        ]
        .iter()
        .map(String::as_str),
    );
    let whole = json!({"model": "gpt-test", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Done.",
        "reasoning_content": "Think first."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2}});
    let server = MockServer::start(vec![Reply::Stream(pieces(&stream, 9)), Reply::ok(whole)]).await;
    let thinking = Mutex::new(String::new());
    let streamed = provider(&server, 0)
        .stream(&hello(), &ignore_retries, &|delta| {
            if let Delta::Thinking { text } = delta {
                thinking.lock().unwrap().push_str(&text);
            }
        })
        .await
        .unwrap();
    assert_eq!(thinking.into_inner().unwrap(), "Think first.");
    let read_whole = provider(&server, 0)
        .complete(&hello(), &ignore_retries)
        .await
        .unwrap();
    assert_eq!(journaled(&streamed), journaled(&read_whole));
    // The model that answered, as the chunks name it.
    assert_eq!(streamed.model.as_deref(), Some("gpt-test"));
    for raw in [streamed.raw.unwrap(), read_whole.raw.unwrap()] {
        assert!(!raw.to_string().contains("Think first"), "{raw}");
    }
}
