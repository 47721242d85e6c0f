//! Downloads: `GET /runs/{id}/export.json`, a run with its whole event stream, as a JSON file
//! streamed page by page ([`EVENTS_PAGE`] events at a time, so a long run's export never sits in
//! memory whole); `GET /runs/{id}/calls/{call_id}/preview.diff`, a pending call's whole diff.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use nrllm_core::preview::PreviewOutcome;
use nrllm_core::run_store::{RunRecord, RunStore};
use nrllm_core::tool::Effect;
use uuid::Uuid;

use super::step_pages::{event_pages, EVENTS_PAGE};
use super::{diff, present, AppState};

/// The export of `run` as a streamed JSON body: `{"run": …, "configuration": …, "events": [`,
/// then its events read `page` at a time ([`event_pages`]), then `]}`. A read that fails midway
/// ends the body early (the download is cut short) and is logged.
pub fn export_body(store: Arc<dyn RunStore>, run: &RunRecord, page: u32) -> Body {
    let head = serde_json::json!({
        "run": present::summary(run),
        "configuration": run.configuration,
    })
    .to_string();
    // The head object without its closing brace, and the events array opened.
    let opening = format!("{},\"events\":[", head.strip_suffix('}').unwrap_or(&head));
    let id = run.id;
    let events = event_pages(store, id, 0, page)
        .enumerate()
        .map(move |(n, read)| match read {
            Ok(events) => {
                let mut chunk = String::new();
                for (i, e) in events.iter().enumerate() {
                    if n > 0 || i > 0 {
                        chunk.push(',');
                    }
                    chunk.push_str(
                        &serde_json::json!({
                            "sequence": e.sequence, "kind": e.kind,
                            "created_at_ms": e.created_at_ms, "payload": e.payload,
                        })
                        .to_string(),
                    );
                }
                Ok(Bytes::from(chunk))
            }
            Err(err) => {
                tracing::error!(%err, run_id = %id, "exporting a run's steps");
                Err(std::io::Error::other("the run's steps could not be read"))
            }
        });
    let closing = futures::stream::once(async { Ok(Bytes::from_static(b"]}")) });
    Body::from_stream(
        futures::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(opening)) })
            .chain(events)
            .chain(closing),
    )
}

/// The run's summary and every event's payload, in order.
pub async fn run_export(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    let Ok(id) = Uuid::parse_str(&id) else {
        return (StatusCode::NOT_FOUND, "There is no such run.").into_response();
    };
    let run = match state.store.get(id).await {
        Ok(Some(run)) => run,
        Ok(None) => return (StatusCode::NOT_FOUND, "There is no such run.").into_response(),
        Err(err) => {
            tracing::error!(%err, run_id = %id, "exporting a run");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "The run could not be read.",
            )
                .into_response();
        }
    };
    let body = export_body(Arc::clone(&state.store), &run, EVENTS_PAGE);
    (
        [
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"run-{id}.json\""),
            ),
        ],
        body,
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

#[cfg(test)]
mod tests {
    use super::*;
    use nrllm_store::db::Database;
    use nrllm_store::SqlRunStore;

    #[tokio::test]
    async fn an_export_streams_every_step_in_order_across_pages() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::connect(&format!("sqlite:{}/export.db", dir.path().display()))
            .await
            .unwrap();
        let store: Arc<dyn RunStore> = Arc::new(SqlRunStore::new(db));
        let done = nrllm_store::testing::completed_run(store.as_ref(), 7, 1).await;
        for page in [1, 2, 3, 7, 500] {
            let body = export_body(Arc::clone(&store), &done, page);
            let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            let steps: Vec<(i64, String)> = json["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    (
                        e["sequence"].as_i64().unwrap(),
                        e["payload"]["resumes_at"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            let expected: Vec<(i64, String)> = (1..=7).map(|n| (n, format!("step {n}"))).collect();
            assert_eq!(steps, expected, "page {page}");
            assert_eq!(json["run"]["final_answer"], "done");
            assert_eq!(json["configuration"]["prompt"], "p");
        }
    }
}
