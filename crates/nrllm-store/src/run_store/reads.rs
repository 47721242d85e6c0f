//! Reading runs, their steps and their journaled effects.

use async_trait::async_trait;
use nrllm_core::run_store::{
    EffectRecord, RunFilter, RunReader, RunRecord, RunStatus, StoreError, StoredEvent,
    WaitingFilter,
};
use sqlx::Row as _;
use uuid::Uuid;

use crate::error::backend;
use crate::transition::{Cells as _, Statement};
use nrllm_core::quorum::Vote;

use super::queries::*;
use super::write::*;
use super::*;

/// The newest runs a search looks among first, before it reads every match.
const SEARCH_WINDOW: u32 = 2_000;

#[async_trait]
impl RunReader for SqlRunStore {
    async fn get(&self, id: Uuid) -> Result<Option<RunRecord>, StoreError> {
        let rows = self
            .db
            .query(
                &Statement::new(format!("SELECT {RUN_COLUMNS} FROM agent_run WHERE id = $1"))
                    .bind(id.to_string()),
            )
            .await?;
        rows.first().map(read_run).transpose()
    }

    async fn approvals(&self, id: Uuid, version: i64) -> Result<Vec<Vote>, StoreError> {
        let rows = self
            .db
            .query(
                &Statement::new(
                    "SELECT approver, token, fingerprint, decision, created_at_ms FROM turn_approval \
                     WHERE run_id = $1 AND run_version = $2 ORDER BY created_at_ms, approver",
                )
                .bind(id.to_string())
                .bind(version),
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(Vote {
                    approver: row.required_text("approver")?,
                    token: row.text("token")?,
                    fingerprint: row.required_text("fingerprint")?,
                    decision: row.required_text("decision")?,
                    at_ms: row.required_int("created_at_ms")?,
                })
            })
            .collect()
    }

    async fn list(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        // A search first looks among the newest runs (quick when many match), then, if that
        // does not fill the page, reads every match (quick when few do).
        let backend_kind = self.db.backend();
        let recent = super::listing::recent_matches_query(backend_kind, filter, SEARCH_WINDOW);
        if let Some(listing) = recent {
            let rows = listing
                .query()
                .fetch_all(self.db.pool())
                .await
                .map_err(backend)?;
            if rows.len() >= filter.limit.clamp(1, 500) as usize {
                return rows.iter().map(read_run).collect();
            }
        }
        let listing = super::listing::list_query(backend_kind, filter);
        let rows = listing
            .query()
            .fetch_all(self.db.pool())
            .await
            .map_err(backend)?;
        rows.iter().map(read_run).collect()
    }

    async fn waiting(&self, filter: &WaitingFilter) -> Result<Vec<RunRecord>, StoreError> {
        let listing = super::listing::waiting_query(self.db.backend(), filter);
        let rows = listing
            .query()
            .fetch_all(self.db.pool())
            .await
            .map_err(backend)?;
        rows.iter().map(read_run).collect()
    }

    async fn events(&self, id: Uuid, after: i64) -> Result<Vec<StoredEvent>, StoreError> {
        self.events_page(id, after, u32::MAX).await
    }

    async fn events_page(
        &self,
        id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT sequence, kind, round, duration_ms, payload, created_at_ms FROM agent_run_event \
             WHERE run_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3",
        )
        .bind(id.to_string())
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(self.db.pool())
        .await.map_err(backend)?;
        rows.iter()
            .map(|row| {
                let payload: String = row.try_get("payload").map_err(backend)?;
                Ok(StoredEvent {
                    run_id: id,
                    sequence: row.try_get("sequence").map_err(backend)?,
                    kind: row.try_get("kind").map_err(backend)?,
                    round: row.try_get("round").map_err(backend)?,
                    duration_ms: row.try_get("duration_ms").map_err(backend)?,
                    payload: serde_json::from_str(&payload)
                        .map_err(|err| StoreError::Corrupt(format!("event payload: {err}")))?,
                    created_at_ms: row.try_get("created_at_ms").map_err(backend)?,
                })
            })
            .collect()
    }

    async fn effects(&self, id: Uuid) -> Result<Vec<EffectRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT round, call_id, tool, effect_key, dispatched_at_ms, result, outcome \
             FROM agent_run_effect WHERE run_id = $1 ORDER BY round, dispatched_at_ms",
        )
        .bind(id.to_string())
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter()
            .map(|row| {
                let result: Option<String> = row.try_get("result").map_err(backend)?;
                let outcome: Option<String> = row.try_get("outcome").map_err(backend)?;
                let round: i64 = row.try_get("round").map_err(backend)?;
                Ok(EffectRecord {
                    round: u32::try_from(round).unwrap_or_default(),
                    call_id: row.try_get("call_id").map_err(backend)?,
                    tool: row.try_get("tool").map_err(backend)?,
                    effect_key: row.try_get("effect_key").map_err(backend)?,
                    dispatched_at_ms: row.try_get("dispatched_at_ms").map_err(backend)?,
                    result: result.map(|r| (r, outcome_from(outcome.as_deref().unwrap_or("ok")))),
                })
            })
            .collect()
    }

    async fn children(&self, id: Uuid, limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM agent_run WHERE parent_id = $1 \
             ORDER BY created_at_ms, id LIMIT $2"
        ))
        .bind(id.to_string())
        .bind(i64::from(limit))
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter().map(read_run).collect()
    }

    async fn queue_position(&self, id: Uuid) -> Result<Option<u64>, StoreError> {
        let ahead: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM agent_run q JOIN agent_run r ON r.id = $1 \
             WHERE r.status = $2 AND q.status = $2 AND (q.queued_at_ms < r.queued_at_ms \
             OR (q.queued_at_ms = r.queued_at_ms AND q.id <= r.id))",
        )
        .bind(id.to_string())
        .bind(RunStatus::Queued.as_str())
        .fetch_one(self.db.pool())
        .await
        .map_err(backend)?;
        Ok(u64::try_from(ahead).ok().filter(|n| *n > 0))
    }

    async fn expired_approvals(&self, now_ms: i64, limit: u32) -> Result<Vec<Uuid>, StoreError> {
        self.overdue(Sweep::Deadlines, now_ms, limit).await
    }
}
