//! The human-in-the-loop cycle, persisted: runs of — turn 1 calls one gated tool, the run
//! suspends, an operator approves, the tool runs, turn 2 answers — through the run service on a
//! real database, from one or more concurrent clients. Prints cycles per second, latency
//! percentiles, the durable commits each cycle made and, on SQLite at `synchronous=FULL`, the
//! disk's own limit: a small loop of 4 KiB writes each followed by `fdatasync`, in the
//! database's folder, run in the same process just before the cycles.
//!
//! cargo bench -p nrllm-store --bench hitl -- --runs 2000 --synchronous normal
//! cargo bench -p nrllm-store --bench hitl -- --runs 1000 --synchronous full --concurrency 8
//! cargo bench -p nrllm-store --bench hitl -- --runs 1000 --db postgres://postgres@127.0.0.1/test
//! cargo bench -p nrllm-store --bench hitl -- --runs 50 --state-kb 1024   (a 1 MB suspended state)
//! cargo bench -p nrllm-store --bench hitl -- --runs 2000 --synchronous normal --otlp
//! cargo bench -p nrllm-store --bench hitl -- --runs 3000 --synchronous normal --floor
//!
//! `--floor` measures what the database alone asks of a cycle on this machine, for comparison:
//! four commits (as many as a cycle makes), each of one 600-byte row inserted into a table of
//! one B-tree, on one connection of the same SQLite (WAL, the same `synchronous`) and nothing
//! else — no model, no tool, no run row, no steps' chain, no checkpoint (the log only grows).
//! At `synchronous=normal` only: at `full` the disk's flushes are the floor (the probe).
//!
//! `--otlp` installs the server's span export (`nrllm-telemetry`, batched OTLP/HTTP) to a local
//! OTLP receiver in the same process, and checks that every cycle's spans arrived.
//!
//! On Postgres the bench makes a scratch database (`nrllm_hitl_bench`) on the URL's server, and
//! drops it at the end.
//! Any failure of any client (a "database is locked" included) ends the bench with exit code 1.

// The allocator the server runs with (src/main.rs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use nrllm_core::authority::Actor;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nrllm_core::provider::{ChatRequest, ChatResponse, Provider, ProviderError, RetryObserver};
use nrllm_core::run_service::{RunService, SingleLoop};
use nrllm_core::run_store::{RunConfiguration, RunStatus};
use nrllm_core::testing::{call_turn, probe_registry, usage, Probe};
use nrllm_core::transcript::Message;
use nrllm_core::{Decision, RunSettings, ToolLoop};
use nrllm_store::db::{Database, DbOptions, SqliteSync};
use nrllm_store::SqlRunStore;
use serde_json::json;

struct Args {
    runs: usize,
    concurrency: usize,
    db: String,
    sync: SqliteSync,
    /// Size of the gated call's argument text, in KiB: the suspended state is about this large.
    state_kb: usize,
    /// Export the spans over OTLP to a local receiver, as the server does.
    otlp: bool,
    /// Measure four bare commits a cycle instead (see the top).
    floor: bool,
}

fn number(value: Option<String>, flag: &str) -> Result<usize, String> {
    value
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("{flag} takes a number"))
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        runs: 200,
        concurrency: 1,
        db: "sqlite:target/hitl-bench/hitl.db".into(),
        sync: SqliteSync::Full,
        state_kb: 0,
        otlp: false,
        floor: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--runs" => args.runs = number(it.next(), "--runs")?.max(1),
            "--concurrency" => args.concurrency = number(it.next(), "--concurrency")?.max(1),
            "--db" => args.db = it.next().ok_or("--db takes a database URL")?,
            "--synchronous" => {
                args.sync = match it.next().as_deref() {
                    Some("full") => SqliteSync::Full,
                    Some("normal") => SqliteSync::Normal,
                    _ => return Err("--synchronous takes full or normal".into()),
                }
            }
            "--state-kb" => args.state_kb = number(it.next(), "--state-kb")?,
            "--otlp" => args.otlp = true,
            "--floor" => args.floor = true,
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

/// The model of the cycle, answering from the request alone so that concurrent runs never take
/// each other's turns: a call to the gated tool first, then, once its result is in, the answer.
struct CycleModel {
    text: String,
}

#[async_trait]
impl Provider for CycleModel {
    fn name(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &str {
        "script"
    }

    async fn complete(
        &self,
        request: &ChatRequest,
        _on_retry: RetryObserver<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        Ok(match request.messages.last() {
            Some(Message::Tool { .. }) => ChatResponse::text("done", usage(120, 10)),
            _ => call_turn(
                "c1",
                "write_note",
                json!({ "text": self.text }),
                usage(100, 20),
            ),
        })
    }
}

/// Durable writes per second the disk allows: 4 KiB written at the end of a file, then
/// `fdatasync`, for about a second (what a WAL commit at `synchronous=FULL` costs at least).
fn fsyncs_per_second(dir: &std::path::Path) -> std::io::Result<f64> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join("fsync-probe");
    let file = std::fs::File::create(&path)?;
    let page = [7u8; 4096];
    let started = Instant::now();
    let mut done = 0u64;
    while started.elapsed() < Duration::from_secs(1) || done < 100 {
        file.write_all_at(&page, done * 4096)?;
        file.sync_data()?;
        done += 1;
    }
    let rate = done as f64 / started.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(rate)
}

