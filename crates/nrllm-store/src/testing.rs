//! Test databases: every store test runs against an SQLite file and, when `TEST_DATABASE_URL` is
//! set, against that Postgres server in a schema of its own. A set but unreachable URL fails the
//! test; it never skips.

use crate::db::{Backend, Database, DbOptions, SqliteSync};
use sqlx::Executor;

/// The CPU time (user + system, every thread) process `pid` has used so far, in milliseconds,
/// from Linux's `/proc/<pid>/stat` (`self`: this process); none where it cannot be read. For
/// the benchmarks that count what a cycle or a streamed piece costs.
pub fn process_cpu_ms(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's closing parenthesis, utime and stime are the 12th and 13th fields, in
    // clock ticks (100 a second on Linux).
    let after = stat.get(stat.rfind(')')? + 2..)?;
    let mut fields = after.split(' ').skip(11);
    let mut ticks = || fields.next()?.parse::<f64>().ok();
    Some((ticks()? + ticks()?) * 10.0)
}

/// The resident memory (`VmRSS`) of process `pid` now, in kilobytes, from Linux's
/// `/proc/<pid>/status`; none where it cannot be read. For the benchmarks that watch the
/// server's memory.
pub fn process_rss_kb(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// One backend's database for one test.
pub struct TestDb {
    pub name: &'static str,
    pub url: String,
    pub db: Database,
    schema: Option<(String, String)>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    /// Another pool on the same database (its own connections, the same audit key).
    pub async fn open(&self, max_connections: u32) -> Database {
        Database::connect_with(
            &self.url,
            DbOptions {
                max_connections: Some(max_connections),
                audit_key: Some(self.db.audit_key().clone()),
                ..DbOptions::default()
            },
        )
        .await
        .unwrap_or_else(|err| panic!("{}: cannot open another pool: {err}", self.name))
    }

    /// Drops the Postgres schema the test used.
    pub async fn cleanup(self) {
        if let Some((admin_url, schema)) = &self.schema {
            self.db.pool().close().await;
            let admin = admin_pool(admin_url)
                .await
                .expect("postgres admin connection");
            admin
                .execute(format!("DROP SCHEMA IF EXISTS {schema} CASCADE").as_str())
                .await
                .expect("drop the test schema");
        }
    }
}

/// A plain connection to the server, for creating and dropping schemas (no migrations).
async fn admin_pool(url: &str) -> Result<sqlx::AnyPool, sqlx::Error> {
    sqlx::any::install_default_drivers();
    sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
}

pub async fn sqlite() -> TestDb {
    sqlite_with(SqliteSync::Full).await
}

/// An SQLite file synced as `sync` says (its writes take another path at `Normal`).
pub async fn sqlite_with(sync: SqliteSync) -> TestDb {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("runs.db").display());
    let db = Database::connect_with(
        &url,
        DbOptions {
            sqlite_sync: sync,
            max_connections: None,
            ..DbOptions::default()
        },
    )
    .await
    .expect("sqlite opens");
    TestDb {
        name: match sync {
            SqliteSync::Full => "sqlite",
            SqliteSync::Normal => "sqlite (synchronous=NORMAL)",
        },
        url,
        db,
        schema: None,
        _dir: Some(dir),
    }
}

async fn postgres(admin_url: &str) -> TestDb {
    assert_eq!(
        Backend::from_url(admin_url),
        Some(Backend::Postgres),
        "TEST_DATABASE_URL must be a postgres URL"
    );
    let admin = admin_pool(admin_url).await.unwrap_or_else(|err| {
        panic!("TEST_DATABASE_URL is set but Postgres is not reachable: {err}")
    });
    let schema = format!("nrllm_test_{}", uuid::Uuid::new_v4().simple());
    admin
        .execute(format!("CREATE SCHEMA {schema}").as_str())
        .await
        .expect("create a test schema");
    admin.close().await;
    let separator = if admin_url.contains('?') { '&' } else { '?' };
    let url = format!("{admin_url}{separator}options=-c%20search_path%3D{schema}");
    let db = Database::connect(&url)
        .await
        .expect("postgres test schema opens");
    TestDb {
        name: "postgres",
        url,
        db,
        schema: Some((admin_url.to_owned(), schema)),
        _dir: None,
    }
}

