//! The settings file as written: every key optional, unknown keys refused (they are usually
//! typos).

use serde::Deserialize;

use super::notify::NotificationsFile;
use super::values::{BudgetLimits, ModelConfiguration, SpendCapSettings};

/// The file as written: every key optional, unknown keys refused (they are usually typos).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SettingsFile {
    pub(super) site_addr: Option<String>,
    pub(super) database_url: Option<String>,
    pub(super) sqlite_synchronous: Option<String>,
    pub(super) log_level: Option<String>,
    pub(super) retention_terminal_days: Option<i64>,
    pub(super) retention_waiting_days: Option<i64>,
    pub(super) demo_think_ms: Option<i64>,
    pub(super) max_body_bytes: Option<i64>,
    pub(super) stream_limit_per_run: Option<i64>,
    pub(super) stream_limit_total: Option<i64>,
    pub(super) export_dir: Option<String>,
    pub(super) audit_key_file: Option<String>,
    pub(super) shutdown_grace_secs: Option<i64>,
    pub(super) configurations: Option<Vec<ModelConfiguration>>,
    pub(super) allowed_hosts: Option<Vec<String>>,
    pub(super) public_url: Option<String>,
    pub(super) four_eyes: Option<bool>,
    pub(super) run_starts_per_minute: Option<i64>,
    pub(super) session_hours: Option<i64>,
    pub(super) webhook_url: Option<String>,
    pub(super) webhook_secret_env: Option<String>,
    pub(super) webhook_max_attempts: Option<i64>,
    pub(super) webhook_backoff_ms: Option<i64>,
    pub(super) lease_secs: Option<i64>,
    pub(super) max_running_runs: Option<i64>,
    pub(super) retry_max_wait_secs: Option<i64>,
    pub(super) max_state_bytes: Option<i64>,
    pub(super) approval_timeout: Option<String>,
    pub(super) mcp_servers: Option<Vec<nrllm_mcp::config::ServerConfig>>,
    pub(super) mcp_call_timeout_secs: Option<i64>,
    pub(super) mcp_elicitation_timeout_secs: Option<i64>,
    pub(super) trace_url_template: Option<String>,
    pub(super) otlp_endpoint: Option<String>,
    pub(super) otlp_protocol: Option<String>,
    pub(super) trace_message_contents: Option<bool>,
    pub(super) limits: Option<BudgetLimits>,
    pub(super) spend_caps: Option<SpendCapSettings>,
    pub(super) notifications: Option<NotificationsFile>,
}
