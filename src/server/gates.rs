//! The MCP tools' gates kept across restarts (`nrllm_mcp::gates`), in the database.

use std::collections::BTreeMap;

use async_trait::async_trait;
use nrllm_mcp::gates::GateMemory;
use nrllm_store::mcp_gates::McpGateStore;

/// [`GateMemory`] over the `mcp_tool_gate` table.
pub struct StoredGates(pub McpGateStore);

#[async_trait]
impl GateMemory for StoredGates {
    async fn recall(&self) -> Result<BTreeMap<String, bool>, String> {
        self.0.recall().await.map_err(|err| err.to_string())
    }

    async fn remember(&self, server: &str, gates: BTreeMap<String, bool>) -> Result<(), String> {
        self.0
            .remember(server, &gates)
            .await
            .map_err(|err| err.to_string())
    }
}
