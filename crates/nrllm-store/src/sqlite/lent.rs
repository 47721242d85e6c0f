//! A transaction of another part of the program (the demo site's change and its effect row, say)
//! on the write connection, statement by statement on the caller's thread, in the process's
//! write turn — where the same transaction through sqlx's pool made a trip to that connection's
//! thread and back for each statement, `BEGIN` and `COMMIT` included (BENCHMARKS.md, issue #46).
//! Its part is a savepoint in a group's transaction, committed with whatever writes follow it in
//! the turn ([`super::group`]).

use super::conn::*;
use super::lock::locked;
use super::readers::rows;
use super::writer::{checkpoint_due, flushing, without_waiting, Immediate, Writer};
use crate::transition::{Row, Statement};
use nrllm_core::run_store::StoreError;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, OwnedMutexGuard};

/// The longest pause between two tries at the file's write lock while another process holds it.
const MOST_PAUSE: Duration = Duration::from_millis(50);

/// A write transaction open on the write connection: its own part under the savepoint `lent`,
/// in a group's transaction. Dropped before it is committed, its part rolls back; then the turn
/// is given up.
pub(crate) struct SqliteTx {
    conn: Shared,
    sync: SqliteSync,
    wake: mpsc::SyncSender<()>,
    jobs: mpsc::Sender<Job>,
    turn: Arc<Mutex<()>>,
    group: Arc<Group>,
    /// Whether its part is still open (the savepoint neither released nor rolled back).
    open: bool,
    /// The write turn, while its part is open.
    held: Option<OwnedMutexGuard<()>>,
}

impl Writer {
    /// Begins a transaction on the write connection in the process's write turn `turn`. While
    /// another process holds the file's write lock it tries again after a pause (this thread
    /// never sleeps in SQLite's busy handler), for as long as the connection's busy timeout.
    pub(crate) async fn begin_lent(&self, turn: Arc<Mutex<()>>) -> Result<SqliteTx, StoreError> {
        let held = Arc::clone(&turn).lock_owned().await;
        let deadline = Instant::now() + BUSY_TIMEOUT;
        let mut pause = Duration::from_millis(1);
        let group = loop {
            match join_or_begin(&self.conn) {
                Ok(group) => break group,
                Err(rusqlite::Error::SqliteFailure(err, _))
                    if err.code == rusqlite::ErrorCode::DatabaseBusy
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MOST_PAUSE);
                }
                Err(err) => return Err(sqlite(err)),
            }
        };
        Ok(SqliteTx {
            conn: Arc::clone(&self.conn),
            sync: self.sync,
            wake: self.wake.clone(),
            jobs: self.jobs.clone(),
            turn,
            group,
            open: true,
            held: Some(held),
        })
    }
}

/// Joins the group open on the write connection, or begins one (`BEGIN IMMEDIATE`, failing at
/// once, busy, if the file's write lock is taken); then opens the part's savepoint.
fn join_or_begin(conn: &Shared) -> rusqlite::Result<Arc<Group>> {
    let mut conn = locked(conn);
    let group = match conn.joinable() {
        Some(group) => group,
        None => {
            without_waiting(&mut conn, |conn| {
                Immediate::begin(&conn.db).map(Immediate::keep_open)
            })??;
            conn.opened()
        }
    };
    let savepoint = conn
        .db
        .prepare_cached("SAVEPOINT lent")
        .and_then(|mut savepoint| savepoint.execute([]));
    if let Err(err) = savepoint {
        conn.left_group();
        return Err(err);
    }
    Ok(group)
}

impl SqliteTx {
    /// The rows `statement` returns (none for a write), run in the transaction.
    pub(crate) fn query(&mut self, statement: &Statement) -> Result<Vec<Row>, StoreError> {
        let mut conn = locked(&self.conn);
        if conn.db.is_autocommit() {
            // An earlier error (a full disk) ended the transaction by itself.
            conn.fail_group("the SQLite write transaction ended under an earlier error");
            return Err(StoreError::Backend(
                "the SQLite write transaction ended under an earlier error".into(),
            ));
        }
        let Conn { db, shapes, .. } = &mut *conn;
        rows(db, shapes, statement, usize::MAX)
    }

    /// Commits: its part is released into the group's transaction, the turn goes to whoever
    /// waits for it (they write in the same transaction), and this waits for its turn again.
    /// By then the group is committed — by the writer thread or a write through the pool — or
    /// this commits it (at `FULL`, on a multi-threaded runtime, in `block_in_place`: the commit
    /// waits for the flush while the runtime's other tasks go on on another thread). Done when
    /// the group's commit is.
    pub(crate) async fn commit(mut self) -> Result<(), StoreError> {
        {
            let mut conn = locked(&self.conn);
            if conn.db.is_autocommit() {
                drop(conn);
                return Err(self.ended());
            }
            conn.db
                .prepare_cached("RELEASE lent")
                .and_then(|mut release| release.execute([]))
                .map_err(sqlite)?;
            self.open = false;
            conn.wait_in_group();
        }
        drop(self.held.take());
        let mut waiting = Waiting {
            jobs: &self.jobs,
            done: false,
        };
        let _turn = Arc::clone(&self.turn).lock_owned().await;
        waiting.done = true;
        if let Some(outcome) = self.group.outcome() {
            return outcome;
        }
        // Only a commit or a failure ends a group: this one is still the open one.
        let mut conn = locked(&self.conn);
        let settled = flushing(self.sync, || conn.settle());
        checkpoint_due(&self.wake);
        settled
    }

    /// The group's transaction ended under an earlier error (a full disk): the group is
    /// failed, and so is this.
    fn ended(&mut self) -> StoreError {
        let why = "the SQLite write transaction ended under an earlier error";
        locked(&self.conn).fail_group(why);
        self.open = false;
        StoreError::Backend(why.into())
    }
}

impl Drop for SqliteTx {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        let mut conn = locked(&self.conn);
        if conn.db.is_autocommit() {
            conn.fail_group("the SQLite write transaction ended under an earlier error");
            return;
        }
        match conn.db.execute_batch("ROLLBACK TO lent; RELEASE lent") {
            Ok(()) => conn.left_group(),
            Err(err) => {
                tracing::error!(error = %err, "an SQLite write transaction could not be rolled back");
                conn.fail_group("the SQLite write transaction could not be rolled back");
            }
        }
    }
}

/// A member waiting for its turn to come round again. Dropped before it came (its task was),
/// the writer thread is asked to commit the group, which nobody else might come to do.
struct Waiting<'a> {
    jobs: &'a mpsc::Sender<Job>,
    done: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.jobs.send(Job::Settle);
        }
    }
}
