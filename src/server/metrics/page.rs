//! `GET /metrics`: the counters and the database's counts in the Prometheus text format.

use super::counters::*;
use crate::server::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use nrllm_core::clock::now_ms;
use nrllm_core::run_store::RunStatus;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub(super) struct StatusLabel {
    pub(super) status: String,
}

/// The metrics as they are now, in the Prometheus text format.
pub async fn render(state: &AppState) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let mut registry = Registry::with_prefix("nrllm");
    register_database(&mut registry, state).await?;
    register_counters(&mut registry, &state.counters);
    register_instance(&mut registry, state);
    let mut text = String::new();
    encode(&mut text, &registry)?;
    Ok(text)
}

/// What the database says: runs by status, and how long the waiting ones have waited.
async fn register_database(registry: &mut Registry, state: &AppState) -> Result<(), sqlx::Error> {
    let runs = Family::<StatusLabel, Gauge>::default();
    let counts: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, COUNT(*) FROM agent_run GROUP BY status")
            .fetch_all(state.db.pool())
            .await?;
    for status in RunStatus::all() {
        let count = counts
            .iter()
            .find(|(s, _)| s == status.as_str())
            .map_or(0, |(_, n)| *n);
        runs.get_or_create(&StatusLabel {
            status: status.as_str().to_owned(),
        })
        .set(count);
    }
    registry.register("runs", "Runs by status", runs);

    let waiting_age = Histogram::new(exponential_buckets(60.0, 4.0, 8));
    let waiting_since: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT updated_at_ms FROM agent_run WHERE {} ORDER BY updated_at_ms LIMIT $1",
        RunStatus::sql_any("status", &RunStatus::WAITING)
    ))
    .bind(MAX_WAITING_SAMPLED)
    .fetch_all(state.db.pool())
    .await?;
    let now = now_ms();
    for since in waiting_since {
        waiting_age.observe((now - since).max(0) as f64 / 1000.0);
    }
    registry.register(
        "waiting_age_seconds",
        "How long the runs waiting for a decision or an answer have waited",
        waiting_age,
    );
    Ok(())
}

/// What the run service counted on this instance: decisions, model calls, retries, latency.
fn register_counters(registry: &mut Registry, counters: &Counters) {
    registry.register(
        "decisions",
        "Decisions taken through this instance",
        counters.decisions.clone(),
    );
    registry.register(
        "model_calls",
        "Model calls answered, made by this instance",
        counters.model_calls.clone(),
    );
    registry.register(
        "model_call_failures",
        "Model calls that failed for good, made by this instance",
        counters.model_failures.clone(),
    );
    registry.register(
        "provider_retries",
        "Model requests retried after a transient failure",
        counters.provider_retries.clone(),
    );
    registry.register(
        "model_call_seconds",
        "How long answered model calls took",
        counters.model_latency.clone(),
    );
    registry.register(
        "model_first_token_seconds",
        "From a streamed model request to the first piece of its response, by configuration",
        counters.first_token.clone(),
    );
    registry.register(
        "tokens",
        "Tokens the models used, by configuration and kind (input and output; cached_input, \
         cache_write and reasoning are parts of them)",
        counters.tokens.clone(),
    );
    registry.register(
        "spend_dollars",
        "What the models cost in US dollars under each configuration's prices",
        counters.spend.clone(),
    );
}

/// What this instance does now: lease takeovers, live streams, runs driven, queue work taken.
fn register_instance(registry: &mut Registry, state: &AppState) {
    let reaped = Counter::<u64>::default();
    reaped.inc_by(state.leases.reaped());
    registry.register(
        "lease_takeovers",
        "Runs whose lease ran out that this instance took over",
        reaped,
    );
    let streams = Gauge::<i64>::default();
    let remote = state.remote.as_ref().map_or(0, |feed| feed.open());
    streams.set((state.live.stats().subscribers + remote) as i64);
    registry.register(
        "live_streams",
        "Live step streams open on this instance",
        streams,
    );
    let driving = Gauge::<i64>::default();
    driving.set(state.leases.driving().len() as i64);
    registry.register("runs_driven", "Runs this instance drives now", driving);
    let peak = Gauge::<i64>::default();
    peak.set(state.leases.peak() as i64);
    registry.register(
        "runs_driven_peak",
        "The most runs this instance drove at once since it started",
        peak,
    );
    let taken = Counter::<u64>::default();
    taken.inc_by(state.queue.taken());
    registry.register(
        "queue_taken",
        "Queued runs (new runs and claimed decisions) this instance took",
        taken,
    );
}

/// `GET /metrics`.
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    match render(&state).await {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(err) => {
            tracing::error!(%err, "metrics: reading the database failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "The metrics could not be read.",
            )
                .into_response()
        }
    }
}
