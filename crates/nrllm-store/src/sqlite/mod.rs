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
//! - A run's fence chains the transition's steps and sets the run's keyed head as it updates
//!   the run ([`chain`]'s SQL functions, on the write connection), where an update of its own
//!   would rewrite the run's row a second time.
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
//! - A transaction of another part of the program (the demo site's changes, the queue's take)
//!   runs on the write connection too, statement by statement on the caller's thread in the
//!   process's write turn ([`SqliteTx`]), rather than a trip to a pool connection's thread for
//!   each statement. Its part is left in an open transaction for the writers that follow it in
//!   the turn, and commits with theirs ([`group`]): at `FULL`, one flush for all of them.

mod chain;
mod conn;
mod group;
mod lent;
mod lock;
mod readers;
#[cfg(test)]
mod tests;
mod writer;

pub(crate) use chain::CHAIN_SET;
pub use conn::*;
pub(crate) use lent::*;
pub(crate) use readers::*;
pub(crate) use writer::*;
