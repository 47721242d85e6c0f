//! The one writer: transitions queued together commit together, each commit's log frames
//! gathered into one write, and the checkpoints between them.

use super::conn::*;
use super::lock::locked;
use super::readers::*;
use crate::transition::{Row, Statement, Transition};
use nrllm_core::failpoint;
use nrllm_core::run_store::StoreError;
use rusqlite::{Connection, OpenFlags};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The writer checkpoints by itself only if the log grows this long (pages) — if the
/// checkpointer cannot keep up, say because readers hold old snapshots.
pub(super) const WRITER_CHECKPOINT_PAGES: u32 = 10_000;

/// How long the checkpointer waits after a checkpoint before the next, so that commits coming
/// in a stream are copied together.
pub(super) const CHECKPOINT_PAUSE: Duration = Duration::from_millis(20);

/// The write connection and its thread. The thread ends, closing the connection, when the
/// last handle is dropped.
#[derive(Debug)]
pub(crate) struct Writer {
    pub(super) conn: Shared,
    /// Whether a commit waits for the disk (then the caller's thread commits only where the
    /// runtime can lend its other tasks to another thread meanwhile).
    pub(super) sync: SqliteSync,
    pub(super) turn: Arc<tokio::sync::Mutex<()>>,
    pub(super) jobs: mpsc::Sender<Job>,
    pub(super) wake: mpsc::SyncSender<()>,
    /// Transitions the caller's thread committed, for the tests of which path a commit takes.
    #[cfg(test)]
    pub(super) inline_commits: std::sync::atomic::AtomicUsize,
    /// Point reads made on the write connection, for the test of which connection reads.
    #[cfg(test)]
    pub(super) writer_reads: std::sync::atomic::AtomicUsize,
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
        let conn = Conn::new(conn);
        super::chain::register(&conn.db, &conn.chain)?;
        let conn: Shared = Arc::new(Mutex::new(conn));
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
                        // Nothing its transaction held may be committed by the next.
                        conn.fail_group("the SQLite writer stopped mid-write");
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
    pub(super) fn inline(&self) -> bool {
        match self.sync {
            SqliteSync::Normal => true,
            SqliteSync::Full => on_multi_thread_runtime(),
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
        // What a group left open holds is not committed yet.
        if conn.open.is_some() {
            return None;
        }
        #[cfg(test)]
        self.writer_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Conn { db, shapes, .. } = &mut *conn;
        Some(rows(db, shapes, statement, usize::MAX))
    }

    /// Commits the group lent transactions left open on the write connection, if any, for a
    /// writer through another connection, which the open transaction's lock would hold up.
    /// Holding the write turn.
    pub(crate) fn settle_open(&self) {
        let mut conn = locked(&self.conn);
        if conn.open.is_none() {
            return;
        }
        // A failure is logged, and the group's members hear it.
        flushing(self.sync, || drop(conn.settle()));
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
                match flushing(self.sync, || carry_out_now(&mut conn, transition)) {
                    Attempt::Done(done) => {
                        checkpoint_due(&self.wake);
                        #[cfg(test)]
                        self.inline_commits
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return done;
                    }
                    // The file's write lock is held elsewhere: the thread waits for it, or
                    // commits the group holding it with this transition.
                    Attempt::Busy(transition) => transition,
                }
            }
            None => transition,
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Job::Write { transition, reply })
            .map_err(|_| StoreError::Backend("the SQLite writer thread has stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Backend("the SQLite writer thread stopped mid-write".into()))?
    }
}

/// A checkpoint is due (if one is already, this adds nothing).
pub(super) fn checkpoint_due(wake: &mpsc::SyncSender<()>) {
    let _ = wake.try_send(());
}

/// Starts the thread that checkpoints the log of the file at `path` whenever it is woken; it
/// ends when the writer does (the sender is dropped).
pub(super) fn checkpointer(
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
/// one sync of the log at `FULL` for all of them. A group that lent transactions left open
/// ([`super::group`]) is joined, and commits with them. Each caller hears its outcome once the
/// commit did (or that it failed: then nothing of the batch was written).
pub(super) fn together(conn: &mut Conn, batch: Vec<Job>) {
    let fail_all = |replies: Vec<Reply>, why: &str| {
        for reply in replies {
            let _ = reply.send(Err(StoreError::Backend(why.to_owned().into())));
        }
    };
    let (transitions, replies): (Vec<_>, Vec<_>) = batch
        .into_iter()
        .filter_map(|job| match job {
            Job::Write { transition, reply } => Some((transition, reply)),
            Job::Settle => None,
        })
        .unzip();
    if transitions.is_empty() {
        // Only a group left open to commit (its failure is logged, and its members hear it).
        let _ = conn.settle();
        return;
    }
    if conn.joinable().is_none() {
        if let Err(err) = Immediate::begin(&conn.db).map(Immediate::keep_open) {
            tracing::error!(error = %err, "an SQLite write transaction could not begin");
            return fail_all(
                replies,
                "the SQLite file stayed locked or could not be written",
            );
        }
        conn.opened();
    }
    let mut outcomes = Vec::with_capacity(transitions.len());
    for transition in transitions {
        let Conn {
            db, shapes, chain, ..
        } = &mut *conn;
        let outcome = db.savepoint().map_err(sqlite).and_then(|savepoint| {
            let written = write(&savepoint, shapes, chain, transition)?;
            if written.is_some() {
                savepoint.commit().map_err(sqlite)?;
            }
            Ok(written)
        });
        // Some errors (a full disk, an I/O error) end the whole transaction, not only the
        // savepoint: nothing of the batch is kept then.
        if conn.db.is_autocommit() {
            tracing::error!("an SQLite write transaction ended under a failed transition");
            conn.fail_group("the SQLite file could not be written");
            return fail_all(replies, "the SQLite file could not be written");
        }
        outcomes.push(outcome);
    }
    if conn.settle().is_err() {
        return fail_all(replies, "the SQLite commit failed");
    }
    for (reply, outcome) in replies.into_iter().zip(outcomes) {
        let _ = reply.send(outcome);
    }
}

/// What a transaction on the write connection came to.
pub(super) enum Attempt {
    Done(Result<Option<Row>, StoreError>),
    /// Another process holds the file's write lock, or a group left open on the write
    /// connection does: nothing was done.
    Busy(Transition),
}

/// One transaction on the write connection if the file's write lock is free now (no waiting
/// for it). Any error rolls it back (the transaction's drop). The connection then waits for
/// locks again as it does at rest — for the writer thread's transactions and the point reads.
pub(super) fn carry_out_now(conn: &mut Conn, transition: Transition) -> Attempt {
    if conn.open.is_some() {
        return Attempt::Busy(transition);
    }
    match without_waiting(conn, |conn| begin_now(conn, transition)) {
        Ok(attempt) => attempt,
        Err(err) => Attempt::Done(Err(sqlite(err))),
    }
}

/// `work` on `conn` while it does not wait for locks (a lock taken elsewhere fails at once,
/// busy); then the connection waits for them again as it does at rest.
pub(super) fn without_waiting<T>(
    conn: &mut Conn,
    work: impl FnOnce(&mut Conn) -> T,
) -> rusqlite::Result<T> {
    conn.db.busy_timeout(Duration::ZERO)?;
    let done = work(conn);
    if let Err(err) = conn.db.busy_timeout(BUSY_TIMEOUT) {
        tracing::error!(error = %err, "the SQLite write connection refused its busy timeout");
    }
    Ok(done)
}

/// `commit`, which may wait for the flush: at `FULL` on a multi-threaded runtime inside
/// `block_in_place`, so that the runtime hands this thread's other tasks to another thread
/// meanwhile; otherwise here.
pub(super) fn flushing<T>(sync: SqliteSync, commit: impl FnOnce() -> T) -> T {
    match sync {
        SqliteSync::Full if on_multi_thread_runtime() => tokio::task::block_in_place(commit),
        _ => commit(),
    }
}

/// Whether this thread is a worker of a multi-threaded runtime: one that can lend its other
/// tasks to another thread while this one waits for a flush (`block_in_place`).
pub(super) fn on_multi_thread_runtime() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|runtime| runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// [`carry_out_now`] on a connection that does not wait for locks.
pub(super) fn begin_now(conn: &mut Conn, transition: Transition) -> Attempt {
    let Conn {
        db, shapes, chain, ..
    } = conn;
    let tx = match Immediate::begin(db) {
        Ok(tx) => tx,
        Err(rusqlite::Error::SqliteFailure(err, _))
            if err.code == rusqlite::ErrorCode::DatabaseBusy =>
        {
            return Attempt::Busy(transition)
        }
        Err(err) => return Attempt::Done(Err(sqlite(err))),
    };
    Attempt::Done(write(&tx, shapes, chain, transition).and_then(|written| {
        tx.commit().map_err(sqlite)?;
        Ok(written)
    }))
}

/// A write transaction begun and committed by statements the connection keeps prepared, where
/// rusqlite's `Transaction` parses `BEGIN` and `COMMIT` again each time (two of a commit's
/// parses); dropped uncommitted, it rolls back.
pub(super) struct Immediate<'c> {
    pub(super) conn: &'c Connection,
    pub(super) committed: bool,
}

impl<'c> Immediate<'c> {
    pub(super) fn begin(conn: &'c Connection) -> rusqlite::Result<Immediate<'c>> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Immediate {
            conn,
            committed: false,
        })
    }

    pub(super) fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.committed = true;
        Ok(())
    }

    /// Leaves the transaction open, for the caller to end.
    pub(super) fn keep_open(mut self) {
        self.committed = true;
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
/// commit: the row its fence returned, or `None` (then nothing was written). A fence that sets
/// the run's head ([`super::CHAIN_SET`]) chains the steps as it runs.
pub(super) fn write(
    conn: &Connection,
    shapes: &mut Shapes,
    chain: &super::chain::Slot,
    mut transition: Transition,
) -> Result<Option<Row>, StoreError> {
    let fence = std::mem::replace(&mut transition.fence, Statement::new(""));
    let found = super::chain::during(chain, &mut transition, || rows(conn, shapes, &fence, 1))?;
    let Some(row) = found.into_iter().next() else {
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
