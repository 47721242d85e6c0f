//! The server binary as an operator meets it: bad settings stop it with a clear message, and
//! `purge` deletes what the retention windows say.

#![cfg(feature = "ssr")]

use std::process::Command;

use nrllm_core::run_store::{Finish, NewRun, RunReader, RunStatus, RunStore, TerminationReason};
use nrllm_core::state::Counters;
use nrllm_store::db::Database;
use nrllm_store::SqlRunStore;

fn binary() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nrllm-playground"));
    // Only what each test sets: no settings file from the working directory.
    command.env("NRLLM_CONFIG", "/nonexistent/on/purpose.toml");
    command
}

#[test]
fn a_bad_setting_stops_start_up_with_its_name_and_no_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("Leptos.toml");
    std::fs::write(&config, "site_addr = \"nowhere\"\n").unwrap();
    let output = binary().env("NRLLM_CONFIG", &config).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`site_addr`") && stderr.contains("Leptos.toml"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    let output = binary()
        .env("NRLLM_CONFIG", &config)
        .env("NRLLM_SITE_ADDR", "127.0.0.1:0")
        .env("NRLLM_DATABASE_URL", "mysql://x")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`database_url`") && stderr.contains("NRLLM_DATABASE_URL"),
        "{stderr}"
    );
}

#[test]
fn a_missing_settings_file_named_explicitly_is_an_error() {
    let output = binary().arg("purge").output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent/on/purpose.toml"), "{stderr}");
}

#[tokio::test]
async fn purge_deletes_runs_past_the_retention_windows_and_expired_sessions_and_links() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("runs.db").display());
    let db = Database::connect(&url).await.unwrap();
    let store = SqlRunStore::new(db.clone());
    let day = 24 * 60 * 60 * 1000;
    let now = nrllm_core::clock::now_ms();
    let configuration = nrllm_store::testing::demo_configuration("hi");
    let mut ids = Vec::new();
    for age_days in [40, 10] {
        let run = NewRun {
            id: uuid::Uuid::new_v4(),
            configuration: configuration.clone(),
            requested_by: "test".into(),
            copied: Vec::new(),
            trace: nrllm_core::trace::RunTrace::start(None),
        };
        let at = now - age_days * day;
        let record = store.create(&run, at, true).await.unwrap();
        let finish = Finish {
            status: RunStatus::Completed,
            reason: TerminationReason::Completed,
            counters: Counters::default(),
            truncated: false,
            final_answer: Some("done".into()),
            error_summary: None,
            estimated_cost_micros: None,
        };
        store
            .finish(run.id, record.version, &finish, &[], at)
            .await
            .unwrap();
        ids.push(run.id);
    }
    // A session and a login link that expired, and a session that has not.
    let accounts = nrllm_store::accounts::AccountStore::new(db.clone());
    accounts
        .create_user("ann", None, nrllm_types::Role::Viewer, now)
        .await
        .unwrap();
    accounts
        .create_session("ann", now - 2 * day, day)
        .await
        .unwrap();
    let live = accounts.create_session("ann", now, day).await.unwrap();
    accounts
        .create_login_link("ann", now - 2 * day, day)
        .await
        .unwrap();
    let config = dir.path().join("Leptos.toml");
    std::fs::write(
        &config,
        format!("database_url = \"{url}\"\nretention_terminal_days = 30\n"),
    )
    .unwrap();
    let output = binary()
        .env("NRLLM_CONFIG", &config)
        .arg("purge")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.starts_with("purged 1 runs and 0 events"), "{stdout}");
    assert!(
        stdout.contains("1 expired sessions and 1 expired login links"),
        "{stdout}"
    );
    assert!(accounts.session(&live, now).await.unwrap().is_some());
    assert!(
        store.get(ids[0]).await.unwrap().is_none(),
        "the 40-day-old run is gone"
    );
    assert!(
        store.get(ids[1]).await.unwrap().is_some(),
        "the 10-day-old run stays"
    );
}

#[test]
fn help_lists_the_commands_and_unknown_arguments_are_refused() {
    let output = binary().arg("--help").output().expect("the binary runs");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("serve") && help.contains("purge"), "{help}");
    let output = binary()
        .arg("frobnicate")
        .output()
        .expect("the binary runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("frobnicate"), "{stderr}");
}

