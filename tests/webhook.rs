//! The signed webhook, against the real server binary and a local receiver: a run that needs a
//! decision is announced with a body that names its calls, signed with HMAC-SHA256 over the
//! timestamp and the body; a receiver that answers 500 twice gets the third attempt; a receiver
//! that never answers well is given up after the last attempt; the run page shows both; the
//! secret is in neither the log nor the database. A run that asks the operator a question is
//! announced too, as waiting for input.

#![cfg(feature = "ssr")]

mod common;

use std::time::Duration;

use axum::http::HeaderMap;
use common::fakes::receiver;
use common::{call, log_in, start, start_run, wait_for, wait_until, ADMIN_PASSWORD};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};

const SECRET: &str = "whsec-7c1d6f0e5b2a4c9e8d3f1a6b0c5e2d9f";

/// Checks a delivery's signature the way a receiver would, with its own HMAC.
fn signature_holds(headers: &HeaderMap, body: &str) -> bool {
    let timestamp = headers["x-nrllm-timestamp"].to_str().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let fresh = timestamp
        .parse::<i64>()
        .is_ok_and(|t| (now - t).abs() < 300);
    let Some(hex) = headers["x-nrllm-signature-256"]
        .to_str()
        .unwrap()
        .strip_prefix("sha256=")
    else {
        return false;
    };
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{timestamp}.{body}").as_bytes());
    fresh && mac.verify_slice(&bytes).is_ok()
}

