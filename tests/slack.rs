//! Slack, against the real server binary and a local server that speaks Slack's Web API wire
//! format (`chat.postMessage`, `chat.update`, `chat.postEphemeral`: JSON bodies, the bot token as
//! a bearer, `{"ok": true, …}` answers): a waiting run is posted in its configuration's channel
//! with its calls as plain text and the buttons; button presses come back signed the way Slack
//! signs them — a good one decides as the mapped user, through the same authority as the page;
//! a bad signature, an old timestamp, an unmapped user or one without the right to decide are
//! refused with nothing decided (the last two told so, only them); after any decision, there or
//! on the page, the message is updated to say who decided what.

#![cfg(feature = "ssr")]

mod common;

use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::post;
use axum::Json;
use common::fakes::{serve, Recorded};
use common::{call, client, log_in, start, start_run, users, wait_for, Server, ADMIN_PASSWORD};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};

const TOKEN: &str = "xoxb-test-token";
const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const CHANNEL: &str = "C0SLACK1";

/// What the fake Slack was called with, per method: the authorization header, and the body.
type Calls = Recorded<(String, Value)>;

async fn fake_slack() -> (String, Calls) {
    let calls = Calls::default();
    async fn api(
        State(calls): State<Calls>,
        Path(method): Path<String>,
        headers: HeaderMap,
        Json(body): Json<Value>,
    ) -> Json<Value> {
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let seen = calls.record(&method, (auth, body.clone()));
        let ts = format!("1700000000.{seen:06}");
        Json(match method.as_str() {
            "chat.postMessage" => json!({ "ok": true, "channel": body["channel"], "ts": ts }),
            _ => json!({ "ok": true }),
        })
    }
    let app = axum::Router::new()
        .route("/api/{method}", post(api))
        .with_state(calls.clone());
    (format!("{}/api", serve(app).await), calls)
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Slack's signature of `body` sent at `at` under `secret`.
fn signature(secret: &str, at: i64, body: &str) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("v0:{at}:{body}").as_bytes());
    format!("v0={}", const_hex::encode(mac.finalize().into_bytes()))
}

/// A press of `action` with button `value` by Slack user `user` of team T1, as Slack posts it.
fn press_body(action: &str, value: &str, user: &str) -> String {
    let payload = json!({
        "type": "block_actions",
        "user": { "id": user, "team_id": "T1" },
        "team": { "id": "T1" },
        "channel": { "id": CHANNEL },
        "actions": [{ "action_id": action, "value": value, "type": "button" }],
    });
    form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
}