/// Rewrites run `id`'s rows from step `from` on as someone who can write the database but has no
/// audit key would: each row's hash recomputed over its stored columns (the chain's older, plain
/// SHA-256 rule), so every row follows the one before.
async fn rehash_from(db: &Database, id: uuid::Uuid, from: i64) {
    use nrllm_store::chain::{row_hash, ChainRow};
    use sqlx::Row as _;
    let rows = sqlx::query(
        "SELECT sequence, kind, round, duration_ms, payload, created_at_ms, prev_hash, hash \
         FROM agent_run_event WHERE run_id = $1 ORDER BY sequence",
    )
    .bind(id.to_string())
    .fetch_all(db.pool())
    .await
    .unwrap();
    let mut prev = nrllm_store::chain::GENESIS.to_owned();
    for row in rows {
        let row = ChainRow {
            sequence: row.get("sequence"),
            kind: row.get("kind"),
            round: row.get("round"),
            duration_ms: row.get("duration_ms"),
            payload: row.get("payload"),
            created_at_ms: row.get("created_at_ms"),
            prev_hash: row.get("prev_hash"),
            hash: row.get("hash"),
        };
        if row.sequence < from {
            prev = row.hash.unwrap();
            continue;
        }
        let hash = row_hash(&id.to_string(), &prev, &row);
        sqlx::query(
            "UPDATE agent_run_event SET prev_hash = $1, hash = $2 WHERE run_id = $3 AND sequence = $4",
        )
        .bind(&prev)
        .bind(&hash)
        .bind(id.to_string())
        .bind(row.sequence)
        .execute(db.pool())
        .await
        .unwrap();
        prev = hash;
    }
}

async fn exec(db: &Database, sql: &str, run: uuid::Uuid) {
    sqlx::query(sql)
        .bind(run.to_string())
        .execute(db.pool())
        .await
        .unwrap();
}

