//! The servers this process connects: one supervisor task each, which connects, lists the
//! server's tools into the registry, watches the connection, and connects again with backoff
//! when it ends (a stdio server that died is started again). An admin may ask for a reconnect;
//! the system page reads each server's state. A server that fails never stops the program: its
//! state says why, and its tools (if it had joined) answer that it is not connected.

use std::process::Stdio;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use nrllm_core::mcp::Annotations;
use nrllm_core::registry::ToolRegistry;
use nrllm_core::retry::retry_delay;
use nrllm_core::tool::DynTool;
use nrllm_types::McpToolStatus;
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::config::{Server, Transport, INHERITED_ENV, SELF_COMMAND};
use crate::tool::{bounded, Link, Listed, McpTool, PREVIEW_SUFFIX};

/// How long connecting (start, handshake, tool list) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// The first wait before connecting again (spread ±20 %); it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(500);
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A connection that lasted this long starts the backoff over when it ends.
const STABLE: Duration = Duration::from_secs(60);
/// The most tools one server may bring.
pub const MAX_TOOLS: usize = 200;

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
}

struct Supervised {
    config: Server,
    link: Arc<Link>,
    status: RwLock<Status>,
    reconnect: Notify,
    /// Set once the first attempt has ended (connected or failed).
    tried: watch::Sender<bool>,
}

/// Every configured server.
pub struct McpHub {
    servers: Vec<Arc<Supervised>>,
}

impl McpHub {
    /// Starts a supervisor for each server and waits until each has tried once (at most
    /// `first_wait`), so that runs cut off by the last stop find their tools; a server still
    /// connecting after that joins when it can.
    pub async fn start(
        servers: Vec<Server>,
        registry: Arc<ToolRegistry>,
        shutdown: CancellationToken,
        first_wait: Duration,
    ) -> Arc<McpHub> {
        // https servers: rustls with ring (installing twice is harmless).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let hub = Arc::new(McpHub {
            servers: servers
                .into_iter()
                .map(|config| {
                    Arc::new(Supervised {
                        status: RwLock::new(Status {
                            name: config.name.clone(),
                            endpoint: config.endpoint(),
                            state: State::Connecting,
                            server_info: None,
                            tools: Vec::new(),
                            connections: 0,
                        }),
                        config,
                        link: Arc::default(),
                        reconnect: Notify::new(),
                        tried: watch::channel(false).0,
                    })
                })
                .collect(),
        });
        let mut tried = Vec::new();
        for server in &hub.servers {
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
            .filter_map(|server| server.status.read().ok().map(|s| s.clone()))
            .collect()
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
            connect(&server.config, server.link.progress()),
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
                let woken = watch(running, &server, &shutdown).await;
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

/// Waits until the connection ends, an admin asks for a reconnect, or the program stops.
async fn watch(
    running: RunningService<RoleClient, Client>,
    server: &Supervised,
    shutdown: &CancellationToken,
) -> Woken {
    let token = running.cancellation_token();
    let woken = tokio::select! {
        quit = running.waiting() => {
            return Woken::Closed(match quit {
                Ok(quit) => {
                    tracing::debug!(server = %server.config.name, ?quit, "MCP connection ended");
                    match server.config.transport {
                        Transport::Stdio { .. } => "the server process stopped (or closed its output)".to_owned(),
                        Transport::Http { .. } => "the connection to the server closed".to_owned(),
                    }
                }
                Err(err) => {
                    tracing::warn!(server = %server.config.name, %err, "MCP connection task failed");
                    "the connection failed (the details are in the server log)".to_owned()
                }
            });
        }
        _ = server.reconnect.notified() => Woken::Reconnect,
        _ = shutdown.cancelled() => Woken::Shutdown,
    };
    token.cancel();
    woken
}

impl Supervised {
    fn set_state(&self, state: State) {
        if let Ok(mut status) = self.status.write() {
            status.state = state;
        }
    }

    /// The server connected: its tools join the registry (replacing what it had), its status
    /// lists them, and its tools' calls go through the new connection.
    fn joined(
        &self,
        registry: &ToolRegistry,
        running: &RunningService<RoleClient, Client>,
        listed: Vec<Listed>,
    ) {
        let config = &self.config;
        let mut tools: Vec<Arc<dyn DynTool>> = Vec::new();
        let mut shown = Vec::new();
        for listed in listed {
            let remote = listed.name.clone();
            match McpTool::new(
                &config.name,
                listed,
                &config.policy,
                Arc::clone(&self.link),
                config.call_timeout,
            ) {
                Ok(tool) => {
                    shown.push(McpToolStatus {
                        name: tool.spec().name.clone(),
                        waits: tool.waits(),
                        rerun_after_crash: tool.spec().idempotent_by_key,
                        refused: None,
                    });
                    tools.push(Arc::new(tool));
                }
                Err(reason) => shown.push(McpToolStatus {
                    name: bounded(&remote, 80),
                    waits: false,
                    rerun_after_crash: false,
                    refused: Some(reason),
                }),
            }
        }
        for taken in registry.set_source(&config.name, tools) {
            if let Some(tool) = shown.iter_mut().find(|t| t.name == taken.0) {
                tool.refused = Some(taken.to_string());
            }
        }
        self.link.connected(running.peer().clone());
        let info = running
            .peer_info()
            .and_then(|info| info.server_info.clone())
            .map(|info| bounded(&format!("{} {}", info.name, info.version), 200));
        if let Ok(mut status) = self.status.write() {
            status.state = State::Connected;
            status.tools = shown;
            status.server_info = info;
            status.connections += 1;
        }
        self.tried.send_replace(true);
    }
}

/// How a connection begins: the newest protocol (2026-07-28, whose servers ask for input by
/// answering a call, so a run can wait durably) if the server speaks it, else the handshake of
/// the versions before it.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
    }
}

