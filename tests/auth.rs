//! Who may do what, against the real server binary: every refusal is 401 or 403 with a message,
//! and changes nothing. No session; a viewer or an operator approving; a token without the role;
//! a cross-site form post; a missing or wrong CSRF token; a foreign `Host`; self-approval under
//! four-eyes. Also: rate limits, signed error banners, cookie and header hardening.

#![cfg(feature = "ssr")]

mod common;

use std::time::Duration;

use common::{
    call, client, form, html, log_in, metrics_text, start as start_server, start_run, users,
    wait_for, Server, Session, ADMIN_PASSWORD,
};
use reqwest::header::{HeaderValue, COOKIE, LOCATION, SET_COOKIE};
use reqwest::StatusCode;
use serde_json::json;

/// Starts the binary with a four-eyes configuration `reviewed`.
async fn start(env: &[(&str, &str)]) -> Server {
    start_server(
        "log_level = \"warn\"\n\n[[configurations]]\nname = \"reviewed\"\nkind = \"demo\"\nmodel = \"demo-1\"\nfour_eyes = true\n",
        env,
    )
    .await
}

async fn runs_count(server: &Server) -> i64 {
    let db = nrllm_store::db::Database::connect(&server.db)
        .await
        .unwrap();
    let count: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM agent_run")
        .fetch_one(db.pool())
        .await
        .unwrap();
    db.pool().close().await;
    count.0
}

/// The admin makes users: `olga` (operator), `vic` (viewer), `bert` and `ann` (approvers).
async fn team(server: &Server) -> (Session, Session, Session, Session) {
    let team = users(
        server,
        &[
            ("olga", "operator"),
            ("vic", "viewer"),
            ("bert", "approver"),
            ("ann", "approver"),
        ],
    )
    .await;
    let [olga, vic, bert, ann] = <[Session; 4]>::try_from(team).ok().unwrap();
    (olga, vic, bert, ann)
}

