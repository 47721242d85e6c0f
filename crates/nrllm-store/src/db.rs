//! Opening the run database: an SQLite file (the embedded default) or Postgres (several app
//! instances sharing one database), chosen by the URL's scheme, with the migrations applied.
//!
//! Every query is written once, for both backends; the few places where the dialects differ ask
//! [`Database::backend`]. They run through sqlx's `Any` driver, except the write transitions
//! and the point reads of the hot path ([`Database::transact`], [`Database::query`]): on SQLite
//! the file's direct connections carry them out ([`crate::sqlite`]), on Postgres pipelining
//! connections ([`crate::postgres`]). A transaction of typed statements for another crate (the
//! demo site's changes, [`Database::begin_typed`]) runs on SQLite's write connection too.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use nrllm_core::run_store::StoreError;
use sqlx::any::{AnyArguments, AnyConnectOptions, AnyPoolOptions, AnyQueryResult};
use sqlx::migrate::Migrator;
use sqlx::{Any, AnyConnection, AnyPool, Executor, Transaction};
use uuid::Uuid;

use crate::chain::AuditKey;
use crate::error::backend;
use crate::notify::{Announcer, Notice};
use crate::postgres::Pipeline;
pub use crate::sqlite::SqliteSync;
use crate::sqlite::{Readers, SqliteTx, Writer};
use crate::transition::{Row, Statement, Transition};

/// A statement with its arguments bound, for sqlx's `Any` driver.
pub type AnyQuery<'q> = sqlx::query::Query<'q, Any, AnyArguments<'q>>;

/// A write transaction through the pool ([`Database::begin_write`]) and, on SQLite, this
/// process's turn to write, held until the transaction ends (committed, or rolled back when
/// dropped).
pub struct WriteTx {
    tx: Transaction<'static, Any>,
    _turn: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl WriteTx {
    /// Commits the transaction, then gives up the turn.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }
}

impl std::ops::Deref for WriteTx {
    type Target = AnyConnection;
    fn deref(&self) -> &AnyConnection {
        &self.tx
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        &mut self.tx
    }
}

/// A write transaction of [`Statement`]s ([`Database::begin_typed`]).
pub struct TypedTx(OpenTx);

enum OpenTx {
    /// On the write connection, on the caller's thread.
    Sqlite(SqliteTx),
    /// Through sqlx's pool.
    Pool(WriteTx),
}

impl TypedTx {
    /// The rows `statement` returns (none for a write that returns none), in the transaction.
    pub async fn query(&mut self, statement: &Statement) -> Result<Vec<Row>, StoreError> {
        match &mut self.0 {
            OpenTx::Sqlite(tx) => tx.query(statement),
            OpenTx::Pool(tx) => {
                let rows = statement
                    .query()
                    .fetch_all(&mut **tx)
                    .await
                    .map_err(backend)?;
                rows.iter().map(Row::from_any).collect()
            }
        }
    }

    /// The first row `statement` returns, if any.
    pub async fn query_one(&mut self, statement: &Statement) -> Result<Option<Row>, StoreError> {
        Ok(self.query(statement).await?.into_iter().next())
    }

    pub async fn commit(self) -> Result<(), StoreError> {
        match self.0 {
            OpenTx::Sqlite(tx) => tx.commit().await,
            OpenTx::Pool(tx) => tx.commit().await.map_err(backend),
        }
    }

