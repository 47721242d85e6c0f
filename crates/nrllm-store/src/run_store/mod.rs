//! [`RunStore`] on SQLite and Postgres through one set of queries. Every transition is fenced by
//! the run's `version` and commits together with the events it produced, in one transaction: a
//! failure leaves neither. A transition is written as data ([`Transition`]) and carried out by
//! [`Database::transact`].

mod audit;
mod leases;
mod listing;
pub(crate) mod queries;
mod reads;
mod rules;
mod runs;
mod search;
mod spend;
mod write;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use uuid::Uuid;

use crate::db::Database;

/// [`RunStore`] on an SQLite or Postgres database.
#[derive(Debug, Clone)]
pub struct SqlRunStore {
    db: Database,
    /// Durable writes made through this store (each transaction or single-statement write).
    commits: Arc<AtomicU64>,
    /// This instance, as the owner of the leases it takes.
    owner: Arc<str>,
    /// How long a lease lasts from its last renewal.
    lease_ms: i64,
}

/// Tries of a cancel whose run keeps moving between waiting and running under it.
const CANCEL_ATTEMPTS: usize = 3;

/// How long a lease lasts unless the store is told otherwise.
pub const DEFAULT_LEASE_MS: i64 = 30_000;

impl SqlRunStore {
    /// A store on an open, migrated database.
    pub fn new(db: Database) -> SqlRunStore {
        SqlRunStore {
            db,
            commits: Arc::default(),
            owner: Arc::from(Uuid::new_v4().to_string()),
            lease_ms: DEFAULT_LEASE_MS,
        }
    }

    /// The same store, taking leases as `owner` (an instance id) for `lease_ms` at a time.
    pub fn with_lease(mut self, owner: &str, lease_ms: i64) -> SqlRunStore {
        self.owner = Arc::from(owner);
        self.lease_ms = lease_ms.max(1);
        self
    }

    /// The instance this store takes leases for.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// How many durable commits this store has made (for the benchmark's commits-per-cycle).
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    fn committed(&self) {
        self.commits.fetch_add(1, Ordering::Relaxed);
    }

    /// The database behind the store.
    pub fn database(&self) -> &Database {
        &self.db
    }
}