/// The Postgres server tests run on: `TEST_DATABASE_URL` (`make test` sets it). A test that
/// needs it panics without it, never passes quietly; such tests are `#[ignore = "needs
/// Postgres …"]`, so that a plain `cargo test` lists them as ignored and `make test` runs them
/// (`--include-ignored`).
fn postgres_url() -> String {
    match std::env::var("TEST_DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => url.trim().to_owned(),
        _ => panic!(
            "this test needs Postgres: set TEST_DATABASE_URL (e.g. \
             postgres://postgres@127.0.0.1:5432/test; `make test` sets it)"
        ),
    }
}

/// A fresh Postgres schema on `TEST_DATABASE_URL`'s server (its `url` opens it).
pub async fn postgres_from_env() -> TestDb {
    postgres(&postgres_url()).await
}

/// The databases a test runs on: SQLite, and Postgres on `TEST_DATABASE_URL`. Without that
/// variable the test fails, unless `NRLLM_TEST_SQLITE_ONLY=1` says out loud that this run covers
/// SQLite alone.
pub async fn backends() -> Vec<TestDb> {
    let mut dbs = vec![sqlite().await];
    if std::env::var("NRLLM_TEST_SQLITE_ONLY").is_ok_and(|v| v == "1") {
        eprintln!("NRLLM_TEST_SQLITE_ONLY=1: this run covers SQLite only");
    } else {
        dbs.push(postgres(&postgres_url()).await);
    }
    dbs
}

/// A run of the demo model asked `prompt`, for tests that need a configuration.
pub fn demo_configuration(prompt: &str) -> nrllm_core::run_store::RunConfiguration {
    nrllm_core::run_store::RunConfiguration {
        continues: None,
        approval_timeout_ms: None,
        provider: "demo".into(),
        model: "demo-1".into(),
        prompt: prompt.into(),
        system_prompt: None,
        skills: Vec::new(),
        settings: Default::default(),
    }
}

/// A run that completed (answer `done`) with `steps` `recovered` steps ("step 1" … "step N"),
/// stored in `store` at `now_ms`.
pub async fn completed_run(
    store: &dyn nrllm_core::run_store::RunStore,
    steps: i64,
    now_ms: i64,
) -> nrllm_core::run_store::RunRecord {
    use nrllm_core::events::Event;
    use nrllm_core::run_store::{Finish, NewRun, RunStatus, SequencedEvent, TerminationReason};
    let run = NewRun {
        id: uuid::Uuid::now_v7(),
        configuration: demo_configuration("p"),
        requested_by: "operator".into(),
        copied: Vec::new(),
        trace: nrllm_core::trace::RunTrace::start(None),
    };
    let created = store.create(&run, now_ms, true).await.unwrap();
    let events: Vec<SequencedEvent> = (1..=steps)
        .map(|sequence| SequencedEvent {
            sequence,
            event: Event::Recovered {
                resumes_at: format!("step {sequence}"),
            },
            created_at_ms: now_ms,
        })
        .collect();
    let finish = Finish {
        status: RunStatus::Completed,
        reason: TerminationReason::Completed,
        counters: Default::default(),
        truncated: false,
        final_answer: Some("done".into()),
        error_summary: None,
        estimated_cost_micros: None,
    };
    store
        .finish(run.id, created.version, &finish, &events, now_ms)
        .await
        .unwrap()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_process_cpu_time_is_read_and_grows_with_work() {
        let before = super::process_cpu_ms("self").expect("this process's /proc stat");
        // Work until the kernel has counted a tick more (5 s at most, on a busy machine).
        let started = std::time::Instant::now();
        let mut spin = 0_u64;
        let mut after = before;
        while after <= before && started.elapsed() < std::time::Duration::from_secs(5) {
            for _ in 0..100_000 {
                spin = std::hint::black_box(spin.wrapping_add(1));
            }
            after = super::process_cpu_ms("self").expect("this process's /proc stat");
        }
        assert!(after > before, "{before} ms, then {after} ms");
        assert_eq!(super::process_cpu_ms("not-a-process"), None);
    }

    #[test]
    fn a_process_resident_memory_is_read_and_grows_with_what_it_touches() {
        let before = super::process_rss_kb("self").expect("this process's /proc status");
        // 64 MB written page by page is resident until it is dropped (half of it is asked for:
        // the tests beside this one may free memory meanwhile).
        let touched = std::hint::black_box(vec![1_u8; 64 << 20]);
        let after = super::process_rss_kb("self").expect("this process's /proc status");
        assert!(after >= before + 32 * 1024, "{before} kB, then {after} kB");
        drop(touched);
        assert_eq!(super::process_rss_kb("not-a-process"), None);
    }
}
