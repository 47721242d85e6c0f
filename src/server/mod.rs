//! The server's composition root: [`AppState`] wires the database, the run store and service, the
//! tools and their settings, the configurations and the live event hub, once, at start. Every
//! piece lives in a module of its own, named for what it does.

pub mod accept;
pub mod approvals;
pub mod audit;
pub mod auth;
pub mod configurations;
pub mod diff;
pub mod export;
pub mod gates;
pub mod health;
pub mod indexer;
pub mod json_body;
pub mod leases;
pub mod list_export;
pub mod live;
pub mod metrics;
pub mod notify;
pub mod outbox;
pub mod owner;
pub mod present;
pub mod queue;
pub mod recovery;
pub mod request;
pub mod retention;
pub mod routes;
pub mod security;
pub mod step_pages;
pub mod webhook;

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::prelude::*;
use nrllm_core::registry::ToolRegistry;
use nrllm_core::run_service::{Listeners, RunListener, RunService};
use nrllm_core::run_store::RunStore;
use nrllm_demo::site::SiteStore;
use nrllm_demo::tools::{builtin_registry, ExportPage};
use nrllm_store::accounts::AccountStore;
use nrllm_store::db::Database;
use nrllm_store::tool_settings::ToolSettingsStore;
use nrllm_store::webhooks::WebhookStore;
use nrllm_store::SqlRunStore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::settings::Settings;
pub use accept::wants_html;
use configurations::Configurations;
use live::{LiveHub, StreamLimits};

