//! What gated each MCP server's tools when they last joined, in `mcp_tool_gate`
//! (`nrllm_mcp::gates`): read at start, written as they join.

use std::collections::BTreeMap;

use sqlx::Row;

use crate::db::Database;
use nrllm_core::clock::now_ms;

/// The kept gates.
#[derive(Debug, Clone)]
pub struct McpGateStore {
    db: Database,
}

impl McpGateStore {
    /// The gates in `db`.
    pub fn new(db: Database) -> McpGateStore {
        McpGateStore { db }
    }

    /// Every tool kept, by its registry name: whether its calls waited for approval.
    pub async fn recall(&self) -> Result<BTreeMap<String, bool>, sqlx::Error> {
        let rows = sqlx::query("SELECT tool, waits FROM mcp_tool_gate")
            .fetch_all(self.db.pool())
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("tool")?, row.try_get::<i64, _>("waits")? != 0)))
            .collect()
    }

    /// Keeps the tools of server `server` as `gates`, replacing what it had, in one commit.
    pub async fn remember(
        &self,
        server: &str,
        gates: &BTreeMap<String, bool>,
    ) -> Result<(), sqlx::Error> {
        let now = now_ms();
        let mut tx = self.db.begin_write().await?;
        sqlx::query("DELETE FROM mcp_tool_gate WHERE server = $1")
            .bind(server)
            .execute(&mut *tx)
            .await?;
        for (tool, waits) in gates {
            sqlx::query(
                "INSERT INTO mcp_tool_gate (server, tool, waits, updated_at_ms) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(server)
            .bind(tool)
            .bind(i64::from(*waits))
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await
    }
}
