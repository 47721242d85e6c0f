//! Server-side state shared by every request — the database, the run service, the tools, the live
//! event hub — and the helpers server functions use. Server functions reach the state with
//! [`state`].

pub mod diff;
pub mod export;
pub mod json_body;
pub mod live;
pub mod retention;
pub mod routes;
pub mod security;
pub mod views;

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::prelude::*;
use nrllm_core::clock::now_ms;
use nrllm_core::provider::{ModelOptions, Provider, Usage};
use nrllm_core::registry::ToolRegistry;
use nrllm_core::service::{LoopFactory, RunService};
use nrllm_core::store::{RunConfiguration, RunStore};
use nrllm_core::{ToolLoop, ToolLoopService};
use nrllm_demo::demo::DemoProvider;
use nrllm_demo::site::SiteStore;
use nrllm_demo::tools::builtin_registry;
use nrllm_providers::anthropic::{AnthropicConfig, AnthropicProvider};
use nrllm_providers::gemini::{GeminiConfig, GeminiProvider};
use nrllm_providers::http::{ApiKey, HttpSettings};
use nrllm_providers::openai::{OpenAiConfig, OpenAiProvider};
use nrllm_store::db::{Backend, Database};
use nrllm_store::tool_settings::ToolSettingsStore;
use nrllm_store::SqlRunStore;

use crate::error::AppError;
use crate::model::ConfigurationView;
use crate::settings::{ProviderKind, Settings};
use live::{LiveHub, StreamLimits};

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
    configured: Arc<Vec<Configured>>,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

/// A configured model: its provider if it can be used, else why not.
struct Configured {
    view: ConfigurationView,
    provider: Result<Arc<dyn Provider>, String>,
    defaults: ModelOptions,
    prices: (Option<f64>, Option<f64>),
}

/// What an operator reads on a run that the last stop of the server cut off.
pub const INTERRUPTED_SUMMARY: &str = "The server stopped while this run was running, so it ended \
here. Steps after the last saved one are lost, and a tool approved just before the stop may or may \
not have run: check its target before you run the prompt again.";

/// At start, ends the runs that the last stop cut off. With the embedded SQLite database this
/// process is the only instance, so a run still `running` can only be one that was running when
/// the server stopped (crash, kill, restart). On Postgres several instances may share the
/// database and a `running` run may be alive in another one; telling those apart needs leases,
/// so nothing is touched there.
pub async fn mark_interrupted_runs(store: &dyn RunStore, backend: Backend) -> Result<u64, String> {
    match backend {
        Backend::Sqlite => store
            .interrupt_running(INTERRUPTED_SUMMARY, now_ms())
            .await
            .map_err(|err| err.to_string()),
        Backend::Postgres => Ok(0),
    }
}

