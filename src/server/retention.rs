//! The purge: deletes finished runs and long-waiting runs (with their events and state) after the
//! windows set in the settings. It runs hourly inside the server and on demand as
//! `nrllm-playground purge`.

use std::time::Duration;

use nrllm_core::clock::now_ms;
use nrllm_core::run_store::{PurgeReport, RunStore, StoreError};

use crate::settings::Settings;

const DAY_MS: i64 = 24 * 60 * 60 * 1000;
/// Runs deleted per transaction, so a large purge never holds the write lock for long.
const PURGE_CHUNK: u32 = 500;

/// Deletes what the retention windows say is due now.
pub async fn purge_once(
    store: &dyn RunStore,
    settings: &Settings,
) -> Result<PurgeReport, StoreError> {
    let now = now_ms();
    store
        .purge(
            now - i64::from(settings.retention_terminal_days) * DAY_MS,
            now - i64::from(settings.retention_waiting_days) * DAY_MS,
            PURGE_CHUNK,
        )
        .await
}

/// Runs the purge every hour for as long as the server lives, logging what it removed: old runs,
/// and the sessions and login links that expired.
pub fn spawn_hourly(
    store: std::sync::Arc<dyn RunStore>,
    accounts: nrllm_store::accounts::AccountStore,
    settings: Settings,
) {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_secs(3600));
        loop {
            ticker.tick().await;
            match accounts.purge_expired(now_ms()).await {
                Ok((sessions, links)) if sessions + links > 0 => {
                    tracing::info!(sessions, links, "purged expired sessions and login links")
                }
                Ok(_) => {}
                Err(err) => tracing::error!(%err, "purging expired sessions failed"),
            }
            match purge_once(store.as_ref(), &settings).await {
                Ok(report) if report.runs > 0 => {
                    tracing::info!(
                        runs = report.runs,
                        events = report.events,
                        "purged old runs"
                    )
                }
                Ok(_) => {}
                Err(err) => tracing::error!(%err, "the scheduled purge failed"),
            }
        }
    });
}
