//! A run's spans in a real OTLP receiver (OpenTelemetry's protobuf types behind a local
//! server): one trace across a suspend, a restart of the server between the suspend and the
//! decision, and the resume in the second process — the `invoke_agent` root with its stored id
//! and start, under the caller's span; `chat` and `execute_tool` spans under the root with the
//! GenAI attributes, from both processes; the wait's span under the root with
//! `nrllm.approval.*`; no message contents unless the setting turns them on.

#![cfg(feature = "ssr")]

mod common;

use std::time::Duration;

use common::{call, client, log_in, wait_for, wait_until, ADMIN_PASSWORD};
use nrllm_telemetry::receiver::{Received, Receiver};
use reqwest::header::COOKIE;
use serde_json::{json, Value};

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// The server's environment for export to `receiver` over `protocol`, in small batches.
fn exporting<'a>(receiver: &'a str, db: &'a str, protocol: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("NRLLM_OTLP_ENDPOINT", receiver),
        ("NRLLM_OTLP_PROTOCOL", protocol),
        ("NRLLM_DATABASE_URL", db),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ]
}

/// Starts a run as `admin` under the caller's span; its id.
async fn start_traced(server: &common::Server, admin: &common::Session, prompt: &str) -> String {
    let response = client()
        .post(format!("{}/api/nrllm_tool_run", server.base))
        .header(COOKIE, &admin.cookies)
        .header("x-csrf-token", &admin.csrf)
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .json(&json!({ "prompt": prompt }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let id: Value = response.json().await.unwrap();
    id.as_str().unwrap().to_owned()
}

fn named<'a>(spans: &'a [Received], name: &str) -> Vec<&'a Received> {
    spans.iter().filter(|span| span.name == name).collect()
}

fn starting<'a>(spans: &'a [Received], prefix: &str) -> Vec<&'a Received> {
    spans
        .iter()
        .filter(|span| span.name.starts_with(prefix))
        .collect()
}