/// Posts `body` to the interactions endpoint, signed at `at` with `secret`.
async fn post_press(server: &Server, body: &str, secret: &str, at: i64) -> reqwest::StatusCode {
    client()
        .post(format!("{}/hooks/slack/interactions", server.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-slack-request-timestamp", at.to_string())
        .header("x-slack-signature", signature(secret, at, body))
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
        .status()
}

async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn status(server: &Server, session: &common::Session, run_id: &str) -> String {
    let (_, view) = call(
        server,
        session,
        "nrllm_run_get",
        json!({ "run_id": run_id }),
    )
    .await;
    view["summary"]["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_waiting_run_is_posted_and_decided_in_slack_by_its_mapped_user_only() {
    let (api, calls) = fake_slack().await;
    let settings = format!(
        "log_level = \"info\"\nfour_eyes = true\n\n\
         [[configurations]]\nname = \"slacked\"\nkind = \"demo\"\nmodel = \"demo-1\"\n\
         notify = {{ slack_channel = \"{CHANNEL}\" }}\n\n\
         [notifications]\nslack_api_url = \"{api}\"\n"
    );
    let server = start(
        &settings,
        &[
            ("NRLLM_SLACK_BOT_TOKEN", TOKEN),
            ("NRLLM_SLACK_SIGNING_SECRET", SECRET),
        ],
    )
    .await;
    users(&server, &[("bert", "approver"), ("carol", "viewer")]).await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    for (name, user) in [("bert", "U1"), ("carol", "U2")] {
        let (code, body) = call(
            &server,
            &admin,
            "nrllm_user_contact",
            json!({ "name": name, "slack_team_id": "T1", "slack_user_id": user }),
        )
        .await;
        assert_eq!(code, reqwest::StatusCode::OK, "{body}");
    }
    let hostile = "<!channel> *bold* <https://evil.example|click>";
    let run_id = start_run(
        &server,
        &admin,
        json!({ "prompt": format!("Create a page slacked titled \"{hostile}\""), "configuration": "slacked" }),
    )
    .await;
    wait_for(&server, &admin, &run_id, "waiting_for_approval").await;

    // Posted in the channel with the bot's token; every run string in plain text.
    until("the run is posted", || {
        !calls.on("chat.postMessage").is_empty()
    })
    .await;
    let (auth, posted) = calls.on("chat.postMessage").remove(0);
    assert_eq!(auth, format!("Bearer {TOKEN}"));
    assert_eq!(posted["channel"], CHANNEL);
    let blocks = posted["blocks"].as_array().unwrap();
    let texts: Vec<&Value> = blocks.iter().filter_map(|b| b.get("text")).collect();
    assert!(texts.iter().all(|t| t["type"] == "plain_text"), "{posted}");
    assert!(posted.to_string().contains("create_page"), "{posted}");
    assert!(
        posted.to_string().contains("<!channel>"),
        "carried as plain text: {posted}"
    );
    let buttons = blocks.last().unwrap()["elements"].as_array().unwrap();
    let approve = buttons
        .iter()
        .find(|b| b["action_id"] == "approve_all")
        .unwrap();
    let value = approve["value"].as_str().unwrap().to_owned();
    assert!(value.contains(&run_id));
    assert!(buttons
        .iter()
        .any(|b| b["url"].as_str().is_some_and(|u| u.ends_with(&run_id))));

    let body = press_body("approve_all", &value, "U1");
    // Not Slack's signature; Slack's, but recorded ten minutes ago: refused, nothing read.
    assert_eq!(
        post_press(&server, &body, "not-the-secret", now_secs()).await,
        401
    );
    assert_eq!(
        post_press(&server, &body, SECRET, now_secs() - 600).await,
        401
    );
    // A Slack user nobody linked, and carol (a viewer): refused, told so, only them.
    let stranger = press_body("approve_all", &value, "U9");
    assert_eq!(
        post_press(&server, &stranger, SECRET, now_secs()).await,
        200
    );
    let viewer = press_body("approve_all", &value, "U2");
    assert_eq!(post_press(&server, &viewer, SECRET, now_secs()).await, 200);
    until("both are told", || {
        calls.on("chat.postEphemeral").len() == 2
    })
    .await;
    let told: Vec<Value> = calls
        .on("chat.postEphemeral")
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    assert!(
        told.iter()
            .any(|b| b["user"] == "U9" && b["text"].as_str().unwrap().contains("not linked")),
        "{told:?}"
    );
    assert!(
        told.iter()
            .any(|b| b["user"] == "U2" && b["text"].as_str().unwrap().contains("approver role")),
        "{told:?}"
    );
    assert_eq!(
        status(&server, &admin, &run_id).await,
        "waiting_for_approval"
    );

    // bert's press decides, answered at once; the message then says so.
    let pressed = Instant::now();
    assert_eq!(post_press(&server, &body, SECRET, now_secs()).await, 200);
    assert!(
        pressed.elapsed() < Duration::from_secs(3),
        "Slack waits 3 s at most"
    );
    let done = wait_for(&server, &admin, &run_id, "completed").await;
    assert_eq!(done["summary"]["decided_by"], "bert");
    until("the message is updated", || {
        !calls.on("chat.update").is_empty()
    })
    .await;
    let (_, updated) = calls.on("chat.update").remove(0);
    assert_eq!(updated["channel"], CHANNEL);
    assert_eq!(updated["ts"], "1700000000.000001");
    assert!(
        updated["text"]
            .as_str()
            .unwrap()
            .contains("approved by bert"),
        "{updated}"
    );
    // A second press of the same button decides nothing more.
    assert_eq!(post_press(&server, &body, SECRET, now_secs()).await, 200);
    until("bert is told it was decided", || {
        calls.on("chat.postEphemeral").len() == 3
    })
    .await;

    // Decided on the page instead: the post is updated all the same.
    let second = start_run(
        &server,
        &admin,
        json!({ "prompt": "Create a page slacked-two titled \"Two\"", "configuration": "slacked" }),
    )
    .await;
    let view = wait_for(&server, &admin, &second, "waiting_for_approval").await;
    until("the second run is posted", || {
        calls.on("chat.postMessage").len() == 2
    })
    .await;
    let bert = log_in(&server, "bert", "bert-password-1").await;
    let (code, body) = call(
        &server,
        &bert,
        "nrllm_tool_resume",
        json!({ "run_id": second, "decision": "deny_all", "digest": view["digest"] }),
    )
    .await;
    assert_eq!(code, reqwest::StatusCode::OK, "{body}");
    until("the second message is updated", || {
        calls.on("chat.update").len() == 2
    })
    .await;
    let (_, updated) = calls.on("chat.update").remove(1);
    assert!(
        updated["text"].as_str().unwrap().contains("denied by bert"),
        "{updated}"
    );
    // The run page lists the post.
    let (_, view) = call(
        &server,
        &admin,
        "nrllm_run_get",
        json!({ "run_id": second }),
    )
    .await;
    assert!(
        view["notifications"]
            .to_string()
            .contains(&format!("Slack message in {CHANNEL}: sent at")),
        "{view}"
    );
}
