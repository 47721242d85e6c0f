//! How the store reports a database error.

use nrllm_core::run_store::StoreError;

/// A database error as the store reports it (its cause is kept for the log).
pub(crate) fn backend(err: sqlx::Error) -> StoreError {
    StoreError::Backend(Box::new(err))
}
