//! Server-side state shared by every request: the database and the Leptos options. Server
//! functions reach it with [`state`].

pub mod retention;

use axum::extract::FromRef;
use leptos::prelude::*;
use nrllm_runtime::db::Database;

use crate::error::AppError;

/// Everything a request handler needs; cheap to clone.
#[derive(Clone, Debug)]
pub struct AppState {
    pub leptos_options: LeptosOptions,
    pub db: Database,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

/// The app state, as `leptos_routes` provides it to every server function.
pub fn state() -> Result<AppState, AppError> {
    use_context::<AppState>()
        .ok_or_else(|| AppError::internal("server state", "AppState missing from context"))
}

impl AppState {
    /// How many pings the database holds.
    pub async fn ping_count(&self) -> Result<i64, AppError> {
        let (count,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM ping")
            .fetch_one(self.db.pool())
            .await
            .map_err(|err| AppError::internal("counting pings", err))?;
        Ok(count)
    }

    /// Writes one ping and returns the new total.
    pub async fn record_ping(&self) -> Result<i64, AppError> {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis() as i64)
            .unwrap_or_default();
        sqlx::query("INSERT INTO ping (created_at_ms) VALUES ($1)")
            .bind(now_ms)
            .execute(self.db.pool())
            .await
            .map_err(|err| AppError::internal("recording a ping", err))?;
        self.ping_count().await
    }
}
