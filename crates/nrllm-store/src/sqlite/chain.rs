//! The fence chains the steps itself: two SQL functions of the write connection, with which a
//! fenced update of a run sets the run's keyed head in the same statement — where the steps
//! were otherwise chained after the fence and the head written by an update of its own, the
//! run's wide row rewritten a second time in every transition (7 % of an approve cycle's
//! instructions; BENCHMARKS.md).
//!
//! `nrllm_chain_head(prev, run_key, head, last_sequence)` chains the steps of the transition
//! being carried out on `prev` (the run's last step's MAC, read by the fence) as
//! [`Transition::chain`] does, and returns the run's new keyed head — or `head` unchanged, for a
//! run whose log goes on in the older, unkeyed form. `nrllm_chain_key(last_sequence)` is the key
//! a run's log is chained by from now on, if its first steps come now (else null). Both read
//! the run's columns as they were before the update (SQLite's `SET` expressions do). The
//! transition waits in the connection's [`Slot`] while its fence runs ([`during`]); nothing
//! else uses the functions.

use std::sync::{Arc, Mutex};

use nrllm_core::run_store::StoreError;
use rusqlite::functions::FunctionFlags;
use rusqlite::Connection;

use super::lock::locked;
use crate::transition::{Statement, Transition};

/// What a fenced update of a run sets on SQLite, before its `WHERE` (after its other columns).
pub(crate) const CHAIN_SET: &str = concat!(
    ", audit_key_id = COALESCE(audit_key_id, nrllm_chain_key(last_sequence)), \
     audit_head = nrllm_chain_head(",
    crate::transition::last_step_mac!(),
    ", audit_key_id, audit_head, last_sequence) "
);

/// The transition whose fence runs on the connection, while it runs.
#[derive(Debug, Default)]
pub(super) struct Pending {
    transition: Option<Transition>,
    /// The head the fence set, once it chained the steps (a second call returns it again).
    head: Option<Option<String>>,
    /// Why the steps could not be chained (the fence failed with it).
    failed: Option<StoreError>,
}

/// A connection's [`Pending`] transition.
pub(super) type Slot = Arc<Mutex<Pending>>;

/// Gives `conn` the two functions, reading transitions from `slot`.
pub(super) fn register(conn: &Connection, slot: &Slot) -> rusqlite::Result<()> {
    // Direct only: a view or a trigger never calls them, only the store's own fences.
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DIRECTONLY;
    let pending = Arc::clone(slot);
    conn.create_scalar_function("nrllm_chain_key", 1, flags, move |ctx| {
        let before: i64 = ctx.get(0)?;
        let pending = locked(&pending);
        let transition = pending.transition.as_ref().ok_or_else(outside)?;
        Ok(transition
            .new_run_key(numbered(transition, before))
            .map(str::to_owned))
    })?;
    let pending = Arc::clone(slot);
    conn.create_scalar_function("nrllm_chain_head", 4, flags, move |ctx| {
        let prev: Option<String> = ctx.get(0)?;
        let run_key: Option<String> = ctx.get(1)?;
        let head: Option<String> = ctx.get(2)?;
        let before: i64 = ctx.get(3)?;
        let mut pending = locked(&pending);
        if let Some(set) = &pending.head {
            return Ok(set.clone());
        }
        let transition = pending.transition.as_mut().ok_or_else(outside)?;
        if transition.steps.is_empty() {
            return Ok(head);
        }
        let before = numbered(transition, before);
        match transition.chain(prev, run_key.as_deref(), before) {
            Ok(keyed) => {
                transition.chained = true;
                let set = keyed.map(|keyed| keyed.mac).or(head);
                pending.head = Some(set.clone());
                Ok(set)
            }
            Err(err) => {
                pending.failed = Some(err);
                Err(rusqlite::Error::UserFunctionError(
                    "the steps could not be chained".into(),
                ))
            }
        }
    })
}

/// `before` where the fence numbers the transition's steps.
fn numbered(transition: &Transition, before: i64) -> Option<i64> {
    transition.numbered_by_fence.then_some(before)
}

fn outside() -> rusqlite::Error {
    rusqlite::Error::UserFunctionError("nrllm_chain_* is called only by a run's fence".into())
}

/// Runs `fence` with `transition` in `slot`, for the functions (its steps chained if the fence
/// did): the fence's outcome, or why the steps could not be chained.
pub(super) fn during<T>(
    slot: &Slot,
    transition: &mut Transition,
    fence: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let parked = std::mem::replace(
        transition,
        Transition::new(Statement::new(""), String::new()),
    );
    *locked(slot) = Pending {
        transition: Some(parked),
        head: None,
        failed: None,
    };
    let outcome = fence();
    let Pending {
        transition: parked,
        failed,
        ..
    } = std::mem::take(&mut *locked(slot));
    if let Some(parked) = parked {
        *transition = parked;
    }
    failed.map_or(outcome, Err)
}