/// Builds every configuration's provider once, at start. Keys are read from the environment here
/// and live only inside the providers.
fn configure(settings: &Settings) -> Vec<Configured> {
    let demo: Arc<dyn Provider> = Arc::new(DemoProvider::with_think_time(
        std::time::Duration::from_millis(u64::from(settings.demo_think_ms)),
    ));
    let mut configured = vec![Configured {
        view: ConfigurationView {
            name: DEMO_CONFIGURATION.to_owned(),
            model: "demo-1".to_owned(),
            available: true,
            reason: None,
        },
        provider: Ok(demo),
        defaults: ModelOptions::default(),
        prices: (None, None),
    }];
    for configuration in &settings.configurations {
        let key = match configuration.key_env() {
            None => Ok(None),
            Some(var) => match std::env::var(var) {
                Ok(key) if !key.trim().is_empty() => Ok(Some(ApiKey::from(key.trim()))),
                _ => Err(format!("set the environment variable {var} to its API key")),
            },
        };
        let base_url = configuration
            .base_url
            .clone()
            .unwrap_or_else(|| configuration.kind.default_base_url().to_owned());
        let provider: Result<Arc<dyn Provider>, String> = match (configuration.kind, key) {
            (_, Err(reason)) => Err(reason),
            (ProviderKind::Openai, Ok(api_key)) => OpenAiProvider::new(OpenAiConfig {
                name: configuration.name.clone(),
                // OpenAI itself takes the newer `max_completion_tokens`; compatible servers `max_tokens`.
                max_completion_tokens: base_url.contains("api.openai.com"),
                base_url,
                model: configuration.model.clone(),
                api_key,
                http: HttpSettings::default(),
            })
            .map(|p| Arc::new(p) as Arc<dyn Provider>)
            .map_err(|err| err.message),
            (ProviderKind::Anthropic, Ok(api_key)) => AnthropicProvider::new(AnthropicConfig {
                name: configuration.name.clone(),
                base_url,
                model: configuration.model.clone(),
                api_key: api_key.unwrap_or_default(),
                http: HttpSettings::default(),
            })
            .map(|p| Arc::new(p) as Arc<dyn Provider>)
            .map_err(|err| err.message),
            (ProviderKind::Gemini, Ok(api_key)) => GeminiProvider::new(GeminiConfig {
                name: configuration.name.clone(),
                base_url,
                model: configuration.model.clone(),
                api_key: api_key.unwrap_or_default(),
                http: HttpSettings::default(),
            })
            .map(|p| Arc::new(p) as Arc<dyn Provider>)
            .map_err(|err| err.message),
        };
        configured.push(Configured {
            view: ConfigurationView {
                name: configuration.name.clone(),
                model: configuration.model.clone(),
                available: provider.is_ok(),
                reason: provider.as_ref().err().cloned(),
            },
            provider,
            defaults: ModelOptions {
                temperature: configuration.temperature,
                max_tokens: configuration.max_tokens,
            },
            prices: (
                configuration.price_input_per_million,
                configuration.price_output_per_million,
            ),
        });
    }
    configured
}

/// Builds the loop for a run's configuration.
struct AppLoops {
    registry: Arc<ToolRegistry>,
    configured: Arc<Vec<Configured>>,
}

impl LoopFactory for AppLoops {
    fn tool_loop(
        &self,
        configuration: &RunConfiguration,
    ) -> Result<Arc<dyn ToolLoopService>, String> {
        let found = self
            .configured
            .iter()
            .find(|c| c.view.name == configuration.provider);
        match found.map(|c| &c.provider) {
            Some(Ok(provider)) => Ok(Arc::new(ToolLoop::new(
                Arc::clone(provider),
                Arc::clone(&self.registry),
            ))),
            Some(Err(reason)) => Err(format!(
                "the configuration `{}` is not available: {reason}",
                configuration.provider
            )),
            None => Err(format!(
                "there is no configuration `{}`",
                configuration.provider
            )),
        }
    }

    fn estimate_cost_micros(&self, configuration: &RunConfiguration, usage: Usage) -> Option<i64> {
        let found = self
            .configured
            .iter()
            .find(|c| c.view.name == configuration.provider)?;
        let (input, output) = found.prices;
        if input.is_none() && output.is_none() {
            return None;
        }
        // Dollars per million tokens are micro-dollars per token.
        let micros = usage.prompt_tokens as f64 * input.unwrap_or(0.0)
            + usage.completion_tokens as f64 * output.unwrap_or(0.0);
        Some(micros.round() as i64)
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
        let interrupted = mark_interrupted_runs(store.as_ref(), db.backend())
            .await
            .map_err(|err| format!("cannot check for runs cut off by the last stop: {err}"))?;
        if interrupted > 0 {
            tracing::warn!(
                runs = interrupted,
                "runs still running when the server last stopped are marked interrupted"
            );
        }
        let registry = Arc::new(builtin_registry(site.clone(), Arc::clone(&store)));
        let tool_settings = ToolSettingsStore::new(db.clone());
        tool_settings
            .load_into(&registry)
            .await
            .map_err(|err| format!("cannot read the tool settings: {err}"))?;
        let live = Arc::new(LiveHub::new(StreamLimits {
            per_run: settings.stream_limit_per_run as usize,
            total: settings.stream_limit_total as usize,
        }));
        let configured = Arc::new(configure(settings));
        let loops = Arc::new(AppLoops {
            registry: Arc::clone(&registry),
            configured: Arc::clone(&configured),
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
            configured,
        })
    }

    /// The configurations the playground offers, usable or not (with the reason).
    pub fn configurations(&self) -> Vec<ConfigurationView> {
        self.configured.iter().map(|c| c.view.clone()).collect()
    }

