//! Outside the door, against the real server binary (issue #37):
//! - nobody locks a user out from elsewhere: failed logins count per name *and* address; a body
//!   larger than a login form from someone not logged in is refused before it is read;
//! - the server signs only its own words: an `__err` (and `__sig`) in a form's `Referer` is
//!   dropped, and the redirect stays on this site; `next` after a login is a same-site path after
//!   the browser's normalisation, and no input makes the redirect fail;
//! - a login link stops working once its user set a password or was disabled;
//! - every page and answer but the built assets is `Cache-Control: no-store`;
//! - the system page shows MCP commands, arguments and URLs to administrators only;
//! - two instances starting together on an empty Postgres both come up.

#![cfg(feature = "ssr")]

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::{call, client, form, html, log_in, start, users, Server, ADMIN_PASSWORD};
use reqwest::header::{CACHE_CONTROL, LOCATION, REFERER};
use reqwest::StatusCode;
use serde_json::json;

/// A JSON login attempt from loopback address `from` (127.0.0.x).
async fn login_from(server: &Server, from: u8, name: &str, password: &str) -> StatusCode {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, from)))
        .build()
        .unwrap()
        .post(format!("{}/api/nrllm_login", server.base))
        .json(&json!({ "name": name, "password": password }))
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn wrong_passwords_from_elsewhere_never_lock_a_user_out() {
    let server = start("log_level = \"info\"\n", &[]).await;
    // Someone at 127.0.0.2 guesses the admin's password until they are refused.
    let mut refused = false;
    for _ in 0..8 {
        refused |=
            login_from(&server, 2, "admin", "guess-guess-1").await == StatusCode::TOO_MANY_REQUESTS;
    }
    assert!(refused, "the guesser is slowed down");
    // The admin, at 127.0.0.1, still logs in.
    assert_eq!(
        login_from(&server, 1, "admin", ADMIN_PASSWORD).await,
        StatusCode::OK
    );
    // A long name is cut before it keys a limiter or reaches the log; a body larger than a
    // login form can be is refused before it is read (nobody is logged in to send it).
    let long = "x".repeat(10_000);
    assert_eq!(
        login_from(&server, 3, &long, "whatever-1").await,
        StatusCode::UNAUTHORIZED
    );
    // Announced at 900 KB, the body is refused on its headers alone: none of it is sent here.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let address = server.base.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let head = format!(
            "POST /api/nrllm_login HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            900 * 1024
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut answer = vec![0u8; 512];
        let read =
            tokio::time::timeout(std::time::Duration::from_secs(10), stream.read(&mut answer))
                .await
                .expect("an answer before the body")
                .unwrap();
        let answer = String::from_utf8_lossy(&answer[..read]);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    }
    // Without a length too (chunked): read no further than the cap.
    let chunks: Vec<Result<String, std::io::Error>> = (0..64)
        .map(|i| {
            Ok(if i == 0 {
                "{\"name\":\"".to_owned()
            } else {
                "z".repeat(16 * 1024)
            })
        })
        .collect();
    // The server answers (or closes the connection) once the cap is passed; the client may
    // still be sending, so a broken pipe is an answer too — but never a login that was tried.
    let chunked = client()
        .post(format!("{}/api/nrllm_login", server.base))
        .header("Content-Type", "application/json")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await;
    match chunked {
        Ok(response) => assert!(
            response.status().is_client_error() && response.status() != StatusCode::UNAUTHORIZED,
            "{}",
            response.status()
        ),
        Err(err) => assert!(err.is_request(), "{err}"),
    }
    let log = server.log_text();
    assert!(
        !log.contains(&"x".repeat(100)),
        "the log holds the whole name"
    );
}