    /// Rolls back what the transaction wrote (as dropping it does, but here the caller hears
    /// when it is done, and whether it failed).
    pub async fn roll_back(self) -> Result<(), StoreError> {
        match self.0 {
            OpenTx::Sqlite(tx) => {
                drop(tx);
                Ok(())
            }
            OpenTx::Pool(tx) => tx.tx.rollback().await.map_err(backend),
        }
    }
}

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("../../migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("../../migrations/postgres");

/// Which SQL dialect the database speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The backend a database URL names, if it is one we support.
    pub fn from_url(url: &str) -> Option<Backend> {
        let scheme = url.split(':').next().unwrap_or_default();
        match scheme {
            "sqlite" => Some(Backend::Sqlite),
            "postgres" | "postgresql" => Some(Backend::Postgres),
            _ => None,
        }
    }
}

/// Connections a pool keeps to Postgres unless told otherwise (sqlx's, and the hot path's).
const POSTGRES_CONNECTIONS: u32 = 16;

/// How to open the database.
#[derive(Debug, Clone, Default)]
pub struct DbOptions {
    pub sqlite_sync: SqliteSync,
    /// Pool size; `None` picks a default for the backend.
    pub max_connections: Option<u32>,
    /// The key the runs' logs are chained by ([`crate::chain`]); `None`: the file beside an
    /// SQLite database (made if missing), or, for Postgres, a key kept nowhere (tests).
    pub audit_key: Option<AuditKey>,
}

/// Why the database could not be opened. Messages never include the URL's credentials.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    #[error("the database URL must start with `sqlite:` or `postgres:` (got a URL starting with `{scheme}:`)")]
    UnsupportedUrl { scheme: String },
    #[error("cannot create the folder `{path}` for the SQLite database: {source}")]
    CreateDir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot connect to the {backend:?} database: {source}")]
    Connect {
        backend: Backend,
        source: sqlx::Error,
    },
    #[error("cannot apply the database migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error(
        "an in-memory SQLite database cannot be shared by the store's connections; name a file"
    )]
    InMemory,
    #[error("cannot open the SQLite file for writing: {0}")]
    Writer(Box<dyn std::error::Error + Send + Sync>),
    #[error("{0}")]
    AuditKey(#[from] crate::chain::AuditKeyError),
    #[error("cannot use the Postgres URL for the run store's connections: {0}")]
    Pipeline(Box<dyn std::error::Error + Send + Sync>),
}

/// What carries out the hot path's transitions and point reads, past sqlx.
#[derive(Debug)]
enum Direct {
    /// The write connection and its thread, the connections point reads use on the caller's
    /// thread, and this process's turn to write (SQLite takes one writer at a time).
    Sqlite {
        writer: Writer,
        readers: Readers,
        turn: Arc<tokio::sync::Mutex<()>>,
    },
    /// Pipelining connections, and what tells the other instances of commits.
    Postgres {
        pipeline: Pipeline,
        announcer: Announcer,
    },
}

/// An open, migrated database.
#[derive(Clone, Debug)]
pub struct Database {
    pool: AnyPool,
    /// The hot path's own connections: transitions and point reads.
    direct: Arc<Direct>,
    /// The key the runs' logs are chained by ([`crate::chain`]).
    audit: AuditKey,
}

impl Database {
    /// Opens the database at `url` (creating an SQLite file and its folder if missing) and applies
    /// the migrations for its backend.
    pub async fn connect(url: &str) -> Result<Database, DatabaseError> {
        Self::connect_with(url, DbOptions::default()).await
    }

    /// As [`Database::connect`], with options.
    pub async fn connect_with(url: &str, options: DbOptions) -> Result<Database, DatabaseError> {
        sqlx::any::install_default_drivers();
        let backend = Backend::from_url(url).ok_or_else(|| DatabaseError::UnsupportedUrl {
            scheme: url
                .split(':')
                .next()
                .unwrap_or_default()
                .chars()
                .take(20)
                .collect(),
        })?;
        let (pool, sqlite_file) = pool_for(url, backend, &options).await?;
        match backend {
            Backend::Sqlite => SQLITE_MIGRATIONS.run(&pool).await?,
            Backend::Postgres => POSTGRES_MIGRATIONS.run(&pool).await?,
        }
        let audit = match (options.audit_key, &sqlite_file) {
            (Some(key), _) => key,
            (None, Some(path)) => AuditKey::load_or_create(&audit_key_beside(path))?.0,
            (None, None) => AuditKey::generate(),
        };
        let direct = match sqlite_file {
            Some(path) => {
                let turn = Arc::default();
                Direct::Sqlite {
                    writer: Writer::open(Path::new(&path), options.sqlite_sync, Arc::clone(&turn))
                        .map_err(DatabaseError::Writer)?,
                    readers: Readers::new(Path::new(&path)),
                    turn,
                }
            }
            None => {
                let size = options.max_connections.unwrap_or(POSTGRES_CONNECTIONS);
                Direct::Postgres {
                    pipeline: Pipeline::new(url, size as usize).map_err(DatabaseError::Pipeline)?,
                    announcer: Announcer::start(url.to_owned()),
                }
            }
        };
        Ok(Database {
            pool,
            direct: Arc::new(direct),
            audit,
        })
    }

    /// The key the runs' logs are chained by.
    pub fn audit_key(&self) -> &AuditKey {
        &self.audit
    }

