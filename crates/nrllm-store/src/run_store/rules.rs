//! Approval rules in the database.

use async_trait::async_trait;
use nrllm_core::rules::{ApprovalRule, RuleDraft, RuleEffect, RuleScope};
use nrllm_core::run_store::{RuleStore, StoreError};
use sqlx::Row as _;
use uuid::Uuid;

use crate::error::backend;
use crate::transition::{Cells, Statement};

use super::*;

pub(super) const RULE_COLUMNS: &str =
    "id, run_id, configuration, tool, effect, conditions, created_by, created_at_ms";

/// The insert of a rule drafted by `by`, returning its `id`.
pub(super) fn rule_insert(draft: &RuleDraft, by: &str, now_ms: i64) -> Statement {
    let (run, configuration) = match &draft.scope {
        RuleScope::Run(run) => (Some(run.to_string()), None),
        RuleScope::Configuration(name) => (None, Some(name.clone())),
    };
    let conditions = serde_json::to_string(&draft.conditions).unwrap_or_else(|_| "[]".into());
    Statement::new(
        "INSERT INTO approval_rule (run_id, configuration, tool, effect, conditions, created_by, \
         created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    )
    .bind(run)
    .bind(configuration)
    .bind(draft.tool.as_str())
    .bind(draft.effect.as_str())
    .bind(conditions)
    .bind(by)
    .bind(now_ms)
}

pub(super) fn rule_from_row(row: &impl Cells) -> Result<ApprovalRule, StoreError> {
    let text = |column: &str| row.text(column);
    let scope = match (text("run_id")?, text("configuration")?) {
        (Some(run), _) => RuleScope::Run(
            Uuid::parse_str(&run).map_err(|e| StoreError::Corrupt(format!("rule run id: {e}")))?,
        ),
        (None, Some(name)) => RuleScope::Configuration(name),
        (None, None) => return Err(StoreError::Corrupt("a rule without a scope".into())),
    };
    let effect = text("effect")?.unwrap_or_default();
    Ok(ApprovalRule {
        id: row.required_int("id")?,
        scope,
        tool: text("tool")?.unwrap_or_default(),
        effect: RuleEffect::parse(&effect)
            .ok_or_else(|| StoreError::Corrupt(format!("rule effect `{effect}`")))?,
        conditions: serde_json::from_str(&text("conditions")?.unwrap_or_default())
            .map_err(|e| StoreError::Corrupt(format!("rule conditions: {e}")))?,
        created_by: text("created_by")?.unwrap_or_default(),
        created_at_ms: row.required_int("created_at_ms")?,
    })
}

#[async_trait]
impl RuleStore for SqlRunStore {
    async fn rules_for(
        &self,
        run: Uuid,
        configuration: &str,
    ) -> Result<Vec<ApprovalRule>, StoreError> {
        let rows = self
            .db
            .query(
                &Statement::new(format!(
                    "SELECT {RULE_COLUMNS} FROM approval_rule WHERE run_id = $1 \
                     OR configuration = $2 ORDER BY id"
                ))
                .bind(run.to_string())
                .bind(configuration),
            )
            .await?;
        rows.iter().map(rule_from_row).collect()
    }

    async fn list_rules(&self, limit: u32) -> Result<Vec<ApprovalRule>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {RULE_COLUMNS} FROM approval_rule ORDER BY id DESC LIMIT $1"
        ))
        .bind(i64::from(limit))
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter().map(rule_from_row).collect()
    }

    async fn add_rule(
        &self,
        draft: &RuleDraft,
        by: &str,
        now_ms: i64,
    ) -> Result<ApprovalRule, StoreError> {
        let mut tx = self.db.begin_write().await.map_err(backend)?;
        let id: i64 = rule_insert(draft, by, now_ms)
            .query()
            .fetch_one(&mut *tx)
            .await
            .and_then(|row| row.try_get("id"))
            .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        Ok(ApprovalRule {
            id,
            scope: draft.scope.clone(),
            tool: draft.tool.clone(),
            effect: draft.effect,
            conditions: draft.conditions.clone(),
            created_by: by.to_owned(),
            created_at_ms: now_ms,
        })
    }

    async fn rule(&self, id: i64) -> Result<Option<ApprovalRule>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {RULE_COLUMNS} FROM approval_rule WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.db.pool())
        .await
        .map_err(backend)?;
        row.as_ref().map(rule_from_row).transpose()
    }

    async fn remove_rule(&self, id: i64) -> Result<Option<ApprovalRule>, StoreError> {
        let mut tx = self.db.begin_write().await.map_err(backend)?;
        let row = sqlx::query(&format!(
            "DELETE FROM approval_rule WHERE id = $1 RETURNING {RULE_COLUMNS}"
        ))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        row.as_ref().map(rule_from_row).transpose()
    }
}