#[tokio::test]
async fn verify_names_each_tampered_run_and_its_first_bad_row_and_tells_a_wrong_key() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("runs.db").display());
    let db = Database::connect(&url).await.unwrap();
    let store = SqlRunStore::new(db.clone());
    let now = nrllm_core::clock::now_ms();
    // One run from before the audit key, chained by the older rule (its key's anchor is later).
    let older = nrllm_store::testing::completed_run(&store, 3, now).await;
    exec(
        &db,
        "UPDATE agent_run SET audit_key_id = NULL, audit_head = NULL WHERE id = $1",
        older.id,
    )
    .await;
    rehash_from(&db, older.id, 1).await;
    // The key comes into use after that run began (its id says when), and before the next.
    store
        .anchor_audit_key(nrllm_core::clock::now_ms() + 1)
        .await
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(nrllm_store::testing::completed_run(&store, 4, now + 20).await);
    }
    let config = dir.path().join("Leptos.toml");
    std::fs::write(&config, format!("database_url = \"{url}\"\n")).unwrap();
    let verify = |key: Option<&str>| {
        let mut command = binary();
        command.env("NRLLM_CONFIG", &config).arg("verify");
        if let Some(key) = key {
            command.env("NRLLM_AUDIT_KEY", key);
        }
        let output = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        (output.status.code(), stdout)
    };
    let (code, stdout) = verify(None);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("6 runs checked with audit key")
            && stdout.contains(": 5 verified, 0 broken, 1 chained before the audit key"),
        "{stdout}"
    );

    // 1. One row edited, and every later hash recomputed, without the key.
    exec(
        &db,
        r#"UPDATE agent_run_event SET payload = '{"type":"recovered","resumes_at":"nothing happened"}' WHERE run_id = $1 AND sequence = 2"#,
        runs[0].id,
    )
    .await;
    rehash_from(&db, runs[0].id, 2).await;
    // 2. The last two rows deleted, with the run's last sequence lowered, and without.
    exec(
        &db,
        "DELETE FROM agent_run_event WHERE run_id = $1 AND sequence > 2",
        runs[1].id,
    )
    .await;
    exec(
        &db,
        "UPDATE agent_run SET last_sequence = 2 WHERE id = $1",
        runs[1].id,
    )
    .await;
    exec(
        &db,
        "DELETE FROM agent_run_event WHERE run_id = $1 AND sequence > 2",
        runs[2].id,
    )
    .await;
    // 3. Every MAC set to NULL; on another run, its key id and head too.
    exec(
        &db,
        "UPDATE agent_run_event SET prev_hash = NULL, hash = NULL WHERE run_id = $1",
        runs[3].id,
    )
    .await;
    exec(
        &db,
        "UPDATE agent_run_event SET prev_hash = NULL, hash = NULL WHERE run_id = $1",
        runs[4].id,
    )
    .await;
    exec(
        &db,
        "UPDATE agent_run SET audit_key_id = NULL, audit_head = NULL WHERE id = $1",
        runs[4].id,
    )
    .await;

    let (code, stdout) = verify(None);
    assert_eq!(code, Some(2), "{stdout}");
    let says = |run: &nrllm_core::run_store::RunRecord, what: &str| {
        assert!(
            stdout.contains(&format!("run {}: {what}", run.id)),
            "expected `run {}: {what}` in\n{stdout}",
            run.id
        );
    };
    says(
        &runs[0],
        "log broken at step 2: its content was changed after it was written",
    );
    says(
        &runs[1],
        "log incomplete: it ends at step 2, but the run's keyed head does not",
    );
    says(
        &runs[2],
        "log incomplete: it ends at step 2, the run's last step is 4",
    );
    says(&runs[3], "log broken at step 1: it carries no MAC");
    says(
        &runs[4],
        "log broken at step 1: the run began after the audit key came into use",
    );
    assert!(
        stdout.contains("0 verified, 5 broken, 1 chained before the audit key"),
        "{stdout}"
    );

    // A row copied from another run, in place of its own.
    let copied = nrllm_store::testing::completed_run(&store, 4, now + 30).await;
    let source = nrllm_store::testing::completed_run(&store, 4, now + 30).await;
    exec(
        &db,
        "DELETE FROM agent_run_event WHERE run_id = $1 AND sequence = 3",
        copied.id,
    )
    .await;
    sqlx::query(
        "INSERT INTO agent_run_event (run_id, sequence, kind, round, duration_ms, payload, \
         created_at_ms, prev_hash, hash) SELECT $1, sequence, kind, round, duration_ms, payload, \
         created_at_ms, prev_hash, hash FROM agent_run_event WHERE run_id = $2 AND sequence = 3",
    )
    .bind(copied.id.to_string())
    .bind(source.id.to_string())
    .execute(db.pool())
    .await
    .unwrap();
    let (code, stdout) = verify(None);
    assert_eq!(code, Some(2), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "run {}: log broken at step 3: it does not follow the step before it",
            copied.id
        )),
        "{stdout}"
    );
    assert!(!stdout.contains(&format!("run {}:", source.id)), "{stdout}");

    // Another key: every keyed run says so, and the older run is still checked by its rule.
    let (code, stdout) = verify(Some(&"5a".repeat(32)));
    assert_eq!(code, Some(2), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "run {}: log keyed by another audit key (id {}",
            source.id,
            db.audit_key().id()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(": 0 verified, 6 broken, 1 chained before the audit key (checked by the older, unkeyed rule), 1 written before"),
        "{stdout}"
    );
}

#[tokio::test]
async fn the_audit_key_file_is_private_and_verify_fails_without_the_anchor() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("runs.db").display());
    let db = Database::connect(&url).await.unwrap();
    let key_file = dir.path().join("runs.db.audit-key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the key file is the owner's alone");
    }
    let store = SqlRunStore::new(db.clone());
    store.anchor_audit_key(1).await.unwrap();
    nrllm_store::testing::completed_run(&store, 2, nrllm_core::clock::now_ms()).await;
    let config = dir.path().join("Leptos.toml");
    std::fs::write(&config, format!("database_url = \"{url}\"\n")).unwrap();
    let verify = || {
        binary()
            .env("NRLLM_CONFIG", &config)
            .arg("verify")
            .output()
            .unwrap()
    };
    let output = verify();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    sqlx::query("DELETE FROM audit_anchor")
        .execute(db.pool())
        .await
        .unwrap();
    let output = verify();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains("the audit key's anchor is missing"),
        "{stdout}"
    );
}