#[tokio::test]
async fn a_waiting_run_is_announced_signed_and_retried_until_delivered() {
    let (hooks, received) = receiver().await;
    let settings = format!(
        "log_level = \"info\"\nwebhook_url = \"{hooks}/flaky\"\nwebhook_max_attempts = 3\n\n\
         [[configurations]]\nname = \"paged\"\nkind = \"demo\"\nmodel = \"demo-1\"\n\
         webhook_url = \"{hooks}/down\"\n"
    );
    let server = start(
        &settings,
        &[
            ("NRLLM_WEBHOOK_SECRET", SECRET),
            ("NRLLM_WEBHOOK_BACKOFF_MS", "50"),
        ],
    )
    .await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;

    let (status, run) = call(
        &server,
        &admin,
        "nrllm_tool_run",
        json!({ "prompt": "Create a page hooks titled \"Hooked\"" }),
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{run}");
    let run_id = run.as_str().unwrap().to_owned();
    wait_for(&server, &admin, &run_id, "waiting_for_approval").await;

    // Three attempts: two answered 500, the third delivered; the page says so.
    let view = wait_until(&server, &admin, &run_id, "was delivered", |view| {
        view["webhooks"][0]["state"] == "delivered"
    })
    .await;
    assert_eq!(view["webhooks"][0]["attempts"], 3, "{view}");
    assert!(view["webhooks"][0]["text"]
        .as_str()
        .unwrap()
        .ends_with("after 3 attempts"));
    let deliveries = received.on("flaky");
    assert_eq!(deliveries.len(), 3);
    for (headers, body) in &deliveries {
        assert!(signature_holds(headers, body), "{headers:?}");
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(headers["x-nrllm-event"], "run.waiting_for_approval");
        assert_eq!(
            headers["x-nrllm-delivery"], deliveries[0].0["x-nrllm-delivery"],
            "one delivery, attempted three times"
        );
        assert_eq!(body, &deliveries[0].1);
    }
    // A body signed for another secret, or tampered with, does not verify.
    let (headers, body) = &deliveries[0];
    assert!(!signature_holds(headers, &body.replace("Hooked", "Hacked")));

    let body: Value = serde_json::from_str(&deliveries[0].1).unwrap();
    assert_eq!(body["run_id"], run_id);
    assert_eq!(body["configuration"], "demo");
    assert_eq!(body["requested_by"], "admin");
    assert_eq!(
        body["link"],
        format!("http://127.0.0.1:{}/runs/{run_id}", server.port)
    );
    assert_eq!(body["calls"][0]["tool"], "create_page", "{body}");
    assert_eq!(body["calls"][0]["arguments"]["title"], "Hooked", "{body}");
    assert!(body["calls"][0]["preview"].is_string(), "{body}");
    assert!(body["deadline_ms"].as_i64().unwrap() > body["waiting_since_ms"].as_i64().unwrap());
    assert_eq!(body["digest"], view["digest"], "the turn the page shows");

    // A configuration with its own webhook: that receiver never answers well, so the delivery is
    // given up after the third attempt, and the page says so.
    let (_, paged) = call(
        &server,
        &admin,
        "nrllm_tool_run",
        json!({ "prompt": "Create a page paged titled \"Paged\"", "configuration": "paged" }),
    )
    .await;
    let paged = paged.as_str().unwrap().to_owned();
    let view = wait_until(&server, &admin, &paged, "gave its webhook up", |view| {
        view["webhooks"][0]["state"] == "failed"
    })
    .await;
    assert_eq!(view["webhooks"][0]["attempts"], 3, "{view}");
    assert!(view["webhooks"][0]["text"]
        .as_str()
        .unwrap()
        .contains("failed after 3 attempts (HTTP 500)"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(received.on("down").len(), 3, "no fourth attempt");
    assert_eq!(
        received.on("flaky").len(),
        3,
        "the other receiver heard nothing more"
    );

    // Decided, the run is not announced again; the secret is nowhere but the environment.
    let (status, _) = call(
        &server,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": run_id, "decision": "approve_all" }),
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::OK);
    wait_for(&server, &admin, &run_id, "completed").await;
    let log = server.log_text();
    assert!(log.contains("a webhook delivery failed"), "{log}");
    assert!(!log.contains(SECRET), "the secret reached the log");
    assert!(
        !log.contains("/flaky") && !log.contains("/down"),
        "the URL reached the log"
    );
    let bytes = server.database_bytes();
    assert!(!bytes.is_empty());
    assert!(
        !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
        "the secret reached the database"
    );
}

#[tokio::test]
async fn a_question_is_announced_as_waiting_for_input_and_the_next_turn_as_approval() {
    let (hooks, received) = receiver().await;
    let server = start(
        &format!("log_level = \"info\"\nwebhook_url = \"{hooks}/ok\"\n"),
        &[("NRLLM_WEBHOOK_SECRET", SECRET)],
    )
    .await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    let run_id = start_run(
        &server,
        &admin,
        json!({ "prompt": "Publish a page — ask me which one" }),
    )
    .await;
    wait_for(&server, &admin, &run_id, "waiting_for_input").await;
    let view = wait_until(&server, &admin, &run_id, "announced its question", |view| {
        view["webhooks"][0]["state"] == "delivered"
    })
    .await;
    let deliveries = received.on("ok");
    assert_eq!(deliveries.len(), 1);
    let (headers, body) = &deliveries[0];
    assert!(signature_holds(headers, body), "{headers:?}");
    assert_eq!(headers["x-nrllm-event"], "run.waiting_for_input");
    let body: Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["event"], "run.waiting_for_input");
    assert_eq!(body["run_id"], run_id);
    assert_eq!(body["calls"][0]["tool"], "ask_operator", "{body}");
    assert_eq!(
        body["calls"][0]["arguments"]["question"], "Which page should I publish?",
        "{body}"
    );
    assert_eq!(body["digest"], view["digest"], "the turn the page shows");

    // Answered, the run waits for a decision on the call the answer led to: announced as such.
    let (status, _) = call(
        &server,
        &admin,
        "nrllm_input_answer",
        json!({ "run_id": run_id, "answer": "careers" }),
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::OK);
    wait_for(&server, &admin, &run_id, "waiting_for_approval").await;
    wait_until(&server, &admin, &run_id, "announced its calls", |view| {
        view["webhooks"]
            .as_array()
            .is_some_and(|all| all.len() == 2 && all.iter().all(|d| d["state"] == "delivered"))
    })
    .await;
    let deliveries = received.on("ok");
    assert_eq!(deliveries.len(), 2);
    let (headers, body) = deliveries
        .iter()
        .find(|(_, body)| body.contains("publish_page"))
        .expect("the second turn's delivery");
    assert_eq!(headers["x-nrllm-event"], "run.waiting_for_approval");
    let body: Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["event"], "run.waiting_for_approval");
    assert_eq!(body["calls"][0]["tool"], "publish_page", "{body}");
}

#[tokio::test]
async fn a_webhook_without_a_secret_stops_the_start_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("settings.toml");
    std::fs::write(&config, "webhook_url = \"http://127.0.0.1:9/hook\"\n").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_nrllm-playground"))
        .env("NRLLM_CONFIG", &config)
        .env(
            "NRLLM_DATABASE_URL",
            format!("sqlite:{}", dir.path().join("x.db").display()),
        )
        .env("NRLLM_SITE_ADDR", "127.0.0.1:0")
        .env_remove("NRLLM_WEBHOOK_SECRET")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("NRLLM_WEBHOOK_SECRET") && stderr.contains("webhook_url"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_run_at_a_daily_cap_is_announced_with_its_stop_and_goes_on_when_the_cap_is_raised() {
    let (hooks, received) = receiver().await;
    // A configuration that may spend nothing today: its runs wait before their first request.
    let settings = format!(
        "log_level = \"info\"\nwebhook_url = \"{hooks}/ok\"\n\n\
         [[configurations]]\nname = \"metered\"\nkind = \"demo\"\nmodel = \"demo-1\"\n\
         price_input_per_million = 1000\nprice_output_per_million = 1000\n\
         spend_cap_usd_per_day = 0\n"
    );
    let server = start(&settings, &[("NRLLM_WEBHOOK_SECRET", SECRET)]).await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    let run_id = start_run(
        &server,
        &admin,
        json!({ "prompt": "List the pages", "configuration": "metered" }),
    )
    .await;
    wait_for(&server, &admin, &run_id, "waiting_for_budget").await;
    wait_until(&server, &admin, &run_id, "announced its stop", |view| {
        view["webhooks"][0]["state"] == "delivered"
    })
    .await;
    let deliveries = received.on("ok");
    let (headers, body) = &deliveries[0];
    assert!(signature_holds(headers, body), "{headers:?}");
    assert_eq!(headers["x-nrllm-event"], "run.waiting_for_budget");
    let body: Value = serde_json::from_str(body).unwrap();
    let budget = &body["budget"];
    assert_eq!(budget["limit"], "cost_micros", "{body}");
    assert_eq!(
        (budget["used"].as_u64(), budget["cap"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(
        budget["next"],
        json!({"action": "model_request", "round": 1})
    );
    assert_eq!(budget["daily_cap"]["scope"], "configuration", "{body}");
    let today =
        nrllm_core::spend::show_day(nrllm_core::spend::utc_day(nrllm_core::clock::now_ms()));
    assert_eq!(budget["daily_cap"]["day"], today.as_str());
    assert!(
        budget["explanation"]
            .as_str()
            .unwrap()
            .starts_with("the configuration's daily spend cap for"),
        "{body}"
    );
    assert_eq!(
        body["calls"],
        json!([]),
        "nothing pending: it stopped before asking"
    );

    // A person's raise of its own limits is refused; the administrator raises the day's cap.
    let (status, refused) = call(
        &server,
        &admin,
        "nrllm_budget_decide",
        json!({ "run_id": run_id, "decision": "raise", "raise_by": "1" }),
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{refused}");
    for (raise_by, scope, name, expected) in [
        (
            "-1",
            "configuration",
            "metered",
            reqwest::StatusCode::BAD_REQUEST,
        ),
        ("1", "team", "metered", reqwest::StatusCode::BAD_REQUEST),
        (
            "1",
            "configuration",
            "nowhere",
            reqwest::StatusCode::BAD_REQUEST,
        ),
        ("1", "configuration", "metered", reqwest::StatusCode::OK),
    ] {
        let (status, answer) = call(
            &server,
            &admin,
            "nrllm_spend_cap_raise",
            json!({ "scope": scope, "name": name, "raise_by": raise_by }),
        )
        .await;
        assert_eq!(status, expected, "{scope} {name} {raise_by}: {answer}");
    }
    wait_for(&server, &admin, &run_id, "completed").await;
    let (_, system) = call(&server, &admin, "nrllm_system_status", json!({})).await;
    let row = system["spend"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["name"] == "metered")
        .cloned()
        .unwrap();
    assert_eq!(row["raised"], "$1.0000", "{row}");
    assert_eq!(row["reached"], false, "{row}");
}

/// A turn that needs two approvals (M-of-N): announced with where its count stands and who may
/// approve; each approval that counts is announced again (`run.approval_counted`, the run still
/// waiting at the same digest); the requester's approval is refused and announces nothing.
#[tokio::test]
async fn each_approval_toward_a_turn_needing_two_is_announced_with_the_count() {
    let (hooks, received) = receiver().await;
    let server = start(
        &format!(
            "log_level = \"info\"\nwebhook_url = \"{hooks}/ok\"\n\n\
             [[configurations]]\nname = \"two\"\nkind = \"demo\"\nmodel = \"demo-1\"\n\
             approvals_required = 2\n"
        ),
        &[("NRLLM_WEBHOOK_SECRET", SECRET)],
    )
    .await;
    let team = common::users(&server, &[("alice", "approver"), ("bert", "approver")]).await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    let run_id = start_run(
        &server,
        &admin,
        json!({ "prompt": "Create a page counted titled \"Two\"", "configuration": "two" }),
    )
    .await;
    let view = wait_for(&server, &admin, &run_id, "waiting_for_approval").await;
    let digest = view["digest"].clone();
    wait_until(&server, &admin, &run_id, "announced", |view| {
        view["webhooks"][0]["state"] == "delivered"
    })
    .await;
    let first: Value = serde_json::from_str(&received.on("ok")[0].1).unwrap();
    assert_eq!(first["event"], "run.waiting_for_approval", "{first}");
    assert_eq!(first["approvals"]["required"], 2);
    assert_eq!(first["approvals"]["text"], "0 of 2 approvals");
    assert_eq!(
        first["approvals"]["may_still_approve"],
        json!(["alice", "bert"]),
        "the requester (admin) never counts: {first}"
    );

    // The requester is refused; alice's approval counts and is announced.
    let decide = json!({ "run_id": run_id, "decision": "approve_all", "digest": digest });
    let (status, body) = call(&server, &admin, "nrllm_tool_resume", decide.clone()).await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN, "{body}");
    let (status, body) = call(&server, &team[0], "nrllm_tool_resume", decide.clone()).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    assert_eq!(body["status"], "waiting_for_approval", "{body}");
    assert_eq!(body["approvals"]["approved_by"], json!(["alice"]));
    assert_eq!(body["approvals"]["may_still_approve"], json!(["bert"]));
    wait_until(&server, &admin, &run_id, "announced the approval", |view| {
        view["webhooks"]
            .as_array()
            .is_some_and(|all| all.len() == 2 && all.iter().all(|d| d["state"] == "delivered"))
    })
    .await;
    let deliveries = received.on("ok");
    let (headers, counted) = deliveries
        .iter()
        .find(|(headers, _)| headers["x-nrllm-event"] == "run.approval_counted")
        .expect("a delivery for alice's approval");
    assert!(signature_holds(headers, counted));
    let counted: Value = serde_json::from_str(counted).unwrap();
    assert_eq!(counted["approvals"]["text"], "1 of 2 approvals: alice");
    assert_eq!(counted["approvals"]["may_still_approve"], json!(["bert"]));
    assert_eq!(counted["digest"], digest, "the same turn, the same digest");

    // Bert's completes the count: the run goes on, decided by both.
    let (status, body) = call(&server, &team[1], "nrllm_tool_resume", decide).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    assert_eq!(body["status"], "queued", "{body}");
    let done = wait_for(&server, &admin, &run_id, "completed").await;
    assert_eq!(done["summary"]["decided_by"], "alice, bert", "{done}");
}