/// How often an instance on Postgres reads the tool settings again even when no other instance
/// announced a change (a notification lost to a dropped connection).
const TOOL_SETTINGS_EVERY: std::time::Duration = std::time::Duration::from_secs(30);
/// How long start waits for the MCP servers to connect before it recovers cut-off runs.
const MCP_FIRST_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Everything a request handler needs; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub leptos_options: LeptosOptions,
    pub db: Database,
    pub store: Arc<dyn RunStore>,
    /// The same store with its SQL-only reads (the log's hash chain).
    pub sql_store: SqlRunStore,
    pub runs: Arc<RunService>,
    pub registry: Arc<ToolRegistry>,
    pub site: SiteStore,
    pub tool_settings: ToolSettingsStore,
    pub live: Arc<LiveHub>,
    pub configurations: Arc<Configurations>,
    /// Every run segment the server drives in the background, and the two loops that take runs
    /// (they end at shutdown), so a shutdown can wait for them.
    pub tasks: TaskTracker,
    /// Cancelled when the server is shutting down: no new runs or decisions are taken, and live
    /// streams end.
    pub shutdown: CancellationToken,
    /// Users, sessions, tokens.
    pub accounts: AccountStore,
    /// What the auth middleware checks against.
    pub auth: auth::AuthConfig,
    pub limits: Arc<auth::Limits>,
    /// API tokens just created, shown once on the admin page.
    pub shown_tokens: Arc<auth::ShownTokens>,
    /// Signs the error a form post leaves in its redirect URL, so a link cannot make the app
    /// show words it did not say.
    pub banner_key: Arc<Vec<u8>>,
    /// How long a login lasts, in milliseconds.
    pub session_ms: i64,
    /// Where users reach the server (links in webhooks and login links).
    pub public_url: String,
    /// Where a run's trace is shown (`{trace_id}` in it), if set.
    pub trace_url_template: Option<String>,
    /// The webhook deliveries (shown on the run page).
    pub webhook_store: WebhookStore,
    /// Sends them, if any configuration has a webhook ([`AppState::start_background`]).
    pub webhooks: Option<Arc<webhook::Webhooks>>,
    /// The notifications (mails), people's addresses, decision links, and their sender.
    pub notify: notify::Wiring,
    /// This instance's name, as the owner of the leases of the runs it drives.
    pub instance: String,
    /// The runs this instance drives, their heartbeat, and the reaper.
    pub leases: Arc<leases::Leases>,
    /// This instance's worker, taking queued runs while it has room.
    pub queue: Arc<queue::Queue>,
    /// On Postgres: other instances' commits, for live streams of the runs they drive.
    pub remote: Option<Arc<live::RemoteFeed>>,
    /// What `/metrics` counts.
    pub counters: Arc<metrics::Counters>,
    /// The MCP servers whose tools joined the registry, and their states.
    pub mcp: Arc<nrllm_mcp::hub::McpHub>,
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
        let (instance, lease, sql_store) = run_store(&db, settings).await?;
        let lease_clock = Arc::new(leases::LeaseClock::new(lease));
        let store: Arc<dyn RunStore> = Arc::new(sql_store.clone());
        let shutdown = CancellationToken::new();
        let (registry, tool_settings, mcp) = tools(&site, &store, &db, settings, &shutdown).await?;
        let configurations = Arc::new(Configurations::from_settings(
            settings,
            Arc::clone(&registry),
        ));
        let live = live_hub(settings, &configurations);
        // The webhook sender's bell and the notifier's: each rings when a run begins to wait.
        let bells: (Arc<outbox::Bell>, Arc<outbox::Bell>) = Default::default();
        let counters = Arc::new(metrics::Counters::with_prices(configurations.all_prices()));
        let listeners: Vec<Arc<dyn RunListener>> = vec![
            live.clone(),
            bells.0.clone(),
            bells.1.clone(),
            counters.clone(),
        ];
        let runs = run_service(
            (&store, Arc::new(sql_store.clone())),
            &configurations,
            listeners,
            lease_clock.clone(),
            settings,
        );
        let (accounts, banner_key) = accounts(&db, settings).await?;
        let (webhook_store, webhooks, notify) =
            announcers(&db, &accounts, &runs, bells, (settings, &configurations)).await?;
        let tasks = TaskTracker::new();
        let lease = (lease, lease_clock);
        let (leases, queue) = workers((&store, &runs, &tasks), lease, (&live, &mcp), settings);
        recovery::recover_cut_off_runs(&store, &leases, db.backend())
            .await
            .map_err(|err| format!("cannot recover the runs the last stop cut off: {err}"))?;
        let remote = remote_feed(&db, &live, settings, &instance);
        Ok(AppState {
            leptos_options,
            db,
            store,
            sql_store,
            runs,
            registry,
            site,
            tool_settings,
            live,
            configurations,
            tasks,
            shutdown,
            auth: auth::AuthConfig {
                accounts: accounts.clone(),
                allowed_hosts: Arc::new(settings.allowed_hosts.clone()),
                secure: settings.public_url.starts_with("https://"),
            },
            accounts,
            limits: Arc::new(auth::Limits::new(settings.run_starts_per_minute)),
            shown_tokens: Arc::default(),
            banner_key: Arc::new(banner_key.into_bytes()),
            session_ms: i64::from(settings.session_hours) * 3600 * 1000,
            public_url: settings.public_url.clone(),
            trace_url_template: settings.trace_url_template.clone(),
            webhook_store,
            webhooks,
            notify,
            instance,
            leases,
            queue,
            remote,
            counters,
            mcp,
        })
    }

    /// Starts the work the server does besides answering requests (until shutdown): the leases'
    /// heartbeat and reaper, the queue's worker, the search indexer, the webhook sender, and on
    /// Postgres the listener for other instances' commits and tool settings.
    pub fn start_background(&self) {
        // The two loops that take runs (the reaper's takeovers, the queue's worker) are tracked
        // like the runs they drive: a shutdown waits until a take in flight has handed its run
        // to a task, rather than leaving it taken and never driven until the next start.
        self.tasks
            .spawn(Arc::clone(&self.leases).run(self.shutdown.clone()));
        // The rate limiters forget the keys whose limits refilled: what failed logins and run
        // starts leave behind does not pile up.
        let (limits, shutdown) = (Arc::clone(&self.limits), self.shutdown.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(auth::FORGET_IDLE_EVERY) => limits.forget_idle(),
                }
            }
        });
        self.tasks
            .spawn(Arc::clone(&self.queue).run(self.remote.clone(), self.shutdown.clone()));
        tokio::spawn(indexer::run(self.sql_store.clone(), self.shutdown.clone()));
        if let Some(remote) = &self.remote {
            tokio::spawn(Arc::clone(remote).run(self.shutdown.clone()));
            tokio::spawn(live::announce_forming(
                Arc::clone(&self.live),
                self.db.clone(),
                self.shutdown.clone(),
            ));
        }
        if let Some(remote) = &self.remote {
            // Another instance may switch a tool on or off: read the choices again when it says
            // so (NOTIFY), and now and then in case a notification was lost.
            let (settings, registry, remote, shutdown) = (
                self.tool_settings.clone(),
                Arc::clone(&self.registry),
                Arc::clone(remote),
                self.shutdown.clone(),
            );
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = remote.tool_settings_changed() => {}
                        _ = tokio::time::sleep(TOOL_SETTINGS_EVERY) => {}
                    }
                    if let Err(err) = settings.load_into(&registry).await {
                        tracing::warn!(%err, "reading the tool settings again failed");
                    }
                }
            });
        }
        if let Some(notifier) = &self.notify.sender {
            tokio::spawn(Arc::clone(notifier).run(self.shutdown.clone()));
        }
        if let Some(webhooks) = &self.webhooks {
            tokio::spawn(Arc::clone(webhooks).run(self.shutdown.clone()));
        }
    }
}

