//! How an operator connects an MCP server (`[[mcp_servers]]` in `Leptos.toml`), checked before
//! anything is started: a name, one transport (a stdio command, or a Streamable HTTP URL), an
//! optional allow-list of the server's tools, and who decides whether calls wait.

use std::collections::BTreeMap;
use std::time::Duration;

use nrllm_core::mcp::{check_server_name, ApprovalPolicy, ServerPolicy};
use serde::Deserialize;

/// The environment variables a stdio server gets from ours without being named (a command
/// needs a `PATH` to be found and a `HOME` for its caches). Everything else — provider keys,
/// database URLs — stays with us unless the operator passes it on by name (`pass_env`).
pub const INHERITED_ENV: &[&str] = &["PATH", "HOME", "LANG", "TMPDIR", "USER"];

/// Header names that carry credentials: their values may come only from the environment.
const SECRET_HEADERS: &[&str] = &["authorization", "proxy-authorization", "cookie"];

/// A command that names this very program (`nrllm-playground mcp-demo`, for instance).
pub const SELF_COMMAND: &str = "@self";

/// One `[[mcp_servers]]` table, as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// 1 to 32 of a–z, 0–9 and `-`; its tools join the registry as `<name>__<tool>`.
    pub name: String,
    /// A stdio server: the program to start (`@self` is this program).
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables set for the stdio server, literally.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Environment variables of ours passed on to the stdio server by name.
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// A Streamable HTTP server: its endpoint (`http://…` or `https://…`).
    #[serde(default)]
    pub url: Option<String>,
    /// Headers sent with every request, literally (never credentials: see `header_env`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Headers whose values are read from environment variables at connect time, by variable
    /// name (`{ Authorization = "GITHUB_MCP_AUTH" }`): the only way to send a secret.
    #[serde(default)]
    pub header_env: BTreeMap<String, String>,
    /// Only these of the server's tools join (by their name on the server); all if absent.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Who decides whether a call waits for an operator: `always`, `never`, or `annotations`
    /// (the default: read-only tools go ahead, every other waits).
    #[serde(default)]
    pub approval: ApprovalPolicy,
    /// The same, for single tools (by their name on the server).
    #[serde(default)]
    pub tool_approval: BTreeMap<String, ApprovalPolicy>,
    /// How long one call may take before it is cancelled (seconds; the global
    /// `mcp_call_timeout_secs` if absent).
    #[serde(default)]
    pub call_timeout_secs: Option<u32>,
}

/// How the program reaches a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        pass_env: Vec<String>,
    },
    Http {
        url: String,
        headers: BTreeMap<String, String>,
        header_env: BTreeMap<String, String>,
    },
}

/// A checked server: what the hub connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub name: String,
    pub transport: Transport,
    pub allow: Option<Vec<String>>,
    pub policy: ServerPolicy,
    pub call_timeout: Duration,
    /// How long a question the server asks inside an open call (versions before 2026-07-28)
    /// is held open for the operator's reply; `None`: such questions are declined
    /// ([`crate::held`]). The program sets it (`mcp_elicitation_timeout_secs`).
    pub elicitation_timeout: Option<Duration>,
}

impl Server {
    /// A short description of where the server is, for the system page (never a secret: no
    /// header values, no environment values).
    pub fn endpoint(&self) -> String {
        match &self.transport {
            Transport::Stdio { command, args, .. } => {
                let mut shown = command.clone();
                for arg in args {
                    shown.push(' ');
                    shown.push_str(arg);
                }
                format!("stdio: {shown}")
            }
            Transport::Http { url, .. } => format!("Streamable HTTP: {url}"),
        }
    }
}

/// Checks every server table: names valid and unique, one transport each, secrets only from
/// the environment. An error names the table (the caller names the setting).
pub fn check(servers: &[ServerConfig], default_timeout_secs: u32) -> Result<Vec<Server>, String> {
    let mut checked: Vec<Server> = Vec::with_capacity(servers.len());
    for (index, server) in servers.iter().enumerate() {
        let at = format!("table {}", index + 1);
        check_server_name(&server.name).map_err(|err| format!("{at}: {err}"))?;
        let at = format!("server `{}`", server.name);
        if checked.iter().any(|other| other.name == server.name) {
            return Err(format!("{at}: two servers have this name"));
        }
        let transport = match (&server.command, &server.url) {
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(format!("{at}: `command` is empty"));
                }
                if !server.headers.is_empty() || !server.header_env.is_empty() {
                    return Err(format!(
                        "{at}: `headers` and `header_env` are for Streamable HTTP servers (`url`)"
                    ));
                }
                Transport::Stdio {
                    command: command.clone(),
                    args: server.args.clone(),
                    env: server.env.clone(),
                    pass_env: server.pass_env.clone(),
                }
            }
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!(
                        "{at}: `url` must start with http:// or https://, and it was `{url}`"
                    ));
                }
                if !server.args.is_empty() || !server.env.is_empty() || !server.pass_env.is_empty()
                {
                    return Err(format!(
                        "{at}: `args`, `env` and `pass_env` are for stdio servers (`command`)"
                    ));
                }
                if let Some(secret) = server
                    .headers
                    .keys()
                    .find(|name| SECRET_HEADERS.contains(&name.to_ascii_lowercase().as_str()))
                {
                    return Err(format!(
                        "{at}: the header `{secret}` carries a credential; name the environment \
                         variable that holds it in `header_env` instead of writing it here"
                    ));
                }
                Transport::Http {
                    url: url.clone(),
                    headers: server.headers.clone(),
                    header_env: server.header_env.clone(),
                }
            }
            (Some(_), Some(_)) => {
                return Err(format!("{at}: give either `command` or `url`, not both"))
            }
            (None, None) => {
                return Err(format!(
                    "{at}: give `command` (a stdio server) or `url` (a Streamable HTTP server)"
                ))
            }
        };
        let call_timeout = call_timeout(server.call_timeout_secs, default_timeout_secs)
            .map_err(|err| format!("{at}: {err}"))?;
        checked.push(Server {
            name: server.name.clone(),
            transport,
            allow: server.tools.clone(),
            policy: ServerPolicy {
                approval: server.approval,
                tools: server.tool_approval.clone(),
            },
            call_timeout,
            elicitation_timeout: None,
        });
    }
    Ok(checked)
}

