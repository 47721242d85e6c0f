//! The approve cycle through the whole server, as an integrator's program drives it: `--runs`
//! runs wait for approval (each creating its own page of the demo site, so no decision changes
//! another's target), and `--clients` API clients approve them over HTTP with a token, each
//! decision with the digest its client read (`nrllm_run_get`).
//!
//! Reported: decisions a second (a decision is a claim answered `200`), the HTTP latency of a
//! decision (p50, p99, p99.9, in an HDR histogram), and, from the database once every run has
//! ended (nothing asks the server while it works; the bench counts the runs in the database
//! every 25 ms to know when they have), approve → effect applied (the page's history
//! row, written in the tool's transaction) and approve → run completed. Those two compare the
//! client's clock when it sent the decision with the server's milliseconds on the same machine,
//! so they are good to a millisecond. A browser follows each of the first `--follow` runs'
//! live stream from the moment its decision is answered: step commit → browser is the step's
//! stored time against the moment its event arrived. With `--follow-on-other` (Postgres) the
//! browsers follow through a second instance on the same database, which hears of the first
//! one's commits by `NOTIFY`: either instance's worker may drive a decided run, so the bench
//! reports how many the second one drove (their steps reached its browsers in-process).
//!
//! The bench fails unless every decision was answered `200`, every run completed, and every
//! approved call's effect was applied exactly once (one history row and one effect key a run).
//!
//! make bench-http      (release build; SQLite NORMAL and FULL, Postgres; 1 and 32 clients)
//! cargo bench -p nrllm-playground --features ssr --bench http -- [--runs 300] [--clients 32] [--db normal|full|postgres] [--follow 100] [--every-ms N] [--follow-on-other] [binary]
//!
//! Without `--every-ms` the clients decide as fast as they are answered, which measures the
//! server's capacity: the runs decided queue up for its workers, and approve → effect includes
//! that wait. With it, each client decides at that pace (one client every 10 ms: an operator
//! far faster than any person, far below capacity), which measures the latency of one decision.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use hdrhistogram::Histogram;
use nrllm_store::testing::TestDb;
use serde_json::json;

mod support;

use support::load::{digest, effects_and_ends, serve, start_run, Db};
use support::{number, percentile, unix_us, until};

const ADDR: &str = "127.0.0.1:3098";
/// Where the second instance listens, when the browsers follow the runs on another instance.
const ADDR_OTHER: &str = "127.0.0.1:3095";

struct Args {
    binary: String,
    runs: usize,
    clients: usize,
    db: Db,
    /// How many of the runs a browser follows on the live stream.
    follow: usize,
    /// Each client's decisions at most one every this long (open loop: the k-th is due k of
    /// them after the start, and one that is late goes at once); none: as fast as answered.
    every: Option<Duration>,
    /// The browsers follow the runs through a second instance on the same Postgres database.
    follow_other: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        binary: String::new(),
        runs: 300,
        clients: 32,
        db: Db::Normal,
        follow: 100,
        every: None,
        follow_other: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--runs" => args.runs = number("--runs", it.next())? as usize,
            "--clients" => args.clients = number("--clients", it.next())? as usize,
            "--follow" => args.follow = number("--follow", it.next())? as usize,
            "--every-ms" => {
                args.every = Some(Duration::from_millis(number("--every-ms", it.next())?))
            }
            "--db" => args.db = Db::parse(it.next())?,
            "--follow-on-other" => args.follow_other = true,
            "--bench" => {}
            other if other.starts_with("--") => return Err(format!("unknown flag `{other}`")),
            binary => args.binary = binary.to_owned(),
        }
    }
    args.binary = support::binary_or_own(args.binary);
    if args.follow_other && args.db != Db::Postgres {
        return Err("--follow-on-other needs --db postgres (instances share Postgres)".into());
    }
    Ok(args)
}

/// A run waiting for approval, and the digest of its pending turn.
struct Waiting {
    id: String,
    digest: String,
}

