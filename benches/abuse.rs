//! Memory under abuse: starts the server binary (the release build `make abuse` makes) on a fresh
//! SQLite file and prints its resident memory before and after each case:
//! - 20,000 live-step streams for unknown run ids;
//! - 1,100 streams held open at once on one running run (the per-run cap refuses most: 503);
//! - 5,000 streams on that run that connect and drop at once;
//! - 1,000 streams held on 20 runs whose model is writing its response (50 on each, the per-run
//!   cap; none of them reads: the server drops what a stream cannot take), after a first round
//!   of the same, unmeasured;
//! - a 50 MB request body (with its Content-Length, and chunked without one);
//! - 1,000 logins with 900 KB random names, from 250 loopback addresses (127.0.0.2 to .251).
//!
//! Every case must end within 20 MB of where it started; the bench exits 1 if one does not.
//!
//! `make abuse` (or `cargo bench -p nrllm-playground --features ssr --bench abuse -- <binary>`)

mod support;

use std::sync::Arc;
use std::time::Duration;
use support::Server;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

const ADDR: &str = "127.0.0.1:3097";
const LIMIT_BYTES: i64 = 20 * 1024 * 1024;
const AT_ONCE: usize = 64;

/// The API token every request carries (an operator's, made in the database before the start).
static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The `Host` line and the token's `Authorization` line of every request.
fn host_lines() -> String {
    let token = TOKEN.get().map(String::as_str).unwrap_or_default();
    format!("Host: {ADDR}\r\nAuthorization: Bearer {token}")
}

async fn start(binary: &str) -> Server {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let url = format!("sqlite:{}/abuse.db", dir.path().display());
    let token = support::token(&url, nrllm_types::Role::Operator, "abuse-bench").await;
    let _ = TOKEN.set(token);
    // The demo model thinks for a minute: a run stays running while the cases run.
    Server::start(
        binary,
        dir,
        "log_level = \"warn\"\nmax_running_runs = 64\n",
        (ADDR, &url),
        &[("NRLLM_DEMO_THINK_MS", "60000")],
    )
}

/// The server's resident memory, in bytes.
fn rss(server: &Server) -> i64 {
    let kb = nrllm_store::testing::process_rss_kb(&server.child.id().to_string())
        .expect("the server's /proc status");
    kb as i64 * 1024
}

/// Sends `head` (and `body`), reads the status line, returns the status and the open connection.
async fn request(head: String, body: &[u8]) -> Option<(u16, TcpStream)> {
    let mut stream = TcpStream::connect(ADDR).await.ok()?;
    stream.write_all(head.as_bytes()).await.ok()?;
    // The server may answer (413) and close before the body is all sent.
    let _ = stream.write_all(body).await;
    let mut buf = [0u8; 64];
    let mut read = 0;
    while read < 12 {
        let n = stream.read(&mut buf[read..]).await.ok()?;
        if n == 0 {
            break;
        }
        read += n;
    }
    let line = String::from_utf8_lossy(&buf[..read]);
    let status = line.split(' ').nth(1)?.parse().ok()?;
    Some((status, stream))
}

fn stream_head(run_id: &str) -> String {
    let host = host_lines();
    format!("GET /api/runs/{run_id}/events HTTP/1.1\r\n{host}\r\nAccept: text/event-stream\r\n\r\n")
}

/// Runs `count` requests, `AT_ONCE` at a time, dropping each connection when answered; counts
/// the answers by status.
async fn many(count: usize, head: impl Fn(usize) -> String) -> Vec<(u16, usize)> {
    let gate = Arc::new(Semaphore::new(AT_ONCE));
    let mut tasks = Vec::with_capacity(count);
    for i in 0..count {
        let permit = Arc::clone(&gate).acquire_owned().await.expect("the gate");
        let head = head(i);
        tasks.push(tokio::spawn(async move {
            let status = request(head, b"").await.map(|(status, _)| status);
            drop(permit);
            status.unwrap_or(0)
        }));
    }
    tally(tasks).await
}

/// `count` wrong logins, `AT_ONCE` at a time, each for a random name of `name_bytes` letters,
/// spread over 250 loopback addresses; counts the answers by status.
async fn logins(count: usize, name_bytes: usize) -> Vec<(u16, usize)> {
    let clients: Arc<Vec<reqwest::Client>> = Arc::new(
        (2..=251u8)
            .map(|last| {
                reqwest::Client::builder()
                    .local_address(std::net::IpAddr::from([127, 0, 0, last]))
                    .build()
                    .expect("an HTTP client")
            })
            .collect(),
    );
    let gate = Arc::new(Semaphore::new(AT_ONCE));
    let mut tasks = Vec::with_capacity(count);
    for i in 0..count {
        let permit = Arc::clone(&gate).acquire_owned().await.expect("the gate");
        let clients = Arc::clone(&clients);
        tasks.push(tokio::spawn(async move {
            let name = random_letters(i as u64 + 1, name_bytes);
            let body = format!(r#"{{"name":"{name}","password":"not the password"}}"#);
            let status = clients[i % clients.len()]
                .post(format!("http://{ADDR}/api/nrllm_login"))
                .header("Host", ADDR)
                .header("Content-Type", "application/json")
                .body(body)
                .send()
                .await
                .map(|response| response.status().as_u16())
                .unwrap_or(0);
            drop(permit);
            status
        }));
    }
    tally(tasks).await
}

/// `len` letters from a generator seeded by `seed` (xorshift: different seeds, different names).
fn random_letters(seed: u64, len: usize) -> String {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(b'a' + (state % 26) as u8)
        })
        .collect()
}

