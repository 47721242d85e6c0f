//! What the benches that run the server binary share: a token made in its database before it
//! starts, and the process itself (killed when dropped).

#![allow(dead_code)]

pub mod load;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nrllm_store::testing::TestDb;
use serde_json::Value;

/// The server binary a bench was told to run, or (none named) the one cargo built with it.
pub fn binary_or_own(named: String) -> String {
    match named.is_empty() {
        true => env!("CARGO_BIN_EXE_nrllm-playground").to_owned(),
        false => named,
    }
}

/// An API token of `role` for the bench `name`, made in the SQLite database at `url` (which it
/// creates and migrates); the database is closed again for the server to open.
pub async fn token(url: &str, role: nrllm_types::Role, name: &str) -> String {
    let db = nrllm_store::db::Database::connect(url)
        .await
        .expect("the database");
    let token = nrllm_store::accounts::AccountStore::new(db.clone())
        .create_program_token("bench", role, name, nrllm_core::clock::now_ms())
        .await
        .expect("a token");
    db.pool().close().await;
    token
}

/// The server binary running for a bench, on its own folder; killed when dropped.
pub struct Server {
    pub child: Child,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts `binary` with the settings file `settings` (written in `dir`), on `addr` and the
    /// database at `url`, with `env` besides.
    pub fn start(
        binary: &str,
        dir: tempfile::TempDir,
        settings: &str,
        (addr, url): (&str, &str),
        env: &[(&str, &str)],
    ) -> Server {
        // A server already there would answer in its place: say so rather than measure it.
        if let Err(err) = std::net::TcpListener::bind(addr) {
            panic!("cannot start the server on {addr} ({err}): is another bench running?");
        }
        let config = dir.path().join("bench.toml");
        std::fs::write(&config, settings).expect("the settings file");
        let child = Command::new(binary)
            .env("NRLLM_CONFIG", &config)
            .env("NRLLM_SITE_ADDR", addr)
            .env("NRLLM_DATABASE_URL", url)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {binary}: {err}"));
        Server { child, _dir: dir }
    }

    /// Its folder.
    pub fn dir(&self) -> &Path {
        self._dir.path()
    }

    /// Waits until it listens on `addr` (a minute at most); fails at once if it stopped.
    pub async fn listening(&mut self, addr: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the server stopped before it listened ({status}); its log says why, above");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the server never listened"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// Microseconds since the Unix epoch by this machine's clock (the clock the server stamps its
/// rows with, in milliseconds).
pub fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// An address on this machine with a port free now, for a server to listen on.
pub fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free local port");
    listener.local_addr().expect("its address").to_string()
}

/// The number a flag was given: a whole number above 0, or a message naming the flag.
pub fn number(flag: &str, value: Option<String>) -> Result<u64, String> {
    value
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .ok_or(format!("{flag} takes a number above 0"))
}

/// The `p`th percentile (0–100) of `sorted`, by nearest rank; NaN when it is empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A JSON call to `endpoint` of the server at `addr` with `token`: the status and the body.
pub async fn call(
    client: &reqwest::Client,
    (addr, token): (&str, &str),
    endpoint: &str,
    body: &Value,
) -> Result<(u16, Value), String> {
    let response = client
        .post(format!("http://{addr}/api/{endpoint}"))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .map_err(|err| format!("{endpoint}: {err}"))?;
    let status = response.status().as_u16();
    Ok((status, response.json().await.unwrap_or(Value::Null)))
}

/// How many runs of `db` are in `status`, and how many failed (one read).
pub async fn count(db: &TestDb, status: &str) -> (i64, i64) {
    sqlx::query_as::<_, (i64, i64)>(
        "SELECT COALESCE(SUM(CASE WHEN status = $1 THEN 1 ELSE 0 END), 0), \
         COALESCE(SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END), 0) FROM agent_run",
    )
    .bind(status)
    .fetch_one(db.db.pool())
    .await
    .expect("counting runs")
}

/// Waits (reading the database every 25 ms, never asking the server) until `n` runs are in
/// `status`; fails on a failed run.
pub async fn until(db: &TestDb, status: &str, n: usize, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        let (reached, failed) = count(db, status).await;
        if reached as usize >= n {
            return Ok(());
        }
        if failed > 0 || Instant::now() > deadline {
            return Err(format!(
                "{reached} of {n} runs reached {status} ({failed} failed) within {within:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// One number of the `/metrics` of the server at `addr` (`name` with its labels, as printed).
pub async fn metric((addr, token): (&str, &str), name: &str) -> Result<u64, String> {
    let text = reqwest::Client::new()
        .get(format!("http://{addr}/metrics"))
        .bearer_auth(token)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|err| format!("reading {addr}'s metrics: {err}"))?
        .text()
        .await
        .map_err(|err| format!("reading {addr}'s metrics: {err}"))?;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| format!("{addr}'s metrics have no {name}"))
}
