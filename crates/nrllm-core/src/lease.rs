//! Whether this instance may still act for a run it drives. Another instance takes a run over
//! once the run's lease runs out; an instance that stalled past that (a pause, a long stop of its
//! process) must not go on as if it still held it. The program keeps, for each lease it holds, a
//! deadline by its own monotonic clock ([`LeaseWatch`]); the loop asks before each model request
//! and each tool call, and stops the run's segment, writing nothing, once the answer is no. The
//! run's version while this instance holds it (its *epoch*: a takeover moves it) reaches each tool
//! ([`crate::tool::ToolContext::lease_epoch`]), so an effect written in the run's own database can
//! be refused in its own transaction when the run has moved on.

use std::fmt;
use std::sync::Arc;

use uuid::Uuid;

/// The program's view of the leases it holds.
pub trait LeaseWatch: Send + Sync {
    /// Whether this instance still holds run `run`'s lease by its own clock: `false` once it
    /// may have run out (not renewed in time) or is known to be gone.
    fn holds(&self, run: Uuid) -> bool;
}

/// One run's lease, as the loop asks about it.
#[derive(Clone)]
pub struct LeaseGuard {
    pub run: Uuid,
    pub watch: Arc<dyn LeaseWatch>,
}

impl LeaseGuard {
    /// Whether the run may go on here.
    pub fn holds(&self) -> bool {
        self.watch.holds(self.run)
    }
}

impl fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("run", &self.run)
            .finish()
    }
}

impl PartialEq for LeaseGuard {
    fn eq(&self, other: &LeaseGuard) -> bool {
        self.run == other.run && Arc::ptr_eq(&self.watch, &other.watch)
    }
}

impl Eq for LeaseGuard {}
