//! A configuration's defaults reach the model, against the real server binary and local servers
//! that speak each provider's wire format: a run started from the form with its temperature and
//! token fields left empty (as a browser without JavaScript sends it) or through the JSON API
//! without them sends the configuration's `temperature` and `max_tokens`, exactly as written; a
//! value typed in wins; the run page says which values were used and where each came from. A
//! provider that asks for a 30 s wait is retried after the `retry_max_wait_secs` cap, and the
//! retry step says so.

#![cfg(feature = "ssr")]

mod common;

use std::time::{Duration, Instant};

use common::{form, log_in, start, start_run, wait_for, ADMIN_PASSWORD};
use reqwest::header::LOCATION;
use serde_json::{json, Value};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn answering(body: Value) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(&server)
        .await;
    server
}

fn openai_answer() -> Value {
    json!({"id": "c1", "object": "chat.completion", "model": "gpt-test",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Done."},
        "finish_reason": "stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 2}})
}

/// The temperature and token limit in a request body of configuration `name`'s format.
fn sent_options(name: &str, body: &Value) -> (Value, Value) {
    match name {
        "ge" => (
            body["generationConfig"]["temperature"].clone(),
            body["generationConfig"]["maxOutputTokens"].clone(),
        ),
        _ => (body["temperature"].clone(), body["max_tokens"].clone()),
    }
}

/// The JSON bodies `server` received, in order.
async fn bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|request| serde_json::from_slice(&request.body).unwrap())
        .collect()
}

#[tokio::test]
async fn the_configurations_defaults_reach_each_wire_format_and_a_typed_value_wins() {
    let openai = answering(openai_answer()).await;
    let anthropic = answering(json!({"id": "m1", "type": "message", "role": "assistant",
        "model": "claude-test", "content": [{"type": "text", "text": "Done."}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 5, "output_tokens": 2}}))
    .await;
    let gemini = answering(json!({"candidates": [{"content": {"role": "model",
        "parts": [{"text": "Done."}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2}}))
    .await;
    // The first model call asks for 30 s; the cap says 1 s.
    let patient = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "30")
                .set_body_string("slow down"),
        )
        .up_to_n_times(1)
        .mount(&patient)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_answer()))
        .mount(&patient)
        .await;
    let configuration = |name: &str, kind: &str, base: String| {
        format!(
            "[[configurations]]\nname = \"{name}\"\nkind = \"{kind}\"\nmodel = \"{name}-model\"\n\
             base_url = \"{base}\"\napi_key_env = \"TEST_WIRE_KEY\"\ntemperature = 0.7\nmax_tokens = 512\n\n"
        )
    };
    let settings = format!(
        "log_level = \"info\"\n\n{}{}{}{}",
        configuration("oa", "openai", format!("{}/v1", openai.uri())),
        configuration("an", "anthropic", format!("{}/v1", anthropic.uri())),
        configuration("ge", "gemini", format!("{}/v1beta/", gemini.uri())),
        configuration("slow", "openai", format!("{}/v1", patient.uri())),
    );
    let server = start(
        &settings,
        &[
            ("TEST_WIRE_KEY", "key-123"),
            ("NRLLM_RETRY_MAX_WAIT_SECS", "1"),
        ],
    )
    .await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;

    for (name, mock) in [("oa", &openai), ("an", &anthropic), ("ge", &gemini)] {
        // The form as a browser without JavaScript posts it: the two fields left empty.
        let posted = form(
            &server,
            &admin.cookies,
            "nrllm_tool_run",
            &[
                ("csrf", &admin.csrf),
                ("prompt", "Say done"),
                ("configuration", name),
                ("max_rounds", "5"),
                ("temperature", ""),
                ("max_tokens", ""),
            ],
            &[],
        )
        .await;
        let location = posted.headers()[LOCATION].to_str().unwrap().to_owned();
        let from_form = location.trim_start_matches("/runs/").to_owned();
        let view = wait_for(&server, &admin, &from_form, "completed").await;
        assert_eq!(
            view["summary"]["model_options"],
            "temperature 0.7 (configuration) · max tokens 512 (configuration) · max rounds 5",
            "{name}"
        );
        // Through the JSON API: one field typed, the other left out.
        let typed = start_run(
            &server,
            &admin,
            json!({ "prompt": "Say done", "configuration": name, "temperature": "0.2" }),
        )
        .await;
        let view = wait_for(&server, &admin, &typed, "completed").await;
        assert_eq!(
            view["summary"]["model_options"],
            "temperature 0.2 (form) · max tokens 512 (configuration) · max rounds 5",
            "{name}"
        );

        let sent = bodies(mock).await;
        assert_eq!(sent.len(), 2, "{name}: {sent:?}");
        let (temperature, tokens) = sent_options(name, &sent[0]);
        // Exactly as written: 0.7, not 0.699999988079071 (an f32 widened).
        assert_eq!((temperature, tokens), (json!(0.7), json!(512)), "{name}");
        let raw = serde_json::to_string(&sent[1]).unwrap();
        assert!(raw.contains("\"temperature\":0.2"), "{name}: {raw}");
    }

    // A provider that asks for 30 s: the wait is capped at 1 s, and the step says so.
    let run = start_run(
        &server,
        &admin,
        json!({ "prompt": "Say done", "configuration": "slow" }),
    )
    .await;
    let began = Instant::now();
    let view = wait_for(&server, &admin, &run, "completed").await;
    assert!(
        began.elapsed() < Duration::from_secs(8),
        "{:?}",
        began.elapsed()
    );
    let retry = view["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|step| step["kind"] == "provider_retry")
        .cloned()
        .unwrap_or_else(|| panic!("a retry step: {view}"));
    let title = retry["title"].as_str().unwrap();
    assert!(title.contains("capped"), "{title}");
    assert_eq!(bodies(&patient).await.len(), 2);
}