/// A server's call time limit: its own `call_timeout_secs`, else the default; at least 1 s.
fn call_timeout(secs: Option<u32>, default_secs: u32) -> Result<Duration, String> {
    match secs.unwrap_or(default_secs) {
        0 => Err("`call_timeout_secs` must be at least 1".to_owned()),
        secs => Ok(Duration::from_secs(u64::from(secs))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Server>, String> {
        #[derive(Deserialize)]
        struct File {
            mcp_servers: Vec<ServerConfig>,
        }
        let file: File = toml_like(text);
        check(&file.mcp_servers, 60)
    }

    /// The tests write tables as JSON (the crate has no TOML parser; the app reads the file).
    fn toml_like<T: serde::de::DeserializeOwned>(json: &str) -> T {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_stdio_and_an_http_server_are_checked_into_transports() {
        let servers = parse(
            r#"{"mcp_servers": [
                {"name": "notes", "command": "@self", "args": ["mcp-demo"], "approval": "always",
                 "tool_approval": {"read_note": "never"}},
                {"name": "tickets", "url": "https://mcp.example.com/mcp",
                 "header_env": {"Authorization": "TICKETS_AUTH"}, "tools": ["open_ticket"],
                 "call_timeout_secs": 5}
            ]}"#,
        )
        .unwrap();
        assert_eq!(servers[0].endpoint(), "stdio: @self mcp-demo");
        assert_eq!(servers[0].policy.approval, ApprovalPolicy::Always);
        assert_eq!(servers[0].call_timeout, Duration::from_secs(60));
        assert!(
            matches!(&servers[1].transport, Transport::Http { header_env, .. }
            if header_env["Authorization"] == "TICKETS_AUTH")
        );
        assert_eq!(
            servers[1].allow.as_deref(),
            Some(&["open_ticket".to_owned()][..])
        );
        assert_eq!(servers[1].call_timeout, Duration::from_secs(5));
    }

    #[test]
    fn bad_tables_are_refused_with_the_setting_named() {
        let cases = [
            (r#"{"name": "Bad Name", "command": "x"}"#, "1 to 32"),
            (r#"{"name": "a"}"#, "give `command`"),
            (
                r#"{"name": "a", "command": "x", "url": "http://h"}"#,
                "not both",
            ),
            (r#"{"name": "a", "url": "ftp://h"}"#, "must start with http"),
            (
                r#"{"name": "a", "url": "http://h", "headers": {"Authorization": "Bearer s3cret"}}"#,
                "header_env",
            ),
            (
                r#"{"name": "a", "command": "x", "headers": {"X": "y"}}"#,
                "Streamable HTTP",
            ),
            (
                r#"{"name": "a", "url": "http://h", "args": ["y"]}"#,
                "stdio servers",
            ),
            (
                r#"{"name": "a", "command": "x", "call_timeout_secs": 0}"#,
                "at least 1",
            ),
        ];
        for (table, expected) in cases {
            let err = parse(&format!(r#"{{"mcp_servers": [{table}]}}"#)).unwrap_err();
            assert!(
                err.starts_with("table 1") || err.starts_with("server `a`"),
                "{err}"
            );
            assert!(err.contains(expected), "{table}: {err}");
            assert!(
                !err.contains("s3cret"),
                "a refused secret is not repeated: {err}"
            );
        }
        let twice = parse(
            r#"{"mcp_servers": [{"name": "a", "command": "x"}, {"name": "a", "command": "y"}]}"#,
        )
        .unwrap_err();
        assert!(twice.contains("two servers have this name"), "{twice}");
        let unknown: Result<ServerConfig, _> =
            serde_json::from_str(r#"{"name": "a", "command": "x", "aproval": "never"}"#);
        assert!(unknown.unwrap_err().to_string().contains("aproval"));
    }
}