    /// The rows a point read returns (a run by id, a run's rules): on SQLite read on this
    /// thread, on the write connection if it is free (see [`crate::sqlite`]); on Postgres on a
    /// pipelining connection.
    pub async fn query(&self, statement: &Statement) -> Result<Vec<Row>, StoreError> {
        match &*self.direct {
            Direct::Sqlite {
                writer, readers, ..
            } => writer
                .query_if_idle(statement)
                .unwrap_or_else(|| readers.query(statement)),
            Direct::Postgres { pipeline, .. } => pipeline.query(statement).await,
        }
    }

    /// Carries out `transition` in one transaction (see [`Transition`]): the row its fence
    /// returned, or `None` — then nothing was written. Its steps are chained by this database's
    /// audit key.
    pub(crate) async fn transact(
        &self,
        mut transition: Transition,
    ) -> Result<Option<Row>, StoreError> {
        transition.audit = Some(self.audit.clone());
        match &*self.direct {
            Direct::Sqlite { writer, .. } => writer.transact(transition).await,
            Direct::Postgres { pipeline, .. } => pipeline.transact(transition).await,
        }
    }

    /// Tells the other instances of a commit, or that a browser here follows a run they may
    /// drive (Postgres; nothing on SQLite).
    pub fn announce(&self, notices: Vec<Notice>) {
        if let (Direct::Postgres { announcer, .. }, false) = (&*self.direct, notices.is_empty()) {
            announcer.announce(notices);
        }
    }

    /// Tells the instances that follow run `id` what its model wrote: `message` in pieces on the
    /// run's channel, outside any transaction of the run (Postgres; nothing on SQLite).
    pub fn announce_forming(&self, id: Uuid, number: u64, message: &str) {
        if let Direct::Postgres { announcer, .. } = &*self.direct {
            announcer.announce_on(
                &crate::notify::forming_channel(id),
                crate::notify::chunks(number, message),
            );
        }
    }

    /// The connection pool.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// This process's turn to write, on SQLite (which lets one writer in at a time): writers
    /// queue here in order rather than in SQLite's busy handler, which sleeps and retries (up
    /// to 100 ms a try), and in which the run store's own writer would otherwise wait for a
    /// write of microseconds. A group of lent transactions left open on the write connection
    /// is committed first: the pool's connection could not write while it is. `None` on
    /// Postgres, where writers of different rows go ahead together.
    pub(crate) async fn write_turn(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        match &*self.direct {
            Direct::Sqlite { writer, turn, .. } => {
                let turn = Arc::clone(turn).lock_owned().await;
                writer.settle_open();
                Some(turn)
            }
            Direct::Postgres { .. } => None,
        }
    }

    /// Starts a write transaction through the pool, in this process's turn to write
    /// ([`Database::write_turn`], held until it ends). On SQLite it takes the file's write lock
    /// at once (`BEGIN IMMEDIATE`), so that it never fails for upgrading a read to a write.
    pub async fn begin_write(&self) -> Result<WriteTx, sqlx::Error> {
        let turn = self.write_turn().await;
        let tx = match self.backend() {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => self.pool.begin().await?,
        };
        Ok(WriteTx { tx, _turn: turn })
    }

    /// Begins a write transaction of [`Statement`]s, for a part of the program outside the run
    /// store (the demo site's changes). On SQLite it runs on the write connection, in this
    /// process's turn to write, statement by statement on the caller's thread — where
    /// [`Database::begin_write`] makes a trip to a pool connection's thread and back for each
    /// statement, `BEGIN` and `COMMIT` included. On Postgres it goes through sqlx's pool, as
    /// [`Database::begin_write`] does: the pipelining connections are the transitions', and a
    /// site change holding one for its eight round trips slowed them (BENCHMARKS.md). Dropped
    /// before it is committed, it rolls back.
    pub async fn begin_typed(&self) -> Result<TypedTx, StoreError> {
        let tx = match &*self.direct {
            Direct::Sqlite { writer, turn, .. } => {
                OpenTx::Sqlite(writer.begin_lent(Arc::clone(turn)).await?)
            }
            Direct::Postgres { .. } => OpenTx::Pool(self.begin_write().await.map_err(backend)?),
        };
        Ok(TypedTx(tx))
    }

