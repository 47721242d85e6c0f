//! Group commit for the transactions lent to other parts of the program ([`super::SqliteTx`]).
//!
//! A lent transaction (the demo site's change, the queue's take) is written statement by
//! statement on its caller's thread, so it cannot queue with the transitions for the writer
//! thread's next transaction. Committing it alone cost a flush of its own at `FULL`, where the
//! transitions share one a group (BENCHMARKS.md, issue #46). Instead, its part ends in a released
//! savepoint of a transaction left open on the write connection — a [`Group`] — and it gives up
//! the write turn and queues for it again. Whoever holds the turn next writes in the same
//! transaction, and the first of them that does not leave it open (the writer thread with its
//! transitions, a write through the pool, or the member itself when its turn comes round again)
//! commits the group: one flush for all of it. A transition that would commit on its caller's
//! thread goes to the writer thread while a group is open. A member hears its part committed
//! only when the group's commit did.

use super::conn::{sqlite, Conn, Group, Open};
use nrllm_core::run_store::StoreError;
use std::sync::Arc;

impl Conn {
    /// The group open on the connection for a writer to join, if any. One whose transaction an
    /// error ended (a full disk) is failed here, and there is none to join.
    pub(super) fn joinable(&mut self) -> Option<Arc<Group>> {
        let open = self.open.as_ref()?;
        if self.db.is_autocommit() {
            self.fail_group("the SQLite write transaction ended under an earlier error");
            return None;
        }
        Some(Arc::clone(&open.group))
    }

    /// Marks the transaction just begun on the connection as a group.
    pub(super) fn opened(&mut self) -> Arc<Group> {
        let group = Arc::new(Group::default());
        self.open = Some(Open {
            group: Arc::clone(&group),
            waiting: 0,
        });
        group
    }

    /// Commits the group open on the connection, if any, and tells its members. Holding the
    /// write turn.
    pub(super) fn settle(&mut self) -> Result<(), StoreError> {
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        let committed = self
            .db
            .prepare_cached("COMMIT")
            .and_then(|mut commit| commit.execute([]));
        match committed {
            Ok(_) => {
                #[cfg(test)]
                {
                    self.group_commits += 1;
                }
                open.group.end(Ok(()));
                Ok(())
            }
            Err(err) => {
                tracing::error!(error = %err, waiting = open.waiting, "an SQLite commit failed");
                self.roll_back_all();
                open.group.end(Err("the SQLite commit failed"));
                Err(sqlite(err))
            }
        }
    }

    /// Fails the group open on the connection, if any: what its members wrote is rolled back.
    pub(super) fn fail_group(&mut self, why: &'static str) {
        if let Some(open) = self.open.take() {
            self.roll_back_all();
            open.group.end(Err(why));
        }
    }

    /// A member's part is written (released from its savepoint): it waits for the group's
    /// commit.
    pub(super) fn wait_in_group(&mut self) {
        if let Some(open) = &mut self.open {
            open.waiting += 1;
        }
    }

    /// A member's part was rolled back: if no other member waits in the group, nothing is
    /// left to commit and the transaction ends here (it holds the file's write lock).
    pub(super) fn left_group(&mut self) {
        if self.open.as_ref().is_some_and(|open| open.waiting == 0) {
            self.fail_group("the SQLite write transaction was rolled back");
        }
    }

    fn roll_back_all(&mut self) {
        if !self.db.is_autocommit() {
            if let Err(err) = self.db.execute_batch("ROLLBACK") {
                tracing::error!(error = %err, "an SQLite write transaction could not be rolled back");
            }
        }
    }
}
