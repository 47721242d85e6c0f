//! The server under a mix for a while, as integrators' programs drive it, and its memory: each
//! of `--clients` clients, again and again for `--secs` seconds, starts a run (each creating its
//! own page of the demo site), follows its live stream as a browser does until the run waits for
//! approval, reads its digest (`nrllm_run_get`), approves it with that digest, and follows it
//! again until it completes. So runs start, stream, wait and are approved at once, all the time.
//!
//! The server's resident memory (`VmRSS`, from `/proc`) is read every second. Reported: runs a
//! second, the HTTP latency of starts and decisions, start → waiting and approve → completed as
//! the client's browser saw them, and the RSS where it settled after the first minute (or a
//! quarter of a shorter run), at the end and at most, against the goal: the end within 20 MB of
//! the settled figure.
//!
//! The bench fails unless every start and decision was answered `200`, every run completed, and
//! every approved call's effect was applied exactly once.
//!
//! make bench-mix SECS=3600   (release build; the soak)
//! cargo bench -p nrllm-playground --features ssr --bench mix -- [--secs 60] [--clients 8] [--db normal|full|postgres] [--every-ms N] [binary]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use hdrhistogram::Histogram;
use serde_json::json;

mod support;

use support::load::{digest, effects_and_ends, serve, start_run, ByRun, Db};
use support::{number, percentile, until};

/// Where the server listens: a port free when the bench starts (a soak may run for an hour
/// beside other benches).
fn addr() -> &'static str {
    static ADDR: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ADDR.get_or_init(support::free_addr)
}

/// How far the RSS at the end may be above where it settled.
const GOAL_MB: f64 = 20.0;

struct Args {
    binary: String,
    secs: u64,
    clients: usize,
    db: Db,
    /// Each client starts a run at most every this long (none: as soon as its last completed).
    every: Option<Duration>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        binary: String::new(),
        secs: 60,
        clients: 8,
        db: Db::Normal,
        every: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--secs" => args.secs = number("--secs", it.next())?,
            "--clients" => args.clients = number("--clients", it.next())? as usize,
            "--every-ms" => {
                args.every = Some(Duration::from_millis(number("--every-ms", it.next())?))
            }
            "--db" => args.db = Db::parse(it.next())?,
            "--bench" => {}
            other if other.starts_with("--") => return Err(format!("unknown flag `{other}`")),
            binary => args.binary = binary.to_owned(),
        }
    }
    args.binary = support::binary_or_own(args.binary);
    Ok(args)
}

/// What a client measured (µs), and what went wrong.
struct Client {
    start_us: Histogram<u64>,
    decide_us: Histogram<u64>,
    to_waiting_us: Histogram<u64>,
    to_completed_us: Histogram<u64>,
    runs: usize,
    /// Each decision: its run, and when it was sent and the browser saw the run complete (ms
    /// since the epoch), to set against when the server says the run completed.
    decided: Vec<(String, f64, f64)>,
    errors: Vec<String>,
}

impl Client {
    fn new() -> Client {
        let histogram = || Histogram::new(3).expect("a histogram of 3 significant digits");
        Client {
            start_us: histogram(),
            decide_us: histogram(),
            to_waiting_us: histogram(),
            to_completed_us: histogram(),
            runs: 0,
            decided: Vec::new(),
            errors: Vec::new(),
        }
    }

    fn add(&mut self, other: Client) {
        for (all, one) in [
            (&mut self.start_us, &other.start_us),
            (&mut self.decide_us, &other.decide_us),
            (&mut self.to_waiting_us, &other.to_waiting_us),
            (&mut self.to_completed_us, &other.to_completed_us),
        ] {
            all.add(one).expect("histograms that add");
        }
        self.runs += other.runs;
        self.decided.extend(other.decided);
        self.errors.extend(other.errors);
    }
}

fn record(histogram: &mut Histogram<u64>, since: Instant) {
    let us = since.elapsed().as_micros() as u64;
    histogram.record(us.max(1)).expect("a latency in range");
}

