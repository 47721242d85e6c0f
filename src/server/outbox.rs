//! What the app's outboxes share (webhook deliveries, notifications): the wait before a
//! failed attempt is tried again, what a failed attempt comes to, the loop that sends, and the
//! bell that wakes it when a run begins to wait.

use std::time::Duration;

use nrllm_core::clock::now_ms;
use nrllm_core::run_service::RunListener;
use nrllm_core::run_store::{RunStatus, SequencedEvent, StoreError};
use nrllm_store::webhooks::Attempt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// No retry waits longer than this.
pub const MAX_BACKOFF_MS: u64 = 3_600_000;

/// The wait before the attempt after `attempts` failed ones: `backoff` doubled each time, up to
/// an hour, spread by ±20 % from the delivery's id (so instances do not retry in step, and every
/// instance computes the same schedule) — [`nrllm_core::retry::retry_delay`].
pub fn retry_wait_ms(backoff_ms: u32, attempts: i64, id: Uuid) -> i64 {
    let retry = u32::try_from(attempts.saturating_sub(1).max(0)).unwrap_or(u32::MAX);
    let seed = u64::from_be_bytes(id.as_bytes()[8..].try_into().expect("8 bytes"))
        .wrapping_add(u64::try_from(attempts).unwrap_or_default());
    let wait = nrllm_core::retry::retry_delay(
        std::time::Duration::from_millis(u64::from(backoff_ms)),
        retry,
        std::time::Duration::from_millis(MAX_BACKOFF_MS),
        seed,
    );
    i64::try_from(wait.as_millis()).unwrap_or(i64::MAX)
}

/// What a failed attempt on an outbox row (a delivery, a notification) that had `attempts`
/// comes to: tried again after a doubling wait, or given up after `max_attempts`.
pub fn failed_attempt(
    (status, error): (Option<i64>, String),
    (attempts, id): (i64, Uuid),
    (max_attempts, backoff_ms): (u32, u32),
) -> Attempt {
    let attempts = attempts + 1;
    let retry_at_ms = (attempts < i64::from(max_attempts))
        .then(|| now_ms() + retry_wait_ms(backoff_ms, attempts, id));
    Attempt::Failed {
        status,
        error,
        retry_at_ms,
    }
}

/// Runs `pass` until `shutdown`: again at once when `bell` rings, and every `poll` for the work
/// another instance made or a retry fell due (an outbox's sender: webhooks, notifications).
pub async fn keep_passing<F, Fut>(
    what: &str,
    (poll, bell, shutdown): (Duration, &Bell, CancellationToken),
    pass: F,
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), StoreError>>,
{
    loop {
        if let Err(err) = pass().await {
            tracing::error!(%err, what, "an outbox pass failed");
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = bell.wait() => {}
            _ = tokio::time::sleep(poll) => {}
        }
    }
}

/// Wakes the sender when a run begins to wait.
#[derive(Default)]
pub struct Bell(Notify);

impl Bell {
    /// Until a run begins to wait.
    pub async fn wait(&self) {
        self.0.notified().await;
    }
}

impl RunListener for Bell {
    fn event(&self, _run_id: Uuid, _event: &SequencedEvent) {}

    fn status(&self, _run_id: Uuid, status: RunStatus) {
        if RunStatus::WAITING.contains(&status) {
            self.0.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_wait_twice_as_long_each_time_within_a_spread_and_an_hour() {
        let id = Uuid::new_v4();
        let waits: Vec<i64> = (1..=5).map(|n| retry_wait_ms(1000, n, id)).collect();
        for (n, wait) in waits.iter().enumerate() {
            let base = 1000 * (1i64 << n);
            assert!(
                (base * 80 / 100..=base * 120 / 100).contains(wait),
                "attempt {}: {wait} ms",
                n + 1
            );
        }
        assert!(retry_wait_ms(3_600_000, 20, id) <= MAX_BACKOFF_MS as i64);
        assert_eq!(
            retry_wait_ms(1000, 3, id),
            retry_wait_ms(1000, 3, id),
            "the same schedule, whoever computes it"
        );
    }
}