#[tokio::test]
async fn the_server_signs_only_its_own_banner_and_redirects_only_within_the_site() {
    let server = start("log_level = \"info\"\n", &[]).await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    // A banner the client wrote, carried in the form's Referer with a signature of its own.
    use base64::Engine;
    let forged = base64::engine::general_purpose::URL_SAFE
        .encode(br#"{"BadRequest":"Your account is locked: call +1 555 0100"}"#);
    let referer = format!(
        "http://evil.example/approvals?__err={forged}&__sig=00&__path=%2Fapi%2Fnrllm_run_cancel"
    );
    let response = form(
        &server,
        &admin.cookies,
        "nrllm_run_cancel",
        &[
            ("csrf", &admin.csrf),
            ("run_id", "01a23b64-0000-7000-8000-000000000000"),
        ],
        &[(REFERER.as_str(), &referer)],
    )
    .await;
    assert!(response.status().is_redirection(), "{}", response.status());
    let location = response.headers()[LOCATION].to_str().unwrap().to_owned();
    assert!(location.starts_with("/approvals?"), "{location}");
    assert!(!location.contains(&forged), "{location}");
    assert_eq!(location.matches("__err=").count(), 1, "{location}");
    // The page shows the server's error, not the client's.
    let page = html(&server, &admin.cookies, &location).await;
    assert!(
        page.contains("There is no run"),
        "the server's banner is shown"
    );
    assert!(!page.contains("Your account is locked"));

    // After a login, `next` is followed only as a path of this site (a browser's form post:
    // the login page's CSRF cookie and field).
    let login_page = client()
        .get(format!("{}/login", server.base))
        .send()
        .await
        .unwrap();
    let csrf = common::cookie_from(login_page.headers(), "nrllm_csrf").unwrap();
    for (next, expected) in [
        ("/runs?status=completed", "/runs?status=completed"),
        ("/\t/evil.example", "/"),
        ("/\n/evil.example", "/"),
        ("/\\evil.example", "/"),
        ("//evil.example", "/"),
        ("https://evil.example/", "/"),
    ] {
        let response = form(
            &server,
            &format!("nrllm_csrf={csrf}"),
            "nrllm_login",
            &[
                ("csrf", &csrf),
                ("name", "admin"),
                ("password", ADMIN_PASSWORD),
                ("next", next),
            ],
            &[],
        )
        .await;
        assert!(
            response.status().is_redirection(),
            "{next:?}: {}",
            response.status()
        );
        assert_eq!(response.headers()[LOCATION], expected, "{next:?}");
    }
}

#[tokio::test]
async fn a_login_link_dies_with_a_password_set_or_its_user_disabled_and_nothing_is_cached() {
    let server = start("log_level = \"info\"\n", &[]).await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    for name in ["ann", "bob"] {
        let (status, body) = call(
            &server,
            &admin,
            "nrllm_user_create",
            json!({ "name": name, "password": format!("{name}-password-1"), "role": "viewer" }),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let db = nrllm_store::db::Database::connect(&server.db)
        .await
        .unwrap();
    let accounts = nrllm_store::accounts::AccountStore::new(db.clone());
    let now = nrllm_core::clock::now_ms();
    let ann_link = accounts
        .create_login_link("ann", now, 60_000)
        .await
        .unwrap();
    let bob_link = accounts
        .create_login_link("bob", now, 60_000)
        .await
        .unwrap();
    // Ann sets a new password; Bob is disabled.
    let ann = log_in(&server, "ann", "ann-password-1").await;
    let (status, body) = call(
        &server,
        &ann,
        "nrllm_password_set",
        json!({ "current": "ann-password-1", "password": "ann-password-2" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_user_update",
        json!({ "name": "bob", "role": "viewer", "disabled": "1" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for link in [ann_link, bob_link] {
        let response = client()
            .post(format!("{}/api/nrllm_login_link", server.base))
            .json(&json!({ "token": link }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }
    db.pool().close().await;

    // Pages and answers are not cached; the built assets may be.
    for path in ["/admin", "/account", "/runs"] {
        let response = client()
            .get(format!("{}{path}", server.base))
            .header("cookie", &admin.cookies)
            .header("accept", "text/html")
            .send()
            .await
            .unwrap();
        assert_eq!(response.headers()[CACHE_CONTROL], "no-store", "{path}");
    }
    let answer = client()
        .post(format!("{}/api/nrllm_runs_list", server.base))
        .header("cookie", &admin.cookies)
        .header("x-csrf-token", &admin.csrf)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(answer.headers()[CACHE_CONTROL], "no-store");
}

#[tokio::test]
async fn the_system_page_shows_mcp_commands_to_administrators_only() {
    let settings = "log_level = \"warn\"\n\n[[mcp_servers]]\nname = \"broken\"\n\
                    command = \"/nonexistent/mcp-server\"\nargs = [\"--password\", \"hunter2-secret\"]\n";
    let server = start(settings, &[]).await;
    let team = users(&server, &[("vic", "viewer")]).await;
    let (status, viewer) = call(&server, &team[0], "nrllm_system_status", json!({})).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!viewer.to_string().contains("hunter2-secret"), "{viewer}");
    assert!(
        !viewer.to_string().contains("/nonexistent/mcp-server"),
        "{viewer}"
    );
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    let (_, full) = call(&server, &admin, "nrllm_system_status", json!({})).await;
    assert!(
        full.to_string().contains("/nonexistent/mcp-server"),
        "{full}"
    );
}

#[tokio::test]
#[ignore = "needs Postgres (TEST_DATABASE_URL); make test runs it"]
async fn two_instances_starting_together_on_an_empty_postgres_both_come_up() {
    let pg = nrllm_store::testing::postgres_from_env().await;
    let env = [("NRLLM_DATABASE_URL", pg.url.as_str())];
    let (a, b) = tokio::join!(
        start("log_level = \"info\"\n", &env),
        start("log_level = \"info\"\n", &env)
    );
    // Both answer, and the one admin logs in on either.
    log_in(&a, "admin", ADMIN_PASSWORD).await;
    log_in(&b, "admin", ADMIN_PASSWORD).await;
    drop((a, b));
    pg.cleanup().await;
}

#[tokio::test]
async fn streams_of_a_queued_run_count_toward_the_stream_caps() {
    // One run at a time, thinking 3 s: the second run waits in the queue meanwhile.
    let server = start(
        "log_level = \"info\"\nstream_limit_total = 2\nmax_running_runs = 1\n",
        &[("NRLLM_DEMO_THINK_MS", "3000")],
    )
    .await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    common::start_run(&server, &admin, json!({ "prompt": "List the pages" })).await;
    let queued = common::start_run(&server, &admin, json!({ "prompt": "What time is it?" })).await;
    let (_, view) = call(
        &server,
        &admin,
        "nrllm_run_get",
        json!({ "run_id": queued }),
    )
    .await;
    assert_eq!(view["summary"]["status"], "queued", "{view}");
    let stream = || {
        client()
            .get(format!("{}/api/runs/{queued}/events", server.base))
            .header("cookie", &admin.cookies)
            .send()
    };
    let first = stream().await.unwrap();
    let second = stream().await.unwrap();
    assert_eq!(
        (first.status(), second.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    let third = stream().await.unwrap();
    assert_eq!(third.status(), StatusCode::SERVICE_UNAVAILABLE);
    // A stream that ends gives its place back.
    drop(first);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let again = stream().await.unwrap();
        if again.status() == StatusCode::OK {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the place never came back"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    drop(second);
}
