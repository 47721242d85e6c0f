//! The approval deadline, against the real server binary: a turn nobody decides within its
//! configuration's `approval_timeout` (2 s here) expires — an `approval_expired` step, none of its
//! calls runs, the model reads that nobody decided (not a denial), and the run ends
//! `approval_expired`; a decision that comes after the deadline is 409 "expired at …". A
//! configuration with `approval_timeout = "none"` waits.

#![cfg(feature = "ssr")]

mod common;

use std::time::Duration;

use common::{call, log_in, start, wait_for, wait_until, ADMIN_PASSWORD};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn a_turn_nobody_decides_in_time_expires_and_the_model_reads_it() {
    let server = start(
        "log_level = \"info\"\napproval_timeout = \"2s\"\n\n[[configurations]]\nname = \"patient\"\nkind = \"demo\"\nmodel = \"demo-1\"\napproval_timeout = \"none\"\n",
        &[("NRLLM_LEASE_SECS", "1")],
    )
    .await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    let start_run = |configuration: &'static str| {
        let (server, admin) = (&server, &admin);
        async move {
            let (status, run) = call(
                server,
                admin,
                "nrllm_tool_run",
                json!({ "prompt": "Rename the home page to \"Too late\"", "configuration": configuration }),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{run}");
            run.as_str().unwrap().to_owned()
        }
    };
    let expiring = start_run("demo").await;
    let patient = start_run("patient").await;

    let waiting = wait_for(&server, &admin, &expiring, "waiting_for_approval").await;
    let deadline = waiting["summary"]["deadline"].as_str().unwrap().to_owned();
    assert!(deadline.starts_with("Decide by "), "{deadline}");
    assert!(deadline.contains(" s left)"), "{deadline}");
    let waiting_too = wait_for(&server, &admin, &patient, "waiting_for_approval").await;
    assert!(waiting_too["summary"]["deadline"].is_null());

    // Past the deadline: a decision is refused, whether or not the sweeper got there first.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": expiring, "decision": "approve_all" }),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.to_string().contains("expired at"), "{body}");

    // The turn expired: nothing ran, the model read why, and the run ended as expired.
    let done = wait_until(&server, &admin, &expiring, "ended", |view| {
        view["summary"]["status"] == "completed" || view["summary"]["status"] == "failed"
    })
    .await;
    assert_eq!(
        done["summary"]["termination_reason"], "approval_expired",
        "{done}"
    );
    assert!(
        done["summary"]["decision"]
            .as_str()
            .unwrap()
            .starts_with("expired by deadline"),
        "{done}"
    );
    let titles: Vec<String> = done["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{}: {}",
                s["kind"].as_str().unwrap(),
                s["title"].as_str().unwrap()
            )
        })
        .collect();
    assert!(
        titles
            .iter()
            .any(|t| t.starts_with("approval_expired: expired: nobody decided")),
        "{titles:?}"
    );
    assert!(
        !titles.iter().any(|t| t.starts_with("approval_decided")),
        "{titles:?}"
    );
    // The tool step answers the call with the expiry, and the model's next request carried it.
    let export = call(
        &server,
        &admin,
        "nrllm_run_get",
        json!({ "run_id": expiring }),
    )
    .await
    .1;
    let tool_step = export["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "tool" && s["title"].as_str().unwrap().contains("update_page"))
        .cloned()
        .unwrap_or_else(|| panic!("{titles:?}"));
    let (_, detail) = call(
        &server,
        &admin,
        "nrllm_run_get",
        json!({ "run_id": expiring, "step": tool_step["sequence"], "tab": "result" }),
    )
    .await;
    assert!(
        detail
            .to_string()
            .contains("before the approval deadline, so it was not run"),
        "{detail}"
    );
    // The configuration without a timeout still waits.
    let pages = call(
        &server,
        &admin,
        "nrllm_run_get",
        json!({ "run_id": patient }),
    )
    .await
    .1;
    assert_eq!(
        pages["summary"]["status"], "waiting_for_approval",
        "no timeout: still waiting"
    );
    let log = server.log_text();
    assert!(log.contains("the turn expired"), "{log}");
}
