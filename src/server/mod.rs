//! The server's composition root: [`AppState`] wires the database, the run store and service, the
//! tools and their settings, the configurations and the live event hub, once, at start. Every
//! piece lives in a module of its own, named for what it does.

pub mod configurations;
pub mod diff;
pub mod export;
pub mod json_body;
pub mod live;
pub mod recovery;
pub mod request;
pub mod retention;
pub mod routes;
pub mod security;
pub mod views;

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::prelude::*;
use nrllm_core::registry::ToolRegistry;
use nrllm_core::service::RunService;
use nrllm_core::store::RunStore;
use nrllm_demo::site::SiteStore;
use nrllm_demo::tools::{builtin_registry, ExportPage};
use nrllm_store::db::Database;
use nrllm_store::tool_settings::ToolSettingsStore;
use nrllm_store::SqlRunStore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::settings::Settings;
use configurations::Configurations;
use live::{LiveHub, StreamLimits};
pub use request::{current_operator, state, wants_html};

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
    pub configurations: Arc<Configurations>,
    /// Every run segment the server drives in the background, so a shutdown can wait for them.
    pub tasks: TaskTracker,
    /// Cancelled when the server is shutting down: no new runs or decisions are taken, and live
    /// streams end.
    pub shutdown: CancellationToken,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

impl AppState {
    /// Wires the services over an open database: seeds the demo site once, ends the runs the
    /// last stop cut off, loads the tool settings, builds the configurations, and connects the
    /// run service to the live hub.
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
        let mut registry = builtin_registry(site.clone(), Arc::clone(&store));
        registry
            .register(ExportPage::new(site.clone(), &settings.export_dir))
            .map_err(|err| format!("cannot register the export tool: {err}"))?;
        let registry = Arc::new(registry);
        let tool_settings = ToolSettingsStore::new(db.clone());
        tool_settings
            .load_into(&registry)
            .await
            .map_err(|err| format!("cannot read the tool settings: {err}"))?;
        let live = Arc::new(LiveHub::new(StreamLimits {
            per_run: settings.stream_limit_per_run as usize,
            total: settings.stream_limit_total as usize,
        }));
        let configurations = Arc::new(Configurations::from_settings(
            settings,
            Arc::clone(&registry),
        ));
        let runs = Arc::new(
            RunService::new(Arc::clone(&store), configurations.clone()).with_listener(live.clone()),
        );
        let tasks = TaskTracker::new();
        recovery::recover_cut_off_runs(&store, &runs, db.backend(), &tasks)
            .await
            .map_err(|err| format!("cannot recover the runs the last stop cut off: {err}"))?;
        Ok(AppState {
            leptos_options,
            db,
            store,
            runs,
            registry,
            site,
            tool_settings,
            live,
            configurations,
            tasks,
            shutdown: CancellationToken::new(),
        })
    }
}
