//! The SQLite file, reached directly (rusqlite) where sqlx would cost a trip to a connection's
//! thread per statement — some 25 trips an approve cycle, and most of the cycle's time went to
//! the scheduler (BENCHMARKS.md, issue #19).
//!
//! - [`Writer`]: the write connection carries out each [`Transition`] whole — `BEGIN
//!   IMMEDIATE`, the fence, the steps, the rest, `COMMIT` — with statements it prepared once.
//!   A thread of its own holds it, and the caller waits for one reply; the transitions that
//!   queued meanwhile go together in its next transaction, each under a savepoint of its own
//!   (one that fails is rolled back alone), so that they share one commit and one sync of the
//!   log — group commit. When no other writer of the process is under way, the caller's thread
//!   does it instead: a commit is some tens of microseconds of work, less than handing it to
//!   another thread and back — at `synchronous=NORMAL` always, at `FULL` (where it also waits
//!   for the flush) only on a multi-threaded runtime, inside `block_in_place`, so that the
//!   runtime's other tasks go on on another thread. Unless another process holds the file's
//!   write lock: then the writer thread waits for it, not the caller. Either way it takes the
//!   process's write turn ([`crate::db::Database::write_turn`]), so that it and the writes still
//!   made through sqlx take turns in order rather than meeting in SQLite's sleeping busy handler.
//! - The write connection opens the file through [`crate::wal_writes`], which writes each
//!   commit's log frames in one write where SQLite's own layer makes two a frame.
//! - A checkpointer thread copies the write-ahead log into the database file beside the writer
//!   (`PRAGMA wal_checkpoint(PASSIVE)` after commits), so that no commit waits for that copy and
//!   its `fsync`s — SQLite would otherwise have the committing connection do it every 1,000
//!   pages, which was most of a cycle's p99.
//! - The point reads of the hot path (a run by id, its rules) run on the caller's thread: on the
//!   write connection when no writer of the process is under way ([`Writer::query_if_idle`]: its
//!   page cache holds what the process last wrote), else on an idle read-only connection
//!   ([`Readers`]), whose page cache starts over after each commit of another connection. Such a
//!   read takes microseconds; a trip to another thread and back costs more than the read. Pages
//!   and scans stay on sqlx's pool.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nrllm_core::failpoint;
use nrllm_core::run_store::StoreError;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::transition::{Row, Statement, Transition, Value};

/// How hard SQLite syncs commits to disk. `Full` survives power loss; `Normal` (with WAL) survives
/// a crash of the process but may lose the last commits on power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SqliteSync {
    #[default]
    Full,
    Normal,
}

impl SqliteSync {
    /// Its value of SQLite's `synchronous` pragma.
    pub(crate) fn pragma(self) -> &'static str {
        match self {
            SqliteSync::Full => "FULL",
            SqliteSync::Normal => "NORMAL",
        }
    }
}

/// Where a transition's outcome goes.
type Reply = tokio::sync::oneshot::Sender<Result<Option<Row>, StoreError>>;

/// A transition waiting for the writer thread, and where its outcome goes.
struct Job {
    transition: Transition,
    reply: Reply,
}

/// Transitions the writer thread commits together at most.
const MAX_BATCH: usize = 64;

/// The write connection, shared by the caller's thread and the writer thread (one at a time:
/// both hold the process's write turn first).
type Shared = Arc<Mutex<Conn>>;

/// A connection and what it learned of the statements it ran.
#[derive(Debug)]
struct Conn {
    db: Connection,
    shapes: Shapes,
}

impl Conn {
    fn new(db: Connection) -> Conn {
        Conn {
            db,
            shapes: Shapes::default(),
        }
    }
}

