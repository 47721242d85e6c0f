//! The app's settings: `Leptos.toml` (or the file named by `NRLLM_CONFIG`), then environment
//! overrides. A bad value is reported with the setting's name and where it came from, and start-up
//! stops; nothing here panics.
//!
//! The layering is written here rather than with `figment`: each setting is checked with its own
//! range and message naming the exact source (`environment variable NRLLM_…` or the file), and
//! the file refuses unknown keys; figment would merge the sources, but these messages and checks
//! would still be ours, so it would add a dependency without removing code.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The settings file read when `NRLLM_CONFIG` is not set.
pub const DEFAULT_SETTINGS_FILE: &str = "Leptos.toml";

/// The settings the server runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Address to listen on.
    pub site_addr: SocketAddr,
    /// `sqlite:` or `postgres:` URL of the run database.
    pub database_url: String,
    /// How hard an SQLite database syncs its commits: `full` survives power loss; `normal` a
    /// crash of the process only, and commits without waiting for the disk.
    pub sqlite_synchronous: nrllm_store::db::SqliteSync,
    /// A `tracing` filter directive (`info`, `debug,sqlx=warn`, …).
    pub log_level: String,
    /// Finished runs older than this many days are purged.
    pub retention_terminal_days: u32,
    /// Runs waiting for a decision longer than this many days are purged.
    pub retention_waiting_days: u32,
    /// The demo model waits this long before each answer (0: answers at once).
    pub demo_think_ms: u32,
    /// The largest request body accepted, in bytes (larger: 413).
    pub max_body_bytes: u32,
    /// Live step streams one run may have open at once (more: 503, the page polls instead).
    pub stream_limit_per_run: u32,
    /// Live step streams the server keeps open at once, over all runs (more: 503).
    pub stream_limit_total: u32,
    /// Where the demo's `export_page` tool writes pages.
    pub export_dir: PathBuf,
    /// The audit key's file (made on first start); none: beside an SQLite database, or
    /// `data/audit.key` for Postgres. `NRLLM_AUDIT_KEY` (the key itself) wins over it.
    pub audit_key_file: Option<PathBuf>,
    /// On SIGTERM or Ctrl-C, how long running segments may take to reach their next journaled
    /// step before the server exits anyway.
    pub shutdown_grace_secs: u32,
    /// Real model configurations (`[[configurations]]`); the demo model is always there too.
    pub configurations: Vec<ModelConfiguration>,
    /// Host names (without port) the server answers to; others get 403 (DNS rebinding).
    pub allowed_hosts: Vec<String>,
    /// The address users reach the server at (`https://…` turns on Secure cookies and HSTS);
    /// links in webhooks and the first-start login link use it.
    pub public_url: String,
    /// Four-eyes for the demo model and every configuration that does not say: the user who
    /// started a run cannot decide it.
    pub four_eyes: bool,
    /// Runs one user may start per minute (more: 429).
    pub run_starts_per_minute: u32,
    /// How long a login lasts.
    pub session_hours: u32,
    /// Where a run that needs a decision is announced (a signed POST), if anywhere.
    pub webhook_url: Option<String>,
    /// The environment variable that holds the secret webhook deliveries are signed with.
    pub webhook_secret_env: String,
    /// Attempts per delivery before it is given up as failed.
    pub webhook_max_attempts: u32,
    /// The wait before the first retry; each further retry waits twice as long (up to an hour).
    pub webhook_backoff_ms: u32,
    /// How long an instance holds a running run's lease without renewing it; after that another
    /// instance's reaper takes the run over.
    pub lease_secs: u32,
    /// How many runs this instance drives at once; further runs wait `queued` (for this
    /// instance or another).
    pub max_running_runs: u32,
    /// The longest wait before retrying a model call, whatever the provider asks for.
    pub retry_max_wait_secs: u32,
    /// The largest state a waiting run keeps (bytes of its JSON); a run whose state would be
    /// larger fails with `state_too_large` instead of waiting.
    pub max_state_bytes: u32,
    /// How long a turn may wait for a decision before it expires, in milliseconds (`None`: until
    /// decided). A configuration's own `approval_timeout` wins.
    pub approval_timeout_ms: Option<u64>,
    /// The MCP servers whose tools join the registry (`[[mcp_servers]]`), checked.
    pub mcp_servers: Vec<nrllm_mcp::config::Server>,
    /// How long an MCP call may take before it is cancelled, unless its server says otherwise.
    pub mcp_call_timeout_secs: u32,
}

/// Which wire format a configuration speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// OpenAI chat completions: OpenAI, Ollama, vLLM, llama.cpp, LM Studio, OpenRouter…
    Openai,
    Anthropic,
    Gemini,
    /// The offline demo model under another name (for example with other rules, such as
    /// four-eyes).
    Demo,
}

