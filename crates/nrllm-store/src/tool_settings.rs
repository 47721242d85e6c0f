//! Enable/disable choices for tools and tool groups, persisted in `tool_setting` and applied to a
//! [`ToolRegistry`] at start and whenever an operator changes them.

use sqlx::Row;

use crate::db::Database;
use nrllm_core::clock::now_ms;
use nrllm_core::registry::ToolRegistry;

/// The persisted tool settings.
#[derive(Debug, Clone)]
pub struct ToolSettingsStore {
    db: Database,
}

const TOOL_PREFIX: &str = "tool:";
const GROUP_PREFIX: &str = "group:";

impl ToolSettingsStore {
    /// The settings in `db`.
    pub fn new(db: Database) -> ToolSettingsStore {
        ToolSettingsStore { db }
    }

    /// Applies every stored choice to `registry`.
    pub async fn load_into(&self, registry: &ToolRegistry) -> Result<(), sqlx::Error> {
        let rows = sqlx::query("SELECT key, enabled FROM tool_setting")
            .fetch_all(self.db.pool())
            .await?;
        for row in rows {
            let key: String = row.try_get("key")?;
            let enabled = row.try_get::<i64, _>("enabled")? != 0;
            if let Some(name) = key.strip_prefix(TOOL_PREFIX) {
                registry.set_enabled(name, enabled);
            } else if let Some(group) = key.strip_prefix(GROUP_PREFIX) {
                registry.set_group_enabled(group, enabled);
            }
        }
        Ok(())
    }

    async fn save(&self, key: String, enabled: bool) -> Result<(), sqlx::Error> {
        let statement = sqlx::query(
            "INSERT INTO tool_setting (key, enabled, updated_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (key) DO UPDATE SET enabled = excluded.enabled, updated_at_ms = excluded.updated_at_ms",
        )
        .bind(key)
        .bind(i64::from(enabled))
        .bind(now_ms());
        self.db.write(statement).await?;
        // Every other instance reads the settings again, now that this committed.
        self.db.announce(vec![crate::notify::Notice::ToolSettings]);
        Ok(())
    }

    /// Enables or disables one tool, durably and in `registry`.
    pub async fn set_tool(
        &self,
        registry: &ToolRegistry,
        name: &str,
        enabled: bool,
    ) -> Result<(), sqlx::Error> {
        self.save(format!("{TOOL_PREFIX}{name}"), enabled).await?;
        registry.set_enabled(name, enabled);
        Ok(())
    }

    /// Enables or disables a group, durably and in `registry`.
    pub async fn set_group(
        &self,
        registry: &ToolRegistry,
        group: &str,
        enabled: bool,
    ) -> Result<(), sqlx::Error> {
        self.save(format!("{GROUP_PREFIX}{group}"), enabled).await?;
        registry.set_group_enabled(group, enabled);
        Ok(())
    }
}
