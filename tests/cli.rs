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
        };
        let at = now - age_days * day;
        let record = store.create(&run, at).await.unwrap();
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
