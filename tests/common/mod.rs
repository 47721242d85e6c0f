//! The real server binary for integration tests: started on a fresh SQLite file with a settings
//! file of the test's own, its log kept in a file, and a client that logs in and calls server
//! functions as a browser or a JSON client does.

#![allow(dead_code)]

pub mod fakes;

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, COOKIE, SET_COOKIE};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

pub const ADMIN_PASSWORD: &str = "admin-password-1";

pub struct Server {
    child: Child,
    pub base: String,
    pub port: u16,
    pub db: String,
    /// The server's log (its standard output and error).
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Sends the server process a signal (`STOP`, `CONT`, `KILL`, …).
    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal}");
    }

    /// Waits (at most `within`) for the process to exit, as it does after `TERM` once it has
    /// stopped gracefully; its exit status, or `None` if it is still running.
    pub fn exited_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether `owner` (a lease owner) is this server process.
    pub fn owns(&self, owner: &str) -> bool {
        owner.starts_with(&format!("{}-", self.child.id()))
    }

    /// Everything the server logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The SQLite database's files (with its write-ahead log), as bytes.
    pub fn database_bytes(&self) -> Vec<u8> {
        let path = self.db.trim_start_matches("sqlite:");
        let mut bytes = std::fs::read(path).unwrap_or_default();
        bytes.extend(std::fs::read(format!("{path}-wal")).unwrap_or_default());
        bytes
    }
}

/// Starts the binary on a fresh SQLite file with the settings file `settings` and `env` on top.
pub async fn start(settings: &str, env: &[(&str, &str)]) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("settings.toml");
    std::fs::write(&config, settings).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let db = format!("sqlite:{}", dir.path().join("test.db").display());
    let log = dir.path().join("server.log");
    let log_file = std::fs::File::create(&log).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_nrllm-playground"));
    command
        .env("NRLLM_CONFIG", &config)
        .env("NRLLM_SITE_ADDR", format!("127.0.0.1:{port}"))
        .env("NRLLM_DATABASE_URL", &db)
        .env("NRLLM_ADMIN_PASSWORD", ADMIN_PASSWORD)
        .env("NRLLM_DEMO_THINK_MS", "0")
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file);
    // Instances sharing a Postgres database share its audit key, as their operators would.
    if env
        .iter()
        .any(|(name, value)| *name == "NRLLM_DATABASE_URL" && value.starts_with("postgres"))
    {
        command.env("NRLLM_AUDIT_KEY", "a1".repeat(32));
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().unwrap();
    // Ready when this server says so: a port that merely accepts a connection may be another
    // process's (the port was free when picked, not necessarily when the server bound it).
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = format!("http://127.0.0.1:{port}/readyz");
    let probe = client();
    loop {
        if let Ok(Some(exit)) = child.try_wait() {
            panic!(
                "the server ended before it was ready ({exit}): {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        let answer = probe.get(&ready).send().await;
        if answer.is_ok_and(|answer| answer.status() == StatusCode::OK) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server is ready: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Server {
        child,
        base: format!("http://127.0.0.1:{port}"),
        port,
        db,
        log,
        _dir: dir,
    }
}

pub fn client() -> Client {
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// A logged-in browser: its cookies and the CSRF token its forms carry.
#[derive(Clone)]
pub struct Session {
    pub cookies: String,
    pub csrf: String,
}

pub fn cookie_from(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix(&format!("{name}=")))
        .map(|rest| rest.split(';').next().unwrap_or_default().to_owned())
}

pub async fn log_in(server: &Server, name: &str, password: &str) -> Session {
    let response = client()
        .post(format!("{}/api/nrllm_login", server.base))
        .json(&json!({ "name": name, "password": password }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{name} logs in");
    let session = cookie_from(response.headers(), "nrllm_session").unwrap();
    let csrf = cookie_from(response.headers(), "nrllm_csrf").unwrap();
    Session {
        cookies: format!("nrllm_session={session}; nrllm_csrf={csrf}"),
        csrf,
    }
}

/// A JSON call as `session` (with its CSRF header).
pub async fn call(
    server: &Server,
    session: &Session,
    endpoint: &str,
    body: Value,
) -> (StatusCode, Value) {
    let request = client()
        .post(format!("{}/api/{endpoint}", server.base))
        .header(COOKIE, &session.cookies)
        .header("x-csrf-token", &session.csrf);
    answer(request.json(&body)).await
}

/// A JSON call with API token `token`.
pub async fn call_with_token(
    server: &Server,
    token: &str,
    endpoint: &str,
    body: Value,
) -> (StatusCode, Value) {
    let request = client()
        .post(format!("{}/api/{endpoint}", server.base))
        .bearer_auth(token);
    answer(request.json(&body)).await
}

/// The status and JSON body `request` is answered with.
async fn answer(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The admin makes users (name, role) with the password `<name>-password-1`, and logs each in.
pub async fn users(server: &Server, team: &[(&str, &str)]) -> Vec<Session> {
    let admin = log_in(server, "admin", ADMIN_PASSWORD).await;
    let mut sessions = Vec::new();
    for (name, role) in team {
        let (status, body) = call(
            server,
            &admin,
            "nrllm_user_create",
            json!({ "name": name, "password": format!("{name}-password-1"), "role": role }),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        sessions.push(log_in(server, name, &format!("{name}-password-1")).await);
    }
    sessions
}

/// Polls a run until `done` holds of its page model (at most 10 s).
pub async fn wait_until(
    server: &Server,
    session: &Session,
    run_id: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, view) = call(
            server,
            session,
            "nrllm_run_get",
            json!({ "run_id": run_id }),
        )
        .await;
        assert_eq!(code, StatusCode::OK, "{view}");
        if done(&view) {
            return view;
        }
        assert!(
            Instant::now() < deadline,
            "run {run_id} never {what}: {view}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Polls a run until it has `status`.
pub async fn wait_for(server: &Server, session: &Session, run_id: &str, status: &str) -> Value {
    wait_until(
        server,
        session,
        run_id,
        &format!("became {status}"),
        |view| view["summary"]["status"] == status,
    )
    .await
}

/// A plain form post as a browser sends it, with these extra headers and fields.
pub async fn form(
    server: &Server,
    cookies: &str,
    endpoint: &str,
    fields: &[(&str, &str)],
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = client()
        .post(format!("{}/api/{endpoint}", server.base))
        .header(COOKIE, cookies)
        .header("accept", "text/html")
        .form(fields);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// Starts a run through the JSON API (`body`: the start's fields) and returns its id; the start
/// must be accepted.
pub async fn start_run(server: &Server, session: &Session, body: Value) -> String {
    let (status, run) = call(server, session, "nrllm_tool_run", body).await;
    assert_eq!(status, StatusCode::OK, "{run}");
    run.as_str().expect("a run id").to_owned()
}

/// The HTML of page `path` as a browser with `cookies` gets it.
pub async fn html(server: &Server, cookies: &str, path: &str) -> String {
    client()
        .get(format!("{}{path}", server.base))
        .header(COOKIE, cookies)
        .header("accept", "text/html")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A Prometheus scrape of `server` with API token `token`; the scrape must be answered.
pub async fn metrics_text(server: &Server, token: &str) -> String {
    let response = client()
        .get(format!("{}/metrics", server.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.text().await.unwrap()
}
