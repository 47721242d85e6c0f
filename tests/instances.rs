//! Two real server processes on one Postgres database: a browser on B follows a run A drives, live;
//! a run started on A is approved through B;
//! a tool switched off through A is off on B;
//! A stalls (SIGSTOP) mid-run, B's reaper takes the run over once its lease runs out and goes on
//! from the journal, and A, woken, writes nothing; A is killed (SIGKILL) mid-run, and B takes
//! that run over within the lease and a margin, with the right recovery rule.

#![cfg(feature = "ssr")]

mod common;

use std::time::{Duration, Instant};

use common::{call, log_in, start, wait_for, Server, ADMIN_PASSWORD};
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
async fn a_stalled_or_killed_instance_loses_its_runs_to_the_other_and_writes_nothing() {
    let Some(pg) = nrllm_store::testing::postgres_from_env().await else {
        return;
    };
    // One after the other: the first start migrates the database and creates the admin.
    let a = instance(&pg.url).await;
    let b = instance(&pg.url).await;
    // A session lives in the database: it works on either instance.
    let admin = log_in(&a, "admin", ADMIN_PASSWORD).await;

    // A browser on B follows a run that A drives: its steps as A commits them, then its status,
    // and the end of the stream.
    let (_, run) = call(
        &a,
        &admin,
        "nrllm_tool_run",
        json!({ "prompt": "Rename the home page to \"Followed\"" }),
    )
    .await;
    let followed = run.as_str().unwrap().to_owned();
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

    // Started on A; A stalls during its first model call.
    let (status, run) = call(
        &a,
        &admin,
        "nrllm_tool_run",
        json!({ "prompt": "Rename the home page to \"Zombie\"" }),
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{run}");
    let id = run.as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let owner_a = row(&pg.db, &id).await.3.expect("A holds the lease");
    a.signal("STOP");

    // B's reaper takes it over after the lease and asks the model again from the prompt.
    let view = wait_for(&b, &admin, &id, "waiting_for_approval").await;
    let (_, kinds, version, _) = row(&pg.db, &id).await;
    assert!(kinds.iter().any(|k| k == "recovered"), "{kinds:?}");
    assert!(b.log_text().contains("took it over"), "{}", b.log_text());

    // A wakes up, finishes its model call and tries to write its segment: refused (B holds the
    // lease, or has moved the run on already), and nothing is written.
    a.signal("CONT");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !a.log_text().contains("driving a run failed") {
        assert!(
            Instant::now() < deadline,
            "A never noticed: {}",
            a.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = a.log_text();
    assert!(
        log.contains("lost its lease") || log.contains("changed meanwhile"),
        "{log}"
    );
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
    let deadline = Instant::now() + Duration::from_secs(5);
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

    // A second run on A; A is killed during its first model call. B takes it over within the
    // lease and a margin (its reaper looks every third of a lease), and asks the model again.
    let (_, run) = call(
        &a,
        &admin,
        "nrllm_tool_run",
        json!({ "prompt": "Rename the home page to \"Killed\"" }),
    )
    .await;
    let second = run.as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        row(&pg.db, &second).await.3.as_deref(),
        Some(owner_a.as_str())
    );
    a.signal("KILL");
    let killed = Instant::now();
    loop {
        let owner = row(&pg.db, &second).await.3;
        if owner.is_some() && owner.as_deref() != Some(owner_a.as_str()) {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(LEASE_SECS) + Duration::from_millis(1_500),
            "B did not take the run over in time"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("taken over {:?} after the kill", killed.elapsed());
    wait_for(&b, &admin, &second, "waiting_for_approval").await;
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