/// What binding a statement and reading its rows needs of its SQL text: the argument each of
/// SQLite's parameters takes (SQLite numbers `$n` parameters in the order they first appear,
/// not by `n`) and the names of the columns it returns. Read once a connection: each run of a
/// statement read every parameter's and column's name from SQLite again, some 280 names an
/// approve cycle (BENCHMARKS.md). A statement's columns change only with the schema, which
/// stays as the migrations left it while the store is open.
#[derive(Debug)]
struct Shape {
    /// For SQLite's parameter `i + 1`, the index of its value in [`Statement::args`].
    args: Box<[usize]>,
    columns: Arc<[String]>,
}

impl Shape {
    fn read(prepared: &rusqlite::Statement<'_>) -> Result<Shape, StoreError> {
        let args = (1..=prepared.parameter_count())
            .map(|index| {
                prepared
                    .parameter_name(index)
                    .and_then(|name| name.strip_prefix('$'))
                    .and_then(|n| n.parse::<usize>().ok())
                    .and_then(|n| n.checked_sub(1))
                    .ok_or_else(|| {
                        StoreError::Backend(
                            format!("parameter {index} of a statement is not written `$n`").into(),
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        let columns: Vec<String> = prepared
            .column_names()
            .into_iter()
            .map(str::to_owned)
            .collect();
        Ok(Shape {
            args,
            columns: columns.into(),
        })
    }
}

/// A connection's statements' shapes, by SQL text (through a fast hash: the texts are long).
#[derive(Debug, Default)]
struct Shapes(foldhash::HashMap<Box<str>, Arc<Shape>>);

impl Shapes {
    fn of(
        &mut self,
        sql: &str,
        prepared: &rusqlite::Statement<'_>,
    ) -> Result<Arc<Shape>, StoreError> {
        if let Some(shape) = self.0.get(sql) {
            return Ok(Arc::clone(shape));
        }
        let shape = Arc::new(Shape::read(prepared)?);
        // As many as the connection keeps statements prepared: a text made with values in it
        // would otherwise grow the map without end.
        if self.0.len() >= PREPARED {
            self.0.clear();
        }
        self.0.insert(sql.into(), Arc::clone(&shape));
        Ok(shape)
    }
}

/// How long a connection waits for a lock another process holds.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Statements each connection keeps prepared (the multi-row step insert has one per size).
const PREPARED: usize = 256;

/// The writer checkpoints by itself only if the log grows this long (pages) — if the
/// checkpointer cannot keep up, say because readers hold old snapshots.
const WRITER_CHECKPOINT_PAGES: u32 = 10_000;

/// How long the checkpointer waits after a checkpoint before the next, so that commits coming
/// in a stream are copied together.
const CHECKPOINT_PAUSE: Duration = Duration::from_millis(20);

/// A database error from a direct connection, as the store reports it.
fn sqlite(err: rusqlite::Error) -> StoreError {
    StoreError::Backend(Box::new(err))
}

/// The write connection and its thread. The thread ends, closing the connection, when the
/// last handle is dropped.
#[derive(Debug)]
pub(crate) struct Writer {
    conn: Shared,
    /// Whether a commit waits for the disk (then the caller's thread commits only where the
    /// runtime can lend its other tasks to another thread meanwhile).
    sync: SqliteSync,
    turn: Arc<tokio::sync::Mutex<()>>,
    jobs: mpsc::Sender<Job>,
    wake: mpsc::SyncSender<()>,
    /// Transitions the caller's thread committed, for the tests of which path a commit takes.
    #[cfg(test)]
    inline_commits: std::sync::atomic::AtomicUsize,
    /// Point reads made on the write connection, for the test of which connection reads.
    #[cfg(test)]
    writer_reads: std::sync::atomic::AtomicUsize,
}

impl Writer {
    /// Opens the SQLite file at `path` (already created and migrated) for writing, with the
    /// pool's settings, and starts the thread.
    pub(crate) fn open(
        path: &Path,
        sync: SqliteSync,
        turn: Arc<tokio::sync::Mutex<()>>,
    ) -> Result<Writer, Box<dyn std::error::Error + Send + Sync>> {
        let synchronous = sync.pragma();
        crate::wal_writes::register()?;
        let conn = Connection::open_with_flags_and_vfs(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            crate::wal_writes::NAME,
        )?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.pragma_update(None, "synchronous", synchronous)?;
        conn.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES)?;
        conn.set_prepared_statement_cache_capacity(PREPARED);
        let conn: Shared = Arc::new(Mutex::new(Conn::new(conn)));
        let wake = checkpointer(path, synchronous)?;
        let (jobs, inbox) = mpsc::channel::<Job>();
        let thread_conn = Arc::clone(&conn);
        let thread_turn = Arc::clone(&turn);
        let thread_wake = wake.clone();
        std::thread::Builder::new()
            .name("nrllm-sqlite-writer".into())
            .spawn(move || {
                while let Ok(first) = inbox.recv() {
                    let _turn = thread_turn.blocking_lock();
                    // What queued meanwhile commits with it: one sync of the log for all.
                    let mut batch = vec![first];
                    batch.extend(inbox.try_iter().take(MAX_BATCH - 1));
                    let mut conn = locked(&thread_conn);
                    // A panic (a bug) fails that batch — its transaction rolls back as it
                    // unwinds and its callers hear the writer stopped mid-write — not every
                    // write after it.
                    let done =
                        std::panic::catch_unwind(AssertUnwindSafe(|| together(&mut conn, batch)));
                    if done.is_err() {
                        tracing::error!("a transition panicked on the SQLite writer thread");
                    }
                    checkpoint_due(&thread_wake);
                }
            })?;
        Ok(Writer {
            conn,
            sync,
            turn,
            jobs,
            wake,
            #[cfg(test)]
            inline_commits: std::sync::atomic::AtomicUsize::new(0),
            #[cfg(test)]
            writer_reads: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// Whether the caller's thread may commit by itself: at `NORMAL` a commit is some tens of
    /// microseconds of work; at `FULL` it waits for the flush, which only a multi-threaded
    /// runtime can wait out on a thread of its own (`block_in_place`) — on a one-thread runtime
    /// every other task would wait too, so there the writer thread commits.
    fn inline(&self) -> bool {
        match self.sync {
            SqliteSync::Normal => true,
            SqliteSync::Full => tokio::runtime::Handle::try_current().is_ok_and(|runtime| {
                runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
            }),
        }
    }

    /// The rows `statement` returns, read on the write connection on this thread — if no
    /// writer of this process is under way; `None` otherwise (nothing was read). That
    /// connection's page cache holds what this process last wrote, where a read connection
    /// starts its cache over after every commit of another and reads each page again.
    pub(crate) fn query_if_idle(
        &self,
        statement: &Statement,
    ) -> Option<Result<Vec<Row>, StoreError>> {
        let _turn = self.turn.try_lock().ok()?;
        let mut conn = locked(&self.conn);
        #[cfg(test)]
        self.writer_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Conn { db, shapes } = &mut *conn;
        Some(rows(db, shapes, statement, usize::MAX))
    }

    /// Carries out `transition` in one transaction: the row its fence returned, or `None` (then
    /// nothing was written).
    pub(crate) async fn transact(&self, transition: Transition) -> Result<Option<Row>, StoreError> {
        // Inline only when no other writer of this process is under way: under load the
        // writer thread commits what queued together.
        let turn = self.inline().then(|| self.turn.try_lock().ok()).flatten();
        let transition = match turn {
            Some(_turn) => {
                let mut conn = locked(&self.conn);
                let attempt = match self.sync {
                    SqliteSync::Normal => carry_out_now(&mut conn, transition),
                    // The commit waits for the flush: the runtime hands this thread's other
                    // tasks to another thread meanwhile.
                    SqliteSync::Full => {
                        tokio::task::block_in_place(|| carry_out_now(&mut conn, transition))
                    }
                };
                match attempt {
                    Attempt::Done(done) => {
                        checkpoint_due(&self.wake);
                        #[cfg(test)]
                        self.inline_commits
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return done;
                    }
                    // Another process holds the file's write lock: the thread waits for it.
                    Attempt::Busy(transition) => transition,
                }
            }
            None => transition,
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Job { transition, reply })
            .map_err(|_| StoreError::Backend("the SQLite writer thread has stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Backend("the SQLite writer thread stopped mid-write".into()))?
    }
}

/// The write connection. One that a panicking transition left poisoned is still sound: the
/// transaction rolled back as it unwound.
fn locked(conn: &Mutex<Conn>) -> std::sync::MutexGuard<'_, Conn> {
    conn.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A checkpoint is due (if one is already, this adds nothing).
fn checkpoint_due(wake: &mpsc::SyncSender<()>) {
    let _ = wake.try_send(());
}

/// Starts the thread that checkpoints the log of the file at `path` whenever it is woken; it
/// ends when the writer does (the sender is dropped).
fn checkpointer(
    path: &Path,
    synchronous: &'static str,
) -> Result<mpsc::SyncSender<()>, Box<dyn std::error::Error + Send + Sync>> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "synchronous", synchronous)?;
    let (wake, woken) = mpsc::sync_channel::<()>(1);
    std::thread::Builder::new()
        .name("nrllm-sqlite-checkpoint".into())
        .spawn(move || {
            while woken.recv().is_ok() {
                // PASSIVE: copies what no reader still needs, never blocking the writer.
                let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                    row.get::<_, i64>(0)
                });
                if let Err(err) = done {
                    tracing::warn!(error = %err, "a checkpoint of the SQLite log failed");
                }
                std::thread::sleep(CHECKPOINT_PAUSE);
            }
        })?;
    Ok(wake)
}

/// Carries out `batch` in one transaction, each transition under a savepoint of its own: one
/// whose fence matches nothing or that fails is rolled back alone, the others commit together —
/// one sync of the log at `FULL` for all of them. Each caller hears its outcome once the commit
/// did (or that it failed: then nothing of the batch was written).
fn together(conn: &mut Conn, batch: Vec<Job>) {
    let fail_all = |replies: Vec<Reply>, why: &str| {
        for reply in replies {
            let _ = reply.send(Err(StoreError::Backend(why.to_owned().into())));
        }
    };
    let (transitions, replies): (Vec<_>, Vec<_>) = batch
        .into_iter()
        .map(|job| (job.transition, job.reply))
        .unzip();
    let Conn { db, shapes } = conn;
    let mut tx = match db.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(err) => {
            tracing::error!(error = %err, "an SQLite write transaction could not begin");
            return fail_all(
                replies,
                "the SQLite file stayed locked or could not be written",
            );
        }
    };
    let mut outcomes = Vec::with_capacity(transitions.len());
    for transition in transitions {
        let outcome = tx.savepoint().map_err(sqlite).and_then(|savepoint| {
            let written = write(&savepoint, shapes, transition)?;
            if written.is_some() {
                savepoint.commit().map_err(sqlite)?;
            }
            Ok(written)
        });
        // Some errors (a full disk, an I/O error) end the whole transaction, not only the
        // savepoint: nothing of the batch is kept then.
        if tx.is_autocommit() {
            tracing::error!("an SQLite write transaction ended under a failed transition");
            return fail_all(replies, "the SQLite file could not be written");
        }
        outcomes.push(outcome);
    }
    if let Err(err) = tx.commit() {
        tracing::error!(error = %err, "an SQLite commit failed");
        return fail_all(replies, "the SQLite commit failed");
    }
    for (reply, outcome) in replies.into_iter().zip(outcomes) {
        let _ = reply.send(outcome);
    }
}

/// What a transaction on the write connection came to.
enum Attempt {
    Done(Result<Option<Row>, StoreError>),
    /// Another process holds the file's write lock: nothing was done.
    Busy(Transition),
}

/// One transaction on the write connection if the file's write lock is free now (no waiting
/// for it). Any error rolls it back (the transaction's drop). The connection then waits for
/// locks again as it does at rest — for the writer thread's transactions and the point reads.
fn carry_out_now(conn: &mut Conn, transition: Transition) -> Attempt {
    if let Err(err) = conn.db.busy_timeout(Duration::ZERO) {
        return Attempt::Done(Err(sqlite(err)));
    }
    let attempt = begin_now(conn, transition);
    if let Err(err) = conn.db.busy_timeout(BUSY_TIMEOUT) {
        tracing::error!(error = %err, "the SQLite write connection refused its busy timeout");
    }
    attempt
}

/// [`carry_out_now`] on a connection that does not wait for locks.
fn begin_now(conn: &mut Conn, transition: Transition) -> Attempt {
    let Conn { db, shapes } = conn;
    let tx = match Immediate::begin(db) {
        Ok(tx) => tx,
        Err(rusqlite::Error::SqliteFailure(err, _))
            if err.code == rusqlite::ErrorCode::DatabaseBusy =>
        {
            return Attempt::Busy(transition)
        }
        Err(err) => return Attempt::Done(Err(sqlite(err))),
    };
    Attempt::Done(write(&tx, shapes, transition).and_then(|written| {
        tx.commit().map_err(sqlite)?;
        Ok(written)
    }))
}

/// A write transaction begun and committed by statements the connection keeps prepared, where
/// rusqlite's `Transaction` parses `BEGIN` and `COMMIT` again each time (two of a commit's
/// parses); dropped uncommitted, it rolls back.
struct Immediate<'c> {
    conn: &'c Connection,
    committed: bool,
}

impl<'c> Immediate<'c> {
    fn begin(conn: &'c Connection) -> rusqlite::Result<Immediate<'c>> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Immediate {
            conn,
            committed: false,
        })
    }

    fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.committed = true;
        Ok(())
    }
}

impl std::ops::Deref for Immediate<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Immediate<'_> {
    fn drop(&mut self) {
        // Some errors (a full disk, say) end the transaction by themselves.
        if !self.committed && !self.conn.is_autocommit() {
            if let Err(err) = self.conn.execute_batch("ROLLBACK") {
                tracing::error!(error = %err, "an SQLite write transaction could not be rolled back");
            }
        }
    }
}

