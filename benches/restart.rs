//! What an operator waits for after an instance dies, measured against the real server binary:
//!
//! - **restart** (`--db sqlite`): `--running` runs are running (each inside a model call that
//!   would take a minute), as many are queued behind them (`max_running_runs = --running`), and
//!   `--waiting` runs wait for approval. The server is killed (SIGKILL) and started again at once.
//!   Reported: kill → listening, and kill → each cut-off run's next step committed (p50, p99, the
//!   last), and the same for the queued runs' first step;
//! - **handoff** (`--db postgres`): instance A drives `--running` runs (each inside a model call
//!   that would take a minute) and instance B, with room for them, runs beside it on the same
//!   database. A is killed (SIGKILL). Reported: kill → B's first step of each of A's runs (B takes
//!   a run over and at once asks the model again, which answers at once), p50, p99 and the last,
//!   against the goal: the lease, plus the reaper's period (a third of a lease), plus 1 s.
//!
//! Nothing asks the server while it recovers: the bench reads the database every 25 ms to know
//! when every run has moved on, then reads each step's commit time. The kill's time is this
//! process's clock and a step's the server's, on the same machine: good to a millisecond.
//!
//! The bench fails unless every cut-off and queued run moved on to wait for approval, none
//! failed, each of A's runs was taken over by B (its lease's epoch moved on once), and the
//! waiting runs were left as they were (no new step).
//!
//! make bench-restart   (release build; SQLite with 16 and 64 running; Postgres at the default
//!                       lease and at `lease_secs = 5`)
//! cargo bench -p nrllm-playground --features ssr --bench restart -- [--db sqlite|postgres] [--running 16] [--waiting 1000] [--lease-secs N] [binary]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use nrllm_store::testing::TestDb;

mod support;

use support::load::start_run;
use support::{count, number, percentile, until, Server};

const ADDR_A: &str = "127.0.0.1:3096";
const ADDR_B: &str = "127.0.0.1:3097";

/// How long a model call of a run that must stay running takes (the longest the demo allows).
const THINK_LONG_MS: u32 = 60_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Db {
    Sqlite,
    Postgres,
}

struct Args {
    binary: String,
    db: Db,
    running: usize,
    waiting: usize,
    /// The instances' lease; none: the server's default.
    lease_secs: Option<u64>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        binary: String::new(),
        db: Db::Sqlite,
        running: 16,
        waiting: 1000,
        lease_secs: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--running" => args.running = number("--running", it.next())? as usize,
            "--waiting" => {
                args.waiting = match it.next().map(|v| v.parse::<usize>()) {
                    Some(Ok(n)) => n,
                    _ => return Err("--waiting takes a number".into()),
                }
            }
            "--lease-secs" => args.lease_secs = Some(number("--lease-secs", it.next())?),
            "--db" => {
                args.db = match it.next().as_deref() {
                    Some("sqlite") => Db::Sqlite,
                    Some("postgres") => Db::Postgres,
                    _ => return Err("--db takes sqlite or postgres".into()),
                }
            }
            "--bench" => {}
            other if other.starts_with("--") => return Err(format!("unknown flag `{other}`")),
            binary => args.binary = binary.to_owned(),
        }
    }
    args.binary = support::binary_or_own(args.binary);
    Ok(args)
}

fn unix_ms() -> i64 {
    (support::unix_us() / 1000) as i64
}

/// The server binary on `db` at `addr`, its model calls taking `think_ms`, driving at most
/// `args.running` runs, with the bench's lease.
async fn start(args: &Args, db: &TestDb, addr: &str, think_ms: u32) -> Server {
    let lease = args
        .lease_secs
        .map_or(String::new(), |secs| format!("lease_secs = {secs}\n"));
    let settings = format!(
        "log_level = \"warn\"\nrun_starts_per_minute = 100000\ndemo_think_ms = {think_ms}\n\
         max_running_runs = {}\n{lease}",
        args.running
    );
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut server = Server::start(&args.binary, dir, &settings, (addr, &db.url), &[]);
    server.listening(addr).await;
    server
}

/// Starts `n` runs through the server at `addr`, each creating its own page (`{name}-{i}`).
async fn start_runs(addr: &str, token: &str, name: &str, n: usize) -> Result<Vec<String>, String> {
    let client = reqwest::Client::new();
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        ids.push(start_run(&client, (addr, token), &format!("{name}-{i}")).await?);
    }
    Ok(ids)
}