struct Cycles {
    cycle_ms: Vec<f64>,
    resume_ms: Vec<f64>,
    state_bytes: usize,
}

/// One client: `runs` cycles back to back.
async fn client(
    service: Arc<RunService>,
    configuration: RunConfiguration,
    runs: usize,
) -> Result<Cycles, String> {
    let mut out = Cycles {
        cycle_ms: Vec::with_capacity(runs),
        resume_ms: Vec::with_capacity(runs),
        state_bytes: 0,
    };
    for _ in 0..runs {
        let cycle = Instant::now();
        let run = service
            .start(configuration.clone(), "bench")
            .await
            .map_err(|err| format!("start: {err}"))?;
        if run.status != RunStatus::WaitingForApproval {
            return Err(format!("the run is {:?}, not waiting", run.status));
        }
        out.state_bytes = run.suspended_state.as_deref().map_or(0, str::len);
        let approved = Instant::now();
        let done = service
            .resume(
                run.id,
                &Decision::ApproveAll,
                &Actor::headless("operator"),
                None,
            )
            .await
            .map_err(|err| format!("resume: {err}"))?;
        if done.status != RunStatus::Completed {
            return Err(format!("the resumed run is {:?}", done.status));
        }
        out.resume_ms
            .push(approved.elapsed().as_secs_f64() * 1000.0);
        out.cycle_ms.push(cycle.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(out)
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("hitl: {message}");
            std::process::exit(2);
        }
    };
    // The server's runtime: one worker thread a core.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if args.floor {
        if let Err(message) = floor(&args) {
            eprintln!("hitl: {message}");
            std::process::exit(1);
        }
        return;
    }
    if let Err(message) = runtime.block_on(bench(args)) {
        eprintln!("hitl: {message}");
        std::process::exit(1);
    }
}

