//! The search index's writer in the background: runs queue themselves when they start and when
//! they finish (the store's triggers), and this indexes them in batches every half second, so
//! that a run is found by search within about a second and no run's commit writes the index.

use std::time::Duration;

use nrllm_store::SqlRunStore;
use tokio_util::sync::CancellationToken;

/// How often the queue is read.
pub const SEARCH_INDEX_EVERY: Duration = Duration::from_millis(500);

/// Runs indexed in one transaction at most.
const SEARCH_BATCH: u32 = 500;

/// Indexes queued runs until `shutdown`.
pub async fn run(store: SqlRunStore, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(SEARCH_INDEX_EVERY) => {}
        }
        loop {
            match store.index_queued(SEARCH_BATCH).await {
                // A full batch: more may wait.
                Ok(taken) if taken == SEARCH_BATCH as usize => {}
                Ok(_) => break,
                Err(err) => {
                    tracing::warn!(%err, "indexing runs for search failed; trying again shortly");
                    break;
                }
            }
        }
    }
}
