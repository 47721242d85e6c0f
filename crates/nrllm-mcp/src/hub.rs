//! The servers this process connects: one supervisor task each, which connects, lists the
//! server's tools into the registry, watches the connection, and connects again with backoff
//! when it ends (a stdio server that died is started again). An admin may ask for a reconnect;
//! the system page reads each server's state. A server that fails never stops the program: its
//! state says why, and its tools (if it had joined) answer that it is not connected.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use nrllm_core::registry::ToolRegistry;
use nrllm_core::retry::retry_delay;
use nrllm_core::tool::DynTool;
use nrllm_types::McpToolStatus;
use rmcp::service::{RoleClient, RunningService};
use serde::Serialize;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::config::{Server, Transport};
pub use crate::connect::MAX_TOOLS;
use crate::connect::{connect, listed};
use crate::gates::GateMemory;
use crate::relist::RELIST_EVERY;
use crate::tool::{bounded, Link, Listed, McpTool};

/// How long connecting (start, handshake, tool list) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// The first wait before connecting again (spread ±20 %); it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(500);
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A connection that lasted this long starts the backoff over when it ends.
const STABLE: Duration = Duration::from_secs(60);

/// A server's state, as the system page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum State {
    Connecting,
    Connected,
    /// Down: why, and when it is tried again (milliseconds since the epoch), if it is.
    Failed {
        reason: String,
        retry_at_ms: Option<i64>,
    },
}

/// A server's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    pub name: String,
    pub endpoint: String,
    pub state: State,
    /// The server's own name and version, from its handshake.
    pub server_info: Option<String>,
    pub tools: Vec<McpToolStatus>,
    /// How many times it was connected since start.
    pub connections: u32,
    /// How many times its tool list changed while it was connected, and when it last did
    /// (milliseconds since the epoch).
    pub list_changes: u32,
    pub list_changed_at_ms: Option<i64>,
    /// How many of its calls are held open now for an operator's reply to the question it asked
    /// inside them ([`crate::held`]).
    pub held_calls: usize,
}

struct Supervised {
    config: Server,
    link: Arc<Link>,
    status: RwLock<Status>,
    reconnect: Notify,
    /// Set once the first attempt has ended (connected or failed).
    tried: watch::Sender<bool>,
    /// The server said its tool list changed ([`crate::relist`]).
    relist: Arc<Notify>,
    /// What it listed last: an administrator's acceptance of looser hints rebuilds from it.
    last_listed: RwLock<Vec<Listed>>,
    /// Its tools' gates as the last process left them, until its tools first join here.
    recalled: Mutex<Option<Vec<McpToolStatus>>>,
    memory: Option<Arc<dyn GateMemory>>,
    /// Its tools' gates as they joined last, for the keeper ([`Supervised::keep_gates`]).
    gates: watch::Sender<Option<BTreeMap<String, bool>>>,
}

/// Every configured server.
pub struct McpHub {
    servers: Vec<Arc<Supervised>>,
    registry: Arc<ToolRegistry>,
}

