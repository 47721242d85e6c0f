//! Queued runs and cancel, against the real server binary on SQLite with `max_running_runs = 1`
//! and a demo model that thinks 1.5 s per answer: a second and third run wait `queued` with their
//! place in line (on the page too); cancel ends a queued run and a waiting run at once and stops a
//! running one at its next step (the model call in flight abandoned) with who and why; a
//! cancelled run is final (409).

#![cfg(feature = "ssr")]

mod common;

use std::time::{Duration, Instant};

use common::{call, html, log_in, start, start_run, wait_for, wait_until, ADMIN_PASSWORD};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn queued_runs_show_their_place_and_cancel_works_in_every_state() {
    let server = start(
        "log_level = \"info\"\n",
        &[
            ("NRLLM_MAX_RUNNING_RUNS", "1"),
            ("NRLLM_DEMO_THINK_MS", "1500"),
        ],
    )
    .await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    let rename = |title: &str| json!({ "prompt": format!("Rename the home page to \"{title}\"") });
    let first = start_run(&server, &admin, rename("One")).await;
    wait_for(&server, &admin, &first, "running").await;
    let second = start_run(&server, &admin, rename("Two")).await;
    let third = start_run(&server, &admin, rename("Three")).await;

    // One runs; the others wait in line, in order.
    let position = |run: &str| {
        let (server, admin, run) = (&server, &admin, run.to_owned());
        async move {
            let (_, view) = call(server, admin, "nrllm_run_get", json!({ "run_id": run })).await;
            assert_eq!(view["summary"]["status"], "queued", "{view}");
            view["summary"]["queue_position"].as_u64()
        }
    };
    assert_eq!(position(&second).await, Some(1));
    assert_eq!(position(&third).await, Some(2));
    let page = html(&server, &admin.cookies, &format!("/runs/{third}")).await;
    assert!(page.contains("data-testid=\"queued-note\""), "{page}");
    assert!(page.contains("Queued: 2 in line"), "{page}");

    // A queued run is cancelled at once, and the one behind it moves up.
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_run_cancel",
        json!({ "run_id": second, "reason": "not needed" }),
    )
    .await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, Some("cancelled")));
    assert_eq!(position(&third).await, Some(1));

    // The running one stops at its next step: its model call is abandoned.
    let asked_at = Instant::now();
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_run_cancel",
        json!({ "run_id": first, "reason": "wrong page" }),
    )
    .await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, Some("running")));
    let stopped = wait_for(&server, &admin, &first, "cancelled").await;
    assert!(
        asked_at.elapsed() < Duration::from_millis(1_400),
        "it did not wait for the model's answer: {:?}",
        asked_at.elapsed()
    );
    assert_eq!(stopped["summary"]["termination_reason"], "cancelled");
    let last = stopped["steps"].as_array().unwrap().last().unwrap().clone();
    let title = last["title"].as_str().unwrap();
    assert!(
        title.contains("cancelled by admin: wrong page")
            && title.contains("a model call in flight was abandoned"),
        "{title}"
    );
    assert!(server.log_text().contains("a running run was cancelled"));

    // The slot is free: the third run is taken, asks the model and waits for a decision; a
    // waiting run is cancelled at once.
    wait_for(&server, &admin, &third, "waiting_for_approval").await;
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_run_cancel",
        json!({ "run_id": third }),
    )
    .await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, Some("cancelled")));

    // Cancelled is final.
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_run_cancel",
        json!({ "run_id": first }),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let done = wait_until(&server, &admin, &second, "stayed cancelled", |view| {
        view["summary"]["status"] == "cancelled"
    })
    .await;
    assert!(done["summary"]["queue_position"].is_null());
}
