//! The human-in-the-loop cycle, persisted: N runs of — turn 1 calls one gated tool, the run
//! suspends, an operator approves, the tool runs, turn 2 answers — through the run service on a
//! real database. Prints per-run latency percentiles and the durable commits each cycle made.
//!
//! cargo bench -p nrllm-store --bench hitl -- --runs 500 --db sqlite:target/hitl.db --synchronous full
//! cargo bench -p nrllm-store --bench hitl -- --runs 500 --db postgres://postgres@127.0.0.1/test
//!
//! cargo bench -p nrllm-store --bench hitl -- --runs 50 --state-kb 1024   (a 1 MB suspended state)
//!
//! On Postgres the tables are created in the URL's default schema; point it at a scratch database.

use std::sync::Arc;
use std::time::Instant;

use nrllm_core::provider::ChatResponse;
use nrllm_core::service::{RunService, SingleLoop};
use nrllm_core::store::{RunConfiguration, RunStatus};
use nrllm_core::testing::{call_turn, probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::{Decision, RunSettings, ToolLoop};
use nrllm_store::db::{Database, DbOptions, SqliteSync};
use nrllm_store::SqlRunStore;
use serde_json::json;

struct Args {
    runs: usize,
    db: String,
    sync: SqliteSync,
    /// Size of the gated call's argument text, in KiB: the suspended state is about this large.
    state_kb: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        runs: 200,
        db: "sqlite:target/hitl-bench/hitl.db".into(),
        sync: SqliteSync::Full,
        state_kb: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--runs" => {
                args.runs = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or("--runs takes a positive number")?
            }
            "--db" => args.db = it.next().ok_or("--db takes a database URL")?,
            "--synchronous" => {
                args.sync = match it.next().as_deref() {
                    Some("full") => SqliteSync::Full,
                    Some("normal") => SqliteSync::Normal,
                    _ => return Err("--synchronous takes full or normal".into()),
                }
            }
            "--state-kb" => {
                args.state_kb = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--state-kb takes a number of KiB")?
            }
            // cargo bench passes --bench to every bench binary.
            "--bench" => {}
            other => return Err(format!("unknown flag `{other}`")),
        }
    }
    Ok(args)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("hitl: {message}");
            std::process::exit(2);
        }
    };
    if let Some(path) = args.db.strip_prefix("sqlite:") {
        // A fresh file each time, so runs do not measure a growing table.
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}"));
        }
    }
    let db = Database::connect_with(
        &args.db,
        DbOptions {
            sqlite_sync: args.sync,
            max_connections: None,
        },
    )
    .await
    .unwrap_or_else(|err| {
        eprintln!("hitl: {err}");
        std::process::exit(2);
    });
    let store = Arc::new(SqlRunStore::new(db));
    let probe = Probe::default();
    let provider = ScriptedProvider::default();
    let tool_loop = Arc::new(ToolLoop::new(
        Arc::new(provider.clone()),
        Arc::new(probe_registry(&probe)),
    ));
    let service = RunService::new(store.clone(), Arc::new(SingleLoop(tool_loop)));
    let configuration = RunConfiguration {
        continues: None,
        approval_timeout_ms: None,
        provider: "scripted".into(),
        model: "script".into(),
        prompt: "write a note".into(),
        system_prompt: Some("You are careful.".into()),
        skills: Vec::new(),
        settings: RunSettings::default(),
    };

    let text = if args.state_kb == 0 {
        "x".to_owned()
    } else {
        "x".repeat(args.state_kb * 1024)
    };
    let mut cycle_ms = Vec::with_capacity(args.runs);
    let mut resume_ms = Vec::with_capacity(args.runs);
    let mut state_bytes = 0;
    let commits_before = store.commits();
    let started = Instant::now();
    for i in 0..args.runs {
        provider.push(call_turn(
            &format!("c{i}"),
            "write_note",
            json!({ "text": text }),
            usage(100, 20),
        ));
        provider.push(ChatResponse::text("done", usage(120, 10)));
        let cycle = Instant::now();
        let run = service
            .start(configuration.clone(), "bench")
            .await
            .expect("start");
        assert_eq!(run.status, RunStatus::WaitingForApproval);
        state_bytes = run.suspended_state.as_deref().map_or(0, str::len);
        let approved = Instant::now();
        let done = service
            .resume(run.id, &Decision::ApproveAll, "operator", None)
            .await
            .expect("resume");
        assert_eq!(done.status, RunStatus::Completed);
        resume_ms.push(approved.elapsed().as_secs_f64() * 1000.0);
        cycle_ms.push(cycle.elapsed().as_secs_f64() * 1000.0);
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(
        probe.count("write_note"),
        args.runs,
        "every approved tool ran exactly once"
    );
    let commits = store.commits() - commits_before;
    cycle_ms.sort_by(f64::total_cmp);
    resume_ms.sort_by(f64::total_cmp);
    let backend = args.db.split(':').next().unwrap_or_default();
    let sync = if backend == "sqlite" {
        format!(" synchronous={:?}", args.sync)
    } else {
        String::new()
    };
    println!(
        "db={backend}{sync} p90_ms={:.3} p99_ms={:.3}",
        percentile(&cycle_ms, 0.9),
        percentile(&cycle_ms, 0.99)
    );
    println!(
        "runs={} runs_per_s={:.1} cycle_ms_p50={:.3} commits_per_cycle={:.1}",
        args.runs,
        args.runs as f64 / elapsed,
        percentile(&cycle_ms, 0.5),
        commits as f64 / args.runs as f64
    );
    println!(
        "state_bytes={state_bytes} approve_to_completed_ms_p50={:.3} p99={:.3}",
        percentile(&resume_ms, 0.5),
        percentile(&resume_ms, 0.99)
    );
}
