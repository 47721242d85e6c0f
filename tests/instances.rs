//! Two real server processes on one Postgres database: a browser on B follows a run A drives, live;
//! a run started on A is approved through B;
//! a tool switched off through A is off on B at once (NOTIFY);
//! the instance driving a run stalls (SIGSTOP) mid-run, the other's reaper takes the run over once
//! its lease runs out and goes on from the journal, and the stalled one, woken, writes nothing;
//! the instance driving a run is killed (SIGKILL) mid-run, and the other takes that run over
//! within the lease and a margin, with the right recovery rule; 200 queued runs with
//! `max_running_runs = 4` each run exactly once, never more than 4 at once per instance; a run
//! cancelled through one instance stops on the other at its next step.
//!
//! Runs are queued and either instance's worker may take one: the tests read which instance
//! holds a run's lease instead of assuming it.

#![cfg(feature = "ssr")]

mod common;

use std::time::{Duration, Instant};

use common::{call, log_in, metrics_text, start, start_run, wait_for, Server, ADMIN_PASSWORD};
use serde_json::json;
use sqlx::Row;

const LEASE_SECS: u64 = 2;

async fn instance(url: &str) -> Server {
    start(
        "log_level = \"info\"\n",
        &[
            ("NRLLM_DATABASE_URL", url),
            ("NRLLM_LEASE_SECS", &LEASE_SECS.to_string()),
            ("NRLLM_DEMO_THINK_MS", "1500"),
        ],
    )
    .await
}