/// On Postgres, the feed of what other instances commit and write (none on SQLite).
fn remote_feed(
    db: &Database,
    live: &Arc<LiveHub>,
    settings: &Settings,
    instance: &str,
) -> Option<Arc<live::RemoteFeed>> {
    (db.backend() == nrllm_store::db::Backend::Postgres).then(|| {
        Arc::new(
            live::RemoteFeed::new(
                &settings.database_url,
                settings.stream_limit_total as usize,
                Arc::clone(live),
                db.clone(),
            )
            .of_instance(instance),
        )
    })
}

/// This instance's name, how long its leases last, and the run store that holds runs under
/// them, with the audit key's anchor recorded.
async fn run_store(
    db: &Database,
    settings: &Settings,
) -> Result<(String, std::time::Duration, SqlRunStore), String> {
    let instance = format!(
        "{}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let lease = std::time::Duration::from_secs(u64::from(settings.lease_secs));
    let sql_store = SqlRunStore::new(db.clone()).with_lease(&instance, lease.as_millis() as i64);
    sql_store
        .anchor_audit_key(nrllm_core::clock::now_ms())
        .await
        .map_err(|err| format!("cannot record the audit key's anchor: {err}"))?;
    tracing::info!(
        key = sql_store.database().audit_key().id(),
        "runs' logs are chained by the audit key with this id"
    );
    tracing::info!(%instance, lease_secs = settings.lease_secs, max_running_runs = settings.max_running_runs, "this instance");
    Ok((instance, lease, sql_store))
}

/// The tools: the built-in ones (on the demo site, seeded once) and the export tool, with their
/// settings as stored, and the MCP
/// servers' tools. Those join before the runs the last stop cut off are recovered (a server still
/// connecting after MCP_FIRST_WAIT joins when it can; one that fails stops nothing).
async fn tools(
    site: &SiteStore,
    store: &Arc<dyn RunStore>,
    db: &Database,
    settings: &Settings,
    shutdown: &CancellationToken,
) -> Result<
    (
        Arc<ToolRegistry>,
        ToolSettingsStore,
        Arc<nrllm_mcp::hub::McpHub>,
    ),
    String,
> {
    site.seed_once()
        .await
        .map_err(|err| format!("cannot seed the demo site: {err}"))?;
    let mut registry = builtin_registry(site.clone(), Arc::clone(store));
    registry
        .register(ExportPage::new(site.clone(), &settings.export_dir))
        .map_err(|err| format!("cannot register the export tool: {err}"))?;
    let registry = Arc::new(registry);
    let tool_settings = ToolSettingsStore::new(db.clone());
    tool_settings
        .load_into(&registry)
        .await
        .map_err(|err| format!("cannot read the tool settings: {err}"))?;
    // A question asked inside an open call is held by this process; its run is held for it in
    // the queue, so that the reply reaches it whichever instance it was given to.
    let hold = Some(std::time::Duration::from_secs(u64::from(
        settings.mcp_elicitation_timeout_secs,
    )));
    let servers = settings
        .mcp_servers
        .iter()
        .cloned()
        .map(|server| nrllm_mcp::config::Server {
            elicitation_timeout: hold,
            ..server
        })
        .collect();
    let mcp = nrllm_mcp::hub::McpHub::start(
        servers,
        Arc::clone(&registry),
        shutdown.clone(),
        (
            MCP_FIRST_WAIT,
            Some(Arc::new(gates::StoredGates(
                nrllm_store::mcp_gates::McpGateStore::new(db.clone()),
            ))),
        ),
    )
    .await;
    Ok((registry, tool_settings, mcp))
}

/// The run service, telling `listeners` about every run, with the state limit, this instance's
/// leases, four-eyes and the daily spend caps (counted in `spend`) as the settings and
/// configurations say.
fn run_service(
    (store, spend): (&Arc<dyn RunStore>, Arc<dyn nrllm_core::spend::SpendLedger>),
    configurations: &Arc<Configurations>,
    listeners: Vec<Arc<dyn RunListener>>,
    lease_clock: Arc<leases::LeaseClock>,
    settings: &Settings,
) -> Arc<RunService> {
    // An unreadable configuration: the safe answer, four-eyes.
    let four_eyes = Arc::clone(configurations);
    Arc::new(
        RunService::new(Arc::clone(store), configurations.clone())
            .with_listener(Arc::new(Listeners(listeners)))
            .with_state_limit(settings.max_state_bytes as usize)
            .with_lease_watch(lease_clock)
            .with_spend_ledger(spend)
            .with_four_eyes(move |name| name.is_none_or(|name| four_eyes.four_eyes(name))),
    )
}

/// The accounts (the first administrator made on the first start) and the key error banners are
/// signed with.
async fn accounts(db: &Database, settings: &Settings) -> Result<(AccountStore, String), String> {
    let accounts = AccountStore::new(db.clone());
    auth::first_admin(
        &accounts,
        &settings.public_url,
        std::env::var("NRLLM_ADMIN_PASSWORD").ok(),
    )
    .await?;
    let banner_key = accounts
        .server_secret("error_banner_key")
        .await
        .map_err(|err| format!("cannot read the server's keys: {err}"))?;
    Ok((accounts, banner_key))
}

/// The live hub, which knows each configuration's prices (a live step's cost).
fn live_hub(settings: &Settings, configurations: &Arc<Configurations>) -> Arc<LiveHub> {
    let prices = Arc::clone(configurations);
    Arc::new(
        LiveHub::new(StreamLimits {
            per_run: settings.stream_limit_per_run as usize,
            total: settings.stream_limit_total as usize,
        })
        .with_prices(Arc::new(move |configuration| {
            nrllm_core::run_service::LoopFactory::prices(&*prices, configuration)
        })),
    )
}

/// What tells people a run waits: the webhook outbox and its sender (if any target is set), and
/// the notification outbox, people's addresses, the decision links' key, and the sender of
/// notifications (if anyone is notified of anything); each sender woken by its bell.
async fn announcers(
    db: &Database,
    accounts: &AccountStore,
    runs: &Arc<RunService>,
    (webhook_bell, bell): (Arc<outbox::Bell>, Arc<outbox::Bell>),
    (settings, configurations): (&Settings, &Configurations),
) -> Result<(WebhookStore, Option<Arc<webhook::Webhooks>>, notify::Wiring), String> {
    let webhook_store = WebhookStore::new(db.clone());
    let webhooks = webhooks(&webhook_store, (accounts, runs), webhook_bell, settings)?;
    let key = accounts
        .server_secret("decision_link_key")
        .await
        .map_err(|err| format!("cannot read the decision link key: {err}"))?;
    let link_key = notify::links::LinkKey::new(key.as_bytes());
    let store = nrllm_store::notifications::NotificationStore::new(db.clone());
    let contacts = nrllm_store::contacts::ContactStore::new(db.clone());
    let slack = notify::SlackApp::from_settings(&settings.notifications.slack, |name| {
        std::env::var(name).ok()
    })?
    .map(Arc::new);
    let parts = notify::Parts {
        store: store.clone(),
        contacts: contacts.clone(),
        runs: Arc::clone(runs),
        accounts: accounts.clone(),
        links: link_key.clone(),
        bell,
        slack: slack.clone(),
    };
    let sender = notify::Notifier::new(parts, settings, &configurations.names())?.map(Arc::new);
    let wiring = notify::Wiring {
        store,
        contacts,
        links: link_key,
        sender,
        slack,
    };
    Ok((webhook_store, webhooks, wiring))
}

/// The webhooks' sender, if any target is set.
fn webhooks(
    store: &WebhookStore,
    (accounts, runs): (&AccountStore, &Arc<RunService>),
    bell: Arc<outbox::Bell>,
    settings: &Settings,
) -> Result<Option<Arc<webhook::Webhooks>>, String> {
    let targets = webhook::Targets::from_settings(settings, |var| std::env::var(var).ok())?;
    if targets.is_empty() {
        return Ok(None);
    }
    let webhooks =
        webhook::Webhooks::new(store.clone(), Arc::clone(runs), targets, bell, settings)?
            .with_accounts(accounts.clone());
    Ok(Some(Arc::new(webhooks)))
}

/// The leases this instance holds (with their heartbeat and reaper; the calls its MCP servers
/// hold open count against its running slots) and the queue's worker.
fn workers(
    (store, runs, tasks): (&Arc<dyn RunStore>, &Arc<RunService>, &TaskTracker),
    lease: (std::time::Duration, Arc<leases::LeaseClock>),
    (live, mcp): (&Arc<LiveHub>, &Arc<nrllm_mcp::hub::McpHub>),
    settings: &Settings,
) -> (Arc<leases::Leases>, Arc<queue::Queue>) {
    let mcp = Arc::clone(mcp);
    let leases = Arc::new(
        leases::Leases::new(
            Arc::clone(store),
            Arc::clone(runs),
            tasks.clone(),
            lease,
            live.clone(),
            settings.max_running_runs as usize,
        )
        .with_held_calls(move || mcp.held_calls()),
    );
    let queue = Arc::new(queue::Queue::new(
        Arc::clone(runs),
        Arc::clone(store),
        Arc::clone(&leases),
    ));
    (leases, queue)
}
