//! The trace context that leaves with a run's requests, with the real export installed: each
//! request to a provider (the OpenAI-compatible adapter, against wiremock) carries a
//! `traceparent` naming its exported `chat` span, and each MCP call (to the demo server over
//! Streamable HTTP) carries one naming its `execute_tool` span in `_meta`. Nothing leaves
//! 127.0.0.1.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use nrllm_core::events::NullSink;
use nrllm_core::mcp::ServerPolicy;
use nrllm_core::registry::ToolRegistry;
use nrllm_core::transcript::Message;
use nrllm_core::{LoopOutcome, RunContext, RunInput, ToolLoop, ToolLoopService};
use nrllm_mcp::config::{Server, Transport};
use nrllm_mcp::demo::DemoServer;
use nrllm_providers::http::{HttpSettings, RetryPolicy};
use nrllm_providers::openai::{OpenAi, OpenAiProvider};
use nrllm_providers::ProviderConfig;
use nrllm_telemetry::receiver::{Received, Receiver};
use nrllm_telemetry::{Config, OtlpProtocol, Telemetry};
use serde_json::json;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A provider that answers a call to `web__read_note`, then the answer.
async fn model() -> MockServer {
    let server = MockServer::start().await;
    let replies = [
        json!({"model": "gpt-test-2026-12-01", "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "r1", "type": "function", "function": {
                "name": "web__read_note", "arguments": "{\"name\":\"home\"}"}}]},
            "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 20, "completion_tokens": 9}}),
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Read."},
            "finish_reason": "stop"}], "usage": {"prompt_tokens": 30, "completion_tokens": 2}}),
    ];
    for reply in replies {
        Mock::given(wiremock::matchers::any())
            .respond_with(ResponseTemplate::new(200).set_body_json(reply))
            .up_to_n_times(1)
            .mount(&server)
            .await;
    }
    server
}

fn provider(server: &MockServer) -> OpenAiProvider {
    OpenAiProvider::new(
        ProviderConfig {
            name: "openai".into(),
            base_url: format!("{}/v1", server.uri()),
            model: "gpt-test".into(),
            api_key: None,
            http: HttpSettings {
                connect_timeout: Duration::from_secs(2),
                request_timeout: Duration::from_secs(5),
                retry: RetryPolicy::default(),
            },
        },
        OpenAi::default(),
    )
    .unwrap()
}

/// The demo MCP server over Streamable HTTP, joined to a registry.
async fn demo_tools() -> (
    DemoServer,
    Arc<ToolRegistry>,
    tokio_util::sync::CancellationToken,
) {
    let demo = DemoServer::open(None).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let router = nrllm_mcp::demo::serving::router(demo.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });
    let registry = Arc::new(ToolRegistry::new());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let server = Server {
        name: "web".into(),
        transport: Transport::Http {
            url,
            headers: BTreeMap::new(),
            header_env: BTreeMap::new(),
        },
        allow: None,
        policy: ServerPolicy::default(),
        call_timeout: Duration::from_secs(10),
        elicitation_timeout: None,
    };
    let _hub = nrllm_mcp::hub::McpHub::start(
        vec![server],
        Arc::clone(&registry),
        shutdown.clone(),
        (Duration::from_secs(20), None),
    )
    .await;
    assert!(registry.get("web__read_note").is_some(), "the demo joined");
    (demo, registry, shutdown)
}

/// The span id a `traceparent` names, after checking its trace id.
fn span_of(traceparent: &str, trace_id: &str) -> String {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(parts[1], trace_id, "{traceparent}");
    parts[2].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_for_a_run_name_their_own_spans() {
    let receiver = Receiver::http().await.unwrap();
    let telemetry = Telemetry::install(&Config {
        endpoint: Some(receiver.endpoint()),
        protocol: Some(OtlpProtocol::HttpProtobuf),
        message_contents: false,
        service_name: "outbound-test".into(),
    })
    .unwrap()
    .expect("export is on");

    let model = model().await;
    let (demo, registry, shutdown) = demo_tools().await;
    let tool_loop = ToolLoop::new(Arc::new(provider(&model)), registry);
    let input = RunInput {
        messages: vec![Message::user("read the home note")],
        ..RunInput::default()
    };
    let trace = nrllm_core::trace::RunTrace::start(None);
    let ctx = RunContext {
        trace: Some(trace.clone()),
        ..RunContext::default()
    };
    let outcome = tool_loop.run(input, &ctx, &NullSink).await.unwrap();
    assert!(matches!(outcome, LoopOutcome::Completed(_)), "{outcome:?}");
    shutdown.cancel();
    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .unwrap();
    let spans = receiver
        .wait_for(|spans| spans.len() >= 3, Duration::from_secs(10))
        .await;
    let named = |prefix: &str| -> Vec<&Received> {
        spans
            .iter()
            .filter(|s| s.name.starts_with(prefix))
            .collect()
    };

    // Each model request names its own chat span, a child of the run's root.
    let chats = named("chat gpt-test");
    assert_eq!(chats.len(), 2, "{spans:#?}");
    for span in chats.iter().chain(&named("execute_tool")) {
        assert_eq!(span.trace_id, trace.trace_id, "{span:#?}");
        assert_eq!(span.parent_span_id, trace.span_id, "{span:#?}");
    }
    let sent = model.received_requests().await.unwrap();
    assert_eq!(sent.len(), 2);
    for request in &sent {
        let header = request
            .headers
            .get("traceparent")
            .expect("a traceparent on the request")
            .to_str()
            .unwrap();
        assert!(header.ends_with("-01"), "{header}");
        let named = span_of(header, &trace.trace_id);
        assert!(
            chats.iter().any(|c| c.span_id == named),
            "{header} names a chat span: {chats:#?}"
        );
    }
    assert_ne!(
        sent[0].headers.get("traceparent"),
        sent[1].headers.get("traceparent")
    );
    // The model that answered, as the provider named it; the one asked for when it did not.
    let answered: Vec<_> = chats
        .iter()
        .map(|chat| {
            assert_eq!(chat.text("gen_ai.request.model"), Some("gpt-test"));
            chat.text("gen_ai.response.model")
        })
        .collect();
    assert!(
        answered.contains(&Some("gpt-test-2026-12-01")),
        "{chats:#?}"
    );
    assert!(answered.contains(&Some("gpt-test")), "{chats:#?}");

    // The MCP call names its execute_tool span in `_meta`.
    let tools = named("execute_tool web__read_note");
    assert_eq!(tools.len(), 1, "{spans:#?}");
    let seen = demo.traceparents();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(span_of(&seen[0], &tools[0].trace_id), tools[0].span_id);
}