    /// A configuration's default temperature and token limit.
    pub fn configuration_defaults(&self, name: &str) -> ModelOptions {
        self.configured
            .iter()
            .find(|c| c.view.name == name)
            .map(|c| c.defaults.clone())
            .unwrap_or_default()
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
            .bind(nrllm_core::clock::now_ms())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::ModelConfiguration;
    use nrllm_core::store::{NewRun, RunStatus};

    #[tokio::test]
    async fn at_start_runs_cut_off_are_explained_on_sqlite_and_left_alone_on_postgres() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}/runs.db", dir.path().display());
        let db = Database::connect(&url).await.unwrap();
        let store = SqlRunStore::new(db.clone());
        let new_run = || NewRun {
            id: uuid::Uuid::new_v4(),
            configuration: RunConfiguration {
                provider: "demo".into(),
                model: "demo-1".into(),
                prompt: "p".into(),
                system_prompt: None,
                skills: Vec::new(),
                settings: Default::default(),
            },
            requested_by: "operator".into(),
        };
        let first = store.create(&new_run(), now_ms()).await.unwrap();
        // Another instance may be running it: with Postgres nothing is touched.
        assert_eq!(
            mark_interrupted_runs(&store, Backend::Postgres).await,
            Ok(0)
        );
        assert_eq!(
            store.get(first.id).await.unwrap().unwrap().status,
            RunStatus::Running
        );
        assert_eq!(mark_interrupted_runs(&store, db.backend()).await, Ok(1));
        let run = store.get(first.id).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Failed);
        assert_eq!(run.error_summary.as_deref(), Some(INTERRUPTED_SUMMARY));
        // Started again, nothing is left to mark.
        assert_eq!(mark_interrupted_runs(&store, db.backend()).await, Ok(0));
    }

    fn configuration(name: &str, kind: ProviderKind, key_env: &str) -> ModelConfiguration {
        ModelConfiguration {
            name: name.into(),
            kind,
            model: "m-1".into(),
            base_url: Some("http://127.0.0.1:9/v1".into()),
            api_key_env: Some(key_env.into()),
            temperature: Some(0.4),
            max_tokens: None,
            price_input_per_million: Some(2.0),
            price_output_per_million: Some(8.0),
        }
    }

    #[test]
    fn configurations_without_their_key_are_listed_with_the_reason() {
        let settings = Settings {
            configurations: vec![
                configuration(
                    "cloud",
                    ProviderKind::Openai,
                    "NRLLM_TEST_KEY_THAT_IS_NEVER_SET",
                ),
                configuration("local", ProviderKind::Openai, ""),
                configuration("gem", ProviderKind::Gemini, ""),
            ],
            ..Settings::default()
        };
        let configured = configure(&settings);
        let views: Vec<_> = configured.iter().map(|c| c.view.clone()).collect();
        assert_eq!(
            views.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
            ["demo", "cloud", "local", "gem"]
        );
        assert!(views[0].available && views[2].available);
        assert!(!views[1].available);
        assert_eq!(
            views[1].reason.as_deref(),
            Some("set the environment variable NRLLM_TEST_KEY_THAT_IS_NEVER_SET to its API key")
        );
        assert!(views[3].available, "{:?}", views[3].reason);

        let loops = AppLoops {
            registry: Arc::new(ToolRegistry::new()),
            configured: Arc::new(configured),
        };
        let run = |provider: &str| RunConfiguration {
            provider: provider.into(),
            model: "m-1".into(),
            prompt: "p".into(),
            system_prompt: None,
            skills: Vec::new(),
            settings: Default::default(),
        };
        let err = loops.tool_loop(&run("cloud")).err().unwrap();
        assert!(
            err.contains("not available") && err.contains("NRLLM_TEST_KEY_THAT_IS_NEVER_SET"),
            "{err}"
        );
        assert!(loops.tool_loop(&run("local")).is_ok());
        // $2 and $8 per million tokens: 1000 prompt + 500 completion tokens = $0.006.
        let usage = Usage {
            prompt_tokens: 1000,
            completion_tokens: 500,
        };
        assert_eq!(loops.estimate_cost_micros(&run("local"), usage), Some(6000));
        assert_eq!(loops.estimate_cost_micros(&run("demo"), usage), None);
    }
}