/// Follows run `id`'s live stream from after step `after` until it ends (the run waits or
/// ended): the last step's sequence and the last status it told.
async fn follow(
    client: &reqwest::Client,
    (token, id): (&str, &str),
    after: i64,
) -> Result<(i64, String), String> {
    let response = client
        .get(format!(
            "http://{}/api/runs/{id}/events?after={after}",
            addr()
        ))
        .bearer_auth(token)
        .header("accept", "text/event-stream")
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|err| format!("following {id}: {err}"))?;
    let mut events = response.bytes_stream().eventsource();
    let (mut last, mut status) = (after, String::new());
    while let Some(event) = events.next().await {
        let event = event.map_err(|err| format!("following {id}: {err}"))?;
        match event.event.as_str() {
            "step" => last = event.id.parse().unwrap_or(last),
            "status" => {
                status = event.data.clone();
                if matches!(status.as_str(), "completed" | "failed" | "cancelled") {
                    break;
                }
            }
            _ => {}
        }
    }
    Ok((last, status))
}

/// One run from start to completion, as a client drives it; its times go to `measured`.
async fn one_run(
    client: &reqwest::Client,
    token: &str,
    number: usize,
    measured: &mut Client,
) -> Result<(), String> {
    let asked = Instant::now();
    let id = start_run(client, (addr(), token), &format!("mix-{number}")).await?;
    record(&mut measured.start_us, asked);
    let (mut last, mut status) = (0, String::new());
    while status != "waiting_for_approval" {
        (last, status) = follow(client, (token, &id), last).await?;
        if matches!(status.as_str(), "completed" | "failed" | "cancelled") {
            return Err(format!("run {id} ended {status} before it waited"));
        }
    }
    record(&mut measured.to_waiting_us, asked);
    let digest = digest(client, (addr(), token), &id).await?;
    let body = json!({ "run_id": id, "decision": "approve_all", "digest": digest });
    let decided = Instant::now();
    let sent_ms = unix_ms();
    match support::call(client, (addr(), token), "nrllm_tool_resume", &body).await? {
        (200, _) => record(&mut measured.decide_us, decided),
        (status, body) => return Err(format!("approving {id}: {status} {body}")),
    }
    while status != "completed" {
        (last, status) = follow(client, (token, &id), last).await?;
        if matches!(status.as_str(), "failed" | "cancelled") {
            return Err(format!("run {id} ended {status}"));
        }
    }
    record(&mut measured.to_completed_us, decided);
    measured.decided.push((id, sent_ms, unix_ms()));
    Ok(())
}

/// A client: runs one run after the other until `until`, at most one every `every`.
async fn client(
    token: Arc<String>,
    next: Arc<AtomicUsize>,
    (until, every): (Instant, Option<Duration>),
) -> Client {
    let client = reqwest::Client::new();
    let mut measured = Client::new();
    let started = tokio::time::Instant::now();
    for due in 0u32.. {
        if let Some(every) = every {
            tokio::time::sleep_until(started + every * due).await;
        }
        if Instant::now() >= until {
            break;
        }
        let number = next.fetch_add(1, Ordering::Relaxed);
        measured.runs += 1;
        if let Err(err) = one_run(&client, &token, number, &mut measured).await {
            measured.errors.push(err);
        }
    }
    measured
}

