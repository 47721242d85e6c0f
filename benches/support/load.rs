//! What the load benches (`http`, `mix`) share: the databases they run on, the server as they
//! start it, and their check that every approved call's effect was applied exactly once.

use std::collections::HashMap;

use nrllm_store::testing::TestDb;
use serde_json::json;

use super::{call, Server};

/// Server milliseconds, by run id.
pub type ByRun = HashMap<String, i64>;

/// The database a load bench runs on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Db {
    Normal,
    Full,
    Postgres,
}

impl Db {
    /// `--db`'s value.
    pub fn parse(value: Option<String>) -> Result<Db, String> {
        match value.as_deref() {
            Some("normal") => Ok(Db::Normal),
            Some("full") => Ok(Db::Full),
            Some("postgres") => Ok(Db::Postgres),
            _ => Err("--db takes normal, full or postgres".into()),
        }
    }

    /// A fresh SQLite file, or a scratch schema on `TEST_DATABASE_URL`.
    pub async fn database(self) -> TestDb {
        match self {
            Db::Normal => {
                nrllm_store::testing::sqlite_with(nrllm_store::db::SqliteSync::Normal).await
            }
            Db::Full => nrllm_store::testing::sqlite_with(nrllm_store::db::SqliteSync::Full).await,
            Db::Postgres => nrllm_store::testing::postgres_from_env().await,
        }
    }
}

/// The server binary on `db` at `addr`, with runs that never pause to think and no limit on
/// starts.
pub async fn serve(binary: &str, db: &TestDb, (sync, addr): (Db, &str)) -> Server {
    let sync = match sync {
        Db::Full => "full",
        _ => "normal",
    };
    let settings = format!(
        "log_level = \"warn\"\nrun_starts_per_minute = 100000\ndemo_think_ms = 0\n\
         sqlite_synchronous = \"{sync}\"\nmax_running_runs = 64\nstream_limit_total = 5000\n"
    );
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut server = Server::start(binary, dir, &settings, (addr, &db.url), &[]);
    server.listening(addr).await;
    server
}

/// Starts a run through the server at `addr` that creates its own page of the demo site,
/// `page` (so that no decision changes another's target): its id.
pub async fn start_run(
    client: &reqwest::Client,
    (addr, token): (&str, &str),
    page: &str,
) -> Result<String, String> {
    let prompt = format!("Create a page {page} titled \"Page {page}\"");
    match call(
        client,
        (addr, token),
        "nrllm_tool_run",
        &json!({ "prompt": prompt }),
    )
    .await?
    {
        (200, serde_json::Value::String(id)) => Ok(id),
        (status, body) => Err(format!("starting a run: {status} {body}")),
    }
}

/// The digest of run `id`'s pending turn, read as a client deciding would (`nrllm_run_get`).
pub async fn digest(
    client: &reqwest::Client,
    (addr, token): (&str, &str),
    id: &str,
) -> Result<String, String> {
    let (status, view) = call(
        client,
        (addr, token),
        "nrllm_run_get",
        &json!({ "run_id": id }),
    )
    .await?;
    match (status, view["digest"].as_str()) {
        (200, Some(digest)) => Ok(digest.to_owned()),
        _ => Err(format!("reading run {id}: {status}, no digest")),
    }
}

/// When each run's effect was applied and when each run completed (server milliseconds, by
/// run id), after checking that every run completed and applied its effect exactly once.
pub async fn effects_and_ends(db: &TestDb, runs: usize) -> Result<(ByRun, ByRun), String> {
    let pool = db.db.pool();
    let history: Vec<(String, i64)> = sqlx::query_as(
        "SELECT run_id, created_at_ms FROM site_page_history WHERE run_id IS NOT NULL",
    )
    .fetch_all(pool)
    .await
    .map_err(|err| format!("reading the site's history: {err}"))?;
    let keys: i64 = sqlx::query_scalar("SELECT COUNT(DISTINCT effect_key) FROM site_effect")
        .fetch_one(pool)
        .await
        .map_err(|err| format!("reading the effect keys: {err}"))?;
    let effects: ByRun = history.iter().cloned().collect();
    if history.len() != runs || effects.len() != runs || keys as usize != runs {
        return Err(format!(
            "{} history rows for {} runs and {keys} effect keys, expected exactly {runs} each",
            history.len(),
            effects.len()
        ));
    }
    let ended: Vec<(String, String, Option<i64>)> =
        sqlx::query_as("SELECT id, status, finished_at_ms FROM agent_run")
            .fetch_all(pool)
            .await
            .map_err(|err| format!("reading the runs: {err}"))?;
    let mut completed = HashMap::new();
    for (id, status, finished) in ended {
        match (status.as_str(), finished) {
            ("completed", Some(ms)) => {
                completed.insert(id, ms);
            }
            _ => return Err(format!("run {id} ended {status}, not completed")),
        }
    }
    Ok((effects, completed))
}