impl ProviderKind {
    /// The environment variable that holds this kind's key unless the configuration names another.
    pub fn default_key_env(self) -> &'static str {
        match self {
            ProviderKind::Openai => "OPENAI_API_KEY",
            ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
            ProviderKind::Gemini => "GEMINI_API_KEY",
            ProviderKind::Demo => "",
        }
    }

    /// The public endpoint used when a configuration gives no base URL.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::Openai => "https://api.openai.com/v1",
            ProviderKind::Anthropic => "https://api.anthropic.com/v1",
            ProviderKind::Gemini => "https://generativelanguage.googleapis.com/v1beta",
            ProviderKind::Demo => "",
        }
    }
}

/// One named model configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfiguration {
    pub name: String,
    pub kind: ProviderKind,
    pub model: String,
    /// Up to the API version (`…/v1`); the kind's public endpoint if absent (for `openai`,
    /// `OPENAI_BASE_URL` if set).
    #[serde(default)]
    pub base_url: Option<String>,
    /// The environment variable holding the API key; the kind's usual one if absent, none if
    /// empty (local servers).
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// US dollars per million prompt tokens, for the cost estimate.
    #[serde(default)]
    pub price_input_per_million: Option<f64>,
    /// US dollars per million completion tokens.
    #[serde(default)]
    pub price_output_per_million: Option<f64>,
    /// Four-eyes for this configuration's runs (default: the `four_eyes` setting).
    #[serde(default)]
    pub four_eyes: Option<bool>,
    /// Where this configuration's runs are announced instead of `webhook_url` (`""`: nowhere).
    #[serde(default)]
    pub webhook_url: Option<String>,
    /// The environment variable with this webhook's secret (default: `webhook_secret_env`).
    #[serde(default)]
    pub webhook_secret_env: Option<String>,
    /// How long this configuration's turns may wait for a decision (`"24h"`, `"30m"`, `"none"`;
    /// default: the `approval_timeout` setting).
    #[serde(default)]
    pub approval_timeout: Option<String>,
}

impl ModelConfiguration {
    /// The environment variable that holds this configuration's key, if it uses one.
    pub fn key_env(&self) -> Option<&str> {
        if self.kind == ProviderKind::Demo {
            return None;
        }
        match self.api_key_env.as_deref() {
            Some("") => None,
            Some(name) => Some(name),
            None => Some(self.kind.default_key_env()),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            site_addr: SocketAddr::from(([127, 0, 0, 1], 3000)),
            database_url: "sqlite:data/nrllm.db".to_owned(),
            sqlite_synchronous: nrllm_store::db::SqliteSync::Full,
            log_level: "info".to_owned(),
            retention_terminal_days: 30,
            retention_waiting_days: 90,
            demo_think_ms: 0,
            max_body_bytes: 1024 * 1024,
            stream_limit_per_run: 50,
            stream_limit_total: 1000,
            export_dir: PathBuf::from("data/exports"),
            audit_key_file: None,
            shutdown_grace_secs: 10,
            configurations: Vec::new(),
            allowed_hosts: default_hosts(SocketAddr::from(([127, 0, 0, 1], 3000))),
            public_url: "http://127.0.0.1:3000".to_owned(),
            four_eyes: false,
            run_starts_per_minute: 30,
            session_hours: 12,
            webhook_url: None,
            webhook_secret_env: "NRLLM_WEBHOOK_SECRET".to_owned(),
            webhook_max_attempts: 8,
            webhook_backoff_ms: 2000,
            lease_secs: 30,
            max_running_runs: 16,
            retry_max_wait_secs: 60,
            max_state_bytes: 8 * 1024 * 1024,
            approval_timeout_ms: Some(24 * 3_600_000),
            mcp_servers: Vec::new(),
            mcp_call_timeout_secs: 60,
        }
    }
}

/// The hosts a server bound to `addr` answers to by default: its address and `localhost`.
fn default_hosts(addr: SocketAddr) -> Vec<String> {
    let mut hosts = vec!["localhost".to_owned()];
    let ip = addr.ip();
    if !ip.is_unspecified() {
        hosts.push(ip.to_string());
    }
    if ip.is_loopback() || ip.is_unspecified() {
        for loopback in ["127.0.0.1", "::1"] {
            if !hosts.iter().any(|h| h == loopback) {
                hosts.push(loopback.to_owned());
            }
        }
    }
    hosts
}

