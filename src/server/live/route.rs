//! `GET /api/runs/{id}/events`.

use super::stream::*;
use crate::server::AppState;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use std::convert::Infallible;
use std::sync::Arc;
use uuid::Uuid;

/// `GET /api/runs/{id}/events`: the run's steps after `Last-Event-ID` (or `?after=`), then live
/// ones until the run stops running.
pub async fn run_events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<After>,
    headers: HeaderMap,
) -> Response {
    let Ok(id) = Uuid::parse_str(&id) else {
        return (StatusCode::NOT_FOUND, "There is no such run.").into_response();
    };
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .or(query.after)
        .unwrap_or(0);
    let remote = state.remote.clone();
    match event_stream(
        Arc::clone(&state.store),
        Arc::clone(&state.live),
        remote,
        id,
        after,
    )
    .await
    {
        Ok(stream) => {
            // A stopping server ends its streams, so its graceful shutdown is not held open by
            // them; the pages reconnect to the next instance (or refresh).
            let stream = stream
                .take_until(state.shutdown.clone().cancelled_owned())
                .map(Ok::<_, Infallible>);
            Sse::new(stream)
                .keep_alive(KeepAlive::default())
                .into_response()
        }
        Err(StreamError::NotFound) => {
            (StatusCode::NOT_FOUND, "There is no such run.").into_response()
        }
        Err(StreamError::Full) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "Too many live streams are open; the page refreshes instead.",
        )
            .into_response(),
        Err(StreamError::Store) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "The run could not be read.",
        )
            .into_response(),
    }
}
