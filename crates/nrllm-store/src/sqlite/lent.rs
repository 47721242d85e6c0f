//! A transaction of another part of the program (the demo site's change and its effect row, say)
//! on the write connection, statement by statement on the caller's thread, in the process's
//! write turn — where the same transaction through sqlx's pool made a trip to that connection's
//! thread and back for each statement, `BEGIN` and `COMMIT` included (BENCHMARKS.md, issue #46).

use super::conn::*;
use super::readers::rows;
use super::writer::{checkpoint_due, locked, on_multi_thread_runtime, without_waiting, Writer};
use crate::transition::{Row, Statement};
use nrllm_core::run_store::StoreError;
use std::time::{Duration, Instant};
use tokio::sync::OwnedMutexGuard;

/// The longest pause between two tries at the file's write lock while another process holds it.
const MOST_PAUSE: Duration = Duration::from_millis(50);

/// A write transaction open on the write connection. Dropped before it is committed, it rolls
/// back; then the turn is given up.
pub(crate) struct SqliteTx {
    conn: Shared,
    sync: SqliteSync,
    wake: std::sync::mpsc::SyncSender<()>,
    open: bool,
    _turn: OwnedMutexGuard<()>,
}

impl Writer {
    /// Begins a transaction on the write connection in the process's write turn `turn`. While
    /// another process holds the file's write lock it tries again after a pause (this thread
    /// never sleeps in SQLite's busy handler), for as long as the connection's busy timeout.
    pub(crate) async fn begin_lent(
        &self,
        turn: OwnedMutexGuard<()>,
    ) -> Result<SqliteTx, StoreError> {
        let deadline = Instant::now() + BUSY_TIMEOUT;
        let mut pause = Duration::from_millis(1);
        loop {
            match begin_now(&self.conn) {
                Ok(()) => break,
                Err(rusqlite::Error::SqliteFailure(err, _))
                    if err.code == rusqlite::ErrorCode::DatabaseBusy
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MOST_PAUSE);
                }
                Err(err) => return Err(sqlite(err)),
            }
        }
        Ok(SqliteTx {
            conn: std::sync::Arc::clone(&self.conn),
            sync: self.sync,
            wake: self.wake.clone(),
            open: true,
            _turn: turn,
        })
    }
}

/// `BEGIN IMMEDIATE` on `conn`, failing at once (busy) if the file's write lock is taken.
fn begin_now(conn: &Shared) -> rusqlite::Result<()> {
    without_waiting(&mut locked(conn), |conn| {
        conn.db
            .prepare_cached("BEGIN IMMEDIATE")
            .and_then(|mut begin| begin.execute([]))
            .map(drop)
    })?
}

impl SqliteTx {
    /// The rows `statement` returns (none for a write), run in the transaction.
    pub(crate) fn query(&mut self, statement: &Statement) -> Result<Vec<Row>, StoreError> {
        let mut conn = locked(&self.conn);
        let Conn { db, shapes } = &mut *conn;
        if db.is_autocommit() {
            // An earlier error (a full disk) ended the transaction by itself.
            return Err(StoreError::Backend(
                "the SQLite write transaction ended under an earlier error".into(),
            ));
        }
        rows(db, shapes, statement, usize::MAX)
    }

    /// Commits (at `FULL`, on a multi-threaded runtime, in `block_in_place`: the commit waits
    /// for the flush while the runtime's other tasks go on on another thread).
    pub(crate) fn commit(mut self) -> Result<(), StoreError> {
        let commit = || {
            let conn = locked(&self.conn);
            conn.db
                .prepare_cached("COMMIT")
                .and_then(|mut commit| commit.execute([]))
        };
        let committed = match self.sync {
            SqliteSync::Full if on_multi_thread_runtime() => tokio::task::block_in_place(commit),
            _ => commit(),
        };
        committed.map_err(sqlite)?;
        self.open = false;
        checkpoint_due(&self.wake);
        Ok(())
    }
}

impl Drop for SqliteTx {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        let conn = locked(&self.conn);
        if !conn.db.is_autocommit() {
            if let Err(err) = conn.db.execute_batch("ROLLBACK") {
                tracing::error!(error = %err, "an SQLite write transaction could not be rolled back");
            }
        }
    }
}