impl McpHub {
    /// Starts a supervisor for each server and waits until each has tried once (at most
    /// `first_wait`), so that runs cut off by the last stop find their tools; a server still
    /// connecting after that joins when it can.
    /// `memory` keeps the tools' gates across restarts ([`crate::gates`]).
    pub async fn start(
        servers: Vec<Server>,
        registry: Arc<ToolRegistry>,
        shutdown: CancellationToken,
        (first_wait, memory): (Duration, Option<Arc<dyn GateMemory>>),
    ) -> Arc<McpHub> {
        // https servers: rustls with ring (installing twice is harmless).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let recalled = match &memory {
            Some(memory) => memory.recall().await.unwrap_or_else(|err| {
                tracing::warn!(%err, "the MCP tools' gates before this start cannot be read; a hint loosened meanwhile is not caught");
                BTreeMap::new()
            }),
            None => BTreeMap::new(),
        };
        let hub = Arc::new(McpHub {
            servers: servers
                .into_iter()
                .map(|config| {
                    let remembered = memory
                        .is_some()
                        .then(|| crate::gates::of_server(&recalled, &config.name));
                    Arc::new(Supervised {
                        status: RwLock::new(Status {
                            name: config.name.clone(),
                            endpoint: config.endpoint(),
                            state: State::Connecting,
                            server_info: None,
                            tools: Vec::new(),
                            connections: 0,
                            list_changes: 0,
                            list_changed_at_ms: None,
                            held_calls: 0,
                        }),
                        link: Arc::new(Link::new(config.elicitation_timeout)),
                        config,
                        reconnect: Notify::new(),
                        tried: watch::channel(false).0,
                        relist: Arc::default(),
                        last_listed: RwLock::default(),
                        recalled: Mutex::new(remembered),
                        memory: memory.clone(),
                        gates: watch::channel(None).0,
                    })
                })
                .collect(),
            registry: Arc::clone(&registry),
        });
        let mut tried = Vec::new();
        for server in &hub.servers {
            // Subscribed before it can join, so that no change is missed.
            let changed = server.gates.subscribe();
            tokio::spawn(Arc::clone(server).keep_gates(changed, shutdown.clone()));
            tried.push(server.tried.subscribe());
            tokio::spawn(supervise(
                Arc::clone(server),
                Arc::clone(&registry),
                shutdown.clone(),
            ));
        }
        let all_tried = async {
            for mut rx in tried {
                let _ = rx.wait_for(|tried| *tried).await;
            }
        };
        let _ = tokio::time::timeout(first_wait, all_tried).await;
        hub
    }

    /// Every server's status, in configuration order.
    pub fn statuses(&self) -> Vec<Status> {
        self.servers
            .iter()
            .filter_map(|server| {
                let mut status = server.status.read().ok()?.clone();
                status.held_calls = server.link.parked();
                Some(status)
            })
            .collect()
    }

    /// Accepts the looser hints of the tools of server `name` that kept their old gate
    /// ([`crate::relist`]): their calls go ahead as the hints say from the next turn. How many
    /// tools it let go; `None` if there is no such server.
    pub fn accept_hints(&self, name: &str) -> Option<usize> {
        let server = self.servers.iter().find(|s| s.config.name == name)?;
        let before = server.held_count();
        let listed = server
            .last_listed
            .read()
            .map(|l| l.clone())
            .unwrap_or_default();
        server.register(&self.registry, listed, false);
        Some(before)
    }

    /// Asks the server named `name` to connect again now (its tools are listed again). `false`
    /// if there is no such server.
    pub fn reconnect(&self, name: &str) -> bool {
        match self.servers.iter().find(|s| s.config.name == name) {
            Some(server) => {
                server.reconnect.notify_one();
                true
            }
            None => false,
        }
    }

    /// How many calls of every server are held open now, each for an operator's reply to the
    /// question its server asked inside it: each keeps its run's running slot here.
    pub fn held_calls(&self) -> usize {
        self.servers.iter().map(|server| server.link.parked()).sum()
    }
}

/// Why a supervisor's wait ended.
enum Woken {
    Closed(String),
    Reconnect,
    Shutdown,
}

async fn supervise(
    server: Arc<Supervised>,
    registry: Arc<ToolRegistry>,
    shutdown: CancellationToken,
) {
    let name = server.config.name.clone();
    // Failed connections in a row: each waits longer ([`retry_delay`]), spread by the name.
    let mut failures = 0u32;
    let spread = name.bytes().fold(0u64, |hash, byte| {
        hash.wrapping_mul(31).wrapping_add(u64::from(byte))
    });
    loop {
        server.set_state(State::Connecting);
        let attempt = tokio::time::timeout(
            CONNECT_TIMEOUT,
            connect(
                &server.config,
                (server.link.progress(), server.link.held()),
                Arc::clone(&server.relist),
            ),
        );
        let woken = match tokio::select! {
            attempt = attempt => Some(attempt),
            _ = shutdown.cancelled() => None,
        } {
            None => return,
            Some(Err(_)) => Woken::Closed(format!(
                "it did not finish connecting within {} s",
                CONNECT_TIMEOUT.as_secs()
            )),
            Some(Ok(Err(reason))) => Woken::Closed(reason),
            Some(Ok(Ok((running, listed)))) => {
                let connected_at = Instant::now();
                server.joined(&registry, &running, listed);
                tracing::info!(server = %name, "MCP server connected");
                let woken = watch(running, &server, &registry, &shutdown).await;
                if connected_at.elapsed() >= STABLE {
                    failures = 0;
                }
                woken
            }
        };
        let reason = match woken {
            Woken::Shutdown => {
                server.link.disconnected("the program is stopping");
                return;
            }
            Woken::Reconnect => {
                server
                    .link
                    .disconnected("an administrator asked it to reconnect");
                failures = 0;
                continue;
            }
            Woken::Closed(reason) => reason,
        };
        let backoff = retry_delay(
            FIRST_BACKOFF,
            failures,
            MAX_BACKOFF,
            spread.wrapping_add(u64::from(failures)),
        );
        tracing::warn!(server = %name, %reason, retry_in_ms = backoff.as_millis() as u64, "MCP server down");
        server.link.disconnected(&reason);
        server.set_state(State::Failed {
            reason,
            retry_at_ms: Some(nrllm_core::clock::now_ms() + backoff.as_millis() as i64),
        });
        server.tried.send_replace(true);
        tokio::select! {
            _ = tokio::time::sleep(backoff) => failures = failures.saturating_add(1),
            _ = server.reconnect.notified() => failures = 0,
            _ = shutdown.cancelled() => return,
        }
    }
}

