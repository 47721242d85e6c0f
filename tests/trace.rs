//! A run's place in a distributed trace, in the real server: a run started with a caller's
//! `traceparent` (and `tracestate`) joins the caller's trace; a malformed one is ignored (the
//! run starts its own trace); a fork starts its own trace linked to its parent's; the run page
//! links to the trace where `trace_url_template` says.

#![cfg(feature = "ssr")]

mod common;

use common::{call, client, html, log_in, wait_for, ADMIN_PASSWORD};
use reqwest::header::COOKIE;
use serde_json::{json, Value};

const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Starts a run as `admin` with the headers `trace`; its id.
async fn start_with(
    server: &common::Server,
    admin: &common::Session,
    trace: &[(&str, &str)],
) -> String {
    let mut request = client()
        .post(format!("{}/api/nrllm_tool_run", server.base))
        .header(COOKIE, &admin.cookies)
        .header("x-csrf-token", &admin.csrf);
    for (name, value) in trace {
        request = request.header(*name, *value);
    }
    let response = request
        .json(&json!({ "prompt": "List the pages" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response
        .json::<Value>()
        .await
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_run_joins_its_callers_trace_and_a_fork_links_back_to_it() {
    let server = common::start(
        "trace_url_template = \"https://tempo.example/trace/{trace_id}?from=nrllm\"\n",
        &[],
    )
    .await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;

    let joined = start_with(
        &server,
        &admin,
        &[
            ("traceparent", CALLER),
            ("tracestate", "rojo=00f067aa0ba902b7"),
        ],
    )
    .await;
    let joined_view = wait_for(&server, &admin, &joined, "completed").await;
    let trace = &joined_view["trace"];
    assert_eq!(
        trace["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736",
        "{joined_view}"
    );
    assert_eq!(trace["parent_span_id"], "00f067aa0ba902b7");
    assert_ne!(trace["span_id"], "00f067aa0ba902b7");
    assert_eq!(
        trace["url"],
        "https://tempo.example/trace/4bf92f3577b34da6a3ce929d0e0e4736?from=nrllm"
    );
    // The log lines of driving it carry its trace, with export off.
    let log = server.log_text();
    assert!(
        log.lines().any(|line| {
            line.contains("trace_id=4bf92f3577b34da6a3ce929d0e0e4736")
                && line.contains(&format!("run_id={joined}"))
                && line.contains("segment of the run ended")
        }),
        "{log}"
    );
    let page = html(&server, &admin.cookies, &format!("/runs/{joined}")).await;
    assert!(
        page.contains(
            "href=\"https://tempo.example/trace/4bf92f3577b34da6a3ce929d0e0e4736?from=nrllm\""
        ),
        "{page}"
    );

    // Malformed (upper-case hex, two headers, a zero id): ignored, the run has its own trace.
    for bad in [
        vec![(
            "traceparent",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        )],
        vec![("traceparent", CALLER), ("traceparent", CALLER)],
        vec![(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        )],
    ] {
        let own = start_with(&server, &admin, &bad).await;
        let view = wait_for(&server, &admin, &own, "completed").await;
        let trace = &view["trace"];
        assert_ne!(
            trace["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736",
            "{bad:?}"
        );
        assert_eq!(trace["trace_id"].as_str().unwrap().len(), 32);
        assert!(trace["parent_span_id"].is_null(), "{bad:?}: {view}");
    }

    // A fork: its own trace, linked to the parent's.
    let step = joined_view["last_sequence"].as_i64().unwrap().to_string();
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_run_fork",
        json!({ "run_id": joined, "step": step, "prompt": "And again" }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let fork = body.as_str().unwrap().to_owned();
    let view = wait_for(&server, &admin, &fork, "completed").await;
    let trace = &view["trace"];
    assert_ne!(
        trace["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736",
        "{view}"
    );
    assert_eq!(trace["linked_trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    let page = html(&server, &admin.cookies, &format!("/runs/{fork}")).await;
    assert!(page.contains("linked to trace"), "{page}");
}

#[tokio::test]
async fn a_trace_url_template_without_its_place_for_the_id_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("settings.toml");
    std::fs::write(
        &config,
        "trace_url_template = \"https://tempo.example/trace/\"\n",
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_nrllm-playground"))
        .env("NRLLM_CONFIG", &config)
        .env(
            "NRLLM_DATABASE_URL",
            format!("sqlite:{}", dir.path().join("t.db").display()),
        )
        .output()
        .unwrap();
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("trace_url_template") && said.contains("{trace_id}"),
        "{said}"
    );
}