/// `--waiting` runs waiting for approval, made by a server whose model answers at once (then
/// stopped): their ids, and the server's milliseconds once they wait.
async fn waiting_runs(args: &Args, db: &TestDb, token: &str) -> Result<(Vec<String>, i64), String> {
    if args.waiting == 0 {
        return Ok((Vec::new(), unix_ms()));
    }
    let server = start(args, db, ADDR_A, 0).await;
    let ids = start_runs(ADDR_A, token, "waiting", args.waiting).await?;
    until(
        db,
        "waiting_for_approval",
        ids.len(),
        Duration::from_secs(300),
    )
    .await?;
    drop(server);
    Ok((ids, unix_ms()))
}

/// Fails if any of `waiting` gained a step since it waited (`first`: each run's first step
/// since then).
fn untouched(waiting: &[String], first: &HashMap<String, i64>) -> Result<(), String> {
    match waiting.iter().find(|id| first.contains_key(*id)) {
        Some(id) => Err(format!(
            "run {id} gained a step while it waited for approval"
        )),
        None => Ok(()),
    }
}

/// Waits until `n` runs are running and, after that, `queued` more are queued.
async fn running_and_queued(db: &TestDb, n: usize, queued: usize) -> Result<(), String> {
    until(db, "running", n, Duration::from_secs(60)).await?;
    until(db, "queued", queued, Duration::from_secs(60)).await?;
    match count(db, "running").await.0 as usize {
        running if running == n => Ok(()),
        running => Err(format!("{running} runs running, expected {n}")),
    }
}

/// Lets the runs just started write what they write before their model call, so that every
/// step after the kill is one of the recovery's (their model calls take a minute).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Each run's first step committed at or after `since_ms` (server milliseconds), by run id.
async fn first_steps_since(db: &TestDb, since_ms: i64) -> Result<HashMap<String, i64>, String> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT run_id, MIN(created_at_ms) FROM agent_run_event WHERE created_at_ms >= $1 \
         GROUP BY run_id",
    )
    .bind(since_ms)
    .fetch_all(db.db.pool())
    .await
    .map_err(|err| format!("reading the steps: {err}"))?;
    Ok(rows.into_iter().collect())
}

/// Milliseconds from `since_ms` to each of `ids`' first step after it, sorted; fails on a run
/// that has none.
fn delays(ids: &[String], first: &HashMap<String, i64>, since_ms: i64) -> Result<Vec<f64>, String> {
    let mut delays = Vec::with_capacity(ids.len());
    for id in ids {
        match first.get(id) {
            Some(ms) => delays.push((ms - since_ms) as f64),
            None => return Err(format!("run {id} never moved on")),
        }
    }
    delays.sort_by(f64::total_cmp);
    Ok(delays)
}

fn line(name: &str, delays: &[f64]) -> String {
    format!(
        "{name} p50={:.0} p99={:.0} all={:.0} n={}",
        percentile(delays, 50.0),
        percentile(delays, 99.0),
        percentile(delays, 100.0),
        delays.len()
    )
}

/// The ids of the runs in `status`.
async fn ids_in(db: &TestDb, status: &str) -> Result<Vec<String>, String> {
    sqlx::query_scalar("SELECT id FROM agent_run WHERE status = $1")
        .bind(status)
        .fetch_all(db.db.pool())
        .await
        .map_err(|err| format!("reading the runs: {err}"))
}

