//! Making one connection to a server: start the process (or reach the URL), shake hands in the
//! newest protocol it speaks, and list the tools that join the registry.

use std::process::Stdio;
use std::sync::Arc;

use nrllm_core::mcp::Annotations;
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientInitializeError, ClientLifecycleMode, ClientServiceExt};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Notify;

use crate::client::Client;
use crate::config::{Server, Transport, INHERITED_ENV, SELF_COMMAND};
use crate::held::Held;
use crate::tool::{bounded, Listed, PREVIEW_SUFFIX};

/// The most tools one server may bring.
pub const MAX_TOOLS: usize = 200;

/// How a connection begins: the newest protocol (2026-07-28, whose servers ask for input by
/// answering a call, so a run can wait durably) if the server speaks it, else the handshake of
/// the versions before it.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
    }
}

/// Why a handshake failed: the text for the system page, and whether the server answered that
/// it speaks only versions of the older handshake (a server on a newer SDK pinned to them).
struct Failed {
    text: String,
    older: bool,
}

/// Starts (or reaches) the server, shakes hands, and lists its tools.
pub(crate) async fn connect(
    config: &Server,
    (progress, held): (ProgressDispatcher, Arc<Held>),
    relist: Arc<Notify>,
) -> Result<(RunningService<RoleClient, Client>, Vec<Listed>), String> {
    let client = Client::new(progress, relist, held);
    let running = match handshake(config, client.clone(), lifecycle()).await {
        // It said which versions it speaks instead of not knowing the newest handshake: the
        // older handshake, on a new connection.
        Err(Failed { older: true, .. }) => {
            handshake(config, client, ClientLifecycleMode::Initialize).await
        }
        other => other,
    }
    .map_err(|failed| failed.text)?;
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

/// Starts (or reaches) the server and shakes hands as `mode` says.
async fn handshake(
    config: &Server,
    client: Client,
    mode: ClientLifecycleMode,
) -> Result<RunningService<RoleClient, Client>, Failed> {
    let failed = |err: ClientInitializeError, text: String| {
        tracing::warn!(server = %config.name, %err, "MCP handshake failed");
        let older = matches!(&err, ClientInitializeError::NoCompatibleProtocolVersion { server_supported, .. }
            if server_supported.iter().any(ProtocolVersion::has_initialize));
        Failed { text, older }
    };
    let refused = |text: String| Failed { text, older: false };
    match &config.transport {
        Transport::Stdio {
            command,
            args,
            env,
            pass_env,
        } => {
            let cmd = child_command(command, args, env, pass_env).map_err(refused)?;
            let (process, stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|err| {
                    tracing::warn!(server = %config.name, %err, "an MCP server could not be started");
                    refused(format!("cannot start `{command}`: {}", err.kind()))
                })?;
            if let Some(stderr) = stderr {
                tokio::spawn(log_stderr(config.name.clone(), stderr));
            }
            client
                .serve_with_lifecycle(process, mode)
                .await
                .map_err(|err| {
                    failed(
                        err,
                        "the server started but did not complete the MCP handshake (its output \
                         is in the server log)"
                            .to_owned(),
                    )
                })
        }
        Transport::Http {
            url,
            headers,
            header_env,
        } => {
            let sent = http_headers(headers, header_env).map_err(refused)?;
            let transport = StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(sent),
            );
            client
                .serve_with_lifecycle(transport, mode)
                .await
                .map_err(|err| {
                    failed(
                        err,
                        format!("cannot connect to {url} (the details are in the server log)"),
                    )
                })
        }
    }
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
pub(crate) fn listed(tools: Vec<rmcp::model::Tool>, config: &Server) -> Vec<Listed> {
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