/// Four bare commits a cycle, `args.runs` cycles, on a fresh SQLite file at the bench's path:
/// prints their rate (see the top).
fn floor(args: &Args) -> Result<(), String> {
    let path = args
        .db
        .strip_prefix("sqlite:")
        .ok_or("--floor measures SQLite only")?;
    if args.sync == SqliteSync::Full {
        // Its log would only grow, and a growing file's flush costs more than a log written
        // over: at FULL the floor is the disk's, which the probe measures.
        return Err(
            "--floor measures synchronous=normal (at full, the fsync probe is the floor)".into(),
        );
    }
    fresh_sqlite(path, SqliteSync::Normal)?;
    let db = |err: rusqlite::Error| format!("the floor's file: {err}");
    let conn = rusqlite::Connection::open(path).map_err(db)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(db)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(db)?;
    conn.pragma_update(None, "wal_autocheckpoint", 0)
        .map_err(db)?;
    conn.execute_batch(
        "CREATE TABLE step (run TEXT NOT NULL, n INTEGER NOT NULL, body TEXT NOT NULL, \
         PRIMARY KEY (run, n)) WITHOUT ROWID",
    )
    .map_err(db)?;
    let body = "x".repeat(600);
    let (started, cpu_before) = (Instant::now(), cpu_ms());
    for _ in 0..args.runs {
        let run = uuid::Uuid::new_v4().to_string();
        for n in 1..=4 {
            let tx = conn.unchecked_transaction().map_err(db)?;
            tx.prepare_cached("INSERT INTO step (run, n, body) VALUES (?1, ?2, ?3)")
                .and_then(|mut insert| insert.execute(rusqlite::params![run, n, body]))
                .map_err(db)?;
            tx.commit().map_err(db)?;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "floor synchronous=Normal runs={} cycles_per_s={:.1} (four bare commits a cycle)",
        args.runs,
        args.runs as f64 / elapsed
    );
    println!(
        "cpu_us_per_cycle={:.1}",
        (cpu_ms() - cpu_before) * 1000.0 / args.runs as f64
    );
    Ok(())
}

/// This process's CPU time so far, in milliseconds (NaN where `/proc` cannot be read).
fn cpu_ms() -> f64 {
    nrllm_store::testing::process_cpu_ms("self").unwrap_or(f64::NAN)
}

async fn bench(args: Args) -> Result<(), String> {
    let sqlite_path = args.db.strip_prefix("sqlite:").map(str::to_owned);
    let fsyncs = match &sqlite_path {
        Some(path) => fresh_sqlite(path, args.sync)?,
        None => None,
    };
    let scratch = match sqlite_path {
        Some(_) => None,
        None => Some(
            ScratchPostgres::create(&args.db)
                .await
                .map_err(|err| format!("a scratch database beside {}: {err}", args.db))?,
        ),
    };
    let url = scratch.as_ref().map_or(args.db.clone(), |s| s.url.clone());
    let db = Database::connect_with(
        &url,
        DbOptions {
            sqlite_sync: args.sync,
            max_connections: None,
            ..DbOptions::default()
        },
    )
    .await
    .map_err(|err| err.to_string())?;
    let store = Arc::new(SqlRunStore::new(db.clone()));
    let export = match args.otlp {
        true => Some(Export::install().await?),
        false => None,
    };
    let probe = Probe::default();
    let service = service(&store, &probe, args.state_kb);

    let per_client = args.runs.div_ceil(args.concurrency);
    let total = per_client * args.concurrency;
    let commits_before = store.commits();
    let (started, cpu_before) = (Instant::now(), cpu_ms());
    let cycles = run_clients(&service, per_client, args.concurrency).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_per_cycle_us = (cpu_ms() - cpu_before) * 1000.0 / total as f64;
    if probe.count("write_note") != total {
        return Err(format!(
            "{} approved calls ran, expected exactly {total}",
            probe.count("write_note")
        ));
    }
    let commits_per_cycle = (store.commits() - commits_before) as f64 / total as f64;
    report(
        &args,
        cycles,
        total as f64 / elapsed,
        commits_per_cycle,
        fsyncs,
    );
    // What a cycle costs the machine, whatever else runs on it (a neighbour's load slows the
    // cycles but takes none of this process's CPU time); with --otlp, the receiver's included.
    println!("cpu_us_per_cycle={cpu_per_cycle_us:.1}");
    if let Some(export) = export {
        export.check(total).await?;
    }
    db.pool().close().await;
    if let Some(scratch) = scratch {
        scratch
            .drop_it()
            .await
            .map_err(|err| format!("dropping the scratch database: {err}"))?;
    }
    Ok(())
}

/// A fresh SQLite file at `path` (so runs do not measure a growing table), and the disk's fsyncs
/// a second where commits wait for the disk (`synchronous=FULL`).
fn fresh_sqlite(path: &str, sync: SqliteSync) -> Result<Option<f64>, String> {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{path}{suffix}"));
    }
    let dir = std::path::Path::new(path)
        .parent()
        .unwrap_or(std::path::Path::new("."));
    match sync {
        SqliteSync::Full => Ok(Some(
            fsyncs_per_second(dir).map_err(|err| format!("fsync probe: {err}"))?,
        )),
        SqliteSync::Normal => Ok(None),
    }
}

/// The run service over `store`, with a model whose gated call carries `state_kb` KiB.
fn service(store: &Arc<SqlRunStore>, probe: &Probe, state_kb: usize) -> Arc<RunService> {
    let text = if state_kb == 0 {
        "x".to_owned()
    } else {
        "x".repeat(state_kb * 1024)
    };
    let tool_loop = Arc::new(ToolLoop::new(
        Arc::new(CycleModel { text }),
        Arc::new(probe_registry(probe)),
    ));
    Arc::new(RunService::new(
        store.clone(),
        Arc::new(SingleLoop(tool_loop)),
    ))
}

/// `concurrency` clients of `per_client` cycles each, together: their cycles, or the first
/// failure.
async fn run_clients(
    service: &Arc<RunService>,
    per_client: usize,
    concurrency: usize,
) -> Result<Cycles, String> {
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
    let clients: Vec<_> = (0..concurrency)
        .map(|_| tokio::spawn(client(service.clone(), configuration.clone(), per_client)))
        .collect();
    let mut all = Cycles {
        cycle_ms: Vec::with_capacity(per_client * concurrency),
        resume_ms: Vec::with_capacity(per_client * concurrency),
        state_bytes: 0,
    };
    let mut failures = Vec::new();
    for handle in clients {
        match handle.await {
            Ok(Ok(cycles)) => {
                all.cycle_ms.extend(cycles.cycle_ms);
                all.resume_ms.extend(cycles.resume_ms);
                all.state_bytes = cycles.state_bytes;
            }
            Ok(Err(message)) => failures.push(message),
            Err(err) => failures.push(format!("a client panicked: {err}")),
        }
    }
    match failures.first() {
        Some(first) => Err(format!(
            "{} of {concurrency} clients failed; first: {first}",
            failures.len()
        )),
        None => Ok(all),
    }
}

