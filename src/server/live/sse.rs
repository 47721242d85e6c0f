//! One step or one status change of a run as a server-sent event.

use crate::server::present;
use axum::response::sse::Event as SseEvent;
use nrllm_core::provider::Prices;
use nrllm_core::run_store::{RunStatus, SequencedEvent, StoredEvent};

/// A step, with what it used toward the run's budget under `prices`.
pub(super) fn step_event(event: &SequencedEvent, prices: &Prices) -> SseEvent {
    let step = present::live_step(event, prices);
    SseEvent::default()
        .id(event.sequence.to_string())
        .event("step")
        .data(serde_json::to_string(&step).unwrap_or_default())
}

/// The steps of stored events, moving `last` to the last one's sequence.
pub(super) fn stored_steps(
    stored: &[StoredEvent],
    last: &mut i64,
    prices: &Prices,
) -> Vec<SseEvent> {
    stored
        .iter()
        .filter_map(|stored| {
            let event = stored.event()?;
            *last = stored.sequence;
            Some(step_event(
                &SequencedEvent {
                    sequence: stored.sequence,
                    event,
                    created_at_ms: stored.created_at_ms,
                },
                prices,
            ))
        })
        .collect()
}

/// What the model wrote since the last one (never journaled, so no id: the id stays the last
/// step's, for `Last-Event-ID`).
pub(super) fn forming_event(forming: &crate::page_data::Forming) -> SseEvent {
    SseEvent::default()
        .event("delta")
        .data(serde_json::to_string(forming).unwrap_or_default())
}

/// A running call's progress (`progress`): the latest report, as JSON.
pub(super) fn progress_event(progress: &crate::page_data::ProgressView) -> SseEvent {
    SseEvent::default()
        .event("progress")
        .data(serde_json::to_string(progress).unwrap_or_default())
}

pub(super) fn status_event(status: RunStatus) -> SseEvent {
    SseEvent::default().event("status").data(status.as_str())
}
