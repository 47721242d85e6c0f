//! The settings the server runs with, their defaults, and what is wrong with them.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

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
    /// How long a question an MCP server (before 2026-07-28) asks inside an open call is held
    /// open for the operator's reply before it is answered `cancel`.
    pub mcp_elicitation_timeout_secs: u32,
    /// Where a run's trace is shown in the operators' tracing tool: an `http(s)` URL with
    /// `{trace_id}` in it (the run page links to it); none by default.
    pub trace_url_template: Option<String>,
    /// Where spans are exported over OTLP (a base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT`); none:
    /// OpenTelemetry's own variables decide, and without them nothing is exported.
    pub otlp_endpoint: Option<String>,
    /// How spans travel (`http/protobuf` or `grpc`); none: OpenTelemetry's variables, else HTTP.
    pub otlp_protocol: Option<nrllm_telemetry::OtlpProtocol>,
    /// Whether exported spans carry message contents (off by default).
    pub trace_message_contents: bool,
    /// The budget every run gets unless its configuration or its form says otherwise
    /// (`[limits]`; none by default).
    pub limits: BudgetLimits,
    /// The daily spend caps across runs (`[spend_caps]`; none by default).
    pub spend_caps: SpendCapSettings,
    /// Who is told when a run waits, and how (`[notifications]`; nobody by default).
    pub notifications: super::notify::Notifications,
}

/// The daily spend caps across runs as the settings write them (`[spend_caps]`), in US
/// dollars per UTC day under each configuration's prices; a run that would cross one waits for
/// the cap to have room again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpendCapSettings {
    /// What each configuration's runs may spend in a day, together (a configuration's own
    /// `spend_cap_usd_per_day` wins).
    pub configuration_usd_per_day: Option<f64>,
    /// What the runs one user requested may spend in a day, together.
    pub user_usd_per_day: Option<f64>,
}

/// Dollars as the core counts them: millionths.
pub fn usd_micros(usd: f64) -> u64 {
    (usd * 1_000_000.0).round() as u64
}

/// What is wrong with a dollar amount, if anything.
pub fn check_usd(usd: Option<f64>) -> Result<(), String> {
    match usd {
        Some(usd) if !usd.is_finite() || usd < 0.0 => {
            Err("a dollar amount must be a number of 0 or more".to_owned())
        }
        _ => Ok(()),
    }
}

impl SpendCapSettings {
    /// What is wrong with them, if anything.
    pub fn check(&self) -> Result<(), String> {
        check_usd(self.configuration_usd_per_day)?;
        check_usd(self.user_usd_per_day)
    }

    /// The caps for configuration `own`'s runs, as the core counts them.
    pub fn for_configuration(&self, own: Option<f64>) -> nrllm_core::spend::SpendCaps {
        nrllm_core::spend::SpendCaps {
            per_configuration: own.or(self.configuration_usd_per_day).map(usd_micros),
            per_user: self.user_usd_per_day.map(usd_micros),
        }
    }
}

/// A run's budget as the settings write it (`[limits]`, or `limits = { … }` in a
/// configuration): each limit optional; a run that reaches one waits for a person.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetLimits {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// US dollars, under the configuration's prices.
    pub cost_usd: Option<f64>,
    /// Model requests.
    pub requests: Option<u64>,
    pub tool_calls: Option<u64>,
    /// Time spent running (waits excluded), in seconds.
    pub seconds: Option<u64>,
}

impl BudgetLimits {
    /// These limits, with `over`'s wherever it sets one.
    pub fn overridden_by(self, over: Option<BudgetLimits>) -> BudgetLimits {
        let Some(over) = over else { return self };
        BudgetLimits {
            input_tokens: over.input_tokens.or(self.input_tokens),
            output_tokens: over.output_tokens.or(self.output_tokens),
            cost_usd: over.cost_usd.or(self.cost_usd),
            requests: over.requests.or(self.requests),
            tool_calls: over.tool_calls.or(self.tool_calls),
            seconds: over.seconds.or(self.seconds),
        }
    }

    /// As the core counts them (cost in millionths of a dollar, time in milliseconds).
    pub fn to_limits(self) -> nrllm_core::state::Limits {
        nrllm_core::state::Limits {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cost_micros: self.cost_usd.map(usd_micros),
            requests: self.requests,
            tool_calls: self.tool_calls,
            wall_ms: self.seconds.map(|s| s.saturating_mul(1000)),
        }
    }

    /// What is wrong with them, if anything.
    pub fn check(&self) -> Result<(), String> {
        check_usd(self.cost_usd).map_err(|message| format!("cost_usd: {message}"))
    }
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
    /// Ask for responses as streams (default `true`); `false` for a gateway that does not
    /// stream.
    #[serde(default)]
    pub stream: Option<bool>,
    /// US dollars per million prompt tokens, for the cost estimate.
    #[serde(default)]
    pub price_input_per_million: Option<f64>,
    /// US dollars per million completion tokens.
    #[serde(default)]
    pub price_output_per_million: Option<f64>,
    /// This configuration's runs' budget, over the `[limits]` setting's.
    #[serde(default)]
    pub limits: Option<BudgetLimits>,
    /// What this configuration's runs may spend in a UTC day together, in US dollars (default:
    /// `[spend_caps] configuration_usd_per_day`).
    #[serde(default)]
    pub spend_cap_usd_per_day: Option<f64>,
    /// US dollars per million prompt tokens read from the provider's cache (default: the input
    /// price).
    #[serde(default)]
    pub price_cached_input_per_million: Option<f64>,
    /// US dollars per million prompt tokens written to the provider's cache (Anthropic; default:
    /// the input price).
    #[serde(default)]
    pub price_cache_write_per_million: Option<f64>,
    /// US dollars per million reasoning tokens (default: the output price).
    #[serde(default)]
    pub price_reasoning_per_million: Option<f64>,
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
    /// Who is told when its runs wait, and when again (each field over `[notifications]`'s).
    #[serde(default)]
    pub notify: Option<super::notify::NotifyFile>,
    /// How many distinct people must approve each of its turns (1 to 10; default 1).
    #[serde(default)]
    pub approvals_required: Option<u32>,
    /// The same for some tools instead, by name (`{ delete_page = 2 }`): a turn needs the most
    /// any of its calls waiting for a person needs.
    #[serde(default)]
    pub tool_approvals_required: std::collections::BTreeMap<String, u32>,
}

impl ModelConfiguration {
    /// How many people must approve its turns ([`nrllm_core::quorum`]).
    pub fn quorum(&self) -> nrllm_core::quorum::Quorum {
        nrllm_core::quorum::Quorum {
            approvals: self.approvals_required.unwrap_or(1),
            tools: self.tool_approvals_required.clone(),
        }
    }

    /// Its prices, for the cost estimate.
    pub fn prices(&self) -> nrllm_core::provider::Prices {
        nrllm_core::provider::Prices {
            input: self.price_input_per_million,
            output: self.price_output_per_million,
            cached_input: self.price_cached_input_per_million,
            cache_write: self.price_cache_write_per_million,
            reasoning: self.price_reasoning_per_million,
        }
    }

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
            mcp_elicitation_timeout_secs: 600,
            trace_url_template: None,
            otlp_endpoint: None,
            otlp_protocol: None,
            trace_message_contents: false,
            limits: BudgetLimits::default(),
            spend_caps: SpendCapSettings::default(),
            notifications: super::notify::Notifications::default(),
        }
    }
}

/// The hosts a server bound to `addr` answers to by default: its address and `localhost`.
pub(super) fn default_hosts(addr: SocketAddr) -> Vec<String> {
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
