//! `GET /runs/{id}/export.json`: a run with its whole event stream, as a JSON file.

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use super::{views, AppState};

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