/// Waits until the connection ends, an admin asks for a reconnect, or the program stops; lists
/// the tools again each time the server says they changed (at most every [`RELIST_EVERY`]).
async fn watch(
    running: RunningService<RoleClient, Client>,
    server: &Supervised,
    registry: &ToolRegistry,
    shutdown: &CancellationToken,
) -> Woken {
    let token = running.cancellation_token();
    let peer = running.peer().clone();
    let following = tokio::spawn(crate::relist::follow(
        peer.clone(),
        Arc::clone(&server.relist),
    ));
    let waiting = running.waiting();
    tokio::pin!(waiting);
    let mut listed_at: Option<Instant> = None;
    let woken = loop {
        tokio::select! {
            quit = &mut waiting => {
                following.abort();
                return Woken::Closed(closed_reason(server, quit));
            }
            _ = server.reconnect.notified() => break Woken::Reconnect,
            _ = shutdown.cancelled() => break Woken::Shutdown,
            _ = server.relist.notified() => {
                let wait = listed_at.map_or(Duration::ZERO, |at| RELIST_EVERY.saturating_sub(at.elapsed()));
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.cancelled() => break Woken::Shutdown,
                }
                listed_at = Some(Instant::now());
                server.relisted(registry, &peer).await;
            }
        }
    };
    following.abort();
    token.cancel();
    woken
}

/// Why a connection that ended did.
fn closed_reason(
    server: &Supervised,
    quit: Result<rmcp::service::QuitReason, tokio::task::JoinError>,
) -> String {
    match quit {
        Ok(quit) => {
            tracing::debug!(server = %server.config.name, ?quit, "MCP connection ended");
            match server.config.transport {
                Transport::Stdio { .. } => {
                    "the server process stopped (or closed its output)".to_owned()
                }
                Transport::Http { .. } => "the connection to the server closed".to_owned(),
            }
        }
        Err(err) => {
            tracing::warn!(server = %server.config.name, %err, "MCP connection task failed");
            "the connection failed (the details are in the server log)".to_owned()
        }
    }
}

impl Supervised {
    fn set_state(&self, state: State) {
        if let Ok(mut status) = self.status.write() {
            status.state = state;
        }
    }

    /// How many of its tools keep their old gate until an administrator accepts looser hints.
    fn held_count(&self) -> usize {
        self.status
            .read()
            .map(|status| status.tools.iter().filter(|t| t.held.is_some()).count())
            .unwrap_or(0)
    }