/// Restart on SQLite: cut-off and queued runs after a SIGKILL and a start at once.
async fn restart(args: &Args, db: &TestDb, token: &str) -> Result<(), String> {
    let (waiting, waited_ms) = waiting_runs(args, db, token).await?;
    let server = start(args, db, ADDR_A, THINK_LONG_MS).await;
    let ids = start_runs(ADDR_A, token, "cut", args.running * 2).await?;
    running_and_queued(db, args.running, args.running).await?;
    settle().await;
    let running = ids_in(db, "running").await?;
    let queued: Vec<String> = ids
        .iter()
        .filter(|id| !running.contains(id))
        .cloned()
        .collect();
    let kill_ms = unix_ms();
    let killed = Instant::now();
    drop(server); // SIGKILL, and waits for the process to be gone.
    let server = start(args, db, ADDR_A, 0).await;
    let listening = killed.elapsed();
    let all = waiting.len() + ids.len();
    until(db, "waiting_for_approval", all, Duration::from_secs(300)).await?;
    drop(server);
    let first = first_steps_since(db, kill_ms).await?;
    let moved = delays(&running, &first, kill_ms)?;
    let started = delays(&queued, &first, kill_ms)?;
    untouched(&waiting, &first_steps_since(db, waited_ms).await?)?;
    println!(
        "restart db=sqlite running={} queued={} waiting={} kill_to_listening_ms={}",
        running.len(),
        queued.len(),
        waiting.len(),
        listening.as_millis()
    );
    println!("{}", line("kill_to_running_moved_on_ms", &moved));
    println!("{}", line("kill_to_queued_started_ms", &started));
    println!("checked: every cut-off and queued run went on to wait for approval, the waiting runs untouched");
    Ok(())
}

/// Handoff on Postgres: A's runs taken over by B after A's SIGKILL.
async fn handoff(args: &Args, db: &TestDb, token: &str) -> Result<(), String> {
    let (waiting, waited_ms) = waiting_runs(args, db, token).await?;
    let a = start(args, db, ADDR_A, THINK_LONG_MS).await;
    let ids = start_runs(ADDR_A, token, "cut", args.running).await?;
    running_and_queued(db, args.running, 0).await?;
    settle().await;
    let owned_by_a: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM agent_run WHERE status = 'running' AND lease_owner LIKE $1",
    )
    .bind(format!("{}-%", a.child.id()))
    .fetch_one(db.db.pool())
    .await
    .map_err(|err| format!("reading the leases: {err}"))?;
    if owned_by_a as usize != ids.len() {
        return Err(format!("A holds {owned_by_a} of its {} runs", ids.len()));
    }
    let b = start(args, db, ADDR_B, 0).await;
    let kill_ms = unix_ms();
    drop(a); // SIGKILL, and waits for the process to be gone.
    let lease_secs = args.lease_secs.unwrap_or(30);
    let goal_ms = (lease_secs * 1000 + lease_secs * 1000 / 3 + 1000) as f64;
    let within = Duration::from_secs(lease_secs * 2 + 60);
    until(
        db,
        "waiting_for_approval",
        waiting.len() + ids.len(),
        within,
    )
    .await?;
    let taken_by_b = support::metric((ADDR_B, token), "nrllm_lease_takeovers_total").await?;
    drop(b);
    if taken_by_b as usize != ids.len() {
        return Err(format!(
            "the survivor took over {taken_by_b} runs, A had {}",
            ids.len()
        ));
    }
    let taken = delays(&ids, &first_steps_since(db, kill_ms).await?, kill_ms)?;
    untouched(&waiting, &first_steps_since(db, waited_ms).await?)?;
    let p99 = percentile(&taken, 99.0);
    println!(
        "handoff db=postgres running={} waiting={} lease_secs={lease_secs}",
        ids.len(),
        waiting.len()
    );
    println!("{}", line("kill_to_taken_over_ms", &taken));
    println!(
        "goal: p99 within lease + reaper period + 1 s = {goal_ms:.0} ms: {}",
        if p99 <= goal_ms { "met" } else { "NOT met" }
    );
    println!("checked: each of A's runs taken over once, by B, and gone on to wait for approval; the waiting runs untouched");
    Ok(())
}

async fn bench(args: Args) -> Result<(), String> {
    let db = match args.db {
        Db::Sqlite => nrllm_store::testing::sqlite().await,
        Db::Postgres => nrllm_store::testing::postgres_from_env().await,
    };
    let token = support::token(&db.url, nrllm_types::Role::Approver, "restart-bench").await;
    let outcome = match args.db {
        Db::Sqlite => restart(&args, &db, &token).await,
        Db::Postgres => handoff(&args, &db, &token).await,
    };
    // The scratch database goes, whatever the outcome.
    db.cleanup().await;
    outcome
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("restart: {message}");
            std::process::exit(2);
        }
    };
    if let Err(message) = bench(args).await {
        eprintln!("restart: {message}");
        std::process::exit(1);
    }
}
