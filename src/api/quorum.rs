//! Turns that need several people's approvals (M-of-N, `nrllm_core::quorum`), as the pages and
//! the API show them: where the count stands and who may still approve, and whether a person's
//! approval is in the count already.

use nrllm_core::run_store::RunRecord;

use crate::error::AppError;
use crate::page_data::ApprovalsView;
use crate::server::AppState;

/// Where `run`'s approvals stand as `viewer` sees them, if its turn needs several.
pub async fn approvals_view(
    state: &AppState,
    run: &RunRecord,
    viewer: Option<&str>,
) -> Result<Option<ApprovalsView>, AppError> {
    crate::server::approvals::approvals_view((&state.accounts, &state.runs), run, viewer)
        .await
        .map_err(|err| AppError::internal("reading a turn's approvals", err))
}

/// Whether `who`'s approval already counts for `run`'s waiting turn (so the inbox's "next"
/// goes past it).
pub async fn counts_already(state: &AppState, run: &RunRecord, who: &str) -> bool {
    match state.runs.tally(run).await {
        Ok(tally) => tally.is_some_and(|tally| tally.votes.iter().any(|vote| vote.approver == who)),
        Err(err) => {
            tracing::warn!(run_id = %run.id, %err, "a turn's approvals could not be read");
            false
        }
    }
}
