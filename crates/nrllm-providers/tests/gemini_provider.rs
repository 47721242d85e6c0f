//! The Gemini adapter on the wire, against a local server: the exact JSON we send (system
//! instruction, generation config, function declarations with schemas Gemini accepts, function
//! calls and responses after a decision, thought signatures sent back) and ids the model did send
//! echoed. The cases every format shares are in `provider_formats.rs`.

use nrllm_store::testing as common;
mod wire;

use std::sync::Arc;

use nrllm_core::events::NullSink;
use nrllm_core::provider::{ignore_retries, ChatRequest, ModelOptions, Provider};
use nrllm_core::run_store::RunStore;
use nrllm_core::testing::{probe_registry, Probe};
use nrllm_core::transcript::Message;
use nrllm_core::{
    CallDecision, Choice, Decision, LoopOutcome, RunContext, RunInput, ToolLoop, ToolLoopService,
};
use nrllm_demo::site::SiteStore;
use nrllm_demo::tools::builtin_registry;
use nrllm_providers::gemini::{Gemini, GeminiProvider};
use nrllm_providers::http::HttpSettings;
use nrllm_providers::ProviderConfig;
use nrllm_store::SqlRunStore;
use serde_json::{json, Value};
use wire::{Reply, WireServer};

fn provider(server: &WireServer, model: &str) -> GeminiProvider {
    GeminiProvider::new(
        ProviderConfig {
            name: "gemini".into(),
            base_url: format!("{}/v1beta/", server.base_url),
            model: model.into(),
            api_key: Some("AIza-test-key".into()),
            http: HttpSettings::default(),
        },
        Gemini,
    )
    .unwrap()
}

fn text(text: &str) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
        "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 8,
        "candidatesTokenCount": 3, "thoughtsTokenCount": 5}, "modelVersion": "gemini-test-001"})
}

#[tokio::test]
async fn a_plain_answer_sends_the_exact_request() {
    let server = WireServer::start(vec![Reply::ok(text("Hello."))]).await;
    let gemini = provider(&server, "models/gemini-test");
    // A logged provider or configuration never shows its key.
    assert!(!format!("{gemini:?}").contains("AIza-test-key"));
    let response = gemini
        .complete(
            &ChatRequest {
                messages: vec![
                    Message::system("Be brief."),
                    Message::system("Be kind."),
                    Message::user("Hi"),
                ],
                tools: Vec::new(),
                tool_choice: Default::default(),
                options: ModelOptions {
                    temperature: Some(0.2),
                    max_tokens: Some(200),
                    ..ModelOptions::default()
                },
            },
            &ignore_retries,
        )
        .await
        .unwrap();
    assert_eq!(response.content.as_deref(), Some("Hello."));
    assert_eq!(response.model.as_deref(), Some("gemini-test-001"));
    // Thinking tokens are billed as output.
    assert_eq!(response.usage.completion_tokens, 8);
    let sent = &server.requests().await[0];
    assert_eq!(sent.path, "/v1beta/models/gemini-test:generateContent");
    assert_eq!(sent.header("x-goog-api-key"), Some("AIza-test-key"));
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(
        sent.body,
        json!({
            "systemInstruction": {"parts": [{"text": "Be brief.\n\nBe kind."}]},
            "contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
            "generationConfig": {"temperature": 0.2, "maxOutputTokens": 200}
        })
    );
}

/// Gemini's `Schema` object: the fields its function declarations accept.
const GEMINI_SCHEMA_FIELDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
];

/// Every schema field used, at any depth, with the path where it is.
fn fields(schema: &Value, path: &str, found: &mut Vec<String>) {
    let Some(object) = schema.as_object() else {
        return;
    };
    for (key, value) in object {
        found.push(format!("{path}.{key}"));
        if !GEMINI_SCHEMA_FIELDS.contains(&key.as_str()) {
            continue;
        }
        match key.as_str() {
            "properties" => {
                for (name, inner) in value.as_object().into_iter().flatten() {
                    fields(inner, &format!("{path}.{name}"), found);
                }
            }
            "items" => fields(value, &format!("{path}[]"), found),
            "anyOf" => value
                .as_array()
                .into_iter()
                .flatten()
                .for_each(|inner| fields(inner, &format!("{path}|"), found)),
            _ => {}
        }
    }
}

