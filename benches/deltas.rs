//! From a provider's bytes to the browser: how long a piece of a streamed response takes from the
//! moment a provider writes it to the moment a live-stream client (`GET /api/runs/{id}/events`,
//! as the run page reads it) has it, and what each piece costs the server in CPU.
//!
//! The bench starts the server binary on a fresh SQLite file with one configuration, `fake`, an
//! OpenAI-compatible server run by the bench itself: each request (`Write N`) is answered by a
//! stream of N pieces of text, one every `--every` milliseconds, each piece a word that names it
//! (`w17 `). For each of `--runs` runs (one after the other) a client follows the run's live
//! stream; when a `delta` event brings a word, its delay since the fake wrote it is recorded
//! (the fake and the client share this process's clock). The CPU cost of a piece is the
//! server's CPU time (user + system, from `/proc`) over runs of `--chunks` pieces, less its time
//! over as many runs of one piece (the run, its requests and steps), divided by the extra pieces.
//!
//! The delay includes the server's gathering of pieces (at most one live message per run every
//! 25 ms), as a browser sees it.
//!
//! make bench-deltas     (release build)
//! cargo bench -p nrllm-playground --features ssr --bench deltas -- [--runs 20] [--chunks 200] [--every 10] [binary]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod support;

use support::{number, percentile, Server};

const ADDR: &str = "127.0.0.1:3099";

struct Args {
    binary: String,
    runs: usize,
    chunks: usize,
    every_ms: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        binary: String::new(),
        runs: 20,
        chunks: 200,
        every_ms: 10,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--runs" => args.runs = number("--runs", it.next())? as usize,
            "--chunks" => args.chunks = number("--chunks", it.next())? as usize,
            "--every" => args.every_ms = number("--every", it.next())?,
            "--bench" => {}
            other if other.starts_with("--") => return Err(format!("unknown flag `{other}`")),
            binary => args.binary = binary.to_owned(),
        }
    }
    args.binary = support::binary_or_own(args.binary);
    Ok(args)
}

/// When the fake provider wrote each piece of the response it is writing now, by its number.
type Written = Arc<Mutex<HashMap<usize, Instant>>>;

/// Told when the bench follows a run's live stream; the provider waits for it to write.
static FOLLOWED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// The fake provider: answers every request (`Write N`) with a stream of N words, one every
/// `every`, recording when it wrote each. It waits half a second before the first, so the
/// bench's client follows the run by then.
async fn fake_provider(every: Duration, written: Written) -> String {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a local port");
    let base = format!("http://{}/v1", listener.local_addr().expect("its address"));
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let written = Arc::clone(&written);
            tokio::spawn(answer(socket, every, written));
        }
    });
    base
}

async fn answer(mut socket: TcpStream, every: Duration, written: Written) {
    // The request: its head, then as many bytes as it says.
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let Ok(n) = socket.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_lowercase();
    let length = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    let body = String::from_utf8_lossy(&buffer[head_end..]);
    let chunks = body
        .split("Write ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(1);
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
    if socket.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    // The pieces start soon after the bench follows the run's live stream (a follower of a run
    // still queued when it connected must have its pieces from the start: a fixed wait here
    // hid that such a stream looked for the run's start only every 300 ms).
    let _ = tokio::time::timeout(Duration::from_secs(5), FOLLOWED.notified()).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let event = |delta: Value, finish: Value| {
        let chunk = json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
            "model": "fake-1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
    for i in 0..chunks {
        let piece = event(json!({"content": format!("w{i} ")}), Value::Null);
        if socket.write_all(piece.as_bytes()).await.is_err() {
            return;
        }
        written
            .lock()
            .expect("the record")
            .insert(i, Instant::now());
        tokio::time::sleep(every).await;
    }
    let usage = json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "choices": [],
        "usage": {"prompt_tokens": 10, "completion_tokens": chunks, "total_tokens": 10 + chunks}});
    let end = format!(
        "{}data: {usage}\n\ndata: [DONE]\n\n",
        event(json!({}), json!("stop"))
    );
    let _ = socket.write_all(end.as_bytes()).await;
}

/// The server's CPU time so far (user + system), in milliseconds.
fn cpu_ms(server: &Server) -> f64 {
    nrllm_store::testing::process_cpu_ms(&server.child.id().to_string())
        .expect("the server's /proc stat")
}

