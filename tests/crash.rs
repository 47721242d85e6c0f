//! The kill -9 harness. It starts the real server binary on a fresh SQLite file, drives runs
//! through the API, and has the process stop at one of the failpoints (`NRLLM_FAILPOINT`) —
//! after the claim commits, during and after the commit of a turn decided without an operator (a
//! message to the internal domain, which `send_message` lets through by its own check), after
//! the dispatch before the tool runs, inside the tool after its
//! effect, after the results before the next model call, during a model call, during a
//! suspension's or a finish's commit — then kills it with SIGKILL and starts it again. After each
//! restart it reads the API and the database and asserts:
//! - no acknowledged decision is lost (its `approval_decided` step is there);
//! - no demo-site change or outbox message is applied twice (rows per effect key), and an approved
//!   change to our own database is applied exactly once;
//! - no run is left `running`, and none ends `failed` where a step can safely go on;
//! - every run that was cut off while running says so in its steps (`recovered` or
//!   `outcome_unknown`); a run cut off right after its claim was still `queued` (nothing of the
//!   decision had started), so a worker carries the decision out after the restart, once, with no
//!   recovery; every log verifies against its hash chain;
//! - an export (an effect outside our database) cut off after a worker took its decision waits for
//!   an operator with the call marked "outcome unknown", and is never run again silently.
//!
//! `NRLLM_CRASH_KILLS` is the number of kills (default: 20 at each point); `make crash-test N=…`
//! runs a soak and prints the figures RELIABILITY.md reports.

#![cfg(feature = "ssr")]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nrllm_core::failpoint::POINTS;
use nrllm_playground::page_data::{CallState, RunStatus, RunView};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

const SETTLE: Duration = Duration::from_secs(30);

/// One start of the server binary.
struct Server {
    child: Child,
    base: String,
    /// Set once the process says it stopped at its failpoint.
    reached: watch::Receiver<bool>,
    started: Instant,
}

/// What every start of one harness shares: the database, the export folder, the port.
struct Site {
    dir: tempfile::TempDir,
    port: u16,
    http: reqwest::Client,
}

impl Site {
    /// A fresh folder and database, with an API token the harness acts with (an approver's:
    /// it starts runs and decides them).
    async fn new() -> Site {
        let dir = tempfile::tempdir().unwrap();
        // `budgeted`: the demo model with a budget of one model request, so a run waits at its
        // budget after its approved call and before asking again.
        std::fs::write(
            dir.path().join("crash.toml"),
            "log_level = \"warn\"\n\n[[configurations]]\nname = \"budgeted\"\nkind = \"demo\"\n\
             model = \"demo-1\"\nlimits = { requests = 1 }\n",
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("sqlite:{}", dir.path().join("crash.db").display());
        let db = nrllm_store::db::Database::connect(&url).await.unwrap();
        let token = nrllm_store::accounts::AccountStore::new(db.clone())
            .create_program_token(
                "test",
                nrllm_types::Role::Approver,
                "crash-harness",
                nrllm_core::clock::now_ms(),
            )
            .await
            .unwrap();
        db.pool().close().await;
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .default_headers(headers)
            .build()
            .unwrap();
        Site { dir, port, http }
    }

    fn database_url(&self) -> String {
        format!("sqlite:{}", self.dir.path().join("crash.db").display())
    }

    fn export_dir(&self) -> PathBuf {
        self.dir.path().join("exports")
    }

    /// Starts the binary, armed at `failpoint` if given, and waits until it listens.
    async fn start(&self, failpoint: Option<&str>) -> Server {
        self.start_thinking(failpoint, 20).await
    }

    /// [`Site::start`] with the demo model thinking `think_ms` per answer.
    async fn start_thinking(&self, failpoint: Option<&str>, think_ms: u64) -> Server {
        self.start_with(failpoint, think_ms, &[]).await
    }

    /// [`Site::start_thinking`] with more settings (`NRLLM_…` variables) set.
    async fn start_with(
        &self,
        failpoint: Option<&str>,
        think_ms: u64,
        settings: &[(&str, &str)],
    ) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_nrllm-playground"));
        command
            .env("NRLLM_CONFIG", self.dir.path().join("crash.toml"))
            .env("NRLLM_SITE_ADDR", format!("127.0.0.1:{}", self.port))
            .env("NRLLM_DATABASE_URL", self.database_url())
            .env("NRLLM_EXPORT_DIR", self.export_dir())
            .env("NRLLM_DEMO_THINK_MS", think_ms.to_string())
            .env_remove("NRLLM_FAILPOINT")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(point) = failpoint {
            command.env("NRLLM_FAILPOINT", point);
        }
        command.envs(settings.iter().copied());
        let started = Instant::now();
        let mut child = command.spawn().expect("the server binary starts");
        let (tx, reached) = watch::channel(false);
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.starts_with("failpoint reached: ") {
                    let _ = tx.send(true);
                }
            }
        });
        let base = format!("http://127.0.0.1:{}", self.port);
        let deadline = Instant::now() + SETTLE;
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "the server listens within {SETTLE:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Server {
            child,
            base,
            reached,
            started,
        }
    }

    /// POSTs JSON to a server function: the status and the JSON answer (`None` if the server
    /// never answered — it may have stopped at its failpoint).
    async fn call(&self, server: &Server, endpoint: &str, body: Value) -> Option<(u16, Value)> {
        let response = self
            .http
            .post(format!("{}/api/{endpoint}", server.base))
            .json(&body)
            .send()
            .await
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.json().await.unwrap_or(Value::Null)))
    }

    async fn run(&self, server: &Server, id: &str) -> Option<RunView> {
        let (status, body) = self
            .call(server, "nrllm_run_get", json!({ "run_id": id }))
            .await?;
        assert_eq!(status, 200, "{body}");
        Some(serde_json::from_value(body).expect("a run view"))
    }
}