/// The statuses `tasks` ended with, counted (0: no answer).
async fn tally(tasks: Vec<tokio::task::JoinHandle<u16>>) -> Vec<(u16, usize)> {
    let mut counts: Vec<(u16, usize)> = Vec::new();
    for task in tasks {
        let status = task.await.unwrap_or(0);
        match counts.iter_mut().find(|(s, _)| *s == status) {
            Some((_, n)) => *n += 1,
            None => counts.push((status, 1)),
        }
    }
    counts.sort();
    counts
}

fn uuid(i: usize) -> String {
    format!("00000000-0000-7000-8000-{i:012}")
}

struct Report {
    failed: bool,
}

impl Report {
    async fn case(
        &mut self,
        server: &Server,
        name: &str,
        run: impl std::future::Future<Output = String>,
    ) {
        let before = rss(server);
        let detail = run.await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = rss(server);
        let delta = after - before;
        let ok = delta <= LIMIT_BYTES;
        self.failed |= !ok;
        println!(
            "{name:<44} {:>8.1} MB → {:>8.1} MB  ({:+.1} MB) {}  {detail}",
            before as f64 / 1048576.0,
            after as f64 / 1048576.0,
            delta as f64 / 1048576.0,
            if ok { "ok" } else { "OVER 20 MB" }
        );
    }
}

#[tokio::main]
async fn main() {
    let binary = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_else(|| "target/release/nrllm-playground".to_owned());
    let server = start(&binary).await;
    for _ in 0..200 {
        if request(
            format!("GET /runs HTTP/1.1\r\nHost: {ADDR}\r\nConnection: close\r\n\r\n"),
            b"",
        )
        .await
        .is_some()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Warm up: the pages and streams once, so the allocator has its working set.
    many(200, |i| stream_head(&uuid(i))).await;
    let mut report = Report { failed: false };

    report
        .case(&server, "20,000 streams for unknown run ids", async {
            format!("{:?}", many(20_000, |i| stream_head(&uuid(i))).await)
        })
        .await;

    // A run that stays running: the demo model thinks for a minute.
    let run_id = start_run().await;

    report
        .case(&server, "1,100 streams held at once on one run", async {
            hold_on_runs(&server, std::slice::from_ref(&run_id), 1100).await
        })
        .await;

    report
        .case(&server, "5,000 streams that connect and drop", async {
            format!("{:?}", many(5_000, |_| stream_head(&run_id)).await)
        })
        .await;

    let mut writing = Vec::new();
    for _ in 0..20 {
        writing.push(start_run().await);
    }
    // Once unmeasured, as the warm-up above: 1,000 held connections are the allocator's working
    // set (it keeps their buffers for the next ones); a leak would grow again in the round
    // measured.
    hold_on_runs(&server, &writing, 50).await;
    report
        .case(&server, "1,000 streams on 20 runs being written", async {
            hold_on_runs(&server, &writing, 50).await
        })
        .await;

    report
        .case(
            &server,
            "a 50 MB body (Content-Length, then chunked)",
            async { big_bodies(50 * 1024 * 1024).await },
        )
        .await;

    report
        .case(&server, "1,000 logins with 900 KB random names", async {
            format!("{:?}", logins(1_000, 900 * 1024).await)
        })
        .await;

    // Stopped before exiting: `exit` runs no destructor, and the server would go on holding
    // the port.
    drop(server);
    if report.failed {
        std::process::exit(1);
    }
}

/// Starts a run as an API client and returns its id.
async fn start_run() -> String {
    let body = br#"{"prompt": "List the pages"}"#;
    let host = host_lines();
    let head = format!(
        "POST /api/nrllm_tool_run HTTP/1.1\r\n{host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let (_, mut answer) = request(head, body).await.expect("a run is started");
    let mut text = String::new();
    let _ = answer.read_to_string(&mut text).await;
    text.rsplit("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .trim()
        .trim_matches('"')
        .to_owned()
}

/// `each` streams on each of `runs` opened and held at once (a few seconds, while their models
/// write), unread: how many were answered 200 and 503, and the memory while they were held.
async fn hold_on_runs(server: &Server, runs: &[String], each: usize) -> String {
    let mut held = Vec::new();
    let mut counts = [0usize; 2];
    for run_id in runs {
        for _ in 0..each {
            match request(stream_head(run_id), b"").await {
                Some((200, stream)) => {
                    counts[0] += 1;
                    held.push(stream);
                }
                Some((503, _)) => counts[1] += 1,
                other => panic!("unexpected answer {:?}", other.map(|(s, _)| s)),
            }
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = rss(server);
    drop(held);
    format!(
        "200: {}, 503: {}, {:.1} MB while held",
        counts[0],
        counts[1],
        during as f64 / 1048576.0
    )
}

/// A body of `size` bytes posted with its length, then chunked: the statuses of both.
async fn big_bodies(size: usize) -> String {
    let big = vec![b'x'; size];
    let host = host_lines();
    let head = format!(
        "POST /api/nrllm_tool_run HTTP/1.1\r\n{host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        big.len()
    );
    let sized = request(head, &big).await.map(|(s, _)| s);
    let mut chunked = format!("{:x}\r\n", big.len()).into_bytes();
    chunked.extend_from_slice(&big);
    chunked.extend_from_slice(b"\r\n0\r\n\r\n");
    let head = format!(
        "POST /api/nrllm_tool_run HTTP/1.1\r\n{host}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let streamed = request(head, &chunked).await.map(|(s, _)| s);
    format!("with length: {sized:?}, chunked: {streamed:?}")
}