#[tokio::test]
async fn every_built_in_tool_is_declared_with_fields_gemini_accepts() {
    let db = common::sqlite().await;
    let runs: Arc<dyn RunStore> = Arc::new(SqlRunStore::new(db.db.clone()));
    let registry = builtin_registry(SiteStore::new(db.db.clone()), runs);
    let specs: Vec<_> = registry.specs();
    let server = WireServer::start(vec![Reply::ok(text("ok"))]).await;
    provider(&server, "gemini-test")
        .complete(
            &ChatRequest {
                messages: vec![Message::user("Hi")],
                tools: specs.clone(),
                tool_choice: Default::default(),
                options: ModelOptions::default(),
            },
            &ignore_retries,
        )
        .await
        .unwrap();
    let body = &server.requests().await[0].body;
    assert_eq!(
        body["toolConfig"],
        json!({"functionCallingConfig": {"mode": "AUTO"}})
    );
    let declarations = body["tools"][0]["functionDeclarations"].as_array().unwrap();
    assert_eq!(declarations.len(), specs.len());
    for (declaration, spec) in declarations.iter().zip(&specs) {
        assert_eq!(declaration["name"], spec.name.as_str());
        assert_eq!(declaration["description"], spec.description.as_str());
        let Some(parameters) = declaration.get("parameters") else {
            // Only tools without arguments are declared without parameters.
            assert!(
                spec.parameters["properties"]
                    .as_object()
                    .is_none_or(|p| p.is_empty()),
                "{}",
                spec.name
            );
            continue;
        };
        assert_eq!(parameters["type"], "object", "{}", spec.name);
        let mut found = Vec::new();
        fields(parameters, &spec.name, &mut found);
        let unknown: Vec<_> = found
            .iter()
            .filter(|f| {
                let key = f.rsplit('.').next().unwrap_or_default();
                !GEMINI_SCHEMA_FIELDS.contains(&key)
            })
            .collect();
        assert!(unknown.is_empty(), "{unknown:?}");
        // Every required field is declared.
        for required in parameters["required"].as_array().into_iter().flatten() {
            assert!(
                parameters["properties"]
                    .get(required.as_str().unwrap())
                    .is_some(),
                "{}: {required}",
                spec.name
            );
        }
    }
    db.cleanup().await;
}

#[tokio::test]
async fn calls_and_responses_after_a_decision_keep_signatures_names_and_order() {
    let server = WireServer::start(vec![
        Reply::ok(json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "Reading, then writing."},
            {"functionCall": {"name": "read_note", "args": {"text": "x"}}, "thoughtSignature": "c2lnLTE="},
            {"functionCall": {"name": "write_note", "args": {"text": "y"}}}
        ]}, "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 12}})),
        Reply::ok(text("Read it; the write was refused.")),
    ])
    .await;
    let probe = Probe::default();
    let tool_loop = ToolLoop::new(
        Arc::new(provider(&server, "gemini-test")),
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
    let state = nrllm_core::SuspendedState::from_json(&state.to_json()).unwrap();
    assert_eq!(state.pending[0].signature.as_deref(), Some("c2lnLTE="));
    let decision = Decision::PerCall {
        calls: vec![
            CallDecision {
                call_id: state.pending[0].id.clone(),
                choice: Choice::Approve,
            },
            CallDecision {
                call_id: state.pending[1].id.clone(),
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
    assert_eq!(
        sent["contents"],
        json!([
            {"role": "user", "parts": [{"text": "read and write"}]},
            {"role": "model", "parts": [
                {"text": "Reading, then writing."},
                {"functionCall": {"name": "read_note", "args": {"text": "x"}}, "thoughtSignature": "c2lnLTE="},
                {"functionCall": {"name": "write_note", "args": {"text": "y"}}}
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "read_note", "response": {"output": "note: x"}}},
                {"functionResponse": {"name": "write_note", "response": {"error": "denied by the operator: no"}}}
            ]}
        ])
    );
    assert_eq!(probe.count("write_note"), 0);
}

#[tokio::test]
async fn ids_the_model_sent_are_echoed_on_calls_and_responses() {
    let server = WireServer::start(vec![
        Reply::ok(
            json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"id": "fc-7", "name": "read_note", "args": {"text": "x"}}}
        ]}, "finishReason": "STOP"}]}),
        ),
        Reply::ok(text("Done.")),
    ])
    .await;
    let tool_loop = ToolLoop::new(
        Arc::new(provider(&server, "gemini-test")),
        Arc::new(probe_registry(&Probe::default())),
    );
    let input = RunInput {
        messages: vec![Message::user("read")],
        ..RunInput::default()
    };
    tool_loop
        .run(input, &RunContext::default(), &NullSink)
        .await
        .unwrap();
    let contents = &server.requests().await[1].body["contents"];
    assert_eq!(contents[1]["parts"][0]["functionCall"]["id"], "fc-7");
    assert_eq!(
        contents[2]["parts"][0]["functionResponse"],
        json!({"id": "fc-7", "name": "read_note", "response": {"output": "note: x"}})
    );
}