impl Server {
    fn reached(&self) -> bool {
        *self.reached.borrow()
    }

    /// SIGKILL: no shutdown of any kind.
    async fn kill(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }
}

/// What a cycle asks the demo model to do.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scenario {
    /// A page change: our own database, exactly once by effect key.
    Rename,
    /// An outbox message: our own database, exactly once by effect key.
    Send,
    /// A file in the export folder: outside our database, so "outcome unknown" after a crash.
    Export,
    /// An outbox message to the internal domain: decided by the tool's own check, with no
    /// operator, and journaled like an approved one (exactly once by effect key).
    SendInternal,
    /// A page change on a budget of one model request: the run waits at its budget before each
    /// further request, and a raise by one lets it ask again.
    Budgeted,
}

impl Scenario {
    fn prompt(self, cycle: usize) -> String {
        match self {
            Scenario::Rename | Scenario::Budgeted => {
                format!("Rename the home page to \"Hello {cycle}\"")
            }
            Scenario::Send => format!("Send a message to team@example.com saying cycle {cycle}"),
            Scenario::Export => "Export the pricing page".to_owned(),
            Scenario::SendInternal => {
                format!("Send a message to ops@internal.example saying cycle {cycle}")
            }
        }
    }
}

impl Scenario {
    fn configuration(self) -> &'static str {
        match self {
            Scenario::Budgeted => "budgeted",
            _ => "demo",
        }
    }
}

const SCENARIOS: [Scenario; 5] = [
    Scenario::Rename,
    Scenario::Send,
    Scenario::Export,
    Scenario::SendInternal,
    Scenario::Budgeted,
];

/// One cycle's record, for the assertions and the figures.
#[derive(Debug, Default)]
struct Cycle {
    run_id: String,
    /// Decisions sent, and those the server acknowledged with 200.
    decisions_sent: usize,
    decisions_acknowledged: usize,
    /// Raises of the run's budget sent, and those acknowledged.
    raises_sent: usize,
    raises_acknowledged: usize,
    killed: bool,
    /// The run was cut off after an operator's decision was claimed and a worker took it.
    killed_after_claim: bool,
    /// The run was cut off while its claimed decision waited `queued` (nothing had started).
    killed_queued: bool,
    came_back_unknown: bool,
    restart_ms: u128,
}

