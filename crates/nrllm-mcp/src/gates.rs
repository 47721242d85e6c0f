//! What gated each server's tools when they last joined, kept across restarts by the program
//! (a database table): a tool whose hints loosened while this process was down — it waited for
//! approval, and now says it is read-only — keeps its old gate at the first connection after a
//! restart too, until an administrator accepts the change ([`crate::relist::held`]).

use std::collections::BTreeMap;

use async_trait::async_trait;

/// Where the gates are kept.
#[async_trait]
pub trait GateMemory: Send + Sync {
    /// Every tool remembered, by its registry name (`server__tool`): whether its calls waited
    /// for approval.
    async fn recall(&self) -> Result<BTreeMap<String, bool>, String>;
    /// Remembers the tools of server `server` as they joined now, replacing what it had.
    async fn remember(&self, server: &str, gates: BTreeMap<String, bool>) -> Result<(), String>;
}

/// The tools of server `server` among `recalled`, as the system page would have shown them.
pub(crate) fn of_server(
    recalled: &BTreeMap<String, bool>,
    server: &str,
) -> Vec<nrllm_types::McpToolStatus> {
    let prefix = format!("{server}{}", nrllm_core::mcp::SEPARATOR);
    recalled
        .iter()
        .filter(|(name, _)| name.starts_with(&prefix))
        .map(|(name, waits)| nrllm_types::McpToolStatus {
            name: name.clone(),
            waits: *waits,
            rerun_after_crash: false,
            refused: None,
            held: None,
        })
        .collect()
}