// On two threads: the receiver is served by this runtime while the test blocks waiting for the
// first process to exit (on one thread, that process's last export would wait for an answer
// until its shutdown gave up, and its spans could be lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_across_a_suspend_a_restart_and_a_resume_in_another_process() {
    let receiver = Receiver::http().await.unwrap();
    let endpoint = receiver.endpoint();
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("shared.db").display());

    // The first process: the run starts under the caller's span and waits for an approval.
    let mut first = common::start("", &exporting(&endpoint, &db, "http/protobuf")).await;
    let admin = log_in(&first, "admin", ADMIN_PASSWORD).await;
    let run_id = start_traced(&first, &admin, "Create a page traced titled \"Traced\"").await;
    let waiting = wait_for(&first, &admin, &run_id, "waiting_for_approval").await;
    let trace = waiting["trace"].clone();
    let (trace_id, root_id) = (
        trace["trace_id"].as_str().unwrap().to_owned(),
        trace["span_id"].as_str().unwrap().to_owned(),
    );
    assert_eq!(trace_id, CALLER_TRACE);
    // Stopped between the suspend and the decision: its last spans are flushed as it stops,
    // so it is given the time to stop (dropped at once, it would be killed mid-flush).
    first.signal("TERM");
    let stopped = first.exited_within(Duration::from_secs(30));
    let first_log = first.log_text();
    assert!(
        stopped.is_some_and(|status| status.success()),
        "{stopped:?}: {first_log}"
    );
    assert!(
        !first_log.contains("not sent in time") && !first_log.contains("did not take spans"),
        "the first process's spans all left: {first_log}"
    );
    drop(first);

    // The second process, on the same database: the decision, the resume, the end.
    let second = common::start("", &exporting(&endpoint, &db, "http/protobuf")).await;
    let admin = log_in(&second, "admin", ADMIN_PASSWORD).await;
    let view = wait_for(&second, &admin, &run_id, "waiting_for_approval").await;
    let digest = view["digest"].as_str().map(str::to_owned);
    let (status, body) = call(
        &second,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": run_id, "decision": "approve_all", "digest": digest }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    wait_for(&second, &admin, &run_id, "completed").await;

    let spans = receiver
        .wait_for(
            |spans| spans.iter().any(|span| span.span_id == root_id),
            Duration::from_secs(20),
        )
        .await;
    let all = spans.len();
    let ours: Vec<Received> = spans
        .into_iter()
        .filter(|span| span.trace_id == trace_id)
        .collect();

    // The root: its stored id, under the caller's span, from the run's start to its end.
    let roots = starting(&ours, "invoke_agent");
    assert_eq!(roots.len(), 1, "{all} spans in all; ours: {ours:#?}");
    let root = roots[0];
    assert_eq!(root.span_id, root_id);
    assert_eq!(root.parent_span_id, CALLER_SPAN);
    assert_eq!(root.text("gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(root.text("nrllm.run.id"), Some(run_id.as_str()));
    assert_eq!(root.text("nrllm.run.status"), Some("completed"));
    assert_eq!(root.service, "nrllm-playground");

    // Model requests under the root, before and after the restart, each within the run's
    // time, with the GenAI attributes.
    let chats = starting(&ours, "chat");
    assert!(chats.len() >= 2, "{ours:#?}");
    for chat in &chats {
        assert_eq!(chat.parent_span_id, root_id, "{chat:#?}");
        assert!(chat.start_unix_ns >= root.start_unix_ns);
        assert!(chat.end_unix_ns <= root.end_unix_ns);
        assert_eq!(chat.text("gen_ai.operation.name"), Some("chat"));
        assert_eq!(chat.text("gen_ai.provider.name"), Some("demo"));
        assert!(chat.text("gen_ai.request.model").is_some(), "{chat:#?}");
        assert!(chat.text("gen_ai.response.model").is_some(), "{chat:#?}");
        assert!(chat.int("gen_ai.usage.input_tokens").is_some(), "{chat:#?}");
        assert!(
            chat.int("gen_ai.usage.output_tokens").is_some(),
            "{chat:#?}"
        );
        assert!(
            chat.attributes["gen_ai.response.finish_reasons"].is_array(),
            "{chat:#?}"
        );
        assert!(!chat.instance.is_empty());
        // Contents are off by default.
        assert!(!chat.attributes.contains_key("gen_ai.input.messages"));
        assert!(!chat.attributes.contains_key("gen_ai.output.messages"));
    }

    // The approved call ran in the second process, keyed, under the root.
    let tools = named(&ours, "execute_tool create_page");
    assert_eq!(tools.len(), 1, "{ours:#?}");
    let tool = tools[0];
    assert_eq!(tool.text("gen_ai.tool.name"), Some("create_page"));
    assert!(tool.text("gen_ai.tool.call.id").is_some());
    assert!(tool.text("nrllm.effect_key").is_some(), "{tool:#?}");
    assert_eq!(tool.parent_span_id, root_id);
    // The first model request came from the first process, the call from the second.
    let first = chats.iter().min_by_key(|chat| chat.start_unix_ns).unwrap();
    assert_ne!(first.instance, tool.instance);
    assert_eq!(root.instance, tool.instance);
    assert!(!tool.attributes.contains_key("gen_ai.tool.call.arguments"));

    // The wait, under the root, from the suspend to the decision.
    let waits = named(&ours, "nrllm.wait approval");
    assert_eq!(waits.len(), 1, "{ours:#?}");
    let wait = waits[0];
    assert_eq!(wait.parent_span_id, root_id);
    assert_eq!(wait.text("nrllm.approval.decision"), Some("approved"));
    assert_eq!(wait.text("nrllm.approval.decided_by"), Some("admin"));
    assert_eq!(wait.text("nrllm.approval.digest"), digest.as_deref());
    let waited = wait.int("nrllm.approval.waited_ms").unwrap();
    assert!(waited >= 0);
    assert_eq!(
        (wait.end_unix_ns - wait.start_unix_ns) / 1_000_000,
        u64::try_from(waited).unwrap()
    );
    // The wait began as the first segment ended, and ended before the resumed call ran.
    assert!(wait.end_unix_ns <= tool.start_unix_ns + 1_000_000);
}

#[tokio::test]
async fn message_contents_go_on_spans_only_when_the_setting_says_and_grpc_carries_them() {
    let receiver = Receiver::grpc().await.unwrap();
    let endpoint = receiver.endpoint();
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("contents.db").display());
    let server = common::start(
        "trace_message_contents = true\n",
        &exporting(&endpoint, &db, "grpc"),
    )
    .await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    let run_id = start_traced(&server, &admin, "List the pages").await;
    let done = wait_for(&server, &admin, &run_id, "completed").await;
    let root_id = done["trace"]["span_id"].as_str().unwrap().to_owned();
    let spans = receiver
        .wait_for(
            |spans| spans.iter().any(|span| span.span_id == root_id),
            Duration::from_secs(20),
        )
        .await;
    let chats = starting(&spans, "chat");
    assert!(!chats.is_empty(), "{spans:#?}");
    let input = chats[0].text("gen_ai.input.messages").unwrap();
    assert!(input.contains("List the pages"), "{input}");
    assert!(chats
        .iter()
        .any(|chat| chat.text("gen_ai.output.messages").is_some()));
    let tools = starting(&spans, "execute_tool");
    assert!(!tools.is_empty(), "{spans:#?}");
    assert!(tools[0].text("gen_ai.tool.call.result").is_some());
    // Never in the log.
    assert!(!server.log_text().contains("gen_ai.input.messages"));
}

#[tokio::test]
async fn a_webhook_delivery_names_the_runs_root_span_only_while_spans_are_exported() {
    let receiver = Receiver::http().await.unwrap();
    let endpoint = receiver.endpoint();
    for exported in [true, false] {
        let (hooks, received) = common::fakes::receiver().await;
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite:{}", dir.path().join("hooked.db").display());
        let settings = format!("webhook_url = \"{hooks}/ok\"\n");
        let mut env = match exported {
            true => exporting(&endpoint, &db, "http/protobuf"),
            false => vec![("NRLLM_DATABASE_URL", db.as_str())],
        };
        env.push(("NRLLM_WEBHOOK_SECRET", "whsec-otel-test-0123456789abcdef"));
        let server = common::start(&settings, &env).await;
        let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
        let run_id = start_traced(&server, &admin, "Create a page hooked titled \"Hooked\"").await;
        let waiting = wait_for(&server, &admin, &run_id, "waiting_for_approval").await;
        let root_id = waiting["trace"]["span_id"].as_str().unwrap().to_owned();
        wait_until(&server, &admin, &run_id, "was announced", |view| {
            view["webhooks"][0]["state"] == "delivered"
        })
        .await;
        let deliveries = received.on("ok");
        let first = deliveries[0]
            .0
            .get("traceparent")
            .map(|value| value.to_str().unwrap().to_owned());
        match exported {
            // The delivery is about the run: its parent is the run's root span, in the caller's
            // trace, sampled as the caller asked.
            true => assert_eq!(
                first,
                Some(format!("00-{CALLER_TRACE}-{root_id}-01")),
                "{}",
                server.log_text()
            ),
            false => assert_eq!(first, None),
        }
    }
}
