//! Live step lists: the run service tells [`LiveHub`] about every event as it happens, and
//! `GET /api/runs/{id}/events` streams them to browsers as server-sent events. Each event carries
//! its sequence number as the SSE id, so a reconnecting browser (`Last-Event-ID`) resumes exactly
//! where it left off: first from the database, then from the live feed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Mutex;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use nrllm_runtime::service::RunListener;
use nrllm_runtime::store::{RunStatus, SequencedEvent};
use tokio::sync::{broadcast, mpsc};
use uuid::Uuid;

use super::{views, AppState};

/// What a live run reports.
#[derive(Debug, Clone)]
pub enum LiveMessage {
    Event(SequencedEvent),
    Status(RunStatus),
}

/// Per-run broadcast channels, plus the events of the segment now running (not yet persisted).
#[derive(Default)]
pub struct LiveHub {
    runs: Mutex<HashMap<Uuid, LiveRun>>,
}

struct LiveRun {
    sender: broadcast::Sender<LiveMessage>,
    unpersisted: Vec<SequencedEvent>,
}

impl LiveRun {
    fn new() -> LiveRun {
        LiveRun {
            sender: broadcast::channel(256).0,
            unpersisted: Vec::new(),
        }
    }
}

impl LiveHub {
    /// Listens to one run: the live feed from now on, and the events already emitted but not yet
    /// in the database.
    pub fn subscribe(&self, id: Uuid) -> (broadcast::Receiver<LiveMessage>, Vec<SequencedEvent>) {
        let mut runs = self
            .runs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let run = runs.entry(id).or_insert_with(LiveRun::new);
        (run.sender.subscribe(), run.unpersisted.clone())
    }
}

impl LiveHub {
    /// The events a running run has emitted but not yet committed (empty for other runs).
    pub fn unpersisted(&self, id: Uuid) -> Vec<SequencedEvent> {
        let runs = self
            .runs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        runs.get(&id)
            .map(|run| run.unpersisted.clone())
            .unwrap_or_default()
    }
}

impl RunListener for LiveHub {
    fn event(&self, run_id: Uuid, event: &SequencedEvent) {
        let mut runs = self
            .runs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let run = runs.entry(run_id).or_insert_with(LiveRun::new);
        run.unpersisted.push(event.clone());
        let _ = run.sender.send(LiveMessage::Event(event.clone()));
    }

    fn status(&self, run_id: Uuid, status: RunStatus) {
        let mut runs = self
            .runs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if status == RunStatus::Running {
            if let Some(run) = runs.get_mut(&run_id) {
                let _ = run.sender.send(LiveMessage::Status(status));
            }
            return;
        }
        // Any other status is reported after the segment's events were committed.
        if let Some(run) = runs.remove(&run_id) {
            let _ = run.sender.send(LiveMessage::Status(status));
        }
    }
}

/// `?after=N`: the last sequence the client has.
#[derive(Debug, serde::Deserialize)]
pub struct After {
    after: Option<i64>,
}

fn step_event(event: &SequencedEvent) -> SseEvent {
    let step = views::live_step(event);
    SseEvent::default()
        .id(event.sequence.to_string())
        .event("step")
        .data(serde_json::to_string(&step).unwrap_or_default())
}

fn status_event(status: RunStatus) -> SseEvent {
    SseEvent::default().event("status").data(status.as_str())
}

/// `GET /api/runs/{id}/events`: the run's steps after `Last-Event-ID` (or `?after=`), then live
/// ones until the run stops running.
pub async fn run_events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<After>,
    headers: HeaderMap,
) -> Response {
    let Ok(id) = Uuid::parse_str(&id) else {
        return (StatusCode::NOT_FOUND, "no such run").into_response();
    };
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .or(query.after)
        .unwrap_or(0);
    // Subscribe first, then read the database: nothing emitted in between is missed.
    let (mut live, unpersisted) = state.live.subscribe(id);
    let run = match state.store.get(id).await {
        Ok(Some(run)) => run,
        Ok(None) => return (StatusCode::NOT_FOUND, "no such run").into_response(),
        Err(err) => {
            tracing::error!(%err, run_id = %id, "reading a run for its event stream");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the run could not be read",
            )
                .into_response();
        }
    };
    let stored = match state.store.events(id, after).await {
        Ok(events) => events,
        Err(err) => {
            tracing::error!(%err, run_id = %id, "reading a run's events");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the run could not be read",
            )
                .into_response();
        }
    };
    let (tx, rx) = mpsc::channel::<SseEvent>(64);
    tokio::spawn(async move {
        let mut last = after;
        for stored_event in &stored {
            let Some(event) = stored_event.event() else {
                continue;
            };
            let sequenced = SequencedEvent {
                sequence: stored_event.sequence,
                event,
                created_at_ms: stored_event.created_at_ms,
            };
            last = sequenced.sequence;
            if tx.send(step_event(&sequenced)).await.is_err() {
                return;
            }
        }
        let fresh: Vec<&SequencedEvent> =
            unpersisted.iter().filter(|e| e.sequence > last).collect();
        for event in fresh {
            last = event.sequence;
            if tx.send(step_event(event)).await.is_err() {
                return;
            }
        }
        if run.status != RunStatus::Running {
            let _ = tx.send(status_event(run.status)).await;
            return;
        }
        loop {
            match live.recv().await {
                Ok(LiveMessage::Event(event)) if event.sequence > last => {
                    last = event.sequence;
                    if tx.send(step_event(&event)).await.is_err() {
                        return;
                    }
                }
                Ok(LiveMessage::Event(_)) => {}
                Ok(LiveMessage::Status(RunStatus::Running)) => {}
                Ok(LiveMessage::Status(status)) => {
                    let _ = tx.send(status_event(status)).await;
                    return;
                }
                // Fell behind or the run's channel closed: the client reconnects from its last id.
                Err(_) => return,
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|event| (Ok::<_, Infallible>(event), rx))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