/// The lease owner of run `id` once a worker took it from the queue.
async fn held(db: &nrllm_store::db::Database, id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let (status, _, _, Some(owner)) = row(db, id).await {
            assert_eq!(status, "running");
            return owner;
        }
        assert!(Instant::now() < deadline, "no instance took run {id}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// (the instance that holds a lease as `owner`, the other one).
fn holder<'a>(owner: &str, a: &'a Server, b: &'a Server) -> (&'a Server, &'a Server) {
    match (a.owns(owner), b.owns(owner)) {
        (true, false) => (a, b),
        (false, true) => (b, a),
        _ => panic!("lease owner {owner} is neither instance"),
    }
}

/// The run's status, step kinds, version and lease owner, read from the database.
async fn row(
    db: &nrllm_store::db::Database,
    id: &str,
) -> (String, Vec<String>, i64, Option<String>) {
    let run = sqlx::query("SELECT status, version, lease_owner FROM agent_run WHERE id = $1")
        .bind(id)
        .fetch_one(db.pool())
        .await
        .unwrap();
    let kinds: Vec<String> =
        sqlx::query_scalar("SELECT kind FROM agent_run_event WHERE run_id = $1 ORDER BY sequence")
            .bind(id)
            .fetch_all(db.pool())
            .await
            .unwrap();
    (
        run.get("status"),
        kinds,
        run.get("version"),
        run.get("lease_owner"),
    )
}

#[tokio::test]
#[ignore = "needs Postgres (TEST_DATABASE_URL); make test runs it"]
async fn a_stalled_or_killed_instance_loses_its_runs_to_the_other_and_writes_nothing() {
    let pg = nrllm_store::testing::postgres_from_env().await;
    // One after the other: the first start migrates the database and creates the admin.
    let a = instance(&pg.url).await;
    let b = instance(&pg.url).await;
    // A session lives in the database: it works on either instance.
    let admin = log_in(&a, "admin", ADMIN_PASSWORD).await;

    // A browser on B follows a run that A drives: its steps as A commits them, then its status,
    // and the end of the stream.
    let followed = start_run(
        &a,
        &admin,
        json!({ "prompt": "Rename the home page to \"Followed\"" }),
    )
    .await;
    let stream = common::client()
        .get(format!("{}/api/runs/{followed}/events", b.base))
        .header(reqwest::header::COOKIE, &admin.cookies)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), reqwest::StatusCode::OK);
    let text = stream
        .text()
        .await
        .expect("the stream ends when the run stops running");
    assert!(text.contains("event: step"), "{text}");
    assert!(
        text.contains("event: status\ndata: waiting_for_approval"),
        "{text}"
    );
    assert!(text.contains("\"kind\":\"approval_requested\""), "{text}");

    // Started on A; the instance that took it stalls during its first model call.
    let id = start_run(
        &a,
        &admin,
        json!({ "prompt": "Rename the home page to \"Zombie\"" }),
    )
    .await;
    let owner = held(&pg.db, &id).await;
    let (stalled, other) = holder(&owner, &a, &b);
    stalled.signal("STOP");

    // The other's reaper takes it over after the lease and asks the model again from the prompt.
    let view = wait_for(other, &admin, &id, "waiting_for_approval").await;
    let (_, kinds, version, _) = row(&pg.db, &id).await;
    assert!(kinds.iter().any(|k| k == "recovered"), "{kinds:?}");
    assert!(
        other.log_text().contains("took it over"),
        "{}",
        other.log_text()
    );

    // The stalled one wakes up, finishes its model call and tries to write its segment: refused
    // (the other holds the lease, or has moved the run on already), and nothing is written.
    stalled.signal("CONT");
    let deadline = Instant::now() + Duration::from_secs(15);
    let noticed = |log: &str| log.contains("lost its lease") || log.contains("changed meanwhile");
    while !noticed(&stalled.log_text()) {
        assert!(
            Instant::now() < deadline,
            "the stalled instance never noticed: {}",
            stalled.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = row(&pg.db, &id).await;
    assert_eq!(
        (after.0.as_str(), after.1.len(), after.2),
        ("waiting_for_approval", kinds.len(), version),
        "the stalled instance wrote nothing"
    );

    // Approved through B; the run finishes; the page was renamed once.
    let (status, body) = call(
        &b,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": id, "decision": "approve_all", "digest": view["digest"] }),
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    wait_for(&a, &admin, &id, "completed").await;
    let (_, kinds, _, owner) = row(&pg.db, &id).await;
    assert_eq!(kinds.iter().filter(|k| *k == "approval_decided").count(), 1);
    assert_eq!(owner, None, "a finished run holds no lease");

    // A tool switched off through A is off on B within a few seconds.
    let (status, _) = call(
        &a,
        &admin,
        "nrllm_tool_set",
        json!({ "name": "delete_page" }),
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::OK);
    // Announced (NOTIFY): well before the 30 s re-read that covers a lost notification.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let (_, options) = call(&b, &admin, "nrllm_playground_options", json!({})).await;
        let delete = options["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "delete_page")
            .cloned()
            .unwrap();
        if delete["enabled"] == false {
            break;
        }
        assert!(Instant::now() < deadline, "B still offers delete_page");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A run cancelled through the instance that does not drive it: the one driving it stops it
    // at its next step (the model call in flight is abandoned), with who and why.
    let cancelled = start_run(
        &a,
        &admin,
        json!({ "prompt": "Rename the home page to \"Cancelled\"" }),
    )
    .await;
    let driver = held(&pg.db, &cancelled).await;
    let (_, elsewhere) = holder(&driver, &a, &b);
    let (status, body) = call(
        elsewhere,
        &admin,
        "nrllm_run_cancel",
        json!({ "run_id": cancelled, "reason": "wrong page" }),
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    assert_eq!(body, "running", "a running run stops at its next step");
    let view = wait_for(elsewhere, &admin, &cancelled, "cancelled").await;
    assert_eq!(view["summary"]["termination_reason"], "cancelled");
    let last = view["steps"].as_array().unwrap().last().unwrap().clone();
    let title = last["title"].as_str().unwrap();
    assert!(
        title.contains("cancelled by admin: wrong page") && title.contains("abandoned"),
        "{title}"
    );

    // A second run; the instance that took it is killed during its first model call. The other
    // takes it over within the lease and a margin (its reaper looks every third of a lease),
    // and asks the model again.
    let second = start_run(
        &a,
        &admin,
        json!({ "prompt": "Rename the home page to \"Killed\"" }),
    )
    .await;
    let killed_owner = held(&pg.db, &second).await;
    let (victim, survivor) = holder(&killed_owner, &a, &b);
    victim.signal("KILL");
    let killed = Instant::now();
    loop {
        let owner = row(&pg.db, &second).await.3;
        if owner.is_some() && owner.as_deref() != Some(killed_owner.as_str()) {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(LEASE_SECS) + Duration::from_millis(1_500),
            "the other instance did not take the run over in time"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("taken over {:?} after the kill", killed.elapsed());
    wait_for(survivor, &admin, &second, "waiting_for_approval").await;
    let recovered: String = sqlx::query_scalar(
        "SELECT payload FROM agent_run_event WHERE run_id = $1 AND kind = 'recovered'",
    )
    .bind(&second)
    .fetch_one(pg.db.pool())
    .await
    .unwrap();
    assert!(
        recovered.contains("starts again from its prompt"),
        "{recovered}"
    );
    drop(a);
    drop(b);
    pg.cleanup().await;
}

/// One number from a Prometheus scrape of `server` (`name` with its labels, as printed).
async fn metric(server: &Server, token: &str, name: &str) -> u64 {
    let text = metrics_text(server, token).await;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
#[ignore = "needs Postgres (TEST_DATABASE_URL); make test runs it"]
async fn queued_runs_across_two_instances_each_run_once_within_each_instances_limit() {
    let pg = nrllm_store::testing::postgres_from_env().await;
    const RUNS: usize = 200;
    const LIMIT: usize = 4;
    let env = |url: &str| {
        vec![
            ("NRLLM_DATABASE_URL".to_owned(), url.to_owned()),
            ("NRLLM_MAX_RUNNING_RUNS".to_owned(), LIMIT.to_string()),
            ("NRLLM_DEMO_THINK_MS".to_owned(), "40".to_owned()),
            ("NRLLM_RUN_STARTS_PER_MINUTE".to_owned(), "10000".to_owned()),
        ]
    };
    let start_one = |url: String| async move {
        let env = env(&url);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        start("log_level = \"warn\"\n", &env).await
    };
    let a = start_one(pg.url.clone()).await;
    let b = start_one(pg.url.clone()).await;
    let admin = log_in(&a, "admin", ADMIN_PASSWORD).await;
    let (_, token) = call(
        &a,
        &admin,
        "nrllm_token_create",
        json!({ "name": "prometheus", "role": "viewer" }),
    )
    .await;
    let token = token.as_str().unwrap().to_owned();

    // Watch the database while the runs go: how many each instance holds at once.
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let (db, watching) = (pg.db.clone(), watching.clone());
        tokio::spawn(async move {
            let mut most = 0_i64;
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                let counts: Vec<i64> = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM agent_run WHERE status = 'running' GROUP BY lease_owner",
                )
                .fetch_all(db.pool())
                .await
                .unwrap();
                most = most.max(counts.into_iter().max().unwrap_or(0));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            most
        })
    };

    // 200 runs, half started through each instance, all at once.
    let started = futures::future::join_all((0..RUNS).map(|n| {
        let (server, admin) = (if n % 2 == 0 { &a } else { &b }, &admin);
        start_run(
            server,
            admin,
            json!({ "prompt": format!("What time is it? (run {n})") }),
        )
    }))
    .await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM agent_run WHERE status = 'completed'")
                .fetch_one(pg.db.pool())
                .await
                .unwrap();
        if done as usize == RUNS {
            break;
        }
        assert!(Instant::now() < deadline, "{done} of {RUNS} runs completed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    let most_in_database = watcher.await.unwrap();

    // Each ran exactly once: one model request per round, the same steps for every run, no
    // recovery, and every run was taken from the queue exactly once (by one instance or the
    // other).
    let mut shapes = std::collections::BTreeSet::new();
    for id in &started {
        let (status, kinds, _, owner) = row(&pg.db, id).await;
        assert_eq!((status.as_str(), owner), ("completed", None));
        assert!(!kinds.iter().any(|k| k == "recovered"), "{kinds:?}");
        shapes.insert(kinds);
    }
    assert_eq!(shapes.len(), 1, "every run took the same steps: {shapes:?}");
    let taken_a = metric(&a, &token, "nrllm_queue_taken_total").await;
    let taken_b = metric(&b, &token, "nrllm_queue_taken_total").await;
    assert_eq!(taken_a + taken_b, RUNS as u64, "each run taken once");
    assert!(
        taken_a > 0 && taken_b > 0,
        "both worked: {taken_a} + {taken_b}"
    );
    // Never more than the limit at once in either instance, by its own count and by the
    // database's.
    for server in [&a, &b] {
        let peak = metric(server, &token, "nrllm_runs_driven_peak").await;
        assert!((1..=LIMIT as u64).contains(&peak), "peak {peak}");
    }
    assert!(
        (1..=LIMIT as i64).contains(&most_in_database),
        "{most_in_database} at once"
    );
    eprintln!("taken: A {taken_a}, B {taken_b}; most at once in the database {most_in_database}");
    drop(a);
    drop(b);
    pg.cleanup().await;
}

/// A lost lease stops the run before its next effect: the instance driving a run stalls (SIGSTOP)
/// during a model call, the other takes the run over and finishes it, and the stalled one, woken,
/// neither runs the tool its model call asked for nor asks the model again — it stops where it
/// stands and writes nothing. (The scripted model answers every call after 1.5 s: first a
/// read-only tool call, then, once it has a tool result, a final text.)
#[tokio::test]
#[ignore = "needs Postgres (TEST_DATABASE_URL); make test runs it"]
async fn a_stalled_instance_takes_no_step_after_its_lease_is_gone() {
    use wiremock::matchers::{body_string_contains, method};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let pg = nrllm_store::testing::postgres_from_env().await;
    let model = MockServer::start().await;
    let completion = |message: serde_json::Value| {
        ResponseTemplate::new(200)
            .set_delay(Duration::from_millis(1500))
            .set_body_json(
                json!({"id": "c", "object": "chat.completion", "model": "scripted",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2}}),
            )
    };
    Mock::given(method("POST"))
        .and(body_string_contains("tool_call_id"))
        .respond_with(completion(
            json!({"role": "assistant", "content": "Listed."}),
        ))
        .mount(&model)
        .await;
    Mock::given(method("POST"))
        .respond_with(completion(json!({"role": "assistant", "content": null,
            "tool_calls": [{"id": "l1", "type": "function",
                "function": {"name": "list_pages", "arguments": "{}"}}]})))
        .mount(&model)
        .await;
    let settings = format!(
        "log_level = \"info\"\n\n[[configurations]]\nname = \"scripted\"\nkind = \"openai\"\n\
         model = \"scripted\"\nbase_url = \"{}/v1\"\napi_key_env = \"TEST_WIRE_KEY\"\n",
        model.uri()
    );
    let env = [
        ("NRLLM_DATABASE_URL", pg.url.as_str()),
        ("NRLLM_LEASE_SECS", "2"),
        ("TEST_WIRE_KEY", "key-1"),
    ];
    let a = start(&settings, &env).await;
    let b = start(&settings, &env).await;
    let admin = log_in(&a, "admin", ADMIN_PASSWORD).await;
    let requests = || async { model.received_requests().await.unwrap_or_default().len() };

    let id = start_run(
        &a,
        &admin,
        json!({ "prompt": "List the pages", "configuration": "scripted" }),
    )
    .await;
    let owner = held(&pg.db, &id).await;
    let (stalled, other) = holder(&owner, &a, &b);
    // Stalled while its first model call is in flight.
    let deadline = Instant::now() + Duration::from_secs(5);
    while requests().await == 0 {
        assert!(Instant::now() < deadline, "the model was never asked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stalled.signal("STOP");
    // The other takes it over, asks the model again, runs the tool and finishes.
    let done = wait_until_long(other, &admin, &id, "completed").await;
    assert_eq!(done["summary"]["final_answer"], "Listed.");
    let asked = requests().await;
    assert_eq!(
        asked, 3,
        "one call by the stalled instance, two by the other"
    );

    // Woken, the stalled instance's model call returns a tool call: it does not run it, does
    // not ask the model again, and says why.
    stalled.signal("CONT");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !stalled.log_text().contains("lost the run's lease") {
        assert!(
            Instant::now() < deadline,
            "the stalled instance never stopped: {}",
            stalled.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Give a wrongly continuing instance time to show itself.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(
        requests().await,
        asked,
        "no model call after the lease was gone"
    );
    let (status, kinds, _, _) = row(&pg.db, &id).await;
    assert_eq!(status, "completed");
    assert_eq!(
        kinds.iter().filter(|k| *k == "tool").count(),
        1,
        "{kinds:?}: the tool ran once, by the other instance"
    );
    drop((a, b));
    pg.cleanup().await;
}

/// Polls a run on `server` until it has `status`, for up to 30 s (a takeover waits for a lease).
async fn wait_until_long(
    server: &Server,
    session: &common::Session,
    id: &str,
    status: &str,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, view) = call(server, session, "nrllm_run_get", json!({ "run_id": id })).await;
        if code == reqwest::StatusCode::OK && view["summary"]["status"] == status {
            return view;
        }
        assert!(
            Instant::now() < deadline,
            "run {id} never became {status}: {view}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
