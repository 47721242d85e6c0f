//! Every wire format (OpenAI-compatible, Anthropic, Gemini) through the same cases, against a
//! local server that answers in that format: a plain answer, one and several tool calls, the
//! transcript after suspend → approve and after a per-call deny (checked against the format's own
//! rules), and every failure an operator can meet — 400, 401, 429 with `Retry-After`, 500 then
//! success (each retry a step), the retry cap, a timeout, invalid JSON and a truncated body.
//! Finally: a run's stored steps, state and error never hold the API key. Nothing leaves 127.0.0.1.

use nrllm_core::authority::Actor;
use nrllm_store::testing as common;
mod mock_http;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use mock_http::{MockServer, Recorded, Reply};
use nrllm_core::events::{Event, NullSink, VecSink};
use nrllm_core::provider::{
    ignore_retries, ChatRequest, ModelOptions, Prices, Provider, ProviderError, ProviderErrorKind,
    Usage,
};
use nrllm_core::run_service::{LoopFactory, RunService, SingleLoop};
use nrllm_core::run_store::{RunConfiguration, RunReader, RunStatus};
use nrllm_core::testing::{probe_registry, Probe};
use nrllm_core::transcript::{validate, Message, Tail};
use nrllm_core::{
    CallDecision, Choice, Decision, LoopOutcome, RunContext, RunInput, RunSettings, ToolLoop,
    ToolLoopService,
};
use nrllm_providers::anthropic::{Anthropic, AnthropicProvider};
use nrllm_providers::gemini::{Gemini, GeminiProvider};
use nrllm_providers::http::{HttpSettings, RetryPolicy};
use nrllm_providers::openai::{OpenAi, OpenAiProvider};
use nrllm_providers::ProviderConfig;
use nrllm_store::SqlRunStore;
use serde_json::{json, Value};

const KEY: &str = "sk-test-wire-secret-0042";

#[derive(Clone, Copy, Debug)]
enum Format {
    OpenAi,
    Anthropic,
    Gemini,
}

const FORMATS: [Format; 3] = [Format::OpenAi, Format::Anthropic, Format::Gemini];

