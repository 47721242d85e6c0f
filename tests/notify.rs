//! Mail to the people who decide, against the real server binary and a local SMTP server (a
//! small one below, speaking the protocol's commands as a relay does): a waiting run is mailed to
//! the configured people who may decide it (not to a viewer, not to its requester under
//! four-eyes, not to someone without an address), retried when the mail server puts it off, then
//! reminded and escalated on time; every run-supplied string is escaped in the HTML part; the
//! signed link decides for its recipient only, once; the run page records each mail. On Postgres
//! with two instances, each round goes out once.

#![cfg(feature = "ssr")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{call, log_in, start, start_run, users, wait_for, ADMIN_PASSWORD};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Mails an SMTP sink received, whole.
#[derive(Clone, Default)]
struct Inbox(Arc<Mutex<Vec<String>>>);

impl Inbox {
    /// The mails to `address` whose subject holds `words`, decoded (quoted-printable).
    fn to(&self, address: &str, words: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|mail| mail.contains(&format!("To: {address}")))
            .map(|mail| quoted_printable(mail))
            .filter(|mail| mail.contains(words))
            .collect()
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// Undoes quoted-printable soft breaks and escapes (enough for the mails checked here).
fn quoted_printable(text: &str) -> String {
    let joined = text.replace("=\r\n", "");
    let bytes = joined.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'=', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An SMTP server on 127.0.0.1 that takes every mail, after putting off the first `refuse`
/// connections (`421`, as a busy relay does).
async fn smtp_sink(refuse: usize) -> (u16, Inbox) {
    let inbox = Inbox::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let kept = inbox.clone();
    tokio::spawn(async move {
        let mut connections = 0;
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            connections += 1;
            let inbox = kept.clone();
            let busy = connections <= refuse;
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut lines = BufReader::new(read).lines();
                if busy {
                    let _ = write.write_all(b"421 busy, try again later\r\n").await;
                    return;
                }
                let _ = write.write_all(b"220 sink ESMTP\r\n").await;
                let mut data: Option<String> = None;
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(body) = data.as_mut() {
                        if line == "." {
                            inbox.0.lock().unwrap().push(data.take().unwrap());
                            let _ = write.write_all(b"250 queued\r\n").await;
                        } else {
                            body.push_str(line.strip_prefix('.').unwrap_or(&line));
                            body.push_str("\r\n");
                        }
                        continue;
                    }
                    let verb = line
                        .split(' ')
                        .next()
                        .unwrap_or_default()
                        .to_ascii_uppercase();
                    let answer: &[u8] = match verb.as_str() {
                        "EHLO" => b"250-sink\r\n250 8BITMIME\r\n",
                        "DATA" => {
                            data = Some(String::new());
                            b"354 go on\r\n"
                        }
                        "QUIT" => {
                            let _ = write.write_all(b"221 bye\r\n").await;
                            return;
                        }
                        _ => b"250 ok\r\n",
                    };
                    let _ = write.write_all(answer).await;
                }
            });
        }
    });
    (port, inbox)
}