    /// Carries out one writing statement through the pool, in this process's turn to write.
    pub async fn write<'q>(&self, statement: AnyQuery<'q>) -> Result<AnyQueryResult, sqlx::Error> {
        let _turn = self.write_turn().await;
        statement.execute(&self.pool).await
    }

    /// SQLite's writer, for tests of its paths.
    #[cfg(test)]
    pub(crate) fn sqlite_writer(&self) -> Option<&Writer> {
        match &*self.direct {
            Direct::Sqlite { writer, .. } => Some(writer),
            Direct::Postgres { .. } => None,
        }
    }

    /// Postgres's pipelining connections, for tests of their paths.
    #[cfg(test)]
    pub(crate) fn postgres_pipeline(&self) -> Option<&Pipeline> {
        match &*self.direct {
            Direct::Postgres { pipeline, .. } => Some(pipeline),
            Direct::Sqlite { .. } => None,
        }
    }

    /// The SQL dialect behind the pool.
    pub fn backend(&self) -> Backend {
        match *self.direct {
            Direct::Sqlite { .. } => Backend::Sqlite,
            Direct::Postgres { .. } => Backend::Postgres,
        }
    }

    /// Whether the database answers with every migration of this build applied: how many are
    /// applied, and how many this build has.
    pub async fn migrations(&self) -> Result<(usize, usize), sqlx::Error> {
        let applied: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE success")
                .fetch_one(&self.pool)
                .await?;
        let known = match self.backend() {
            Backend::Sqlite => SQLITE_MIGRATIONS.iter().count(),
            Backend::Postgres => POSTGRES_MIGRATIONS.iter().count(),
        };
        Ok((usize::try_from(applied).unwrap_or_default(), known))
    }
}

/// Where the audit key of the SQLite file at `path` lives: beside it, `<file>.audit-key`.
fn audit_key_beside(path: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("{path}.audit-key"))
}

/// Makes sure the SQLite file can be created: its folder exists and the URL asks for
/// read-write-create mode unless it names a mode itself. The URL, and the file's path.
fn prepare_sqlite_url(url: &str) -> Result<(String, String), DatabaseError> {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() || path == ":memory:" || query.split('&').any(|p| p == "mode=memory") {
        return Err(DatabaseError::InMemory);
    }
    if let Some(parent) = Path::new(path)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent).map_err(|source| DatabaseError::CreateDir {
            path: parent.display().to_string(),
            source,
        })?;
    }
    let url = if query.split('&').any(|pair| pair.starts_with("mode=")) {
        url.to_owned()
    } else if query.is_empty() {
        format!("{url}?mode=rwc")
    } else {
        format!("{url}&mode=rwc")
    };
    Ok((url, path.to_owned()))
}

