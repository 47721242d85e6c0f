//! What the server does at start about runs the last stop cut off.
//!
//! With the embedded SQLite database this process is the only instance, so a run still `running`
//! can only be one that was running when the server stopped (crash, kill, restart). Each goes on
//! from its last journaled step ([`RunService::recover`]): a run that never suspended asks the
//! model again; one cut off after a decision carries the decision out again without applying any
//! effect twice, or waits for an operator where a call's outcome is unknown. On Postgres several
//! instances may share the database and a `running` run may be alive in another one; telling
//! those apart needs leases, so nothing is touched there.

use std::sync::Arc;

use nrllm_core::service::RunService;
use nrllm_core::store::{RunFilter, RunStatus, RunStore, StoreError};
use nrllm_store::db::Backend;
use tokio_util::task::TaskTracker;

/// Starts the recovery of every run the last stop cut off (see the module), each as a tracked
/// task; how many.
pub async fn recover_cut_off_runs(
    store: &Arc<dyn RunStore>,
    runs: &Arc<RunService>,
    backend: Backend,
    tasks: &TaskTracker,
) -> Result<usize, StoreError> {
    if backend == Backend::Postgres {
        return Ok(0);
    }
    let cut_off = store
        .list(&RunFilter {
            status: Some(RunStatus::Running),
            created_before_ms: None,
            limit: 500,
        })
        .await?;
    for run in &cut_off {
        let (runs, id) = (Arc::clone(runs), run.id);
        tasks.spawn(async move {
            match runs.recover(id).await {
                Ok(run) => tracing::info!(run_id = %id, status = %run.status, "recovered a run the last stop cut off"),
                Err(err) => tracing::error!(run_id = %id, %err, "recovering a run failed"),
            }
        });
    }
    if !cut_off.is_empty() {
        tracing::warn!(
            runs = cut_off.len(),
            "runs the last stop cut off go on from their last journaled step"
        );
    }
    Ok(cut_off.len())
}