#[tokio::test]
async fn every_refusal_is_401_or_403_and_changes_nothing() {
    let server = start(&[]).await;
    let (olga, vic, bert, ann) = team(&server).await;

    // No session: the API says 401, a page asks to log in.
    let anonymous = client()
        .post(format!("{}/api/nrllm_tool_run", server.base))
        .json(&json!({ "prompt": "Rename the home page to \"X\"" }))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    assert!(anonymous.text().await.unwrap().contains("Log in first"));
    let page = client()
        .get(format!("{}/runs", server.base))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::SEE_OTHER);
    assert_eq!(page.headers()[LOCATION], "/login?next=%2Fruns");
    assert_eq!(runs_count(&server).await, 0);

    // A viewer cannot start a run.
    let (status, body) = call(
        &server,
        &vic,
        "nrllm_tool_run",
        json!({ "prompt": "List the pages" }),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body.to_string().contains("needs the operator role"),
        "{body}"
    );
    assert_eq!(runs_count(&server).await, 0);

    // Olga starts a run under four-eyes; it waits.
    let (status, run) = call(
        &server,
        &olga,
        "nrllm_tool_run",
        json!({ "prompt": "Rename the home page to \"Four eyes\"", "configuration": "reviewed" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{run}");
    let run_id = run.as_str().unwrap().to_owned();
    let waiting = wait_for(&server, &olga, &run_id, "waiting_for_approval").await;
    assert!(waiting["decide_block"]
        .as_str()
        .unwrap()
        .contains("approver role"));
    let approve = json!({ "run_id": run_id, "decision": "approve_all" });

    // Olga (an operator) and Vic (a viewer) cannot decide.
    for (who, session) in [("olga", &olga), ("vic", &vic)] {
        let (status, body) = call(&server, session, "nrllm_tool_resume", approve.clone()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{who}: {body}");
        assert!(
            body.to_string().contains("needs the approver role"),
            "{body}"
        );
    }

    // Only an administrator raises a daily spend cap, whatever lower role asks.
    for (who, session) in [("olga", &olga), ("vic", &vic), ("bert", &bert)] {
        let (status, body) = call(
            &server,
            session,
            "nrllm_spend_cap_raise",
            json!({ "scope": "configuration", "name": "demo", "raise_by": "5" }),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{who}: {body}");
        assert!(body.to_string().contains("needs the admin role"), "{body}");
    }

    // A cross-site form post, even with a valid session and token, is refused.
    for headers in [
        &[("sec-fetch-site", "cross-site")][..],
        &[("origin", "https://evil.example")][..],
    ] {
        let response = form(
            &server,
            &bert.cookies,
            "nrllm_tool_resume",
            &[
                ("run_id", &run_id),
                ("decision", "approve_all"),
                ("digest", "x"),
                ("csrf", &bert.csrf),
            ],
            headers,
        )
        .await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{headers:?}");
        assert!(response.text().await.unwrap().contains("another site"));
    }
    // A form post without the CSRF token, or with another one, is refused.
    for token in [None, Some("0123")] {
        let mut fields = vec![("run_id", run_id.as_str()), ("decision", "approve_all")];
        if let Some(token) = token {
            fields.push(("csrf", token));
        }
        let response = form(&server, &bert.cookies, "nrllm_tool_resume", &fields, &[]).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{token:?}");
        assert!(response.text().await.unwrap().contains("security token"));
    }
    // So is a JSON call with a session cookie but no CSRF header.
    let bare = client()
        .post(format!("{}/api/nrllm_tool_resume", server.base))
        .header(COOKIE, &bert.cookies)
        .json(&approve)
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), StatusCode::FORBIDDEN);
    // A foreign Host (DNS rebinding) reads nothing and changes nothing.
    let rebound = client()
        .post(format!("{}/api/nrllm_approvals_list", server.base))
        .header("host", format!("rebind.evil.example:{}", server.port))
        .header(COOKIE, &bert.cookies)
        .header("x-csrf-token", &bert.csrf)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), StatusCode::FORBIDDEN);
    assert!(!rebound.text().await.unwrap().contains(&run_id));

    // A token with a role too low for deciding.
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    let (status, token) = call(
        &server,
        &admin,
        "nrllm_token_create",
        json!({ "name": "ci-reader", "role": "viewer" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let token = token.as_str().unwrap().to_owned();
    let with_token = client()
        .post(format!("{}/api/nrllm_tool_resume", server.base))
        .bearer_auth(&token)
        .json(&approve)
        .send()
        .await
        .unwrap();
    assert_eq!(with_token.status(), StatusCode::FORBIDDEN);
    let bad_token = client()
        .post(format!("{}/api/nrllm_run_get", server.base))
        .bearer_auth("nrllm_not-a-token")
        .json(&json!({ "run_id": run_id }))
        .send()
        .await
        .unwrap();
    assert_eq!(bad_token.status(), StatusCode::UNAUTHORIZED);

    // Still waiting, nothing decided.
    let still = wait_for(&server, &bert, &run_id, "waiting_for_approval").await;
    assert!(still["summary"]["decision"].is_null(), "{still}");

    // Four-eyes: an approver who started a run cannot decide it; another approver can.
    let (status, own) = call(
        &server,
        &bert,
        "nrllm_tool_run",
        json!({ "prompt": "Rename the about page to \"Mine\"", "configuration": "reviewed" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let own = own.as_str().unwrap().to_owned();
    let view = wait_for(&server, &bert, &own, "waiting_for_approval").await;
    assert!(view["decide_block"]
        .as_str()
        .unwrap()
        .starts_with("Four-eyes"));
    let (status, body) = call(
        &server,
        &bert,
        "nrllm_tool_resume",
        json!({ "run_id": own, "decision": "approve_all" }),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body.to_string()
            .contains("Four-eyes: bert started this run"),
        "{body}"
    );
    wait_for(&server, &ann, &own, "waiting_for_approval").await;

    // The right person decides, and is recorded as the decider.
    let (status, body) = call(&server, &ann, "nrllm_tool_resume", approve.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let done = wait_for(&server, &ann, &run_id, "completed").await;
    assert!(
        done["summary"]["decision"]
            .as_str()
            .unwrap()
            .starts_with("approved by ann at"),
        "{done}"
    );
    assert_eq!(done["summary"]["requested_by"], "olga");
}

#[tokio::test]
async fn logins_and_run_starts_are_rate_limited_and_banners_must_be_the_servers() {
    let server = start(&[("NRLLM_RUN_STARTS_PER_MINUTE", "2")]).await;
    // Wrong passwords: refused, then slowed down.
    let mut statuses = Vec::new();
    for _ in 0..7 {
        let response = client()
            .post(format!("{}/api/nrllm_login", server.base))
            .json(&json!({ "name": "admin", "password": "wrong-password" }))
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    assert_eq!(&statuses[..5], &[401; 5]);
    assert_eq!(&statuses[5..], &[429, 429]);

    let (olga, ..) = {
        let admin_server = &server;
        // The admin's own name is locked for a minute; make a user on another name to go on.
        let db = nrllm_store::db::Database::connect(&admin_server.db)
            .await
            .unwrap();
        nrllm_store::accounts::AccountStore::new(db.clone())
            .create_user(
                "olga",
                Some("olga-password-1"),
                nrllm_types::Role::Operator,
                nrllm_core::clock::now_ms(),
            )
            .await
            .unwrap();
        db.pool().close().await;
        (log_in(&server, "olga", "olga-password-1").await, ())
    };
    let mut started = Vec::new();
    for _ in 0..3 {
        let (status, _) = call(
            &server,
            &olga,
            "nrllm_tool_run",
            json!({ "prompt": "What time is it?" }),
        )
        .await;
        started.push(status.as_u16());
    }
    assert_eq!(started, [200, 200, 429]);
    assert_eq!(runs_count(&server).await, 2);

    // An error banner made up in a link is not shown; one the server signed is.
    let forged = {
        use base64::Engine;
        let text =
            serde_json::to_string(&json!({ "Conflict": "Your account is suspended: call +1 555" }))
                .unwrap();
        base64::engine::general_purpose::URL_SAFE.encode(text)
    };
    let page = html(
        &server,
        &olga.cookies,
        &format!("/approvals?__err={forged}"),
    )
    .await;
    assert!(!page.contains("suspended"), "a forged banner is not shown");
    let refused = form(
        &server,
        &olga.cookies,
        "nrllm_run_cancel",
        &[
            ("run_id", "00000000-0000-7000-8000-000000000000"),
            ("csrf", &olga.csrf),
        ],
        &[("referer", &format!("{}/approvals", server.base))],
    )
    .await;
    let location = refused.headers()[LOCATION].to_str().unwrap().to_owned();
    assert!(
        location.contains("__err=") && location.contains("&__sig="),
        "{location}"
    );
    let page = html(
        &server,
        &olga.cookies,
        location.trim_start_matches(&server.base),
    )
    .await;
    assert!(
        page.contains("There is no run 00000000-0000-7000-8000-000000000000"),
        "the server's own banner is shown"
    );
}

#[tokio::test]
async fn cookies_are_http_only_strict_and_secure_over_https_with_hsts() {
    let server = start(&[
        ("NRLLM_PUBLIC_URL", "https://playground.example.com"),
        ("NRLLM_ALLOWED_HOSTS", "127.0.0.1,playground.example.com"),
    ])
    .await;
    let response = client()
        .post(format!("{}/api/nrllm_login", server.base))
        .json(&json!({ "name": "admin", "password": ADMIN_PASSWORD }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let cookies: Vec<String> = response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    assert_eq!(cookies.len(), 2, "{cookies:?}");
    for cookie in &cookies {
        for part in ["HttpOnly", "SameSite=Strict", "Secure", "Path=/"] {
            assert!(cookie.contains(part), "{cookie}");
        }
    }
    assert_eq!(
        response.headers().get("strict-transport-security"),
        Some(&HeaderValue::from_static("max-age=31536000"))
    );
    assert_eq!(response.headers()["x-content-type-options"], "nosniff");
    assert!(response.headers().contains_key("referrer-policy"));
}

#[tokio::test]
async fn only_an_admin_switches_tools_and_every_caller_sees_the_change() {
    let server = start(&[]).await;
    let (olga, _vic, bert, _ann) = team(&server).await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    let enabled = |options: &serde_json::Value| {
        options["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "delete_page")
            .map(|t| t["enabled"].as_bool().unwrap())
    };
    let off = json!({ "name": "delete_page" });
    for (who, session) in [("olga", &olga), ("bert", &bert)] {
        let (status, body) = call(&server, session, "nrllm_tool_set", off.clone()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{who}: {body}");
        assert!(body.to_string().contains("needs the admin role"), "{body}");
    }
    let (_, options) = call(&server, &olga, "nrllm_playground_options", json!({})).await;
    assert_eq!(enabled(&options), Some(true));

    let (status, body) = call(&server, &admin, "nrllm_tool_set", off).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, options) = call(&server, &olga, "nrllm_playground_options", json!({})).await;
    assert_eq!(enabled(&options), Some(false));
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_tool_set",
        json!({ "name": "<b>nope</b>", "enabled": "1" }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = call(
        &server,
        &admin,
        "nrllm_tool_set",
        json!({ "name": "delete_page", "enabled": "1" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, options) = call(&server, &bert, "nrllm_playground_options", json!({})).await;
    assert_eq!(enabled(&options), Some(true));
}

#[tokio::test]
async fn probes_answer_without_a_login_from_any_host_and_say_nothing_else() {
    let server = start(&[]).await;
    for (path, body) in [("healthz", "ok\n"), ("readyz", "ready\n")] {
        let response = client()
            .get(format!("{}/{path}", server.base))
            .header("host", "10.1.2.3:3000")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(response.text().await.unwrap(), body);
    }
    // Everything else still needs an allowed host.
    let other = client()
        .get(format!("{}/runs", server.base))
        .header("host", "10.1.2.3:3000")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn metrics_need_a_token_and_count_what_happened_and_request_logs_keep_no_query() {
    let server = start(&[("NRLLM_LOG", "info")]).await;
    let (olga, _vic, bert, _ann) = team(&server).await;
    let anonymous = client()
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    let (status, token) = call(
        &server,
        &admin,
        "nrllm_token_create",
        json!({ "name": "prometheus", "role": "viewer" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{token}");
    let scrape = || metrics_text(&server, token.as_str().unwrap());
    let before = scrape().await;
    assert!(
        before.contains("nrllm_runs{status=\"waiting_for_approval\"} 0"),
        "{before}"
    );
    assert!(before.contains("nrllm_decisions_total 0"), "{before}");

    let (_, run) = call(
        &server,
        &olga,
        "nrllm_tool_run",
        json!({ "prompt": "Rename the home page to \"Counted\"" }),
    )
    .await;
    let run_id = run.as_str().unwrap().to_owned();
    wait_for(&server, &olga, &run_id, "waiting_for_approval").await;
    let waiting = scrape().await;
    assert!(
        waiting.contains("nrllm_runs{status=\"waiting_for_approval\"} 1"),
        "{waiting}"
    );
    assert!(
        waiting.contains("nrllm_waiting_age_seconds_count 1"),
        "{waiting}"
    );
    assert!(waiting.contains("nrllm_model_calls_total 2"), "{waiting}");
    assert!(
        waiting.contains("nrllm_model_call_seconds_count 2"),
        "{waiting}"
    );
    assert!(
        waiting.contains("nrllm_model_first_token_seconds_count{configuration=\"demo\"} 2"),
        "time to first token is kept by configuration: {waiting}"
    );

    let (status, _) = call(
        &server,
        &bert,
        "nrllm_tool_resume",
        json!({ "run_id": run_id, "decision": "approve_all" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    wait_for(&server, &olga, &run_id, "completed").await;
    let done = scrape().await;
    assert!(done.contains("nrllm_decisions_total 1"), "{done}");
    assert!(
        done.contains("nrllm_runs{status=\"completed\"} 1"),
        "{done}"
    );
    assert!(done.contains("nrllm_waiting_age_seconds_count 0"), "{done}");

    // A run waiting for an answer waits for a person too.
    let asking = start_run(
        &server,
        &olga,
        json!({ "prompt": "Publish a page — ask me which one" }),
    )
    .await;
    wait_for(&server, &olga, &asking, "waiting_for_input").await;
    let asked = scrape().await;
    assert!(
        asked.contains("nrllm_runs{status=\"waiting_for_input\"} 1"),
        "{asked}"
    );
    assert!(
        asked.contains("nrllm_waiting_age_seconds_count 1"),
        "{asked}"
    );

    // A request log line names the path, never the query (where login links carry a token).
    let _ = client()
        .get(format!(
            "{}/login/once?token=query-secret-4711",
            server.base
        ))
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = server.log_text();
    assert!(log.contains("/login/once"), "{log}");
    assert!(
        !log.contains("query-secret-4711"),
        "the query reached the log"
    );
}