async fn start(binary: &str, provider: &str) -> (Server, String) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let url = format!("sqlite:{}/deltas.db", dir.path().display());
    let token = support::token(&url, nrllm_types::Role::Operator, "deltas-bench").await;
    let settings = format!(
        "log_level = \"warn\"\nrun_starts_per_minute = 10000\n\n[[configurations]]\n\
         name = \"fake\"\nkind = \"openai\"\nmodel = \"fake-1\"\nbase_url = \"{provider}\"\n\
         api_key_env = \"\"\n"
    );
    let mut server = Server::start(binary, dir, &settings, (ADDR, &url), &[]);
    server.listening(ADDR).await;
    (server, token)
}

/// Follows one run's live stream until it completes: the delay of each word it brought, and
/// how many `delta` events it read.
async fn follow(
    client: &reqwest::Client,
    token: &str,
    written: &Written,
    chunks: usize,
) -> (Vec<f64>, usize) {
    let started = client
        .post(format!("http://{ADDR}/api/nrllm_tool_run"))
        .bearer_auth(token)
        .json(&json!({"prompt": format!("Write {chunks}"), "configuration": "fake"}))
        .send()
        .await
        .expect("the server answers");
    assert!(started.status().is_success(), "a run is started");
    let id: String = started.json().await.expect("the run's id");
    let response = client
        .get(format!("http://{ADDR}/api/runs/{id}/events"))
        .bearer_auth(token)
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("the live stream");
    FOLLOWED.notify_one();
    let mut events = response.bytes_stream().eventsource();
    let mut seen = vec![false; chunks];
    let mut delays = Vec::with_capacity(chunks);
    let mut messages = 0;
    while let Some(Ok(event)) = events.next().await {
        match event.event.as_str() {
            "delta" => {
                let now = Instant::now();
                messages += 1;
                let forming: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
                let text = forming["text"].as_str().unwrap_or_default();
                let record = written.lock().expect("the record").clone();
                for word in text.split_whitespace() {
                    let Some(i) = word.strip_prefix('w').and_then(|n| n.parse::<usize>().ok())
                    else {
                        continue;
                    };
                    if i < chunks && !seen[i] {
                        seen[i] = true;
                        if let Some(at) = record.get(&i) {
                            delays.push(now.duration_since(*at).as_secs_f64() * 1000.0);
                        }
                    }
                }
            }
            "status" => break,
            _ => {}
        }
    }
    written.lock().expect("the record").clear();
    (delays, messages)
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let written = Written::default();
    let provider = fake_provider(Duration::from_millis(args.every_ms), Arc::clone(&written)).await;
    let (server, token) = start(&args.binary, &provider).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("an HTTP client");
    // One run first, unmeasured: the server warms up. Then the runs' own cost, with one piece.
    follow(&client, &token, &written, args.chunks).await;
    let cpu_before = cpu_ms(&server);
    for _ in 0..args.runs {
        follow(&client, &token, &written, 1).await;
    }
    let cpu_runs = cpu_ms(&server) - cpu_before;
    let cpu_before = cpu_ms(&server);
    let mut delays = Vec::new();
    let mut messages = 0;
    for _ in 0..args.runs {
        let (more, read) = follow(&client, &token, &written, args.chunks).await;
        delays.extend(more);
        messages += read;
    }
    let cpu_ms = cpu_ms(&server) - cpu_before;
    let pieces = args.runs * args.chunks;
    delays.sort_by(f64::total_cmp);
    println!(
        "runs {}, pieces {} ({} every {} ms each), seen {}, live messages {}",
        args.runs,
        pieces,
        args.chunks,
        args.every_ms,
        delays.len(),
        messages
    );
    println!(
        "provider write → client read: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&delays, 50.0),
        percentile(&delays, 99.0),
        delays.last().copied().unwrap_or(f64::NAN)
    );
    let extra = (args.runs * args.chunks.saturating_sub(1)).max(1);
    println!(
        "server CPU: {cpu_ms:.0} ms for these runs, {cpu_runs:.0} ms for as many of one piece: \
         {:.1} µs a piece",
        (cpu_ms - cpu_runs) * 1000.0 / extra as f64
    );
    drop(server);
    if delays.len() < pieces * 9 / 10 {
        eprintln!("fewer than 90 % of the pieces reached the client");
        std::process::exit(1);
    }
}