/// An approval timeout: a duration such as `24h`, `90m` or `2s` (at least a second, at most a
/// year), or `none` (a turn waits until decided). In milliseconds.
pub fn parse_timeout(value: &str) -> Result<Option<u64>, String> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    humantime::parse_duration(value)
        .ok()
        .filter(|d| (1..=365 * 24 * 3600).contains(&d.as_secs()))
        .map(|d| Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
        .ok_or_else(|| {
            format!("`{value}` is not a duration such as \"24h\", \"90m\" or \"2s\" (1 s to a year), or \"none\"")
        })
}

/// A webhook address: `http://` or `https://` with a host.
fn web_url(value: &str) -> Result<String, String> {
    let rest = value
        .strip_prefix("https://")
        .or_else(|| value.strip_prefix("http://"));
    match rest {
        Some(rest)
            if !rest.is_empty()
                && !rest.starts_with('/')
                && !value.contains(char::is_whitespace) =>
        {
            Ok(value.to_owned())
        }
        _ => Err("a webhook URL starts with http:// or https:// and names a host".to_owned()),
    }
}

/// What is wrong with the settings; the message names the setting and its source.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("cannot read the settings file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the settings file {path} is not valid: {message}")]
    Syntax { path: String, message: String },
    #[error("setting `{setting}` in {source_name} is not valid: {message}")]
    Invalid {
        setting: &'static str,
        source_name: String,
        message: String,
    },
}

/// The file as written: every key optional, unknown keys refused (they are usually typos).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsFile {
    site_addr: Option<String>,
    database_url: Option<String>,
    sqlite_synchronous: Option<String>,
    log_level: Option<String>,
    retention_terminal_days: Option<i64>,
    retention_waiting_days: Option<i64>,
    demo_think_ms: Option<i64>,
    max_body_bytes: Option<i64>,
    stream_limit_per_run: Option<i64>,
    stream_limit_total: Option<i64>,
    export_dir: Option<String>,
    audit_key_file: Option<String>,
    shutdown_grace_secs: Option<i64>,
    configurations: Option<Vec<ModelConfiguration>>,
    allowed_hosts: Option<Vec<String>>,
    public_url: Option<String>,
    four_eyes: Option<bool>,
    run_starts_per_minute: Option<i64>,
    session_hours: Option<i64>,
    webhook_url: Option<String>,
    webhook_secret_env: Option<String>,
    webhook_max_attempts: Option<i64>,
    webhook_backoff_ms: Option<i64>,
    lease_secs: Option<i64>,
    max_running_runs: Option<i64>,
    retry_max_wait_secs: Option<i64>,
    max_state_bytes: Option<i64>,
    approval_timeout: Option<String>,
    mcp_servers: Option<Vec<nrllm_mcp::config::ServerConfig>>,
    mcp_call_timeout_secs: Option<i64>,
}

