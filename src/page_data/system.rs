//! What the system page shows: the server, the configurations, the MCP servers, and today's
//! spend against the daily caps.

use serde::{Deserialize, Serialize};

use super::ConfigurationView;

/// What the system page reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemView {
    /// The server's version.
    pub version: String,
    /// `SQLite` or `Postgres`.
    pub database: String,
    /// The database answered, and how many migrations it has applied.
    pub database_ok: bool,
    pub migrations: i64,
    pub configurations: Vec<ConfigurationView>,
    pub tools_enabled: usize,
    pub tools_total: usize,
    /// Runs running in this process, and the live step streams open on them.
    pub running_here: usize,
    pub live_streams: usize,
    /// The MCP servers this process connects, in configuration order.
    pub mcp_servers: Vec<McpServerView>,
    /// The viewer may ask a server to reconnect (administrators).
    pub can_reconnect: bool,
    /// Today's spend against the daily caps across runs.
    pub spend: SpendToday,
    /// The notification outbox (mails), if anyone is notified.
    pub notifications: Option<OutboxView>,
}

/// How the notification outbox stands over the last day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxView {
    pub pending: i64,
    /// Pending after a failed attempt.
    pub retrying: i64,
    pub failed: i64,
    pub delivered: i64,
    /// The latest failure, in the server's words, and when.
    pub last_error: Option<String>,
}

/// Today's spend (a UTC day) against the daily caps across runs: each configuration's, and
/// each user's who spent today; administrators may raise a cap for the day.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SpendToday {
    /// `2026-12-04`.
    pub day: String,
    pub rows: Vec<SpendRow>,
    /// The cap every user has, if any (`$5.0000`).
    pub user_cap: Option<String>,
    pub can_raise: bool,
}

/// One count of today's spend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpendRow {
    /// `configuration` or `user`.
    pub scope: String,
    pub name: String,
    /// `$0.0123`.
    pub spent: String,
    /// The cap as raised for the day (none: no cap).
    pub cap: Option<String>,
    /// What an administrator raised it by today.
    pub raised: Option<String>,
    /// The cap is reached: runs wait at it.
    pub reached: bool,
}

/// An MCP server as the system page shows it. Every text in it is the operator's or was
/// bounded when the server said it; pages render it as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerView {
    pub name: String,
    /// `stdio: <command>` or `Streamable HTTP: <url>` (never a header or an environment value).
    pub endpoint: String,
    pub state: nrllm_types::McpState,
    /// Why it failed.
    pub reason: Option<String>,
    /// When it is tried again (`2026-11-30 06:41:29 UTC`).
    pub retry_at: Option<String>,
    /// The server's own name and version.
    pub server_info: Option<String>,
    pub tools: Vec<nrllm_types::McpToolStatus>,
    pub connections: u32,
    /// "Its tool list changed 2 time(s), last at 2026-12-04 23:20:01 UTC", once it has.
    #[serde(default)]
    pub list_changed: Option<String>,
    /// "1 call held open for an operator's reply …", while any is.
    #[serde(default)]
    pub held_calls: Option<String>,
}