/// Starts `runs` runs, each creating its own page, and waits until every one waits for
/// approval; then reads each one's digest, as a client deciding would.
async fn waiting_runs(
    client: &reqwest::Client,
    token: &str,
    db: &TestDb,
    runs: usize,
) -> Result<Vec<Waiting>, String> {
    let mut ids = Vec::with_capacity(runs);
    for i in 0..runs {
        ids.push(start_run(client, (ADDR, token), &format!("bench-{i}")).await?);
    }
    until(db, "waiting_for_approval", runs, Duration::from_secs(300)).await?;
    let mut waiting = Vec::with_capacity(runs);
    for id in ids {
        let digest = digest(client, (ADDR, token), &id).await?;
        waiting.push(Waiting { id, digest });
    }
    Ok(waiting)
}

/// One client's decisions: the HTTP latency of each (µs), when each was sent (µs since the
/// epoch, by run id), and the answers that were not `200`.
struct Decided {
    latency_us: Histogram<u64>,
    sent_us: Vec<(String, u64)>,
    refused: Vec<String>,
    /// The browsers following the first runs decided, from their answers on.
    followers: Vec<tokio::task::JoinHandle<Arrivals>>,
}

impl Decided {
    fn new() -> Decided {
        Decided {
            latency_us: Histogram::new(3).expect("a histogram of 3 significant digits"),
            sent_us: Vec::new(),
            refused: Vec::new(),
            followers: Vec::new(),
        }
    }
}