impl Settings {
    /// Loads the settings from the file named by `NRLLM_CONFIG` (default `Leptos.toml`; a missing
    /// default file means defaults) and applies the `NRLLM_*` environment overrides.
    pub fn load() -> Result<Settings, SettingsError> {
        let explicit = std::env::var_os("NRLLM_CONFIG").map(PathBuf::from);
        let path = explicit
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SETTINGS_FILE));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => None,
            Err(source) => {
                return Err(SettingsError::Read {
                    path: path.display().to_string(),
                    source,
                })
            }
        };
        Self::from_sources(&path, text.as_deref(), |name| std::env::var(name).ok())
    }

    /// Builds settings from a file's text (if any) and an environment lookup.
    pub fn from_sources(
        path: &Path,
        text: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Settings, SettingsError> {
        let file_name = path.display().to_string();
        let file: SettingsFile = match text {
            Some(text) => toml::from_str(text).map_err(|err| SettingsError::Syntax {
                path: file_name.clone(),
                message: err.message().to_owned(),
            })?,
            None => SettingsFile::default(),
        };
        let defaults = Settings::default();
        // Each value is taken from the environment, else the file, else the default, and is
        // validated with the name of the place it came from.
        let pick = |env_name: &str, from_file: Option<String>| {
            match env(env_name) {
                Some(value) => Some((value, format!("environment variable {env_name}"))),
                None => from_file.map(|value| (value, file_name.clone())),
            }
            .map(|(value, source)| (value.trim().to_owned(), source))
        };

        let site_addr = match pick("NRLLM_SITE_ADDR", file.site_addr) {
            Some((value, source_name)) => {
                value
                    .parse::<SocketAddr>()
                    .map_err(|_| SettingsError::Invalid {
                        setting: "site_addr",
                        source_name,
                        message: format!(
                            "`{value}` is not a host:port address such as 127.0.0.1:3000"
                        ),
                    })?
            }
            None => defaults.site_addr,
        };
        let database_url = match pick("NRLLM_DATABASE_URL", file.database_url) {
            Some((value, source_name)) => {
                if nrllm_store::db::Backend::from_url(&value).is_none() {
                    return Err(SettingsError::Invalid {
                        setting: "database_url",
                        source_name,
                        message: "it must start with `sqlite:` or `postgres://`".to_owned(),
                    });
                }
                value
            }
            None => defaults.database_url,
        };
        let sqlite_synchronous = match pick("NRLLM_SQLITE_SYNCHRONOUS", file.sqlite_synchronous) {
            Some((value, source_name)) => match value.to_ascii_lowercase().as_str() {
                "full" => nrllm_store::db::SqliteSync::Full,
                "normal" => nrllm_store::db::SqliteSync::Normal,
                _ => {
                    return Err(SettingsError::Invalid {
                        setting: "sqlite_synchronous",
                        source_name,
                        message: "it must be `full` or `normal`".to_owned(),
                    })
                }
            },
            None => defaults.sqlite_synchronous,
        };
        let log_level = match pick("NRLLM_LOG", file.log_level) {
            Some((value, source_name)) => {
                tracing_subscriber::EnvFilter::try_new(&value).map_err(|err| {
                    SettingsError::Invalid {
                        setting: "log_level",
                        source_name,
                        message: format!("`{value}` is not a log level or filter ({err})"),
                    }
                })?;
                value
            }
            None => defaults.log_level,
        };
        // A whole number within `range`, from the environment, else the file, else the default.
        let number = |setting: &'static str,
                      env_name: &str,
                      from_file: Option<i64>,
                      default: u32,
                      range: std::ops::RangeInclusive<u32>,
                      unit: &str| {
            match pick(env_name, from_file.map(|n| n.to_string())) {
                Some((value, source_name)) => value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| range.contains(n))
                    .ok_or_else(|| SettingsError::Invalid {
                        setting,
                        source_name,
                        message: format!(
                            "`{value}` is not a whole number of {unit} from {} to {}",
                            range.start(),
                            range.end()
                        ),
                    }),
                None => Ok(default),
            }
        };
        let retention_terminal_days = number(
            "retention_terminal_days",
            "NRLLM_RETENTION_TERMINAL_DAYS",
            file.retention_terminal_days,
            defaults.retention_terminal_days,
            1..=36_500,
            "days",
        )?;
        let retention_waiting_days = number(
            "retention_waiting_days",
            "NRLLM_RETENTION_WAITING_DAYS",
            file.retention_waiting_days,
            defaults.retention_waiting_days,
            1..=36_500,
            "days",
        )?;
        let demo_think_ms = number(
            "demo_think_ms",
            "NRLLM_DEMO_THINK_MS",
            file.demo_think_ms,
            defaults.demo_think_ms,
            0..=60_000,
            "milliseconds",
        )?;
        let max_body_bytes = number(
            "max_body_bytes",
            "NRLLM_MAX_BODY_BYTES",
            file.max_body_bytes,
            defaults.max_body_bytes,
            16 * 1024..=64 * 1024 * 1024,
            "bytes",
        )?;
        let stream_limit_per_run = number(
            "stream_limit_per_run",
            "NRLLM_STREAM_LIMIT_PER_RUN",
            file.stream_limit_per_run,
            defaults.stream_limit_per_run,
            1..=10_000,
            "streams",
        )?;
        let stream_limit_total = number(
            "stream_limit_total",
            "NRLLM_STREAM_LIMIT_TOTAL",
            file.stream_limit_total,
            defaults.stream_limit_total,
            1..=100_000,
            "streams",
        )?;
        let shutdown_grace_secs = number(
            "shutdown_grace_secs",
            "NRLLM_SHUTDOWN_GRACE_SECS",
            file.shutdown_grace_secs,
            defaults.shutdown_grace_secs,
            0..=600,
            "seconds",
        )?;
        let export_dir = match pick("NRLLM_EXPORT_DIR", file.export_dir) {
            Some((value, source_name)) if value.is_empty() => {
                return Err(SettingsError::Invalid {
                    setting: "export_dir",
                    source_name,
                    message: "give a folder".to_owned(),
                })
            }
            Some((value, _)) => PathBuf::from(value),
            None => defaults.export_dir,
        };
        let audit_key_file = match pick("NRLLM_AUDIT_KEY_FILE", file.audit_key_file) {
            Some((value, source_name)) if value.is_empty() => {
                return Err(SettingsError::Invalid {
                    setting: "audit_key_file",
                    source_name,
                    message: "give a file".to_owned(),
                })
            }
            Some((value, _)) => Some(PathBuf::from(value)),
            None => defaults.audit_key_file,
        };
        let run_starts_per_minute = number(
            "run_starts_per_minute",
            "NRLLM_RUN_STARTS_PER_MINUTE",
            file.run_starts_per_minute,
            defaults.run_starts_per_minute,
            1..=100_000,
            "runs",
        )?;
        let session_hours = number(
            "session_hours",
            "NRLLM_SESSION_HOURS",
            file.session_hours,
            defaults.session_hours,
            1..=24 * 90,
            "hours",
        )?;
        let webhook_max_attempts = number(
            "webhook_max_attempts",
            "NRLLM_WEBHOOK_MAX_ATTEMPTS",
            file.webhook_max_attempts,
            defaults.webhook_max_attempts,
            1..=30,
            "attempts",
        )?;
        let webhook_backoff_ms = number(
            "webhook_backoff_ms",
            "NRLLM_WEBHOOK_BACKOFF_MS",
            file.webhook_backoff_ms,
            defaults.webhook_backoff_ms,
            10..=3_600_000,
            "milliseconds",
        )?;
        let lease_secs = number(
            "lease_secs",
            "NRLLM_LEASE_SECS",
            file.lease_secs,
            defaults.lease_secs,
            1..=3600,
            "seconds",
        )?;
        let max_running_runs = number(
            "max_running_runs",
            "NRLLM_MAX_RUNNING_RUNS",
            file.max_running_runs,
            defaults.max_running_runs,
            1..=10_000,
            "runs",
        )?;
        let retry_max_wait_secs = number(
            "retry_max_wait_secs",
            "NRLLM_RETRY_MAX_WAIT_SECS",
            file.retry_max_wait_secs,
            defaults.retry_max_wait_secs,
            1..=3600,
            "seconds",
        )?;
        let max_state_bytes = number(
            "max_state_bytes",
            "NRLLM_MAX_STATE_BYTES",
            file.max_state_bytes,
            defaults.max_state_bytes,
            65_536..=1_073_741_824,
            "bytes",
        )?;
        let approval_timeout_ms = match pick("NRLLM_APPROVAL_TIMEOUT", file.approval_timeout) {
            Some((value, source_name)) => {
                parse_timeout(&value).map_err(|message| SettingsError::Invalid {
                    setting: "approval_timeout",
                    source_name,
                    message,
                })?
            }
            None => defaults.approval_timeout_ms,
        };
        let webhook_url = match pick("NRLLM_WEBHOOK_URL", file.webhook_url) {
            Some((value, _)) if value.is_empty() => None,
            Some((value, source_name)) => {
                Some(web_url(&value).map_err(|message| SettingsError::Invalid {
                    setting: "webhook_url",
                    source_name,
                    message,
                })?)
            }
            None => None,
        };
        let webhook_secret_env = match pick("NRLLM_WEBHOOK_SECRET_ENV", file.webhook_secret_env) {
            Some((value, source_name)) if value.is_empty() => {
                return Err(SettingsError::Invalid {
                    setting: "webhook_secret_env",
                    source_name,
                    message: "name the environment variable that holds the secret".to_owned(),
                })
            }
            Some((value, _)) => value,
            None => defaults.webhook_secret_env,
        };
        let allowed_hosts = match (env("NRLLM_ALLOWED_HOSTS"), file.allowed_hosts) {
            (Some(value), _) => (
                value
                    .split(',')
                    .map(|h| h.trim().to_ascii_lowercase())
                    .collect(),
                "environment variable NRLLM_ALLOWED_HOSTS".to_owned(),
            ),
            (None, Some(hosts)) => (
                hosts
                    .iter()
                    .map(|h| h.trim().to_ascii_lowercase())
                    .collect(),
                file_name.clone(),
            ),
            (None, None) => (default_hosts(site_addr), String::new()),
        };
        let (allowed_hosts, hosts_source): (Vec<String>, String) = allowed_hosts;
        if allowed_hosts.is_empty()
            || allowed_hosts
                .iter()
                .any(|h| h.is_empty() || h.contains(['/', ':', ' ']) && !h.contains("::"))
        {
            return Err(SettingsError::Invalid {
                setting: "allowed_hosts",
                source_name: hosts_source,
                message:
                    "give host names without scheme or port, such as \"playground.example.com\""
                        .to_owned(),
            });
        }
        let public_url = match pick("NRLLM_PUBLIC_URL", file.public_url) {
            Some((value, source_name)) => {
                if !(value.starts_with("http://") || value.starts_with("https://")) {
                    return Err(SettingsError::Invalid {
                        setting: "public_url",
                        source_name,
                        message: format!("`{value}` must start with http:// or https://"),
                    });
                }
                value.trim_end_matches('/').to_owned()
            }
            None => format!("http://{site_addr}"),
        };
        let four_eyes = match (env("NRLLM_FOUR_EYES"), file.four_eyes) {
            (Some(value), _) => match value.trim() {
                "true" | "1" => true,
                "false" | "0" => false,
                other => {
                    return Err(SettingsError::Invalid {
                        setting: "four_eyes",
                        source_name: "environment variable NRLLM_FOUR_EYES".to_owned(),
                        message: format!("`{other}` is not true or false"),
                    })
                }
            },
            (None, Some(value)) => value,
            (None, None) => defaults.four_eyes,
        };
        let mcp_call_timeout_secs = number(
            "mcp_call_timeout_secs",
            "NRLLM_MCP_CALL_TIMEOUT_SECS",
            file.mcp_call_timeout_secs,
            defaults.mcp_call_timeout_secs,
            1..=3_600,
            "seconds",
        )?;
        let mcp_servers = nrllm_mcp::config::check(
            file.mcp_servers.as_deref().unwrap_or_default(),
            mcp_call_timeout_secs,
        )
        .map_err(|message| SettingsError::Invalid {
            setting: "mcp_servers",
            source_name: file_name.clone(),
            message,
        })?;
        let configurations = file.configurations.unwrap_or_default();
        let invalid = |message: String| SettingsError::Invalid {
            setting: "configurations",
            source_name: file_name.clone(),
            message,
        };
        let mut configurations_out = Vec::with_capacity(configurations.len());
        for mut configuration in configurations {
            let name = configuration.name.trim().to_owned();
            if name.is_empty()
                || name == "demo"
                || configurations_out
                    .iter()
                    .any(|c: &ModelConfiguration| c.name == name)
            {
                return Err(invalid(format!(
                    "every configuration needs its own name, not empty and not `demo` (`{name}`)"
                )));
            }
            if configuration.model.trim().is_empty() {
                return Err(invalid(format!("configuration `{name}` has no model")));
            }
            if configuration.kind == ProviderKind::Openai && configuration.base_url.is_none() {
                configuration.base_url =
                    env("OPENAI_BASE_URL").filter(|url| !url.trim().is_empty());
            }
            if let Some(url) = &configuration.base_url {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid(format!(
                        "configuration `{name}`: base_url must start with http:// or https://"
                    )));
                }
            }
            if let Some(url) = configuration.webhook_url.as_mut() {
                *url = url.trim().to_owned();
                if !url.is_empty() {
                    *url = web_url(url)
                        .map_err(|message| invalid(format!("configuration `{name}`: {message}")))?;
                }
            }
            if let Some(timeout) = &configuration.approval_timeout {
                parse_timeout(timeout)
                    .map_err(|message| invalid(format!("configuration `{name}`: {message}")))?;
            }
            if configuration
                .temperature
                .is_some_and(|t| !(0.0..=2.0).contains(&t))
            {
                return Err(invalid(format!(
                    "configuration `{name}`: temperature must be from 0 to 2"
                )));
            }
            let prices = [
                configuration.price_input_per_million,
                configuration.price_output_per_million,
            ];
            if prices.iter().flatten().any(|p| !p.is_finite() || *p < 0.0) {
                return Err(invalid(format!(
                    "configuration `{name}`: prices must be numbers of 0 or more"
                )));
            }
            configuration.name = name;
            configurations_out.push(configuration);
        }
        Ok(Settings {
            site_addr,
            database_url,
            sqlite_synchronous,
            log_level,
            retention_terminal_days,
            retention_waiting_days,
            demo_think_ms,
            max_body_bytes,
            stream_limit_per_run,
            stream_limit_total,
            export_dir,
            audit_key_file,
            shutdown_grace_secs,
            configurations: configurations_out,
            allowed_hosts,
            public_url,
            four_eyes,
            run_starts_per_minute,
            session_hours,
            webhook_url,
            webhook_secret_env,
            webhook_max_attempts,
            webhook_backoff_ms,
            lease_secs,
            max_running_runs,
            retry_max_wait_secs,
            max_state_bytes,
            approval_timeout_ms,
            mcp_servers,
            mcp_call_timeout_secs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: Option<&str>, env: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        Settings::from_sources(Path::new("Leptos.toml"), text, |name| {
            env.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        })
    }

    #[test]
    fn no_file_and_no_environment_gives_the_defaults() {
        assert_eq!(load(None, &[]).unwrap(), Settings::default());
    }

    #[test]
    fn the_file_sets_values_and_the_environment_overrides_them() {
        let text = "site_addr = \"0.0.0.0:8080\"\ndatabase_url = \"postgres://a@b/c\"\n";
        let settings = load(Some(text), &[("NRLLM_SITE_ADDR", "127.0.0.1:4000")]).unwrap();
        assert_eq!(settings.site_addr.port(), 4000);
        assert_eq!(settings.database_url, "postgres://a@b/c");
        assert_eq!(settings.log_level, "info");
    }

    #[test]
    fn a_bad_value_names_the_setting_and_the_file() {
        let err = load(Some("site_addr = \"nowhere\""), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`site_addr`") && err.contains("Leptos.toml"),
            "{err}"
        );
        let err = load(None, &[("NRLLM_DATABASE_URL", "mysql://x")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`database_url`") && err.contains("NRLLM_DATABASE_URL"),
            "{err}"
        );
        let err = load(Some("log_level = \"info,=[\""), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("`log_level`"), "{err}");
    }

    #[test]
    fn sqlite_syncing_is_full_unless_set_to_normal() {
        use nrllm_store::db::SqliteSync;
        let settings = load(Some("sqlite_synchronous = \"normal\""), &[]).unwrap();
        assert_eq!(settings.sqlite_synchronous, SqliteSync::Normal);
        let settings = load(
            Some("sqlite_synchronous = \"normal\""),
            &[("NRLLM_SQLITE_SYNCHRONOUS", "FULL")],
        )
        .unwrap();
        assert_eq!(settings.sqlite_synchronous, SqliteSync::Full);
        let err = load(None, &[("NRLLM_SQLITE_SYNCHRONOUS", "off")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`sqlite_synchronous`") && err.contains("`full` or `normal`"),
            "{err}"
        );
    }

    #[test]
    fn retention_windows_are_whole_days() {
        let settings = load(
            Some("retention_terminal_days = 7\nretention_waiting_days = 14"),
            &[("NRLLM_RETENTION_WAITING_DAYS", "21")],
        )
        .unwrap();
        assert_eq!(
            (
                settings.retention_terminal_days,
                settings.retention_waiting_days
            ),
            (7, 21)
        );
        let err = load(Some("retention_terminal_days = 0"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`retention_terminal_days`") && err.contains("Leptos.toml"),
            "{err}"
        );
        let err = load(None, &[("NRLLM_RETENTION_WAITING_DAYS", "soon")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("NRLLM_RETENTION_WAITING_DAYS"), "{err}");
    }

    #[test]
    fn resource_limits_are_whole_numbers_within_their_range() {
        let settings = load(
            Some("max_body_bytes = 65536\nstream_limit_per_run = 3"),
            &[("NRLLM_STREAM_LIMIT_TOTAL", "7")],
        )
        .unwrap();
        assert_eq!(
            (
                settings.max_body_bytes,
                settings.stream_limit_per_run,
                settings.stream_limit_total
            ),
            (65536, 3, 7)
        );
        let err = load(Some("stream_limit_per_run = 0"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`stream_limit_per_run`") && err.contains("from 1 to 10000"),
            "{err}"
        );
        let err = load(None, &[("NRLLM_MAX_BODY_BYTES", "1")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`max_body_bytes`") && err.contains("NRLLM_MAX_BODY_BYTES"),
            "{err}"
        );
    }

    #[test]
    fn mcp_servers_are_read_and_checked_with_the_setting_named() {
        let text = r#"
            mcp_call_timeout_secs = 30
            [[mcp_servers]]
            name = "notes"
            command = "@self"
            args = ["mcp-demo"]
            [[mcp_servers]]
            name = "tickets"
            url = "https://mcp.example.com/mcp"
            header_env = { Authorization = "TICKETS_AUTH" }
            call_timeout_secs = 5
        "#;
        let settings = load(Some(text), &[("NRLLM_MCP_CALL_TIMEOUT_SECS", "45")]).unwrap();
        assert_eq!(settings.mcp_call_timeout_secs, 45);
        let [notes, tickets] = settings.mcp_servers.as_slice() else {
            panic!("two servers")
        };
        assert_eq!(notes.call_timeout, std::time::Duration::from_secs(45));
        assert_eq!(tickets.call_timeout, std::time::Duration::from_secs(5));
        assert_eq!(
            tickets.endpoint(),
            "Streamable HTTP: https://mcp.example.com/mcp"
        );
        let secret = "[[mcp_servers]]\nname = \"t\"\nurl = \"https://h\"\nheaders = { Authorization = \"Bearer s3cret\" }\n";
        let err = load(Some(secret), &[]).unwrap_err().to_string();
        assert!(
            err.contains("setting `mcp_servers`") && err.contains("header_env"),
            "{err}"
        );
        assert!(!err.contains("s3cret"), "{err}");
        let unknown = "[[mcp_servers]]\nname = \"t\"\ncomand = \"x\"\n";
        let err = load(Some(unknown), &[]).unwrap_err().to_string();
        assert!(err.contains("comand"), "{err}");
        assert!(load(None, &[]).unwrap().mcp_servers.is_empty());
    }

    #[test]
    fn model_configurations_are_read_and_checked() {
        let text = r#"
            [[configurations]]
            name = "openai"
            kind = "openai"
            model = "gpt-4o-mini"
            price_input_per_million = 0.15

            [[configurations]]
            name = "ollama"
            kind = "openai"
            model = "llama3.1"
            base_url = "http://127.0.0.1:11434/v1"
            api_key_env = ""
        "#;
        let settings = load(Some(text), &[("OPENAI_BASE_URL", "http://proxy.local/v1")]).unwrap();
        let [openai, ollama] = settings.configurations.as_slice() else {
            panic!("two configurations")
        };
        assert_eq!(openai.base_url.as_deref(), Some("http://proxy.local/v1"));
        assert_eq!(openai.key_env(), Some("OPENAI_API_KEY"));
        assert_eq!(
            ollama.base_url.as_deref(),
            Some("http://127.0.0.1:11434/v1")
        );
        assert_eq!(ollama.key_env(), None);

        let twice = "[[configurations]]\nname = \"a\"\nkind = \"openai\"\nmodel = \"m\"\n[[configurations]]\nname = \"a\"\nkind = \"gemini\"\nmodel = \"m\"\n";
        let err = load(Some(twice), &[]).unwrap_err().to_string();
        assert!(
            err.contains("`configurations`") && err.contains("own name"),
            "{err}"
        );
        let bad_kind = "[[configurations]]\nname = \"a\"\nkind = \"cohere\"\nmodel = \"m\"\n";
        assert!(load(Some(bad_kind), &[])
            .unwrap_err()
            .to_string()
            .contains("Leptos.toml"));
        let bad_url = "[[configurations]]\nname = \"a\"\nkind = \"openai\"\nmodel = \"m\"\nbase_url = \"ftp://x\"\n";
        assert!(load(Some(bad_url), &[])
            .unwrap_err()
            .to_string()
            .contains("base_url"));
    }

    #[test]
    fn approval_timeouts_are_durations_or_none() {
        assert_eq!(
            load(None, &[]).unwrap().approval_timeout_ms,
            Some(86_400_000)
        );
        let settings = load(
            Some("approval_timeout = \"90m\"\n[[configurations]]\nname = \"a\"\nkind = \"demo\"\nmodel = \"m\"\napproval_timeout = \"none\"\n"),
            &[],
        )
        .unwrap();
        assert_eq!(settings.approval_timeout_ms, Some(5_400_000));
        assert_eq!(
            settings.configurations[0].approval_timeout.as_deref(),
            Some("none")
        );
        assert_eq!(
            load(None, &[("NRLLM_APPROVAL_TIMEOUT", "none")])
                .unwrap()
                .approval_timeout_ms,
            None
        );
        assert_eq!(parse_timeout("2s"), Ok(Some(2000)));
        let err = load(None, &[("NRLLM_APPROVAL_TIMEOUT", "soon")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`approval_timeout`") && err.contains("24h"),
            "{err}"
        );
        assert!(parse_timeout("0s").is_err());
        let err = load(
            Some("[[configurations]]\nname = \"a\"\nkind = \"demo\"\nmodel = \"m\"\napproval_timeout = \"later\"\n"),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("configuration `a`"), "{err}");
    }

    #[test]
    fn webhook_settings_are_checked() {
        let settings = load(
            Some("webhook_url = \"https://hooks.example/nrllm\"\nwebhook_max_attempts = 3"),
            &[("NRLLM_WEBHOOK_BACKOFF_MS", "50")],
        )
        .unwrap();
        assert_eq!(
            settings.webhook_url.as_deref(),
            Some("https://hooks.example/nrllm")
        );
        assert_eq!(
            (settings.webhook_max_attempts, settings.webhook_backoff_ms),
            (3, 50)
        );
        assert_eq!(settings.webhook_secret_env, "NRLLM_WEBHOOK_SECRET");
        let err = load(Some("webhook_url = \"hooks.example\""), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`webhook_url`") && err.contains("http://"),
            "{err}"
        );
        let err = load(
            Some("[[configurations]]\nname = \"a\"\nkind = \"demo\"\nmodel = \"m\"\nwebhook_url = \"ftp://x\"\n"),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("configuration `a`"), "{err}");
        let err = load(None, &[("NRLLM_WEBHOOK_MAX_ATTEMPTS", "0")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("`webhook_max_attempts`"), "{err}");
    }

    #[test]
    fn unknown_keys_and_broken_syntax_are_refused_with_the_file_name() {
        let err = load(Some("site_adr = \"x\""), &[]).unwrap_err().to_string();
        assert!(
            err.contains("Leptos.toml") && err.contains("site_adr"),
            "{err}"
        );
        let err = load(Some("site_addr = "), &[]).unwrap_err().to_string();
        assert!(err.contains("Leptos.toml"), "{err}");
    }
}