    /// Its tools as `listed` join the registry (replacing what it had) and its status lists
    /// them. With `keep`, a tool whose hints became looser than when it last joined keeps its
    /// old gate ([`crate::relist::held`]); without, every tool is gated by its hints.
    fn register(&self, registry: &ToolRegistry, listed: Vec<Listed>, keep: bool) {
        let config = &self.config;
        // Its tools first join here: as the last process left them.
        let recalled = self.recalled.lock().ok().and_then(|mut r| r.take());
        let before = recalled.unwrap_or_else(|| {
            self.status
                .read()
                .map(|s| s.tools.clone())
                .unwrap_or_default()
        });
        if let Ok(mut last) = self.last_listed.write() {
            *last = listed.clone();
        }
        let mut tools: Vec<Arc<dyn DynTool>> = Vec::new();
        let mut shown = Vec::new();
        for listed in listed {
            let remote = listed.name.clone();
            let registry_name = format!("{}{}{remote}", config.name, nrllm_core::mcp::SEPARATOR);
            let waits_now = config
                .policy
                .requires_approval(&remote, &listed.annotations);
            let earlier = before.iter().find(|t| t.name == registry_name);
            let hold = crate::relist::held(earlier, waits_now, keep);
            let built = McpTool::new(
                &config.name,
                listed,
                &config.policy,
                Arc::clone(&self.link),
                (config.call_timeout, hold),
            );
            match built {
                Ok(tool) => {
                    shown.push(McpToolStatus {
                        name: tool.spec().name.clone(),
                        waits: tool.waits(),
                        rerun_after_crash: tool.spec().idempotent_by_key,
                        refused: None,
                        held: hold.then(|| crate::relist::HELD.to_owned()),
                    });
                    tools.push(Arc::new(tool));
                }
                Err(reason) => shown.push(McpToolStatus {
                    name: bounded(&remote, 80),
                    waits: false,
                    rerun_after_crash: false,
                    refused: Some(reason),
                    held: None,
                }),
            }
        }
        for taken in registry.set_source(&config.name, tools) {
            if let Some(tool) = shown.iter_mut().find(|t| t.name == taken.0) {
                tool.refused = Some(taken.to_string());
            }
        }
        self.remember(&shown);
        if let Ok(mut status) = self.status.write() {
            status.tools = shown;
        }
    }

    /// Keeps the gates of its tools as `shown`, for the next start ([`crate::gates`]): the
    /// keeper writes the latest, in order.
    fn remember(&self, shown: &[McpToolStatus]) {
        if self.memory.is_none() {
            return;
        }
        let gates = shown
            .iter()
            .filter(|tool| tool.refused.is_none())
            .map(|tool| (tool.name.clone(), tool.waits))
            .collect();
        self.gates.send_replace(Some(gates));
    }

    /// Writes its tools' gates to `memory` as they change, the latest each time, until
    /// `shutdown`.
    async fn keep_gates(
        self: Arc<Self>,
        mut changed: watch::Receiver<Option<BTreeMap<String, bool>>>,
        shutdown: CancellationToken,
    ) {
        let Some(memory) = self.memory.clone() else {
            return;
        };
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                seen = changed.changed() => if seen.is_err() { return },
            }
            let Some(gates) = changed.borrow_and_update().clone() else {
                continue;
            };
            let server = &self.config.name;
            if let Err(err) = memory.remember(server, gates).await {
                tracing::warn!(%server, %err, "the MCP tools' gates cannot be kept for the next start");
            }
        }
    }

    /// The server connected: its tools join the registry ([`Supervised::register`]; a tool
    /// whose hints loosened since its last connection keeps its old gate), and its tools'
    /// calls go through the new connection.
    fn joined(
        &self,
        registry: &ToolRegistry,
        running: &RunningService<RoleClient, Client>,
        listed: Vec<Listed>,
    ) {
        self.register(registry, listed, true);
        self.link.connected(running.peer().clone());
        let info = running
            .peer_info()
            .and_then(|info| info.server_info.clone())
            .map(|info| bounded(&format!("{} {}", info.name, info.version), 200));
        if let Ok(mut status) = self.status.write() {
            status.state = State::Connected;
            status.server_info = info;
            status.connections += 1;
        }
        self.tried.send_replace(true);
    }

    /// The server said its tool list changed: its tools are listed again and, if they differ
    /// from the last listing, join as they are now (a tool whose hints loosened keeps its old
    /// gate) and the change is counted. A listing that fails keeps the tools as they were.
    async fn relisted(&self, registry: &ToolRegistry, peer: &rmcp::service::Peer<RoleClient>) {
        let name = &self.config.name;
        let tools = match peer.list_all_tools().await {
            Ok(tools) if tools.len() <= MAX_TOOLS => tools,
            Ok(tools) => {
                tracing::warn!(server = %name, count = tools.len(), "an MCP server now lists too many tools; kept the ones it had");
                return;
            }
            Err(err) => {
                tracing::warn!(server = %name, %err, "listing an MCP server's changed tools failed; kept the ones it had");
                return;
            }
        };
        let listed = listed(tools, &self.config);
        let same = self.last_listed.read().is_ok_and(|last| *last == listed);
        if same {
            return;
        }
        self.register(registry, listed, true);
        if let Ok(mut status) = self.status.write() {
            status.list_changes += 1;
            status.list_changed_at_ms = Some(nrllm_core::clock::now_ms());
        }
        tracing::info!(server = %name, "an MCP server's tool list changed; its tools were listed again");
    }
}