/// `transition`'s statements, in a transaction open on `conn`, up to its crash point before the
/// commit: the row its fence returned, or `None` (then nothing was written).
fn write(
    conn: &Connection,
    shapes: &mut Shapes,
    transition: Transition,
) -> Result<Option<Row>, StoreError> {
    let Some(row) = rows(conn, shapes, &transition.fence, 1)?.pop() else {
        return Ok(None);
    };
    let (statements, point) = transition.follow(&row)?;
    for statement in &statements {
        rows(conn, shapes, statement, 0)?;
    }
    if let Some(point) = point {
        failpoint::reach(point);
    }
    Ok(Some(row))
}

/// Read-only connections to the file, used one at a time on the caller's thread.
#[derive(Debug)]
pub(crate) struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Conn>>,
}

/// Idle read connections kept open.
const IDLE_READERS: usize = 8;

impl Readers {
    pub(crate) fn new(path: &Path) -> Readers {
        Readers {
            path: path.to_owned(),
            idle: Mutex::default(),
        }
    }

    /// The rows `statement` returns, read on this thread.
    pub(crate) fn query(&self, statement: &Statement) -> Result<Vec<Row>, StoreError> {
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let mut conn = match idle {
            Some(conn) => conn,
            None => Conn::new(self.open().map_err(sqlite)?),
        };
        let found = rows(&conn.db, &mut conn.shapes, statement, usize::MAX);
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < IDLE_READERS {
                idle.push(conn);
            }
        }
        found
    }

    fn open(&self) -> Result<Connection, rusqlite::Error> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.set_prepared_statement_cache_capacity(PREPARED);
        Ok(conn)
    }
}