/// Prints the case's figures: cycles a second, commits a cycle, the cycle's and the approve →
/// completed latencies, and (one client on SQLite FULL) how near the disk's limit it came.
fn report(
    args: &Args,
    mut cycles: Cycles,
    cycles_per_s: f64,
    commits_per_cycle: f64,
    fsyncs: Option<f64>,
) {
    cycles.cycle_ms.sort_by(f64::total_cmp);
    cycles.resume_ms.sort_by(f64::total_cmp);
    let (cycle_ms, resume_ms) = (&cycles.cycle_ms, &cycles.resume_ms);
    let backend = args.db.split(':').next().unwrap_or_default();
    let sync = if backend == "sqlite" {
        format!(" synchronous={:?}", args.sync)
    } else {
        String::new()
    };
    println!(
        "db={backend}{sync} concurrency={} runs={} cycles_per_s={cycles_per_s:.1} \
         commits_per_cycle={commits_per_cycle:.1}",
        args.concurrency,
        cycle_ms.len()
    );
    println!(
        "cycle_ms p50={:.3} p90={:.3} p99={:.3}",
        percentile(cycle_ms, 0.5),
        percentile(cycle_ms, 0.9),
        percentile(cycle_ms, 0.99)
    );
    println!(
        "state_bytes={} approve_to_completed_ms p50={:.3} p99={:.3}",
        cycles.state_bytes,
        percentile(resume_ms, 0.5),
        percentile(resume_ms, 0.99)
    );
    let Some(fsyncs) = fsyncs else { return };
    if args.concurrency == 1 {
        let limit = fsyncs / commits_per_cycle;
        println!(
            "disk fsyncs_per_s={fsyncs:.0} -> limit_cycles_per_s={limit:.1} ({commits_per_cycle:.1} commits a cycle); \
             reached {:.0}% of it",
            100.0 * cycles_per_s / limit
        );
    } else {
        // The writer commits the transitions that queued together in one transaction.
        println!(
            "disk fsyncs_per_s={fsyncs:.0} (several clients' transitions share commits: the \
             one-client limit does not apply)"
        );
    }
}

/// The server's span export, to a receiver of the bench's own.
struct Export {
    receiver: nrllm_telemetry::receiver::Receiver,
    telemetry: nrllm_telemetry::Telemetry,
}

/// The spans of one cycle: the root, two model requests, the call, the wait.
const SPANS_PER_CYCLE: usize = 5;

impl Export {
    async fn install() -> Result<Export, String> {
        let receiver = nrllm_telemetry::receiver::Receiver::http_counting()
            .map_err(|err| format!("the OTLP receiver: {err}"))?;
        let telemetry = nrllm_telemetry::Telemetry::install(&nrllm_telemetry::Config {
            endpoint: Some(receiver.endpoint()),
            protocol: Some(nrllm_telemetry::OtlpProtocol::HttpProtobuf),
            message_contents: false,
            service_name: "hitl-bench".to_owned(),
        })?
        .ok_or("the OTLP export did not install")?;
        Ok(Export {
            receiver,
            telemetry,
        })
    }

    /// Flushes the export and checks that every cycle's spans arrived; prints what came.
    async fn check(self, cycles: usize) -> Result<(), String> {
        let telemetry = self.telemetry;
        tokio::task::spawn_blocking(move || telemetry.shutdown())
            .await
            .map_err(|err| err.to_string())?;
        let expected = cycles * SPANS_PER_CYCLE;
        let spans = self
            .receiver
            .wait_for_count(expected, Duration::from_secs(10))
            .await;
        let (_, batches) = self.receiver.counts();
        println!("otlp spans_received={spans} expected={expected} batches={batches}");
        match spans >= expected {
            true => Ok(()),
            false => Err(format!("{spans} spans of {expected} reached the receiver")),
        }
    }
}

/// A database of the bench's own on a Postgres server, made new for each run.
struct ScratchPostgres {
    admin: sqlx::PgPool,
    url: String,
}

impl ScratchPostgres {
    const NAME: &str = "nrllm_hitl_bench";

    async fn create(server_url: &str) -> Result<ScratchPostgres, sqlx::Error> {
        let admin = sqlx::PgPool::connect(server_url).await?;
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            Self::NAME
        ))
        .execute(&admin)
        .await?;
        sqlx::query(&format!("CREATE DATABASE {}", Self::NAME))
            .execute(&admin)
            .await?;
        // The same server, the scratch database (the URL's own options are not kept).
        let (scheme, rest) = server_url
            .split_once("://")
            .unwrap_or(("postgres", server_url));
        let authority = rest.split(['/', '?']).next().unwrap_or(rest);
        let url = format!("{scheme}://{authority}/{}", Self::NAME);
        Ok(ScratchPostgres { admin, url })
    }

    async fn drop_it(self) -> Result<(), sqlx::Error> {
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            Self::NAME
        ))
        .execute(&self.admin)
        .await?;
        Ok(())
    }
}