/// Starts (or reaches) the server, shakes hands, and lists its tools.
async fn connect(
    config: &Server,
    progress: ProgressDispatcher,
) -> Result<(RunningService<RoleClient, Client>, Vec<Listed>), String> {
    let client = Client::new(progress);
    let running = match &config.transport {
        Transport::Stdio {
            command,
            args,
            env,
            pass_env,
        } => {
            let cmd = child_command(command, args, env, pass_env)?;
            let (process, stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|err| {
                    tracing::warn!(server = %config.name, %err, "an MCP server could not be started");
                    format!("cannot start `{command}`: {}", err.kind())
                })?;
            if let Some(stderr) = stderr {
                tokio::spawn(log_stderr(config.name.clone(), stderr));
            }
            client
                .serve_with_lifecycle(process, lifecycle())
                .await
                .map_err(|err| {
                    tracing::warn!(server = %config.name, %err, "MCP handshake failed");
                    "the server started but did not complete the MCP handshake (its output is in \
                 the server log)"
                        .to_owned()
                })?
        }
        Transport::Http {
            url,
            headers,
            header_env,
        } => {
            let sent = http_headers(headers, header_env)?;
            let transport = StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(sent),
            );
            client
                .serve_with_lifecycle(transport, lifecycle())
                .await
                .map_err(|err| {
                    tracing::warn!(server = %config.name, %err, "MCP connection failed");
                    format!("cannot connect to {url} (the details are in the server log)")
                })?
        }
    };
    let tools = running.peer().list_all_tools().await.map_err(|err| {
        tracing::warn!(server = %config.name, %err, "listing an MCP server's tools failed");
        "the server did not list its tools (the details are in the server log)".to_owned()
    })?;
    if tools.len() > MAX_TOOLS {
        return Err(format!(
            "the server lists {} tools, more than the {MAX_TOOLS} accepted",
            tools.len()
        ));
    }
    let listed = listed(tools, config);
    Ok((running, listed))
}

/// The command that starts a stdio server: this program itself for the built-in demo server,
/// with an environment of only what it is given (and the few variables every process needs).
fn child_command(
    command: &str,
    args: &[String],
    env: &std::collections::BTreeMap<String, String>,
    pass_env: &[String],
) -> Result<tokio::process::Command, String> {
    let program = if command == SELF_COMMAND {
        std::env::current_exe()
            .map_err(|err| format!("cannot find this program's own path: {err}"))?
    } else {
        command.into()
    };
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(args).env_clear();
    for var in INHERITED_ENV
        .iter()
        .copied()
        .chain(pass_env.iter().map(String::as_str))
    {
        if let Ok(value) = std::env::var(var) {
            cmd.env(var, value);
        }
    }
    cmd.envs(env);
    Ok(cmd)
}

/// The headers an HTTP server is sent: those given, and those whose value comes from the
/// environment (a variable that is not set is an error naming it).
fn http_headers(
    headers: &std::collections::BTreeMap<String, String>,
    header_env: &std::collections::BTreeMap<String, String>,
) -> Result<std::collections::HashMap<http::HeaderName, http::HeaderValue>, String> {
    let mut sent = std::collections::HashMap::new();
    let literal = headers.iter().map(|(k, v)| (k.clone(), v.clone()));
    let mut from_env = Vec::new();
    for (header, var) in header_env {
        let value = std::env::var(var).map_err(|_| {
            format!(
                "the header `{header}` takes its value from the environment variable \
                 `{var}`, which is not set"
            )
        })?;
        from_env.push((header.clone(), value));
    }
    for (header, value) in literal.chain(from_env) {
        let name = http::HeaderName::try_from(header.as_str())
            .map_err(|_| format!("`{header}` is not a valid header name"))?;
        let value = http::HeaderValue::try_from(value)
            .map_err(|_| format!("the value of the header `{header}` is not valid in a header"))?;
        sent.insert(name, value);
    }
    Ok(sent)
}

/// The tools a server listed that join the registry: not the preview tools (which say
/// whether a tool has one), and only those `allow` names if it names any.
fn listed(tools: Vec<rmcp::model::Tool>, config: &Server) -> Vec<Listed> {
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    tools
        .into_iter()
        .filter(|tool| !tool.name.ends_with(PREVIEW_SUFFIX))
        .filter(|tool| {
            config
                .allow
                .as_ref()
                .is_none_or(|allow| allow.iter().any(|a| a == tool.name.as_ref()))
        })
        .map(|tool| {
            let hints = tool.annotations.clone().unwrap_or_default();
            let preview = format!("{}{PREVIEW_SUFFIX}", tool.name);
            Listed {
                has_preview: names.contains(&preview),
                name: tool.name.to_string(),
                description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
                schema: serde_json::Value::Object((*tool.input_schema).clone()),
                annotations: Annotations {
                    read_only: hints.read_only_hint,
                    destructive: hints.destructive_hint,
                    idempotent: hints.idempotent_hint,
                    open_world: hints.open_world_hint,
                },
            }
        })
        .collect()
}

/// A stdio server's error output goes to our log, line by line, bounded.
async fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(server = %server, line = %bounded(&line, 2_000), "MCP server says");
    }
}
