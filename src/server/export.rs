//! Downloads: `GET /runs/{id}/export.json`, a run with its whole event stream, as a JSON file;
//! `GET /runs/{id}/calls/{call_id}/preview.diff`, a pending call's whole diff.

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use nrllm_core::preview::PreviewOutcome;
use nrllm_core::tool::Effect;
use uuid::Uuid;

use super::{diff, views, AppState};

/// The run's summary and every event's payload, in order.
pub async fn run_export(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    let Ok(id) = Uuid::parse_str(&id) else {
        return (StatusCode::NOT_FOUND, "There is no such run.").into_response();
    };
    let (run, events) = match (state.store.get(id).await, state.store.events(id, 0).await) {
        (Ok(Some(run)), Ok(events)) => (run, events),
        (Ok(None), _) => return (StatusCode::NOT_FOUND, "There is no such run.").into_response(),
        (Err(err), _) | (_, Err(err)) => {
            tracing::error!(%err, run_id = %id, "exporting a run");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "The run could not be read.",
            )
                .into_response();
        }
    };
    let body = serde_json::json!({
        "run": views::summary(&run),
        "configuration": run.configuration,
        "events": events.iter().map(|e| serde_json::json!({
            "sequence": e.sequence, "kind": e.kind, "created_at_ms": e.created_at_ms, "payload": e.payload,
        })).collect::<Vec<_>>(),
    });
    (
        [
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"run-{id}.json\""),
            ),
        ],
        serde_json::to_string_pretty(&body).unwrap_or_default(),
    )
        .into_response()
}

/// `GET /runs/{id}/calls/{call_id}/preview.diff`: the whole diff of a pending call's preview, as
/// computed now (for a change too large to show in the panel).
pub async fn preview_diff(
    State(state): State<AppState>,
    Path((id, call_id)): Path<(String, String)>,
) -> Response {
    let not_found = || {
        (
            StatusCode::NOT_FOUND,
            "There is no such pending call with a change to show.",
        )
            .into_response()
    };
    let Ok(id) = Uuid::parse_str(&id) else {
        return not_found();
    };
    let run = match state.store.get(id).await {
        Ok(Some(run)) => run,
        Ok(None) => return not_found(),
        Err(err) => {
            tracing::error!(%err, run_id = %id, "reading a run for its preview diff");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "The run could not be read.",
            )
                .into_response();
        }
    };
    let Some(pending) = state.runs.pending(&run).await else {
        return not_found();
    };
    let change = pending.previews.iter().find_map(|p| match &p.outcome {
        PreviewOutcome::Ready(preview) if p.call_id == call_id => match &preview.effect {
            Effect::Change {
                target,
                before,
                after,
            } => Some(diff::unified_diff(target, before, after)),
            Effect::Text { .. } => None,
        },
        _ => None,
    });
    match change {
        Some(text) => (
            [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()),
                (
                    header::CONTENT_DISPOSITION,
                    format!(
                        "attachment; filename=\"run-{id}-{}.diff\"",
                        sanitize(&call_id)
                    ),
                ),
            ],
            text,
        )
            .into_response(),
        None => not_found(),
    }
}

/// A call id as it may appear in a file name (ids come from the model).
fn sanitize(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(64)
        .collect()
}