/// The sqlx pool for `url`: on SQLite, with WAL, a busy timeout, foreign keys and the chosen
/// `synchronous` on every connection (and the file's path); on Postgres, a bounded wait.
async fn pool_for(
    url: &str,
    backend: Backend,
    options: &DbOptions,
) -> Result<(AnyPool, Option<String>), DatabaseError> {
    let connect_error = |source| DatabaseError::Connect { backend, source };
    let synchronous = options.sqlite_sync.pragma();
    let mut sqlite_file = None;
    let pool = match backend {
        Backend::Sqlite => {
            let (url, path) = prepare_sqlite_url(url)?;
            sqlite_file = Some(path);
            let connect = AnyConnectOptions::from_str(&url).map_err(connect_error)?;
            AnyPoolOptions::new()
                .max_connections(options.max_connections.unwrap_or(8))
                // A connection to a file does not go stale: no ping before each use (it
                // is a round trip to the connection's thread).
                .test_before_acquire(false)
                .after_connect(move |conn, _meta| {
                    Box::pin(async move {
                        // WAL lets readers run beside the one writer; the busy timeout makes a
                        // second writer wait for the lock instead of failing at once.
                        conn.execute("PRAGMA journal_mode = WAL").await?;
                        conn.execute("PRAGMA busy_timeout = 10000").await?;
                        conn.execute("PRAGMA foreign_keys = ON").await?;
                        conn.execute(format!("PRAGMA synchronous = {synchronous}").as_str())
                            .await?;
                        Ok(())
                    })
                })
                .connect_with(connect)
                .await
                .map_err(connect_error)?
        }
        Backend::Postgres => {
            let connect = AnyConnectOptions::from_str(url).map_err(connect_error)?;
            AnyPoolOptions::new()
                .max_connections(options.max_connections.unwrap_or(POSTGRES_CONNECTIONS))
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(connect)
                .await
                .map_err(connect_error)?
        }
    };
    Ok((pool, sqlite_file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nrllm_core::run_store::RunReader;

    #[test]
    fn the_backend_follows_the_url_scheme() {
        assert_eq!(Backend::from_url("sqlite:data/x.db"), Some(Backend::Sqlite));
        assert_eq!(
            Backend::from_url("postgres://u@h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(
            Backend::from_url("postgresql://u@h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(Backend::from_url("mysql://u@h/db"), None);
    }

    #[tokio::test]
    async fn an_unsupported_url_names_only_its_scheme() {
        let err = Database::connect("mysql://user:secret@host/db")
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("`mysql:`"), "{text}");
        assert!(!text.contains("secret"), "{text}");
    }

    #[tokio::test]
    async fn an_in_memory_sqlite_database_is_refused_with_a_reason() {
        for url in ["sqlite::memory:", "sqlite:", "sqlite:file.db?mode=memory"] {
            let err = Database::connect(url).await.unwrap_err();
            assert!(matches!(err, DatabaseError::InMemory), "{url}: {err}");
            assert!(err.to_string().contains("name a file"));
        }
    }

    #[tokio::test]
    async fn a_new_sqlite_file_and_its_folder_are_created_and_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/folder/run.db");
        let db = Database::connect(&format!("sqlite:{}", path.display()))
            .await
            .unwrap();
        assert!(path.exists());
        let (mode,): (String,) = sqlx::query_as("PRAGMA journal_mode")
            .fetch_one(db.pool())
            .await
            .unwrap();
        assert_eq!(mode.to_lowercase(), "wal");
        let (tables,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'agent_run'",
        )
        .fetch_one(db.pool())
        .await
        .unwrap();
        assert_eq!(tables, 1);
    }

    /// Migration 18 builds the effect table again (without the unique index on the key): a file
    /// written before it keeps every effect, done or not, and the primary key still refuses a
    /// call dispatched twice.
    #[tokio::test]
    async fn effects_written_before_the_effect_table_was_rebuilt_are_kept() {
        use nrllm_core::transcript::ToolOutcome;
        use uuid::Uuid;

        let dir = tempfile::tempdir().unwrap();
        let earlier = dir.path().join("migrations");
        std::fs::create_dir(&earlier).unwrap();
        let all = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/sqlite");
        for entry in std::fs::read_dir(&all).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            if name.as_str() < "20261130000018" {
                std::fs::copy(&path, earlier.join(&name)).unwrap();
            }
        }
        let path = dir.path().join("old.db");
        let url = format!("sqlite:{}?mode=rwc", path.display());
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::migrate::Migrator::new(earlier.as_path())
            .await
            .unwrap()
            .run(&pool)
            .await
            .unwrap();
        let run = Uuid::now_v7();
        for (call, result) in [("c1", Some("written")), ("c2", None)] {
            sqlx::query(
                "INSERT INTO agent_run_effect (run_id, round, call_id, tool, arguments, \
                 effect_key, dispatched_at_ms, result, outcome, completed_at_ms) \
                 VALUES (?, 1, ?, 'write_note', '{}', ?, 5, ?, ?, ?)",
            )
            .bind(run.to_string())
            .bind(call)
            .bind(format!("{run}/1/{call}"))
            .bind(result)
            .bind(result.map(|_| "ok"))
            .bind(result.map(|_| 6))
            .execute(&pool)
            .await
            .unwrap();
        }
        pool.close().await;

        let db = Database::connect(&format!("sqlite:{}", path.display()))
            .await
            .unwrap();
        let (applied, known) = db.migrations().await.unwrap();
        assert_eq!(applied, known);
        let effects = crate::SqlRunStore::new(db.clone())
            .effects(run)
            .await
            .unwrap();
        let kept: Vec<_> = effects
            .iter()
            .map(|e| (e.call_id.as_str(), e.effect_key.clone(), e.result.clone()))
            .collect();
        assert_eq!(
            kept,
            [
                (
                    "c1",
                    format!("{run}/1/c1"),
                    Some(("written".to_owned(), ToolOutcome::Ok))
                ),
                ("c2", format!("{run}/1/c2"), None),
            ]
        );
        let again = sqlx::query(
            "INSERT INTO agent_run_effect (run_id, round, call_id, tool, arguments, effect_key, \
             dispatched_at_ms) VALUES ($1, 1, 'c1', 'write_note', '{}', 'k', 7)",
        )
        .bind(run.to_string())
        .execute(db.pool())
        .await;
        assert!(again.is_err(), "a call dispatched twice was stored twice");
        let (indexes,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' \
             AND tbl_name = 'agent_run_effect'",
        )
        .fetch_one(db.pool())
        .await
        .unwrap();
        assert_eq!(indexes, 1, "only the primary key's index is left");
    }
}