/// One tool call as a test scripts it: id (ignored by Gemini, which sends none), name, arguments.
type Call<'a> = (&'a str, &'a str, Value);

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::OpenAi => "openai",
            Format::Anthropic => "anthropic",
            Format::Gemini => "gemini",
        }
    }

    fn provider(self, server: &MockServer, retries: u32, timeout: Duration) -> Arc<dyn Provider> {
        let http = HttpSettings {
            connect_timeout: Duration::from_secs(2),
            request_timeout: timeout,
            retry: RetryPolicy {
                max_retries: retries,
                base_delay: Duration::from_millis(10),
                max_delay: Duration::from_millis(50),
            },
        };
        let config = |base: &str, model: &str| ProviderConfig {
            name: self.name().to_owned(),
            base_url: format!("{}{base}", server.base_url),
            model: model.into(),
            api_key: Some(KEY.into()),
            http,
        };
        match self {
            Format::OpenAi => Arc::new(
                OpenAiProvider::new(
                    config("/v1", "gpt-test"),
                    OpenAi {
                        max_completion_tokens: false,
                    },
                )
                .unwrap(),
            ),
            Format::Anthropic => {
                Arc::new(AnthropicProvider::new(config("/v1", "claude-test"), Anthropic).unwrap())
            }
            Format::Gemini => {
                Arc::new(GeminiProvider::new(config("/v1beta", "gemini-test"), Gemini).unwrap())
            }
        }
    }

    fn path(self) -> &'static str {
        match self {
            Format::OpenAi => "/v1/chat/completions",
            Format::Anthropic => "/v1/messages",
            Format::Gemini => "/v1beta/models/gemini-test:generateContent",
        }
    }

    /// The key as the request carried it, in the format's header.
    fn sent_key(self, request: &Recorded) -> Option<String> {
        match self {
            Format::OpenAi => request
                .header("authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::to_owned),
            Format::Anthropic => request.header("x-api-key").map(str::to_owned),
            Format::Gemini => request.header("x-goog-api-key").map(str::to_owned),
        }
    }

    /// A plain answer with 11 prompt and 4 completion tokens.
    fn answer(self, text: &str) -> Value {
        match self {
            Format::OpenAi => json!({"id": "chatcmpl-1", "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                "finish_reason": "stop"}], "usage": {"prompt_tokens": 11, "completion_tokens": 4}}),
            Format::Anthropic => json!({"id": "msg_1", "type": "message", "role": "assistant",
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 11, "output_tokens": 4}}),
            Format::Gemini => json!({"candidates": [{"content": {"role": "model",
                "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 4,
                "totalTokenCount": 15}, "modelVersion": "gemini-test"}),
        }
    }

    /// A turn of tool calls.
    fn calls(self, calls: &[Call]) -> Value {
        match self {
            Format::OpenAi => json!({"choices": [{"index": 0, "message": {"role": "assistant",
                "content": null, "tool_calls": calls.iter().map(|(id, name, args)| json!({
                    "id": id, "type": "function",
                    "function": {"name": name, "arguments": args.to_string()}})).collect::<Vec<_>>()},
                "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 20, "completion_tokens": 9}}),
            Format::Anthropic => json!({"content": calls.iter().map(|(id, name, args)| json!({
                    "type": "tool_use", "id": id, "name": name, "input": args})).collect::<Vec<_>>(),
                "stop_reason": "tool_use", "usage": {"input_tokens": 20, "output_tokens": 9}}),
            Format::Gemini => json!({"candidates": [{"content": {"role": "model",
                "parts": calls.iter().map(|(_, name, args)| json!({
                    "functionCall": {"name": name, "args": args}})).collect::<Vec<_>>()},
                "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 9}}),
        }
    }

    /// Whether a request declares tools but forbids calling them.
    fn forbids_calls(self, body: &Value) -> bool {
        let declared = match self {
            Format::Gemini => body["tools"][0]["functionDeclarations"].as_array(),
            _ => body["tools"].as_array(),
        }
        .is_some_and(|tools| !tools.is_empty());
        declared
            && match self {
                Format::OpenAi => body["tool_choice"] == "none",
                Format::Anthropic => body["tool_choice"] == json!({"type": "none"}),
                Format::Gemini => body["toolConfig"]["functionCallingConfig"]["mode"] == "NONE",
            }
    }

    /// An error body in the format's shape.
    fn error(self, message: &str) -> String {
        match self {
            Format::OpenAi => {
                json!({"error": {"message": message, "type": "invalid_request_error"}})
            }
            Format::Anthropic => json!({"type": "error",
                "error": {"type": "invalid_request_error", "message": message}}),
            Format::Gemini => {
                json!({"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}})
            }
        }
        .to_string()
    }

    /// The tool results a request carries, as (tool name, result) in order — after checking the
    /// format's rules: every call of a model turn is answered exactly once, directly after that
    /// turn, in call order, ids (or, for Gemini, names and order) matching.
    fn answers(self, body: &Value) -> Result<Vec<(String, String)>, String> {
        let mut answers = Vec::new();
        match self {
            Format::OpenAi => {
                let messages: Vec<Message> =
                    serde_json::from_value(body["messages"].clone()).map_err(|e| e.to_string())?;
                validate(&messages, Tail::Complete).map_err(|e| e.to_string())?;
                let mut names = std::collections::HashMap::new();
                for message in &messages {
                    for call in message.tool_calls() {
                        names.insert(call.id.clone(), call.name.clone());
                    }
                    if let Message::Tool {
                        tool_call_id,
                        content,
                        ..
                    } = message
                    {
                        answers.push((names[tool_call_id].clone(), content.clone()));
                    }
                }
            }
            Format::Anthropic => {
                let messages = body["messages"].as_array().ok_or("no messages")?;
                let mut open: VecDeque<(String, String)> = VecDeque::new();
                for message in messages {
                    let blocks = message["content"]
                        .as_array()
                        .ok_or("content is not blocks")?;
                    for block in blocks {
                        match block["type"].as_str() {
                            Some("tool_use") => open.push_back((
                                block["id"].as_str().ok_or("tool_use without id")?.into(),
                                block["name"]
                                    .as_str()
                                    .ok_or("tool_use without name")?
                                    .into(),
                            )),
                            Some("tool_result") => {
                                let (id, name) = open.pop_front().ok_or("a result for no call")?;
                                if block["tool_use_id"] != id.as_str() || message["role"] != "user"
                                {
                                    return Err(format!("result {block} does not answer {id}"));
                                }
                                let text = block["content"].as_str().ok_or("no result text")?;
                                answers.push((name, text.to_owned()));
                            }
                            _ if !open.is_empty() => {
                                return Err(format!("{block} comes before every call is answered"))
                            }
                            _ => {}
                        }
                    }
                }
                if !open.is_empty() {
                    return Err(format!("unanswered calls: {open:?}"));
                }
            }
            Format::Gemini => {
                let contents = body["contents"].as_array().ok_or("no contents")?;
                let mut open: VecDeque<(String, Option<String>)> = VecDeque::new();
                for content in contents {
                    let parts = content["parts"].as_array().ok_or("no parts")?;
                    if parts.is_empty() {
                        return Err("a turn without parts".into());
                    }
                    if !open.is_empty()
                        && (content["role"] != "user"
                            || parts.len() != open.len()
                            || parts.iter().any(|p| p.get("functionResponse").is_none()))
                    {
                        return Err(format!("{content} does not answer {open:?}"));
                    }
                    for part in parts {
                        if let Some(call) = part.get("functionCall") {
                            open.push_back((
                                call["name"].as_str().ok_or("a call without a name")?.into(),
                                call["id"].as_str().map(str::to_owned),
                            ));
                        }
                        if let Some(response) = part.get("functionResponse") {
                            let (name, id) = open.pop_front().ok_or("a response for no call")?;
                            if response["name"] != name.as_str()
                                || response["id"].as_str().map(str::to_owned) != id
                            {
                                return Err(format!("{response} does not answer {name}"));
                            }
                            let result = response["response"]["output"]
                                .as_str()
                                .or(response["response"]["error"].as_str())
                                .ok_or("no output or error")?;
                            answers.push((name, result.to_owned()));
                        }
                    }
                }
                if !open.is_empty() {
                    return Err(format!("unanswered calls: {open:?}"));
                }
            }
        }
        Ok(answers)
    }
}

fn hi() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::system("Be brief."), Message::user("Hi")],
        tools: Vec::new(),
        tool_choice: Default::default(),
        options: ModelOptions::default(),
    }
}

/// Asks once against a server scripted with `replies`; the error, and how many requests it saw.
async fn failing(
    format: Format,
    replies: Vec<Reply>,
    retries: u32,
    timeout: Duration,
) -> (ProviderError, usize) {
    let server = MockServer::start(replies).await;
    let err = format
        .provider(&server, retries, timeout)
        .complete(&hi(), &ignore_retries)
        .await
        .unwrap_err();
    (err, server.requests().len())
}

#[tokio::test]
async fn a_plain_answer_reads_text_and_usage_and_sends_the_key_in_its_header() {
    for format in FORMATS {
        let server = MockServer::start(vec![Reply::ok(format.answer("Hello."))]).await;
        let response = format
            .provider(&server, 0, Duration::from_secs(5))
            .complete(&hi(), &ignore_retries)
            .await
            .unwrap();
        assert_eq!(response.content.as_deref(), Some("Hello."), "{format:?}");
        assert!(response.tool_calls.is_empty());
        assert_eq!(
            (
                response.usage.prompt_tokens,
                response.usage.completion_tokens
            ),
            (11, 4),
            "{format:?}"
        );
        let sent = &server.requests()[0];
        assert_eq!(sent.path, format.path());
        assert_eq!(format.sent_key(sent).as_deref(), Some(KEY), "{format:?}");
    }
}

/// An answer whose usage has every part its format reports: cached input (and, for Anthropic,
/// cache writes) and reasoning, as each format counts them.
fn answer_with_parts(format: Format) -> Value {
    let mut answer = format.answer("Cached.");
    match format {
        // Cached tokens inside the prompt count, reasoning inside the completion count.
        Format::OpenAi => {
            answer["usage"] = json!({"prompt_tokens": 1200, "completion_tokens": 300,
                "total_tokens": 1500, "prompt_tokens_details": {"cached_tokens": 1000, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 200, "audio_tokens": 0}})
        }
        // Cache reads and writes beside `input_tokens`, not in it; no reasoning count.
        Format::Anthropic => {
            answer["usage"] = json!({"input_tokens": 50, "output_tokens": 300,
                "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 150})
        }
        // Cached tokens inside the prompt count; thoughts beside the candidates, not in them.
        Format::Gemini => {
            answer["usageMetadata"] = json!({"promptTokenCount": 1200, "candidatesTokenCount": 100,
                "thoughtsTokenCount": 200, "cachedContentTokenCount": 1000, "totalTokenCount": 1500})
        }
    }
    answer
}

#[tokio::test]
async fn cached_input_cache_writes_and_reasoning_are_read_and_priced_exactly() {
    let prices = Prices {
        input: Some(2.0),
        output: Some(8.0),
        cached_input: Some(0.5),
        cache_write: Some(2.5),
        reasoning: Some(10.0),
    };
    for format in FORMATS {
        let server = MockServer::start(vec![Reply::ok(answer_with_parts(format))]).await;
        let usage = format
            .provider(&server, 0, Duration::from_secs(5))
            .complete(&hi(), &ignore_retries)
            .await
            .unwrap()
            .usage;
        let (writes, reasoning) = match format {
            Format::OpenAi => (0, 200),
            Format::Anthropic => (150, 0),
            Format::Gemini => (0, 200),
        };
        assert_eq!(
            usage,
            Usage {
                cached_input_tokens: 1000,
                cache_write_tokens: writes,
                reasoning_tokens: reasoning,
                ..Usage::tokens(1200, 300)
            },
            "{format:?}"
        );
        // uncached × 2 + cached × 0.5 + writes × 2.5 + answer × 8 + reasoning × 10.
        let expected = match format {
            Format::OpenAi | Format::Gemini => 200 * 2 + 1000 / 2 + 100 * 8 + 200 * 10,
            Format::Anthropic => 50 * 2 + 1000 / 2 + 150 * 5 / 2 + 300 * 8,
        };
        assert_eq!(prices.cost_micros(&usage), Some(expected), "{format:?}");
    }
}

#[tokio::test]
async fn one_and_several_tool_calls_come_back_in_order() {
    for format in FORMATS {
        let server = MockServer::start(vec![
            Reply::ok(format.calls(&[("c1", "read_note", json!({"text": "a"}))])),
            Reply::ok(format.calls(&[
                ("c2", "read_note", json!({"text": "b"})),
                ("c3", "write_note", json!({"text": "c"})),
            ])),
        ])
        .await;
        let provider = format.provider(&server, 0, Duration::from_secs(5));
        let one = provider.complete(&hi(), &ignore_retries).await.unwrap();
        let several = provider.complete(&hi(), &ignore_retries).await.unwrap();
        let shown = |calls: &[nrllm_core::transcript::ToolCall]| -> Vec<(String, Value)> {
            calls
                .iter()
                .map(|c| (c.name.clone(), c.parsed_arguments().unwrap()))
                .collect()
        };
        assert_eq!(
            shown(&one.tool_calls),
            [("read_note".to_owned(), json!({"text": "a"}))],
            "{format:?}"
        );
        assert_eq!(
            shown(&several.tool_calls),
            [
                ("read_note".to_owned(), json!({"text": "b"})),
                ("write_note".to_owned(), json!({"text": "c"}))
            ],
            "{format:?}"
        );
        assert_ne!(several.tool_calls[0].id, several.tool_calls[1].id);
    }
}

/// Suspends on a read and a write in one turn, decides with `decide` (given the pending call
/// ids), resumes, and returns the answers the format carried on the request after the decision.
async fn after_decision(
    format: Format,
    decide: impl Fn(&[String]) -> Decision,
) -> (Vec<(String, String)>, Probe) {
    let server = MockServer::start(vec![
        Reply::ok(format.calls(&[
            ("r1", "read_note", json!({"text": "x"})),
            ("w1", "write_note", json!({"text": "y"})),
        ])),
        Reply::ok(format.answer("Done.")),
    ])
    .await;
    let probe = Probe::default();
    let tool_loop = ToolLoop::new(
        format.provider(&server, 0, Duration::from_secs(5)),
        Arc::new(probe_registry(&probe)),
    );
    let ctx = RunContext::default();
    let input = RunInput {
        system_prompt: Some("Careful.".into()),
        messages: vec![Message::user("read and write")],
        ..RunInput::default()
    };
    let LoopOutcome::Suspended(state) = tool_loop.run(input, &ctx, &NullSink).await.unwrap() else {
        panic!("{format:?}: a write suspends the run")
    };
    // The decision comes later, from the stored state.
    let state = nrllm_core::SuspendedState::from_json(&state.to_json()).unwrap();
    let ids: Vec<String> = state.pending.iter().map(|c| c.id.clone()).collect();
    let outcome = tool_loop
        .resume(&state, &decide(&ids), &ctx, &NullSink)
        .await
        .unwrap();
    assert!(matches!(outcome, LoopOutcome::Completed(_)), "{format:?}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let answers = format
        .answers(&requests[1].body)
        .unwrap_or_else(|err| panic!("{format:?}: {err}\n{}", requests[1].body));
    (answers, probe)
}

#[tokio::test]
async fn after_approval_every_call_is_answered_once_by_the_formats_rules() {
    for format in FORMATS {
        let (answers, probe) = after_decision(format, |_| Decision::ApproveAll).await;
        assert_eq!(
            answers,
            [
                ("read_note".to_owned(), "note: x".to_owned()),
                ("write_note".to_owned(), "wrote: y".to_owned())
            ],
            "{format:?}"
        );
        assert_eq!(probe.count("write_note"), 1);
    }
}

#[tokio::test]
async fn after_a_per_call_denial_the_refusal_answers_its_call() {
    for format in FORMATS {
        let (answers, probe) = after_decision(format, |ids| Decision::PerCall {
            calls: vec![
                CallDecision {
                    call_id: ids[0].clone(),
                    choice: Choice::Approve,
                },
                CallDecision {
                    call_id: ids[1].clone(),
                    choice: Choice::Deny {
                        reason: Some("not now".into()),
                    },
                },
            ],
        })
        .await;
        assert_eq!(
            answers,
            [
                ("read_note".to_owned(), "note: x".to_owned()),
                (
                    "write_note".to_owned(),
                    "denied by the operator: not now".to_owned()
                )
            ],
            "{format:?}"
        );
        assert_eq!(probe.count("write_note"), 0);
        assert_eq!(probe.count("read_note"), 1);
    }
}

#[tokio::test]
async fn the_round_after_the_cap_declares_the_tools_but_forbids_calls() {
    for format in FORMATS {
        let server = MockServer::start(vec![
            Reply::ok(format.calls(&[("c1", "read_note", json!({"text": "a"}))])),
            Reply::ok(format.answer("That is all.")),
        ])
        .await;
        let tool_loop = ToolLoop::new(
            format.provider(&server, 0, Duration::from_secs(5)),
            Arc::new(probe_registry(&Probe::default())),
        );
        let input = RunInput {
            messages: vec![Message::user("read")],
            settings: RunSettings {
                max_rounds: 1,
                ..RunSettings::default()
            },
            ..RunInput::default()
        };
        let outcome = tool_loop
            .run(input, &RunContext::default(), &NullSink)
            .await
            .unwrap();
        assert!(matches!(outcome, LoopOutcome::Completed(ref done) if done.truncated));
        let requests = server.requests();
        assert!(!format.forbids_calls(&requests[0].body), "{format:?}");
        assert!(
            format.forbids_calls(&requests[1].body),
            "{format:?}: {}",
            requests[1].body
        );
        // The capped request still carries the answered call, by the format's rules.
        assert_eq!(
            format.answers(&requests[1].body).unwrap(),
            [("read_note".to_owned(), "note: a".to_owned())]
        );
    }
}

#[tokio::test]
async fn a_400_is_not_retried_and_carries_the_providers_message() {
    for format in FORMATS {
        let reply = Reply::status(400, &format.error("Invalid value at 'tools[0]'"));
        let (err, requests) = failing(format, vec![reply], 3, Duration::from_secs(5)).await;
        assert_eq!(err.kind, ProviderErrorKind::Permanent);
        assert_eq!(
            err.message,
            format!(
                "{}: the request was refused (HTTP 400): Invalid value at 'tools[0]'",
                format.name()
            )
        );
        assert_eq!(requests, 1);
    }
}

#[tokio::test]
async fn a_refused_key_is_named_without_showing_it() {
    for format in FORMATS {
        let body = format.error(&format!("Incorrect API key provided: {KEY}."));
        let reply = Reply::status(401, &body);
        let (err, requests) = failing(format, vec![reply], 3, Duration::from_secs(5)).await;
        assert_eq!(
            err.message,
            format!(
                "{}: the API key was refused (HTTP 401): Incorrect API key provided: [redacted].",
                format.name()
            )
        );
        assert_eq!(requests, 1);
    }
    // Gemini says so with a 400 and the reason API_KEY_INVALID.
    let body = json!({"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
        "status": "INVALID_ARGUMENT", "details": [{"reason": "API_KEY_INVALID"}]}});
    let reply = Reply::status(400, &body.to_string());
    let (err, _) = failing(Format::Gemini, vec![reply], 3, Duration::from_secs(5)).await;
    assert_eq!(
        err.message,
        "gemini: the API key was refused (HTTP 400): API key not valid. Please pass a valid API key."
    );
}

#[tokio::test]
async fn a_429_with_retry_after_and_a_500_are_retried_and_each_retry_is_a_step() {
    for format in FORMATS {
        let server = MockServer::start(vec![
            Reply::Json(
                429,
                vec![("retry-after".into(), "0".into())],
                format.error("Resource exhausted"),
            ),
            Reply::status(500, &format.error("internal")),
            Reply::ok(format.answer("Finally.")),
        ])
        .await;
        let tool_loop = ToolLoop::new(
            format.provider(&server, 3, Duration::from_secs(5)),
            Arc::new(probe_registry(&Probe::default())),
        );
        let sink = VecSink::default();
        let input = RunInput {
            messages: vec![Message::user("Hi")],
            ..RunInput::default()
        };
        let outcome = tool_loop
            .run(input, &RunContext::default(), &sink)
            .await
            .unwrap();
        let LoopOutcome::Completed(done) = outcome else {
            panic!("{format:?}: completes after the retries")
        };
        assert_eq!(done.content, "Finally.");
        assert_eq!(server.requests().len(), 3);
        let retries: Vec<(u32, u64, String)> = sink
            .events()
            .into_iter()
            .filter_map(|event| match event {
                Event::ProviderRetry {
                    round: 1,
                    retry,
                    wait_ms,
                    reason,
                    ..
                } => Some((retry, wait_ms, reason)),
                _ => None,
            })
            .collect();
        let name = format.name();
        let reasons: Vec<(u32, &str)> = retries
            .iter()
            .map(|(retry, _, reason)| (*retry, reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                (
                    1,
                    format!("{name}: rate limited (HTTP 429): Resource exhausted").as_str()
                ),
                (
                    2,
                    format!("{name}: the provider failed (HTTP 500): internal").as_str()
                ),
            ]
        );
        // The first wait is the provider's Retry-After; the second 2 × 10 ms, spread ±20 %.
        assert_eq!(retries[0].1, 0);
        assert!((16..=24).contains(&retries[1].1), "{:?}", retries[1]);
        let kinds: Vec<&str> = sink.events().iter().map(Event::kind).collect();
        assert_eq!(
            kinds,
            [
                "assembled",
                "request",
                "provider_retry",
                "provider_retry",
                "llm"
            ]
        );
    }
}

#[tokio::test]
async fn retries_stop_at_the_cap_with_a_transient_error() {
    for format in FORMATS {
        let replies = vec![Reply::status(503, "upstream down"); 3];
        let (err, requests) = failing(format, replies, 2, Duration::from_secs(5)).await;
        assert_eq!(err.kind, ProviderErrorKind::Transient);
        assert_eq!(
            err.message,
            format!(
                "{}: the provider failed (HTTP 503): upstream down (after 2 retries)",
                format.name()
            )
        );
        assert_eq!(requests, 3);
    }
}

#[tokio::test]
async fn a_timeout_is_retried_and_then_reported() {
    for format in FORMATS {
        let replies = vec![Reply::Hang, Reply::Hang];
        let (err, requests) = failing(format, replies, 1, Duration::from_millis(300)).await;
        assert_eq!(err.kind, ProviderErrorKind::Transient);
        assert_eq!(
            err.message,
            format!(
                "{}: no answer within the time limit (after 1 retries)",
                format.name()
            )
        );
        assert_eq!(requests, 2);
    }
}

#[tokio::test]
async fn invalid_json_a_truncated_body_and_an_unexpected_shape_are_errors_not_panics() {
    for format in FORMATS {
        let name = format.name();
        let server = MockServer::start(vec![
            Reply::status(200, "<html>oops</html>"),
            Reply::Truncated(r#"{"choices": [{"mess"#.into()),
            Reply::ok(json!({"unexpected": true})),
        ])
        .await;
        let provider = format.provider(&server, 0, Duration::from_secs(5));
        let err = provider.complete(&hi(), &ignore_retries).await.unwrap_err();
        assert_eq!(
            err.message,
            format!("{name}: the response is not valid JSON")
        );
        let err = provider.complete(&hi(), &ignore_retries).await.unwrap_err();
        assert!(err.message.starts_with(&format!("{name}: ")), "{err}");
        let err = provider.complete(&hi(), &ignore_retries).await.unwrap_err();
        assert!(
            err.message
                .starts_with(&format!("{name}: the response has no ")),
            "{err}"
        );
    }
}

/// A run that meets the key everywhere a provider can echo it — a rate-limit message, a tool
/// call's arguments, a final 401 — and is stored through the run service: no stored step, no
/// state and no error summary holds the key.
#[tokio::test]
async fn a_stored_run_never_holds_the_api_key() {
    for format in FORMATS {
        let db = common::sqlite().await;
        let server = MockServer::start(vec![
            Reply::status(429, &format.error(&format!("slow down, {KEY}"))),
            Reply::ok(format.calls(&[("w1", "write_note", json!({"text": KEY}))])),
            Reply::status(401, &format.error(&format!("bad key {KEY}"))),
        ])
        .await;
        let store = Arc::new(SqlRunStore::new(db.db.clone()));
        let tool_loop: Arc<dyn ToolLoopService> = Arc::new(ToolLoop::new(
            format.provider(&server, 1, Duration::from_secs(5)),
            Arc::new(probe_registry(&Probe::default())),
        ));
        let loops: Arc<dyn LoopFactory> = Arc::new(SingleLoop(tool_loop));
        let service = RunService::new(store.clone(), loops);
        let configuration = RunConfiguration {
            continues: None,
            approval_timeout_ms: None,
            provider: format.name().into(),
            model: "m".into(),
            prompt: "write the key".into(),
            system_prompt: None,
            skills: Vec::new(),
            settings: RunSettings::default(),
        };
        let run = service.start(configuration, "alice").await.unwrap();
        assert_eq!(run.status, RunStatus::WaitingForApproval, "{format:?}");
        let waiting = store.get(run.id).await.unwrap().unwrap();
        assert!(!waiting.suspended_state.unwrap().contains(KEY));
        let run = service
            .resume(
                run.id,
                &Decision::ApproveAll,
                &Actor::headless("alice"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::Failed, "{format:?}");
        let summary = run.error_summary.clone().unwrap_or_default();
        assert!(summary.contains("API key was refused"), "{summary}");
        let events = store.events(run.id, 0).await.unwrap();
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        assert!(kinds.contains(&"provider_retry") && kinds.contains(&"llm_failed"));
        let stored =
            serde_json::to_string(&events.iter().map(|e| &e.payload).collect::<Vec<_>>()).unwrap();
        assert!(stored.contains("[redacted]"), "{format:?}: {stored}");
        assert!(!stored.contains(KEY), "{format:?}: {stored}");
        assert!(!summary.contains(KEY));
        db.cleanup().await;
    }
}
