//! Probes for whatever runs the server (a load balancer, Kubernetes, systemd): `/healthz` says
//! the process answers, `/readyz` that it can serve — the database answers and every migration of
//! this build is applied. Both are plain text, need no login and reveal nothing else, so they sit
//! outside the guard (a probe reaches the server by an address that is not in `allowed_hosts`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;

use super::AppState;

/// The process is up.
pub async fn healthz() -> impl IntoResponse {
    "ok\n"
}

/// The server can serve requests: 200, or 503 saying what is missing (the cause is logged).
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if state.shutdown.is_cancelled() {
        return (StatusCode::SERVICE_UNAVAILABLE, "stopping\n".to_owned());
    }
    match state.db.migrations().await {
        Ok((applied, known)) if applied >= known => (StatusCode::OK, "ready\n".to_owned()),
        Ok((applied, known)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("database migrations: {applied} of {known} applied\n"),
        ),
        Err(err) => {
            tracing::error!(%err, "readiness: the database does not answer");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the database does not answer\n".to_owned(),
            )
        }
    }
}
