//! A connection of our own to the SQLite file, and the shapes of the statements it keeps
//! prepared.

use crate::transition::{Row, Transition};
use nrllm_core::run_store::StoreError;
use rusqlite::Connection;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

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
pub(super) type Reply = tokio::sync::oneshot::Sender<Result<Option<Row>, StoreError>>;

/// What the writer thread is asked to do.
pub(super) enum Job {
    /// A transition, and where its outcome goes.
    Write {
        transition: Transition,
        reply: Reply,
    },
    /// Commit the group left open on the write connection, if one still is: a member waiting
    /// for it gave up (its task was dropped), and nobody else may come to commit it.
    Settle,
}

/// Transitions the writer thread commits together at most.
pub(super) const MAX_BATCH: usize = 64;

/// The write connection, shared by the caller's thread and the writer thread (one at a time:
/// both hold the process's write turn first).
pub(super) type Shared = Arc<Mutex<Conn>>;

/// A connection and what it learned of the statements it ran.
#[derive(Debug)]
pub(super) struct Conn {
    pub(super) db: Connection,
    pub(super) shapes: Shapes,
    /// The transition whose fence runs, for the fence's SQL functions (the write connection's:
    /// [`super::chain`]).
    pub(super) chain: super::chain::Slot,
    /// The transaction left open for the next writer to join ([`super::group`]), if any.
    pub(super) open: Option<Open>,
    /// Groups committed, for the tests of group commit.
    #[cfg(test)]
    pub(super) group_commits: usize,
}

impl Conn {
    pub(super) fn new(db: Connection) -> Conn {
        Conn {
            db,
            shapes: Shapes::default(),
            chain: super::chain::Slot::default(),
            open: None,
            #[cfg(test)]
            group_commits: 0,
        }
    }
}

/// A transaction left open on the write connection for the next writer in the turn to join
/// ([`super::group`]), and how its commit came out, for the members waiting for it.
#[derive(Debug, Default)]
pub(super) struct Group {
    outcome: OnceLock<Result<(), &'static str>>,
}

impl Group {
    /// The group's outcome, once it was committed or failed.
    pub(super) fn outcome(&self) -> Option<Result<(), StoreError>> {
        self.outcome
            .get()
            .map(|done| done.map_err(|why| StoreError::Backend(why.into())))
    }

    /// Its commit came out as `outcome` (the first outcome set stays).
    pub(super) fn end(&self, outcome: Result<(), &'static str>) {
        let _ = self.outcome.set(outcome);
    }
}

/// The transaction open on the write connection, and how many members' parts wait in it.
#[derive(Debug)]
pub(super) struct Open {
    pub(super) group: Arc<Group>,
    pub(super) waiting: usize,
}

/// What binding a statement and reading its rows needs of its SQL text: the argument each of
/// SQLite's parameters takes (SQLite numbers `$n` parameters in the order they first appear,
/// not by `n`) and the names of the columns it returns. Read once a connection: each run of a
/// statement read every parameter's and column's name from SQLite again, some 280 names an
/// approve cycle (BENCHMARKS.md). A statement's columns change only with the schema, which
/// stays as the migrations left it while the store is open.
#[derive(Debug)]
pub(super) struct Shape {
    /// For SQLite's parameter `i + 1`, the index of its value in [`Statement::args`].
    pub(super) args: Box<[usize]>,
    pub(super) columns: Arc<[String]>,
}

impl Shape {
    pub(super) fn read(prepared: &rusqlite::Statement<'_>) -> Result<Shape, StoreError> {
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
pub(super) struct Shapes(foldhash::HashMap<Box<str>, Arc<Shape>>);

impl Shapes {
    /// The texts of the statements the connection ran (as many as it keeps prepared).
    #[cfg(test)]
    pub(super) fn texts(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(|text| &**text)
    }

    pub(super) fn of(
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
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Statements each connection keeps prepared (the multi-row step insert has one per size).
pub(super) const PREPARED: usize = 256;

/// A database error from a direct connection, as the store reports it.
pub(super) fn sqlite(err: rusqlite::Error) -> StoreError {
    StoreError::Backend(Box::new(err))
}