/// What the clients share: the runs to decide, the next one to take, how many of the first
/// are followed by a browser and through which instance, and each client's pace (none: as fast
/// as answered).
#[derive(Clone)]
struct Shared {
    waiting: Arc<Vec<Waiting>>,
    next: Arc<AtomicUsize>,
    follow: (usize, &'static str),
    every: Option<Duration>,
}

/// A client: approves the runs left, one after the other, until none is left; a browser
/// follows each of the first `follow` runs' live stream once its decision is answered.
async fn approver(client: reqwest::Client, token: Arc<String>, shared: Shared) -> Decided {
    let Shared {
        waiting,
        next,
        follow,
        every,
    } = shared;
    let mut decided = Decided::new();
    let started = tokio::time::Instant::now();
    for due in 0.. {
        if let Some(every) = every {
            tokio::time::sleep_until(started + every * due).await;
        }
        let index = next.fetch_add(1, Ordering::Relaxed);
        let Some(run) = waiting.get(index) else {
            return decided;
        };
        let body = json!({ "run_id": run.id, "decision": "approve_all", "digest": run.digest });
        let sent = unix_us();
        let asked = Instant::now();
        let answer = support::call(&client, (ADDR, &token), "nrllm_tool_resume", &body).await;
        let took = asked.elapsed().as_micros() as u64;
        match answer {
            Ok((200, _)) => {
                decided
                    .latency_us
                    .record(took.max(1))
                    .expect("a latency in range");
                decided.sent_us.push((run.id.clone(), sent));
                if index < follow.0 {
                    let follower = follower(follow.1, token.clone(), run.id.clone());
                    decided.followers.push(tokio::spawn(follower));
                }
            }
            Ok((status, body)) => decided.refused.push(format!("{}: {status} {body}", run.id)),
            Err(err) => decided.refused.push(format!("{}: {err}", run.id)),
        }
    }
    decided
}

/// Every client's decisions together, and how long they took from the first sent to the last
/// answered.
async fn approve_all(
    token: &str,
    waiting: Vec<Waiting>,
    (clients, follow, every): (usize, (usize, &'static str), Option<Duration>),
) -> (Decided, Duration) {
    let token = Arc::new(token.to_owned());
    let shared = Shared {
        waiting: Arc::new(waiting),
        next: Arc::new(AtomicUsize::new(0)),
        follow,
        every,
    };
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            // A client of its own each, as separate programs would be.
            let client = reqwest::Client::new();
            tokio::spawn(approver(client, token.clone(), shared.clone()))
        })
        .collect();
    let mut all = Decided::new();
    for task in tasks {
        let one = task.await.expect("a client");
        all.latency_us
            .add(&one.latency_us)
            .expect("histograms that add");
        all.sent_us.extend(one.sent_us);
        all.refused.extend(one.refused);
        all.followers.extend(one.followers);
    }
    (all, started.elapsed())
}

/// Milliseconds from each decision's sending to `at` (the server's milliseconds, by run id).
fn since_sent(sent_us: &[(String, u64)], at: &std::collections::HashMap<String, i64>) -> Vec<f64> {
    let mut delays: Vec<f64> = sent_us
        .iter()
        .filter_map(|(id, sent)| at.get(id).map(|ms| *ms as f64 - *sent as f64 / 1000.0))
        .collect();
    delays.sort_by(f64::total_cmp);
    delays
}

/// When each step of a followed run reached its browser: (run id, sequence, µs since the epoch
/// it arrived, µs since the epoch its stream was asked for).
type Arrivals = Vec<(String, i64, u64, u64)>;

/// A browser following run `id`'s live stream through the instance at `addr` from the moment
/// its decision was answered (as the run page does once it is back), until the run ends.
async fn follower(addr: &str, token: Arc<String>, id: String) -> Arrivals {
    let opened = unix_us();
    let response = reqwest::Client::new()
        .get(format!("http://{addr}/api/runs/{id}/events"))
        .bearer_auth(token.as_str())
        .header("accept", "text/event-stream")
        .send()
        .await;
    let mut arrived = Vec::new();
    let Ok(response) = response else {
        return arrived;
    };
    let mut events = response.bytes_stream().eventsource();
    while let Some(Ok(event)) = events.next().await {
        match event.event.as_str() {
            "step" => {
                if let Ok(sequence) = event.id.parse::<i64>() {
                    arrived.push((id.clone(), sequence, unix_us(), opened));
                }
            }
            "status" if matches!(event.data.as_str(), "completed" | "failed" | "cancelled") => {
                break
            }
            _ => {}
        }
    }
    arrived
}

/// Milliseconds from each step's commit (its stored time) to its arrival at a browser, for the
/// steps committed after their stream was asked for (not those it sends as it opens).
async fn live_delays(db: &TestDb, arrivals: &Arrivals) -> Result<Vec<f64>, String> {
    let stored: Vec<(String, i64, i64)> =
        sqlx::query_as("SELECT run_id, sequence, created_at_ms FROM agent_run_event")
            .fetch_all(db.db.pool())
            .await
            .map_err(|err| format!("reading the steps: {err}"))?;
    let at: std::collections::HashMap<(String, i64), i64> = stored
        .into_iter()
        .map(|(run, sequence, ms)| ((run, sequence), ms))
        .collect();
    let mut delays: Vec<f64> = arrivals
        .iter()
        .filter_map(|(run, sequence, arrived, opened)| {
            let ms = *at.get(&(run.clone(), *sequence))?;
            (ms as u64 * 1000 >= *opened).then(|| *arrived as f64 / 1000.0 - ms as f64)
        })
        .collect();
    delays.sort_by(f64::total_cmp);
    Ok(delays)
}

/// What one case measured.
struct Measured {
    decided: Decided,
    took: Duration,
    to_effect: Vec<f64>,
    to_completed: Vec<f64>,
    live: Vec<f64>,
    /// With the browsers on a second instance: how many runs that instance drove (its steps
    /// reached its browsers in-process, not from the other instance).
    other_drove: u64,
}

fn report(args: &Args, measured: &Measured) {
    let latency = &measured.decided.latency_us;
    let ms = |us: u64| us as f64 / 1000.0;
    println!(
        "db={:?} clients={} runs={} every_ms={} follow_on={} decisions_per_s={:.1}",
        args.db,
        args.clients,
        args.runs,
        args.every
            .map_or("none".to_owned(), |every| every.as_millis().to_string()),
        if args.follow_other { "other" } else { "same" },
        measured.decided.sent_us.len() as f64 / measured.took.as_secs_f64()
    );
    println!(
        "decision_http_ms p50={:.2} p99={:.2} p99.9={:.2} max={:.2}",
        ms(latency.value_at_quantile(0.5)),
        ms(latency.value_at_quantile(0.99)),
        ms(latency.value_at_quantile(0.999)),
        ms(latency.max())
    );
    for (name, delays) in [
        ("approve_to_effect_ms", &measured.to_effect),
        ("approve_to_completed_ms", &measured.to_completed),
        ("live_step_ms", &measured.live),
    ] {
        println!(
            "{name} p50={:.1} p99={:.1} max={:.1} n={}",
            percentile(delays, 50.0),
            percentile(delays, 99.0),
            percentile(delays, 100.0),
            delays.len()
        );
    }
    if args.follow_other {
        println!(
            "live steps read through the other instance: it drove {} of the {} runs itself",
            measured.other_drove, args.runs
        );
    }
}

/// Runs waiting, some followed by browsers, approved by the clients; measured from the
/// database once every run has ended.
async fn measure(args: &Args, db: &TestDb, token: &str) -> Result<Measured, String> {
    let client = reqwest::Client::new();
    let waiting = waiting_runs(&client, token, db, args.runs).await?;
    let follow_on = if args.follow_other { ADDR_OTHER } else { ADDR };
    let other_took = || async {
        match args.follow_other {
            true => support::metric((ADDR_OTHER, token), "nrllm_queue_taken_total").await,
            false => Ok(0),
        }
    };
    // The other instance's worker took some of the new runs; what it takes from now on are
    // decided runs.
    let other_before = other_took().await?;
    eprintln!(
        "http: {} runs wait for approval; {} clients decide",
        waiting.len(),
        args.clients
    );
    let (mut decided, took) = approve_all(
        token,
        waiting,
        (args.clients, (args.follow, follow_on), args.every),
    )
    .await;
    if let Some(first) = decided.refused.first() {
        let refused = decided.refused.len();
        return Err(format!(
            "{refused} decisions were not answered 200, first: {first}"
        ));
    }
    until(db, "completed", args.runs, Duration::from_secs(300)).await?;
    let mut arrivals = Arrivals::new();
    for follower in std::mem::take(&mut decided.followers) {
        let arrived = tokio::time::timeout(Duration::from_secs(30), follower)
            .await
            .map_err(|_| "a live stream did not end with its run".to_owned())?
            .expect("a follower");
        arrivals.extend(arrived);
    }
    let (effects, completed) = effects_and_ends(db, args.runs).await?;
    let other_drove = other_took().await? - other_before;
    Ok(Measured {
        to_effect: since_sent(&decided.sent_us, &effects),
        to_completed: since_sent(&decided.sent_us, &completed),
        live: live_delays(db, &arrivals).await?,
        other_drove,
        decided,
        took,
    })
}

async fn bench(args: Args) -> Result<(), String> {
    let db = args.db.database().await;
    let token = support::token(&db.url, nrllm_types::Role::Approver, "http-bench").await;
    let server = serve(&args.binary, &db, (args.db, ADDR)).await;
    let other = match args.follow_other {
        true => Some(serve(&args.binary, &db, (args.db, ADDR_OTHER)).await),
        false => None,
    };
    let measured = measure(&args, &db, &token).await;
    drop((server, other));
    if let Ok(measured) = &measured {
        report(&args, measured);
        println!(
            "checked: {} effects applied once each, every run completed, no refusal",
            measured.to_effect.len()
        );
    }
    // The scratch database goes, whatever the outcome.
    db.cleanup().await;
    measured.map(|_| ())
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("http: {message}");
            std::process::exit(2);
        }
    };
    if let Err(message) = bench(args).await {
        eprintln!("http: {message}");
        std::process::exit(1);
    }
}
