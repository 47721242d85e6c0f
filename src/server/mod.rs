//! Server-side state shared by every request — the database, the run service, the tools, the live
//! event hub — and the helpers server functions use. Server functions reach the state with
//! [`state`].

pub mod export;
pub mod json_body;
pub mod live;
pub mod retention;
pub mod views;

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::prelude::*;
use nrllm_runtime::db::Database;
use nrllm_runtime::demo::DemoProvider;
use nrllm_runtime::registry::ToolRegistry;
use nrllm_runtime::service::{LoopFactory, RunService};
use nrllm_runtime::site::SiteStore;
use nrllm_runtime::store::{RunConfiguration, RunStore, SqlRunStore};
use nrllm_runtime::tool_settings::ToolSettingsStore;
use nrllm_runtime::tools::builtin_registry;
use nrllm_runtime::{ToolLoop, ToolLoopService};

use crate::error::AppError;
use crate::model::ConfigurationView;
use crate::settings::Settings;
use live::LiveHub;

/// The configuration every playground has: the offline demo model.
pub const DEMO_CONFIGURATION: &str = "demo";

/// Everything a request handler needs; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub leptos_options: LeptosOptions,
    pub db: Database,
    pub store: Arc<dyn RunStore>,
    pub runs: Arc<RunService>,
    pub registry: Arc<ToolRegistry>,
    pub site: SiteStore,
    pub tool_settings: ToolSettingsStore,
    pub live: Arc<LiveHub>,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

/// Builds the loop for a run's configuration.
struct AppLoops {
    registry: Arc<ToolRegistry>,
    demo: Arc<DemoProvider>,
}

impl LoopFactory for AppLoops {
    fn tool_loop(
        &self,
        configuration: &RunConfiguration,
    ) -> Result<Arc<dyn ToolLoopService>, String> {
        match configuration.provider.as_str() {
            DEMO_CONFIGURATION => Ok(Arc::new(ToolLoop::new(
                self.demo.clone(),
                Arc::clone(&self.registry),
            ))),
            other => Err(format!("the configuration `{other}` is not available")),
        }
    }
}

impl AppState {
    /// Wires the services over an open database: seeds the demo site once, loads the tool
    /// settings, and connects the run service to the live hub.
    pub async fn open(
        leptos_options: LeptosOptions,
        db: Database,
        settings: &Settings,
    ) -> Result<AppState, String> {
        let site = SiteStore::new(db.clone());
        site.seed_once()
            .await
            .map_err(|err| format!("cannot seed the demo site: {err}"))?;
        let store: Arc<dyn RunStore> = Arc::new(SqlRunStore::new(db.clone()));
        let registry = Arc::new(builtin_registry(site.clone(), Arc::clone(&store)));
        let tool_settings = ToolSettingsStore::new(db.clone());
        tool_settings
            .load_into(&registry)
            .await
            .map_err(|err| format!("cannot read the tool settings: {err}"))?;
        let live = Arc::new(LiveHub::default());
        let loops = Arc::new(AppLoops {
            registry: Arc::clone(&registry),
            demo: Arc::new(DemoProvider::with_think_time(
                std::time::Duration::from_millis(u64::from(settings.demo_think_ms)),
            )),
        });
        let runs = Arc::new(RunService::new(Arc::clone(&store), loops).with_listener(live.clone()));
        Ok(AppState {
            leptos_options,
            db,
            store,
            runs,
            registry,
            site,
            tool_settings,
            live,
        })
    }

    /// The configurations the playground offers.
    pub fn configurations(&self) -> Vec<ConfigurationView> {
        vec![ConfigurationView {
            name: DEMO_CONFIGURATION.to_owned(),
            model: "demo-1".to_owned(),
            available: true,
            reason: None,
        }]
    }

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
        sqlx::query("INSERT INTO ping (created_at_ms) VALUES ($1)")
            .bind(nrllm_runtime::service::now_ms())
            .execute(self.db.pool())
            .await
            .map_err(|err| AppError::internal("recording a ping", err))?;
        self.ping_count().await
    }
}

/// The app state, as `leptos_routes` provides it to every server function and page.
pub fn state() -> Result<AppState, AppError> {
    use_context::<AppState>()
        .ok_or_else(|| AppError::internal("server state", "AppState missing from context"))
}

/// Whether this request is a browser's plain form post (it accepts HTML): such requests are
/// answered with a redirect, everything else with JSON and a status code.
pub fn wants_html() -> bool {
    use_context::<http::request::Parts>()
        .and_then(|parts| {
            parts
                .headers
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.contains("text/html"))
        })
        .unwrap_or(false)
}

/// Gives an error its HTTP status for API clients (form posts are redirected instead, with the
/// error in the URL).
pub fn with_status(err: AppError) -> AppError {
    if !wants_html() {
        if let Some(options) = use_context::<leptos_axum::ResponseOptions>() {
            options.set_status(err.status());
        }
    }
    err
}

/// Who is acting. Accounts come later; until then every operator is `operator`.
pub fn current_operator() -> String {
    "operator".to_owned()
}