/// Runs `statement` to its end; the first `keep` rows it returned.
fn rows(
    conn: &Connection,
    shapes: &mut Shapes,
    statement: &Statement,
    keep: usize,
) -> Result<Vec<Row>, StoreError> {
    let mut prepared = conn.prepare_cached(&statement.sql).map_err(sqlite)?;
    let shape = shapes.of(&statement.sql, &prepared)?;
    for (index, &arg) in shape.args.iter().enumerate() {
        let value = statement.args.get(arg).ok_or_else(|| {
            StoreError::Backend(format!("no value for parameter ${}", arg + 1).into())
        })?;
        match value {
            Value::Int(v) => prepared.raw_bind_parameter(index + 1, v),
            Value::Text(v) => prepared.raw_bind_parameter(index + 1, v),
        }
        .map_err(sqlite)?;
    }
    let columns = &shape.columns;
    let mut found = Vec::new();
    let mut cursor = prepared.raw_query();
    while let Some(row) = cursor.next().map_err(sqlite)? {
        if found.len() >= keep {
            continue;
        }
        let mut values = Vec::with_capacity(columns.len());
        for (i, name) in columns.iter().enumerate() {
            let value = match row.get_ref(i).map_err(sqlite)? {
                ValueRef::Null => Value::Text(None),
                ValueRef::Integer(n) => Value::Int(Some(n)),
                ValueRef::Text(bytes) => Value::Text(Some(
                    std::str::from_utf8(bytes)
                        .map_err(|err| StoreError::Corrupt(format!("column `{name}`: {err}")))?
                        .to_owned(),
                )),
                ValueRef::Real(_) | ValueRef::Blob(_) => {
                    return Err(StoreError::Corrupt(format!(
                        "column `{name}` has a type the store does not read"
                    )))
                }
            };
            values.push(value);
        }
        found.push(Row::new(Arc::clone(columns), values));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use super::{SqliteSync, BUSY_TIMEOUT};
    use crate::transition::scratch::{self, bump};
    use crate::transition::{Cells, Row, Statement};

    #[tokio::test]
    async fn transitions_queued_together_commit_together_and_fail_alone() {
        let test = crate::testing::sqlite().await;
        let db = &test.db;
        scratch::table(db, "batch_t", &["a", "b", "c", "d"]).await;
        let mut failing = bump("batch_t", "c", 1);
        failing
            .then
            .push(Statement::new("INSERT INTO batch_t (id, version) VALUES ($1, 0)").bind("a"));
        // While this test holds the process's write turn, the writer thread waits for it with
        // the first transition and the others queue behind: then it takes them all at once.
        let turn = db.write_turn().await;
        let writes: Vec<_> = [
            bump("batch_t", "a", 1),
            bump("batch_t", "b", 7),
            failing,
            bump("batch_t", "d", 1),
        ]
        .into_iter()
        .map(|transition| {
            let db = db.clone();
            tokio::spawn(async move { db.transact(transition).await })
        })
        .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(turn);
        let mut outcomes = Vec::new();
        for write in writes {
            outcomes.push(write.await.unwrap());
        }
        let version = |outcome: &Result<Option<Row>, _>| {
            outcome
                .as_ref()
                .ok()
                .and_then(Option::as_ref)
                .map(|row| row.required_int("version").unwrap())
        };
        assert_eq!(version(&outcomes[0]), Some(2), "a committed");
        assert!(matches!(outcomes[1], Ok(None)), "b's fence matched nothing");
        assert!(outcomes[2].is_err(), "c failed");
        assert_eq!(version(&outcomes[3]), Some(2), "d committed");
        let mut stored = Vec::new();
        for id in ["a", "b", "c", "d"] {
            stored.push(scratch::version(db, "batch_t", id).await);
        }
        assert_eq!(
            stored,
            [2, 1, 1, 2],
            "c's bump went back with its failing statement, nothing else did"
        );
        let rows = db
            .query(&Statement::new("SELECT id FROM batch_t"))
            .await
            .unwrap();
        assert_eq!(rows.len(), 4, "c's failing insert left nothing");
        test.cleanup().await;
    }

    /// At `FULL` the caller's thread commits only on a multi-threaded runtime, which can lend
    /// its other tasks to another thread while the commit waits for the flush; on a one-thread
    /// runtime the writer thread does (`block_in_place` would panic there).
    #[test]
    fn at_full_the_callers_thread_commits_only_on_a_multi_threaded_runtime() {
        for (multi_threaded, inline) in [(true, 3), (false, 0)] {
            let runtime = if multi_threaded {
                tokio::runtime::Builder::new_multi_thread()
            } else {
                tokio::runtime::Builder::new_current_thread()
            }
            .enable_all()
            .build()
            .unwrap();
            runtime.block_on(async {
                let test = crate::testing::sqlite_with(SqliteSync::Full).await;
                let db = &test.db;
                scratch::table(db, "full_t", &["a"]).await;
                let writer = db.sqlite_writer().unwrap();
                let before = writer.inline_commits.load(Ordering::Relaxed);
                for version in 1..=3 {
                    let row = db.transact(bump("full_t", "a", version)).await.unwrap();
                    assert!(row.is_some(), "bump {version} committed");
                }
                assert_eq!(scratch::version(db, "full_t", "a").await, 4);
                assert_eq!(
                    writer.inline_commits.load(Ordering::Relaxed) - before,
                    inline,
                    "multi-threaded: {multi_threaded}"
                );
                test.cleanup().await;
            });
        }
    }

    /// A point read goes to the write connection, whose page cache is warm, when no writer of
    /// the process is under way; while one is, to a read connection — without waiting for it.
    #[tokio::test]
    async fn point_reads_use_the_write_connection_only_while_no_writer_is_under_way() {
        let test = crate::testing::sqlite().await;
        let db = &test.db;
        scratch::table(db, "read_t", &["a"]).await;
        let writer = db.sqlite_writer().unwrap();
        let read = Statement::new("SELECT version FROM read_t WHERE id = $1").bind("a");
        let version = |rows: Vec<Row>| rows[0].required_int("version").unwrap();
        db.transact(bump("read_t", "a", 1)).await.unwrap();
        // At FULL on this one-thread runtime the writer thread committed, and it may still hold
        // the write turn for a moment after it answered.
        drop(db.write_turn().await);
        let before = writer.writer_reads.load(Ordering::Relaxed);
        assert_eq!(version(db.query(&read).await.unwrap()), 2);
        assert_eq!(
            writer.writer_reads.load(Ordering::Relaxed) - before,
            1,
            "read on the write connection"
        );
        let turn = db.write_turn().await;
        let rows = tokio::time::timeout(Duration::from_secs(2), db.query(&read))
            .await
            .expect("the read did not wait for the writer")
            .unwrap();
        assert_eq!(version(rows), 2);
        assert_eq!(
            writer.writer_reads.load(Ordering::Relaxed) - before,
            1,
            "read on a read connection while the write turn was taken"
        );
        drop(turn);
        test.cleanup().await;
    }

    /// Each run of a statement binds its values by their `$n` numbers and names its columns as
    /// the first run did — read from the write connection, from a read connection, and after
    /// more texts than a connection keeps have come and gone.
    #[tokio::test]
    async fn statements_bind_by_number_and_name_their_columns_on_every_run() {
        let test = crate::testing::sqlite().await;
        let db = &test.db;
        // `$2` appears first: SQLite numbers it parameter 1.
        let swapped = |n: i64| {
            Statement::new(format!("SELECT $2 AS second, $1 AS first, {n} AS n"))
                .bind(n)
                .bind(format!("text {n}"))
        };
        let check = |rows: Vec<Row>, n: i64| {
            assert_eq!(rows.len(), 1);
            assert_eq!(rows[0].required_int("first").unwrap(), n);
            assert_eq!(
                rows[0].required_text("second").unwrap(),
                format!("text {n}")
            );
            assert_eq!(rows[0].required_int("n").unwrap(), n);
        };
        for _ in 0..2 {
            check(db.query(&swapped(7)).await.unwrap(), 7);
            let turn = db.write_turn().await;
            check(db.query(&swapped(7)).await.unwrap(), 7);
            drop(turn);
        }
        for n in 0..(super::PREPARED as i64 + 10) {
            check(db.query(&swapped(n)).await.unwrap(), n);
        }
        check(db.query(&swapped(7)).await.unwrap(), 7);
        // A value missing for a number the text uses is a clear error, not a wrong binding.
        let short = Statement::new("SELECT $2 AS second, $1 AS first").bind(1);
        let err = db.query(&short).await.unwrap_err().to_string();
        assert!(err.contains("no value for parameter $2"), "{err}");
        test.cleanup().await;
    }

    /// A commit on the caller's thread, which tries the file's lock without waiting, leaves the
    /// write connection waiting for locks again — for the writer thread's transactions and the
    /// point reads made on it.
    #[tokio::test]
    async fn a_commit_on_the_callers_thread_leaves_the_write_connection_waiting_for_locks() {
        let test = crate::testing::sqlite_with(SqliteSync::Normal).await;
        let db = &test.db;
        scratch::table(db, "timeout_t", &["a"]).await;
        let writer = db.sqlite_writer().unwrap();
        let before = writer.inline_commits.load(Ordering::Relaxed);
        db.transact(bump("timeout_t", "a", 1)).await.unwrap();
        assert_eq!(
            writer.inline_commits.load(Ordering::Relaxed) - before,
            1,
            "committed on the caller's thread"
        );
        let rows = writer
            .query_if_idle(&Statement::new("PRAGMA busy_timeout"))
            .expect("no writer under way")
            .unwrap();
        let waits = rows[0].values[0].clone();
        assert_eq!(
            waits,
            crate::transition::Value::Int(Some(BUSY_TIMEOUT.as_millis() as i64))
        );
        test.cleanup().await;
    }

    /// On this test's runtime — one thread — a caller that waited for the lock itself would
    /// stop the timer below until SQLite gave up.
    #[tokio::test]
    async fn a_write_lock_held_elsewhere_is_waited_for_off_the_callers_thread() {
        for sync in [SqliteSync::Normal, SqliteSync::Full] {
            let test = crate::testing::sqlite_with(sync).await;
            let db = &test.db;
            scratch::table(db, "locked_t", &["a"]).await;
            // Another connection, as another process would, holds the file's write lock.
            let path = test.url.trim_start_matches("sqlite:");
            let other = rusqlite::Connection::open(path).unwrap();
            other.execute_batch("BEGIN IMMEDIATE").unwrap();
            let write = tokio::spawn({
                let db = db.clone();
                async move { db.transact(bump("locked_t", "a", 1)).await }
            });
            let asleep = std::time::Instant::now();
            tokio::time::sleep(Duration::from_millis(300)).await;
            // Well short of the 10 s SQLite would wait for the lock.
            assert!(
                asleep.elapsed() < Duration::from_secs(5),
                "{sync:?}: the runtime's thread was held while the write waited"
            );
            assert!(
                !write.is_finished(),
                "{sync:?}: the write waits for the lock"
            );
            other.execute_batch("COMMIT").unwrap();
            let row = write
                .await
                .unwrap()
                .unwrap_or_else(|err| panic!("{sync:?}: {err}"))
                .expect("the fence matched");
            assert_eq!(row.required_int("version").unwrap(), 2, "{sync:?}");
            test.cleanup().await;
        }
    }
}