/// Drives one run on an armed server until the failpoint stops it (then SIGKILL) or the run
/// ends without reaching it.
async fn drive_armed(site: &Site, server: Server, scenario: Scenario, cycle: usize) -> Cycle {
    let mut record = Cycle::default();
    let (status, body) = site
        .call(
            &server,
            "nrllm_tool_run",
            json!({ "prompt": scenario.prompt(cycle), "configuration": scenario.configuration() }),
        )
        .await
        .expect("the start of a run is answered");
    assert_eq!(status, 200, "{body}");
    record.run_id = body.as_str().unwrap().to_owned();
    let deadline = Instant::now() + SETTLE;
    loop {
        if server.reached() {
            record.killed = true;
            break;
        }
        assert!(Instant::now() < deadline, "cycle {cycle}: the run moves on");
        match site.run(&server, &record.run_id).await {
            Some(view)
                if view.summary.status == RunStatus::WaitingForApproval
                    && record.decisions_sent == 0 =>
            {
                record.decisions_sent += 1;
                let answer = site
                    .call(
                        &server,
                        "nrllm_tool_resume",
                        json!({ "run_id": record.run_id, "decision": "approve_all" }),
                    )
                    .await;
                if matches!(answer, Some((200, _))) {
                    record.decisions_acknowledged += 1;
                }
            }
            Some(view)
                if view.summary.status == RunStatus::WaitingForBudget && record.raises_sent < 5 =>
            {
                raise(site, &server, &mut record).await;
            }
            Some(view) if view.summary.status.is_terminal() => break,
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    record.killed_after_claim = record.killed && record.decisions_sent > 0;
    server.kill().await;
    record
}

/// Raises the budget of the run the record follows by one model request.
async fn raise(site: &Site, server: &Server, record: &mut Cycle) {
    record.raises_sent += 1;
    let answer = site
        .call(
            server,
            "nrllm_budget_decide",
            json!({ "run_id": record.run_id, "decision": "raise", "raise_by": "1" }),
        )
        .await;
    if matches!(answer, Some((200, _))) {
        record.raises_acknowledged += 1;
    }
}

/// On an unarmed server: waits for recovery, answers what waits (an unknown outcome by one of
/// its three choices, in turn), until the run completes.
async fn settle(site: &Site, server: &Server, record: &mut Cycle, cycle: usize) {
    let deadline = Instant::now() + SETTLE;
    loop {
        assert!(
            Instant::now() < deadline,
            "cycle {cycle}: run {} settles after the restart",
            record.run_id
        );
        let view = site
            .run(server, &record.run_id)
            .await
            .expect("the restarted server answers");
        match view.summary.status {
            RunStatus::Completed => return,
            RunStatus::WaitingForApproval => {
                let unknown: Vec<_> = view
                    .pending
                    .iter()
                    .filter(|c| matches!(c.state, CallState::OutcomeUnknown { .. }))
                    .collect();
                let body = if unknown.is_empty() {
                    json!({ "run_id": record.run_id, "decision": "approve_all" })
                } else {
                    record.came_back_unknown = true;
                    for call in &unknown {
                        let CallState::OutcomeUnknown {
                            effect_key,
                            dispatched_at,
                        } = &call.state
                        else {
                            unreachable!()
                        };
                        assert!(effect_key.starts_with(&record.run_id), "{effect_key}");
                        assert!(dispatched_at.ends_with("UTC"), "{dispatched_at}");
                    }
                    let calls: Vec<Value> = view
                        .pending
                        .iter()
                        .map(|call| match (&call.state, cycle % 3) {
                            (CallState::OutcomeUnknown { .. }, 0) => json!({
                                "call_id": call.call_id, "choice": "respond",
                                "result": format!("Exported by hand in cycle {cycle}.")
                            }),
                            (CallState::OutcomeUnknown { .. }, 1) => json!({
                                "call_id": call.call_id, "choice": "failed",
                                "reason": "the file is not there"
                            }),
                            _ => json!({ "call_id": call.call_id, "choice": "approve" }),
                        })
                        .collect();
                    json!({ "run_id": record.run_id, "decision": "per_call", "calls": calls })
                };
                record.decisions_sent += 1;
                let (status, answer) = site
                    .call(server, "nrllm_tool_resume", body)
                    .await
                    .expect("an answer");
                assert_eq!(status, 200, "cycle {cycle}: {answer}");
                record.decisions_acknowledged += 1;
            }
            RunStatus::WaitingForBudget => raise(site, server, record).await,
            RunStatus::Running | RunStatus::Queued => {}
            other => panic!(
                "cycle {cycle}: run {} ended {other}: {:?}",
                record.run_id, view.summary.error_summary
            ),
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
}

/// What the database says, checked after every restart.
async fn check_database(site: &Site, record: &Cycle, scenario: Scenario, cycle: usize) {
    let db = nrllm_store::db::Database::connect(&site.database_url())
        .await
        .unwrap();
    let pool = db.pool();
    let count = |sql: &'static str, bind: String| async move {
        let row: (i64,) = sqlx::query_as(sql)
            .bind(bind)
            .fetch_one(pool)
            .await
            .unwrap();
        row.0
    };
    let running: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM agent_run WHERE status = 'running'")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(running.0, 0, "cycle {cycle}: no run is left running");
    for table in ["site_page_history", "site_outbox"] {
        let twice: Vec<(String, i64)> = sqlx::query_as(&format!(
            "SELECT effect_key, COUNT(*) FROM {table} WHERE effect_key IS NOT NULL \
             GROUP BY effect_key HAVING COUNT(*) > 1"
        ))
        .fetch_all(pool)
        .await
        .unwrap();
        assert!(
            twice.is_empty(),
            "cycle {cycle}: applied twice in {table}: {twice:?}"
        );
    }
    let prefix = format!("{}/%", record.run_id);
    match scenario {
        Scenario::Rename | Scenario::Budgeted => assert_eq!(
            count(
                "SELECT COUNT(*) FROM site_page_history WHERE effect_key LIKE $1",
                prefix.clone()
            )
            .await,
            1,
            "cycle {cycle}: the approved rename happened exactly once"
        ),
        Scenario::Send | Scenario::SendInternal => assert_eq!(
            count(
                "SELECT COUNT(*) FROM site_outbox WHERE effect_key LIKE $1",
                prefix.clone()
            )
            .await,
            1,
            "cycle {cycle}: the approved message was put in the outbox exactly once"
        ),
        Scenario::Export => {}
    }
    let steps: Vec<(String, String)> = sqlx::query_as(
        "SELECT kind, payload FROM agent_run_event WHERE run_id = $1 ORDER BY sequence",
    )
    .bind(&record.run_id)
    .fetch_all(pool)
    .await
    .unwrap();
    let kinds: Vec<&str> = steps.iter().map(|k| k.0.as_str()).collect();
    // An operator's decisions (a turn decided by the tools' own checks is journaled the same
    // way, by `automatic`).
    let decided = steps
        .iter()
        .filter(|(kind, payload)| {
            kind == "approval_decided"
                && serde_json::from_str::<Value>(payload).unwrap()["decided_by"]
                    .as_str()
                    .is_some_and(|by| !by.starts_with("automatic"))
        })
        .count();
    assert!(
        decided >= record.decisions_acknowledged && decided <= record.decisions_sent,
        "cycle {cycle}: {decided} decisions on record, {} acknowledged, {} sent: {kinds:?}",
        record.decisions_acknowledged,
        record.decisions_sent
    );
    let raised = kinds
        .iter()
        .filter(|kind| **kind == "budget_decided")
        .count();
    assert!(
        raised >= record.raises_acknowledged && raised <= record.raises_sent,
        "cycle {cycle}: {raised} raises on record, {} acknowledged, {} sent: {kinds:?}",
        record.raises_acknowledged,
        record.raises_sent
    );
    if scenario == Scenario::Budgeted {
        assert!(
            kinds.contains(&"budget_reached") && raised >= 1,
            "cycle {cycle}: the run waited at its budget and was raised: {kinds:?}"
        );
    }
    if record.killed_queued {
        assert!(
            !kinds.contains(&"recovered") && !kinds.contains(&"outcome_unknown"),
            "cycle {cycle}: a decision cut off while queued is simply carried out: {kinds:?}"
        );
    } else if record.killed {
        assert!(
            kinds.contains(&"recovered") || kinds.contains(&"outcome_unknown"),
            "cycle {cycle}: the steps say the run was cut off: {kinds:?}"
        );
    }
    // The log is whole: the hash chain holds over every step, before and after the kill.
    let store = nrllm_store::SqlRunStore::new(db.clone());
    let id = uuid::Uuid::parse_str(&record.run_id).unwrap();
    let verdict = store.verify_log(id).await.unwrap().unwrap();
    assert!(
        verdict.is_verified(),
        "cycle {cycle}: {}",
        verdict.describe()
    );
    db.pool().close().await;
}

/// The armed point for cycle `cycle` at `point`: model calls are stopped at the first, second or
/// third call (before and after the decision), turn by turn over each pass of every point and
/// scenario.
fn armed(point: &str, cycle: usize) -> String {
    let pass = POINTS.len() * SCENARIOS.len();
    match point {
        "during_model_call" => format!("{point}@{}", 1 + (cycle / pass) % 3),
        _ => point.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failpoint_survives_kill_9() {
    let kills: usize = std::env::var("NRLLM_CRASH_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(8 * POINTS.len());
    let site = Site::new().await;
    let begun = Instant::now();
    let mut per_point: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
    let mut restarts = Vec::new();
    let mut cycle = 0;
    let mut total = 0;
    while total < kills {
        let point = POINTS[cycle % POINTS.len()];
        let scenario = SCENARIOS[(cycle / POINTS.len()) % SCENARIOS.len()];
        cycle += 1;
        assert!(
            cycle < kills * 4 + 40,
            "the failpoints are reached: {per_point:?}"
        );
        let server = site.start(Some(&armed(point, cycle))).await;
        let mut record = drive_armed(&site, server, scenario, cycle).await;
        if point == "after_claim_commit" {
            // The claim queues the decision: cut off there, nothing of it had started.
            record.killed_queued = record.killed;
            record.killed_after_claim = false;
        }
        let entry = per_point.entry(point).or_default();
        entry.0 += 1;
        if record.killed {
            total += 1;
            entry.1 += 1;
        }
        let server = site.start(None).await;
        settle(&site, &server, &mut record, cycle).await;
        record.restart_ms = server.started.elapsed().as_millis();
        restarts.push(record.restart_ms);
        if scenario == Scenario::Export && record.killed_after_claim {
            assert!(
                record.came_back_unknown,
                "cycle {cycle}: an export cut off at {point} after its dispatch waits with \
                 its outcome unknown"
            );
        }
        if record.came_back_unknown {
            assert_eq!(
                scenario,
                Scenario::Export,
                "cycle {cycle}: a tool idempotent by key is run again with its key, not asked about"
            );
            entry.2 += 1;
        }
        check_database(&site, &record, scenario, cycle).await;
        server.kill().await;
    }
    for (point, (cycles, killed, unknown)) in &per_point {
        assert!(*killed > 0, "{point} was reached");
        println!(
            "{point:28} cycles {cycles:4}  kills {killed:4}  came back outcome-unknown {unknown:4}"
        );
    }
    restarts.sort_unstable();
    println!(
        "{total} kills in {cycle} cycles, {:.1} s; restart to settled run p50 {} ms, max {} ms",
        begun.elapsed().as_secs_f64(),
        restarts[restarts.len() / 2],
        restarts.last().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_running_run_finish_its_step() {
    let site = Site::new().await;
    // The model thinks for a second: SIGTERM arrives while the run is mid-step.
    let server = site.start_thinking(None, 1000).await;
    finishes_through_sigterm(&site, server).await;
}

/// A grace period longer than the lease: the stopping server renews the lease of the run it still
/// drives, so the run finishes its step here instead of stopping at its lease's end (its step
/// outlasts the lease) and being left `running` for a takeover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_renews_the_leases_of_the_runs_finishing_their_step() {
    let site = Site::new().await;
    // A lease of 1 s; each answer of the model takes 2.5 s.
    let server = site
        .start_with(None, 2500, &[("NRLLM_LEASE_SECS", "1")])
        .await;
    finishes_through_sigterm(&site, server).await;
}

/// SIGTERM at once after a run is queued, at a few delays: the run was either taken before the
/// stop and finished its step in the stopping process, or never taken and still queued — never
/// taken and left `running` for the next start to recover. A queued one goes on at the next
/// start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_a_run_is_taken_leaves_it_finished_or_queued() {
    let site = Site::new().await;
    let mut queued = Vec::new();
    for delay_ms in [0, 0, 1, 2, 3, 5] {
        let server = site.start_thinking(None, 50).await;
        let id = start_run(&site, &server).await;
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        terminate(server).await;
        let (status, reason) = status_of(&site, &id).await;
        println!("SIGTERM {delay_ms} ms after the start: the run is {status}");
        assert!(
            status == "completed" || status == "queued",
            "SIGTERM {delay_ms} ms after the start left the run {status} ({reason:?})"
        );
        check_untouched(&site, &id).await;
        if status == "queued" {
            queued.push(id);
        }
    }
    let server = site.start_thinking(None, 50).await;
    for id in &queued {
        let deadline = Instant::now() + SETTLE;
        while site
            .run(&server, id)
            .await
            .expect("a run view")
            .summary
            .status
            != RunStatus::Completed
        {
            assert!(Instant::now() < deadline, "the queued run {id} goes on");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        check_untouched(&site, id).await;
    }
    server.kill().await;
}

/// Starts a run on `server`, sends SIGTERM once a worker drives it, and checks that it completed
/// in the stopping process, untouched by any recovery.
async fn finishes_through_sigterm(site: &Site, server: Server) {
    let id = start_run(site, &server).await;
    running(site, &server, &id).await;
    terminate(server).await;
    let (status, reason) = status_of(site, &id).await;
    assert_eq!(status, "completed", "{reason:?}");
    check_untouched(site, &id).await;
}

/// Waits until a worker has taken run `id` (it is `running`).
async fn running(site: &Site, server: &Server, id: &str) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let view = site.run(server, id).await.expect("the server answers");
        if view.summary.status == RunStatus::Running {
            return;
        }
        assert!(Instant::now() < deadline, "a worker takes the run");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Starts "What time is it?" (a read-only tool, then an answer): the run's id.
async fn start_run(site: &Site, server: &Server) -> String {
    let (status, body) = site
        .call(
            server,
            "nrllm_tool_run",
            json!({ "prompt": "What time is it?" }),
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    body.as_str().unwrap().to_owned()
}

/// SIGTERM, and the server exits cleanly within its grace period.
async fn terminate(mut server: Server) {
    let pid = server.child.id().unwrap();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(15), server.child.wait())
        .await
        .expect("the server exits within its grace period")
        .unwrap();
    assert!(exit.success(), "{exit:?}");
}

/// The run's status and termination reason, read from the database.
async fn status_of(site: &Site, id: &str) -> (String, Option<String>) {
    let db = nrllm_store::db::Database::connect(&site.database_url())
        .await
        .unwrap();
    let row = sqlx::query_as("SELECT status, termination_reason FROM agent_run WHERE id = $1")
        .bind(id)
        .fetch_one(db.pool())
        .await
        .unwrap();
    db.pool().close().await;
    row
}

/// The run has no recovery step: nothing of it was cut off.
async fn check_untouched(site: &Site, id: &str) {
    let db = nrllm_store::db::Database::connect(&site.database_url())
        .await
        .unwrap();
    let recovered: (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM agent_run_event WHERE run_id = $1 AND kind = 'recovered'",
    )
    .bind(id)
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(recovered.0, 0);
    db.pool().close().await;
}

/// An approved MCP call cut off by a kill -9 after the server applied it (the failpoint after
/// its effect) follows the server's `idempotentHint`: the demo's `write_note` says it is
/// idempotent, so the restart sends it again with the same effect key and the server answers
/// from its record (one write); the same server told to drop the hint (`NRLLM_MCP_DEMO_HINTS`)
/// has its call come back "outcome unknown", waiting for the operator, and nothing runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_cut_off_after_its_effect_follows_the_idempotent_hint() {
    for idempotent in [true, false] {
        let site = Site::new().await;
        let notes = site.dir.path().join("notes.json");
        let hints = if idempotent { "declared" } else { "plain" };
        std::fs::write(
            site.dir.path().join("crash.toml"),
            format!(
                "log_level = \"warn\"\n[[mcp_servers]]\nname = \"notes\"\ncommand = \"@self\"\n\
                 args = [\"mcp-demo\", \"--data\", \"{}\"]\nenv = {{ NRLLM_MCP_DEMO_HINTS = \"{hints}\" }}\n",
                notes.display()
            ),
        )
        .unwrap();
        let server = site.start(Some("in_tool_after_effect")).await;
        let (status, body) = site
            .call(
                &server,
                "nrllm_tool_run",
                json!({ "prompt": "Write the note todo saying \"Buy milk\"" }),
            )
            .await
            .unwrap();
        assert_eq!(status, 200, "{body}");
        let run_id = body.as_str().unwrap().to_owned();
        let deadline = Instant::now() + SETTLE;
        let mut decided = false;
        while !server.reached() {
            assert!(
                Instant::now() < deadline,
                "the approved call reaches its effect"
            );
            match site.run(&server, &run_id).await {
                Some(view) if view.summary.status == RunStatus::WaitingForApproval && !decided => {
                    assert_eq!(view.pending[0].tool, "notes__write_note");
                    let (status, answer) = site
                        .call(
                            &server,
                            "nrllm_tool_resume",
                            json!({ "run_id": run_id, "decision": "approve_all" }),
                        )
                        .await
                        .unwrap();
                    assert_eq!(status, 200, "{answer}");
                    decided = true;
                }
                Some(view) => assert!(!view.summary.status.is_terminal(), "{view:?}"),
                None => {}
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
        server.kill().await;
        let book = nrllm_mcp::demo::Notebook::load(&notes).unwrap();
        assert_eq!(
            book.writes, 1,
            "the server applied the call before the kill"
        );

        let server = site.start(None).await;
        let deadline = Instant::now() + SETTLE;
        let view = loop {
            assert!(
                Instant::now() < deadline,
                "the run settles after the restart"
            );
            let view = site.run(&server, &run_id).await.expect("an answer");
            if view.summary.status == RunStatus::Completed
                || view.summary.status == RunStatus::WaitingForApproval
            {
                break view;
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
        };
        let book = nrllm_mcp::demo::Notebook::load(&notes).unwrap();
        assert_eq!(book.writes, 1, "never applied twice: {book:?}");
        if idempotent {
            assert_eq!(view.summary.status, RunStatus::Completed, "{view:?}");
            assert_eq!(
                book.applied.len(),
                1,
                "one effect key, sent twice: {book:?}"
            );
            assert_eq!(
                view.summary.final_answer.as_deref(),
                Some("Wrote note todo (8 characters).")
            );
        } else {
            assert_eq!(view.summary.status, RunStatus::WaitingForApproval);
            let call = &view.pending[0];
            assert!(
                matches!(&call.state, CallState::OutcomeUnknown { effect_key, .. } if effect_key.starts_with(&run_id)),
                "{call:?}"
            );
        }
        server.kill().await;
    }
}
