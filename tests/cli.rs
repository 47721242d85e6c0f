//! The server binary as an operator meets it: bad settings stop it with a clear message, and
//! `purge` deletes what the retention windows say.

#![cfg(feature = "ssr")]

use std::process::Command;

use nrllm_core::state::Counters;
use nrllm_core::store::{Finish, NewRun, RunConfiguration, RunStatus, RunStore, TerminationReason};
use nrllm_core::RunSettings;
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
async fn purge_deletes_runs_past_the_retention_windows() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("runs.db").display());
    let store = SqlRunStore::new(Database::connect(&url).await.unwrap());
    let day = 24 * 60 * 60 * 1000;
    let now = nrllm_core::clock::now_ms();
    let configuration = RunConfiguration {
        continues: None,
        approval_timeout_ms: None,
        provider: "demo".into(),
        model: "demo-1".into(),
        prompt: "hi".into(),
        system_prompt: None,
        skills: Vec::new(),
        settings: RunSettings::default(),
    };
    let mut ids = Vec::new();
    for age_days in [40, 10] {
        let run = NewRun {
            id: uuid::Uuid::new_v4(),
            configuration: configuration.clone(),
            requested_by: "test".into(),
            copied: Vec::new(),
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

#[tokio::test]
async fn verify_checks_every_run_log_and_names_an_edited_row() {
    use nrllm_core::events::Event;
    use nrllm_core::store::SequencedEvent;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("runs.db").display());
    let db = Database::connect(&url).await.unwrap();
    let store = SqlRunStore::new(db.clone());
    let run = NewRun {
        id: uuid::Uuid::new_v4(),
        configuration: RunConfiguration {
            continues: None,
            approval_timeout_ms: None,
            provider: "demo".into(),
            model: "demo-1".into(),
            prompt: "hi".into(),
            system_prompt: None,
            skills: Vec::new(),
            settings: RunSettings::default(),
        },
        requested_by: "test".into(),
        copied: Vec::new(),
    };
    let now = nrllm_core::clock::now_ms();
    let record = store.create(&run, now, true).await.unwrap();
    let events: Vec<SequencedEvent> = (1..=3)
        .map(|sequence| SequencedEvent {
            sequence,
            event: Event::Recovered {
                resumes_at: format!("step {sequence}"),
            },
            created_at_ms: now,
        })
        .collect();
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
        .finish(run.id, record.version, &finish, &events, now)
        .await
        .unwrap();
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
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.contains("1 runs checked: 1 verified, 0 broken"),
        "{stdout}"
    );

    // Someone with database access rewrites what step 2 says.
    sqlx::query("UPDATE agent_run_event SET payload = $1 WHERE run_id = $2 AND sequence = 2")
        .bind(r#"{"type":"recovered","resumes_at":"nothing happened"}"#)
        .bind(run.id.to_string())
        .execute(db.pool())
        .await
        .unwrap();
    let output = verify();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "run {}: log broken at step 2: its content was changed after it was written",
            run.id
        )),
        "{stdout}"
    );
    assert_eq!(
        store.verify_log(run.id).await.unwrap().unwrap(),
        nrllm_store::chain::ChainVerdict::Broken {
            sequence: 2,
            reason: "its content was changed after it was written".into()
        }
    );
}
