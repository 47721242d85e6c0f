//! The run list as a download: `GET /runs/export.csv` and `GET /runs/export.json`, with the run
//! list's filters (`status`, `configuration`, `requester`, `from`, `to`, `q`). The runs are read
//! a page at a time by key and written as they come, so memory stays bounded whatever the
//! number of runs. A CSV cell that a spreadsheet would read as a formula (it begins with `=`,
//! `+`, `-`, `@`, a tab or a carriage return) is written with a `'` before it.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use nrllm_core::run_store::{RunFilter, RunStore};

use super::{present, AppState};
use crate::api::run_list::ssr::RunQuery;
use crate::page_data::RunSummary;

/// Runs read at a time (each row holds its configuration and state, which can be large).
const EXPORT_PAGE: u32 = 50;

/// The CSV's columns, in order.
const COLUMNS: [&str; 17] = [
    "id",
    "created_at",
    "status",
    "termination_reason",
    "configuration",
    "model",
    "requested_by",
    "decision",
    "prompt",
    "final_answer",
    "rounds",
    "tool_calls",
    "prompt_tokens",
    "completion_tokens",
    "unreported_usage",
    "estimated_cost",
    "duration_ms",
];

/// `text` as a spreadsheet reads it literally.
pub fn cell(text: &str) -> String {
    match text.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => format!("'{text}"),
        _ => text.to_owned(),
    }
}

fn record(run: &RunSummary) -> [String; 17] {
    [
        run.id.clone(),
        run.created_at.clone(),
        run.status.as_str().to_owned(),
        run.termination_reason.clone().unwrap_or_default(),
        run.configuration.clone(),
        run.model.clone(),
        run.requested_by.clone(),
        run.decision.clone().unwrap_or_default(),
        run.prompt.clone(),
        run.final_answer.clone().unwrap_or_default(),
        run.rounds.to_string(),
        run.tool_calls.to_string(),
        run.prompt_tokens.to_string(),
        run.completion_tokens.to_string(),
        run.unreported_usage.to_string(),
        run.estimated_cost.clone().unwrap_or_default(),
        run.wall_ms.map(|ms| ms.to_string()).unwrap_or_default(),
    ]
    .map(|text| cell(&text))
}

/// CSV lines for `rows` (with the header first when `header`).
fn csv_chunk(rows: &[RunSummary], header: bool) -> Result<Vec<u8>, csv::Error> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    if header {
        writer.write_record(COLUMNS)?;
    }
    for row in rows {
        writer.write_record(record(row))?;
    }
    writer.into_inner().map_err(|err| err.into_error().into())
}

/// The pages of runs `filter` matches, each as the summaries the list shows, read by key.
fn pages(
    store: Arc<dyn RunStore>,
    filter: RunFilter,
) -> impl futures::Stream<Item = Result<Vec<RunSummary>, String>> {
    futures::stream::unfold(Some(filter), move |filter| {
        let store = Arc::clone(&store);
        async move {
            let filter = filter?;
            match store.list(&filter).await {
                Ok(runs) => {
                    let next = runs.last().filter(|_| runs.len() == filter.limit as usize);
                    let next = next.map(|last| RunFilter {
                        after: Some((last.created_at_ms, last.id)),
                        ..filter.clone()
                    });
                    let page = runs.iter().map(present::summary).collect();
                    Some((Ok(page), next))
                }
                Err(err) => {
                    tracing::error!(%err, "exporting the run list");
                    Some((Err("the runs could not be read".to_owned()), None))
                }
            }
        }
    })
}

/// `GET /runs/export.csv`: the filtered run list as CSV.
pub async fn export_csv(State(state): State<AppState>, RawQuery(query): RawQuery) -> Response {
    list_export(&state, query, Format::Csv)
}

/// `GET /runs/export.json`: the filtered run list as a JSON array of the list's summaries.
pub async fn export_json(State(state): State<AppState>, RawQuery(query): RawQuery) -> Response {
    list_export(&state, query, Format::Json)
}

#[derive(Clone, Copy)]
enum Format {
    Csv,
    Json,
}

fn list_export(state: &AppState, query: Option<String>, format: Format) -> Response {
    // Fields other than the list's filters (a cursor, say) are not read.
    let Ok(fields) = serde_qs::from_str::<RunQuery>(query.as_deref().unwrap_or_default()) else {
        return (
            StatusCode::BAD_REQUEST,
            "The download's filters do not read: take the link from the runs page again.",
        )
            .into_response();
    };
    let fields = RunQuery {
        after: None,
        ..fields
    };
    let filter = match fields.filter(None, Some(EXPORT_PAGE)) {
        // A page at a time, all of it written.
        Ok(filter) => RunFilter {
            limit: EXPORT_PAGE,
            ..filter
        },
        Err(err) => return (StatusCode::BAD_REQUEST, err.to_string()).into_response(),
    };
    // Fused: a body may be polled again after its end.
    let pages = pages(Arc::clone(&state.store), filter).fuse().enumerate();
    let (content_type, extension, body) = match format {
        Format::Csv => {
            let chunks = pages.map(|(n, page)| {
                let page = page.map_err(std::io::Error::other)?;
                csv_chunk(&page, n == 0)
                    .map(Bytes::from)
                    .map_err(std::io::Error::other)
            });
            ("text/csv; charset=utf-8", "csv", Body::from_stream(chunks))
        }
        Format::Json => {
            let opening = futures::stream::once(async { Ok(Bytes::from_static(b"[")) });
            let chunks = pages.map(|(n, page)| {
                let page = page.map_err(std::io::Error::other)?;
                let mut chunk = String::new();
                for (i, run) in page.iter().enumerate() {
                    // Only the first page can start the array: a page shorter than a page ends it.
                    if n > 0 || i > 0 {
                        chunk.push(',');
                    }
                    chunk.push_str(&serde_json::to_string(run).unwrap_or_default());
                }
                Ok::<_, std::io::Error>(Bytes::from(chunk))
            });
            let closing = futures::stream::once(async { Ok(Bytes::from_static(b"]")) });
            let body = Body::from_stream(opening.chain(chunks).chain(closing));
            ("application/json", "json", body)
        }
    };
    (
        [
            (header::CONTENT_TYPE, content_type.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"runs.{extension}\""),
            ),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_a_spreadsheet_would_compute_are_written_as_text() {
        for formula in ["=1+1", "+1", "-2", "@SUM(A1)", "\tx", "\rx"] {
            assert_eq!(cell(formula), format!("'{formula}"));
        }
        assert_eq!(cell("plain = text"), "plain = text");
        assert_eq!(cell(""), "");
    }
}
