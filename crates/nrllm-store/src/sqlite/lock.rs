//! The one way the SQLite backend takes its mutexes (the write connection, the fence's pending
//! transition).

use std::sync::{Mutex, MutexGuard, PoisonError};

/// `mutex`'s guard, even if a panic left it poisoned: each of the backend's mutexes stays sound
/// through one (a panicking transition's transaction rolled back as it unwound; the fence's
/// pending transition is set whole each time).
pub(super) fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