/// The server's RSS every second (seconds since the start, MB) until `until`.
async fn sample_rss(pid: u32, until: Instant, samples: Arc<Mutex<Vec<(f64, f64)>>>) {
    let started = Instant::now();
    while Instant::now() < until {
        if let Some(kb) = nrllm_store::testing::process_rss_kb(&pid.to_string()) {
            let mb = kb as f64 / 1024.0;
            let at = started.elapsed().as_secs_f64();
            samples.lock().expect("the samples").push((at, mb));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn unix_ms() -> f64 {
    support::unix_us() as f64 / 1000.0
}

/// Where approve → completed as the browser saw it went: approve → the server's completion
/// (`finished_at_ms`), and completion → the browser, sorted (ms).
fn split(decided: &[(String, f64, f64)], ends: &ByRun) -> (Vec<f64>, Vec<f64>) {
    let (mut server, mut stream) = (Vec::new(), Vec::new());
    for (id, sent, seen) in decided {
        if let Some(&finished) = ends.get(id) {
            server.push(finished as f64 - sent);
            stream.push(seen - finished as f64);
        }
    }
    server.sort_by(f64::total_cmp);
    stream.sort_by(f64::total_cmp);
    (server, stream)
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn report(args: &Args, all: &Client, samples: &[(f64, f64)]) {
    println!(
        "db={:?} clients={} secs={} runs={} runs_per_s={:.1}",
        args.db,
        args.clients,
        args.secs,
        all.runs,
        all.runs as f64 / args.secs as f64
    );
    for (name, histogram) in [
        ("start_http_ms", &all.start_us),
        ("decision_http_ms", &all.decide_us),
        ("start_to_waiting_seen_ms", &all.to_waiting_us),
        ("approve_to_completed_seen_ms", &all.to_completed_us),
    ] {
        println!(
            "{name} p50={:.2} p99={:.2} p99.9={:.2} max={:.2}",
            ms(histogram.value_at_quantile(0.5)),
            ms(histogram.value_at_quantile(0.99)),
            ms(histogram.value_at_quantile(0.999)),
            ms(histogram.max())
        );
    }
    // Where it settled: the last sample of the first minute (a quarter of a shorter run).
    let settle_at = (args.secs as f64 / 4.0).min(60.0);
    let settled = samples.iter().take_while(|(at, _)| *at <= settle_at).last();
    let (Some(&(_, settled)), Some(&(_, end))) = (settled, samples.last()) else {
        println!("rss: too few samples");
        return;
    };
    let max = samples.iter().map(|(_, mb)| *mb).fold(0.0, f64::max);
    // The curve, at each tenth of the run: a leak climbs to the end, a cache levels off.
    let curve: Vec<String> = (1..=10)
        .filter_map(|tenth| {
            let at = args.secs as f64 * f64::from(tenth) / 10.0;
            let (_, mb) = samples.iter().take_while(|(t, _)| *t <= at).last()?;
            Some(format!("{at:.0}s={mb:.1}"))
        })
        .collect();
    println!("rss_mb_curve {}", curve.join(" "));
    println!(
        "rss_mb settled={settled:.1} (at {settle_at:.0} s) end={end:.1} max={max:.1} growth={:.1}",
        end - settled
    );
    println!(
        "goal: end within {GOAL_MB:.0} MB of settled: {}",
        if end - settled <= GOAL_MB {
            "met"
        } else {
            "NOT met"
        }
    );
}

async fn bench(args: Args) -> Result<(), String> {
    let db = args.db.database().await;
    let token = support::token(&db.url, nrllm_types::Role::Approver, "mix-bench").await;
    let server = serve(&args.binary, &db, (args.db, addr())).await;
    let until_at = Instant::now() + Duration::from_secs(args.secs);
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampler = tokio::spawn(sample_rss(server.child.id(), until_at, samples.clone()));
    let (token, next) = (Arc::new(token), Arc::new(AtomicUsize::new(0)));
    let clients: Vec<_> = (0..args.clients)
        .map(|_| tokio::spawn(client(token.clone(), next.clone(), (until_at, args.every))))
        .collect();
    let mut all = Client::new();
    for one in clients {
        all.add(one.await.expect("a client"));
    }
    let _ = sampler.await;
    let outcome = match all.errors.first() {
        Some(first) => Err(format!(
            "{} runs went wrong, first: {first}",
            all.errors.len()
        )),
        None => match until(&db, "completed", all.runs, Duration::from_secs(60)).await {
            Ok(()) => effects_and_ends(&db, all.runs)
                .await
                .map(|(_, completed)| split(&all.decided, &completed)),
            Err(err) => Err(err),
        },
    };
    drop(server);
    if let Ok((server_side, stream_side)) = &outcome {
        report(&args, &all, &samples.lock().expect("the samples"));
        for (name, delays) in [
            ("approve_to_completed_in_server_ms", server_side),
            ("completed_to_browser_ms", stream_side),
        ] {
            println!(
                "{name} p50={:.1} p99={:.1} p99.9={:.1} max={:.1}",
                percentile(delays, 50.0),
                percentile(delays, 99.0),
                percentile(delays, 99.9),
                percentile(delays, 100.0)
            );
        }
        println!(
            "checked: {} runs, each effect applied once, every run completed, no refusal",
            all.runs
        );
    }
    // The scratch database goes, whatever the outcome.
    db.cleanup().await;
    outcome.map(|_| ())
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("mix: {message}");
            std::process::exit(2);
        }
    };
    if let Err(message) = bench(args).await {
        eprintln!("mix: {message}");
        std::process::exit(1);
    }
}
