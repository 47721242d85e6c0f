//! What the server does at start about runs the last stop cut off.
//!
//! With the embedded SQLite database this process is the only instance, so a run still `running`
//! can only be one that was running when the server stopped (crash, kill, restart). Each is taken
//! over at once, whoever held its lease, and goes on from its last journaled step
//! ([`RunService::recover`](nrllm_core::run_service::RunService::recover)): a run that never suspended
//! asks the model again; one cut off after a decision carries the decision out again without
//! applying any effect twice, or waits for an operator where a call's outcome is unknown. On
//! Postgres several instances share the database and a `running` run may be alive in another
//! one: such runs are left to the reapers, which take over a run once its lease runs out
//! ([`super::leases`]).

use std::sync::Arc;

use nrllm_core::run_store::{RunFilter, RunStatus, RunStore, StoreError};
use nrllm_store::db::Backend;

use super::leases::Leases;

/// Takes over every run the last stop cut off (see the module), each recovered in a tracked
/// task; how many.
pub async fn recover_cut_off_runs(
    store: &Arc<dyn RunStore>,
    leases: &Arc<Leases>,
    backend: Backend,
) -> Result<usize, StoreError> {
    if backend == Backend::Postgres {
        return Ok(0);
    }
    // The calls the last process held open for its servers' questions died with it: their runs
    // are anyone's to take (the reply finds no call to go to, and says so).
    let released = store.release_holds().await?;
    if released > 0 {
        tracing::warn!(
            runs = released,
            "calls held open by the last process are gone; their runs no longer wait for it"
        );
    }
    let cut_off = store
        .list(&RunFilter {
            status: Some(RunStatus::Running),
            limit: 500,
            ..RunFilter::default()
        })
        .await?;
    let mut taken = 0;
    for run in &cut_off {
        if leases.take_over(run.id, true).await? {
            taken += 1;
        }
    }
    if taken > 0 {
        tracing::warn!(
            runs = taken,
            "runs the last stop cut off go on from their last journaled step"
        );
    }
    Ok(taken)
}