/// Waits (at most `seconds`) until `check` holds.
async fn until(seconds: u64, what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The link after `label: ` in a mail's text part.
fn link(mail: &str, label: &str) -> String {
    mail.lines()
        .find_map(|line| line.strip_prefix(&format!("{label}: ")))
        .unwrap_or_else(|| panic!("no {label} link in {mail}"))
        .trim()
        .to_owned()
}

fn settings(port: u16, remind: &str, escalate: &str) -> String {
    format!(
        "log_level = \"info\"\nfour_eyes = true\n\n\
         [[configurations]]\nname = \"paged\"\nkind = \"demo\"\nmodel = \"demo-1\"\n\
         notify = {{ to = [\"bert\", \"dave\", \"erin\"], remind_after = \"{remind}\", \
         escalate_after = \"{escalate}\", escalate_to = [\"role:admin\"] }}\n\n\
         [notifications]\nsmtp_url = \"smtp://127.0.0.1:{port}\"\n\
         mail_from = \"Playground <nrllm@example.test>\"\n"
    )
}

/// Gives each user an address (erin none).
async fn addresses(server: &common::Server, admin: &common::Session) {
    for name in ["bert", "dave", "carol"] {
        let (status, body) = call(
            server,
            admin,
            "nrllm_user_contact",
            json!({ "name": name, "email": format!("{name}@example.test") }),
        )
        .await;
        assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    }
}

#[tokio::test]
async fn the_people_who_may_decide_are_mailed_reminded_and_escalated_and_their_link_decides_once() {
    let (port, inbox) = smtp_sink(1).await;
    let server = start(
        &settings(port, "3s", "5s"),
        &[("NRLLM_WEBHOOK_BACKOFF_MS", "100")],
    )
    .await;
    let team = users(
        &server,
        &[
            ("bert", "approver"),
            ("dave", "viewer"),
            ("erin", "approver"),
            ("carol", "admin"),
        ],
    )
    .await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    addresses(&server, &admin).await;
    let hostile = "<img src=x onerror=alert(1)>";
    let run_id = start_run(
        &server,
        &admin,
        json!({ "prompt": format!("Create a page mailed titled \"{hostile}\""), "configuration": "paged" }),
    )
    .await;
    wait_for(&server, &admin, &run_id, "waiting_for_approval").await;

    // bert, once the busy mail server takes it; not dave (a viewer), not erin (no address), not
    // the admin who started it (four-eyes), not carol (not named for this round).
    until(10, "bert is mailed", || {
        !inbox.to("bert@example.test", &run_id).is_empty()
    })
    .await;
    let first = inbox
        .to("bert@example.test", "waits for your decision")
        .remove(0);
    assert!(first.contains("create_page"), "{first}");
    // The default approval timeout (24 h) is the turn's deadline.
    assert!(first.contains("Decide by 20"), "{first}");
    // The HTML part shows the model's markup as text; the text part carries it as plain text.
    let html = first
        .split("Content-Type: text/html")
        .nth(1)
        .expect("an HTML part");
    assert!(
        html.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "escaped: {html}"
    );
    assert!(
        !html.contains("<img src=x"),
        "raw markup in the HTML part: {html}"
    );
    assert!(inbox.to("dave@example.test", "").is_empty());
    assert!(inbox.to("carol@example.test", "").is_empty());

    // The reminder to bert, then the escalation to the admins who may decide (carol).
    until(10, "bert is reminded", || {
        !inbox.to("bert@example.test", "a reminder").is_empty()
    })
    .await;
    until(10, "carol gets the escalation", || {
        !inbox
            .to("carol@example.test", "escalated to you")
            .is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(inbox.count(), 3, "one mail a round");
    let (_, view) = call(
        &server,
        &admin,
        "nrllm_run_get",
        json!({ "run_id": run_id }),
    )
    .await;
    let notes: Vec<&str> = view["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["text"].as_str().unwrap())
        .collect();
    assert!(
        notes.iter().any(|n| n.starts_with("mail to bert: sent at")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("mail to bert (reminder): sent at")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("mail to carol (escalation): sent at")),
        "{notes:?}"
    );

    // bert's Approve link is bert's: carol's press decides nothing; bert's decides, once.
    let approve = link(&first, "Approve");
    let token = approve.split("token=").nth(1).unwrap().to_owned();
    let carol = log_in(&server, "carol", "carol-password-1").await;
    let (status, body) = call(
        &server,
        &carol,
        "nrllm_link_decide",
        json!({ "token": token }),
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN, "{body}");
    assert!(
        body.to_string().contains("This link was sent to bert"),
        "{body}"
    );
    let (status, body) = call(
        &server,
        &team[0],
        "nrllm_link_get",
        json!({ "token": token }),
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    assert_eq!(body["blocked"], Value::Null, "{body}");
    let (status, body) = call(
        &server,
        &team[0],
        "nrllm_link_decide",
        json!({ "token": token }),
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    let done = wait_for(&server, &admin, &run_id, "completed").await;
    assert_eq!(done["summary"]["decided_by"], "bert");
    let (status, body) = call(
        &server,
        &team[0],
        "nrllm_link_decide",
        json!({ "token": token }),
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::CONFLICT, "{body}");
    assert!(body.to_string().contains("decided already"), "{body}");
    // carol's escalation link now says the turn moved on.
    let escalation = inbox.to("carol@example.test", "escalated to you").remove(0);
    let carol_token = link(&escalation, "Approve")
        .split("token=")
        .nth(1)
        .unwrap()
        .to_owned();
    let (_, body) = call(
        &server,
        &carol,
        "nrllm_link_get",
        json!({ "token": carol_token }),
    )
    .await;
    assert!(
        body["blocked"].as_str().unwrap().contains("not waiting")
            || body["blocked"]
                .as_str()
                .unwrap()
                .contains("already decided"),
        "{body}"
    );
    // The put-off first attempt is in the log (the mail server's own words only there).
    assert!(
        server.log_text().contains("a notification failed"),
        "the retry is logged"
    );
    assert!(!notes.iter().any(|n| n.contains("busy")), "{notes:?}");
}

#[tokio::test]
async fn two_instances_on_one_postgres_send_each_round_once() {
    let pg = nrllm_store::testing::postgres_from_env().await;
    let (port, inbox) = smtp_sink(0).await;
    let settings = settings(port, "2s", "1h");
    let env = [("NRLLM_DATABASE_URL", pg.url.as_str())];
    let a = start(&settings, &env).await;
    let b = start(&settings, &env).await;
    users(
        &a,
        &[("bert", "approver"), ("dave", "viewer"), ("carol", "admin")],
    )
    .await;
    let admin = log_in(&a, "admin", ADMIN_PASSWORD).await;
    addresses(&a, &admin).await;
    let mut runs = Vec::new();
    for n in 0..4 {
        let run_id = start_run(
            &a,
            &admin,
            json!({ "prompt": format!("Create a page twice-{n} titled \"T\""), "configuration": "paged" }),
        )
        .await;
        wait_for(&a, &admin, &run_id, "waiting_for_approval").await;
        runs.push(run_id);
    }
    until(15, "every run's reminder", || {
        runs.iter().all(|run| {
            inbox
                .to("bert@example.test", run)
                .iter()
                .any(|mail| mail.contains("a reminder"))
        })
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for run in &runs {
        let mails = inbox.to("bert@example.test", run);
        assert_eq!(
            mails.len(),
            2,
            "{run}: one first mail and one reminder, whatever the instances"
        );
    }
    assert_eq!(inbox.count(), 8);
    drop(b);
}

#[tokio::test]
async fn a_dead_mail_server_shows_on_the_run_page_and_system_and_never_on_a_decision() {
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = start(
        &settings(port, "1h", "2h"),
        &[("NRLLM_WEBHOOK_BACKOFF_MS", "60000")],
    )
    .await;
    let team = users(
        &server,
        &[("bert", "approver"), ("dave", "viewer"), ("carol", "admin")],
    )
    .await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    addresses(&server, &admin).await;
    let run_id = start_run(
        &server,
        &admin,
        json!({ "prompt": "Create a page dead-mail titled \"D\"", "configuration": "paged" }),
    )
    .await;
    let view = wait_for(&server, &admin, &run_id, "waiting_for_approval").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let note = loop {
        let (_, view) = call(
            &server,
            &admin,
            "nrllm_run_get",
            json!({ "run_id": run_id }),
        )
        .await;
        let text = view["notifications"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if text.contains("failed") {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the failed attempt is never shown: {view}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        note.starts_with(
            "mail to bert: attempt 1 failed (could not reach the mail server); trying again at"
        ),
        "{note}"
    );
    let (_, system) = call(&server, &admin, "nrllm_system_status", json!({})).await;
    let outbox = &system["notifications"];
    assert_eq!(outbox["retrying"], 1, "{system}");
    assert!(
        outbox["last_error"]
            .as_str()
            .unwrap()
            .starts_with("could not reach the mail server"),
        "{system}"
    );
    // The decision does not wait for mail, and says nothing of it.
    let (code, body) = call(
        &server,
        &team[0],
        "nrllm_tool_resume",
        json!({ "run_id": run_id, "decision": "approve_all", "digest": view["digest"] }),
    )
    .await;
    assert_eq!(code, reqwest::StatusCode::OK, "{body}");
    wait_for(&server, &admin, &run_id, "completed").await;
}
