//! The audit log's chain: verifying runs' steps, anchoring the audit key.

use nrllm_core::run_store::StoreError;
use sqlx::Row as _;
use uuid::Uuid;

use crate::chain::{self, ChainRow, ChainVerdict, RunSeal};
use crate::error::backend;

use super::*;

impl SqlRunStore {
    /// Verifies run `id`'s log against its chain under this database's audit key (`None`: no
    /// such run).
    pub async fn verify_log(&self, id: Uuid) -> Result<Option<ChainVerdict>, StoreError> {
        let since = self.audit_since().await?;
        self.verify_with(id, since).await
    }

    pub(super) async fn verify_with(
        &self,
        id: Uuid,
        since: Option<i64>,
    ) -> Result<Option<ChainVerdict>, StoreError> {
        let run = id.to_string();
        let Some(seal) = sqlx::query(
            "SELECT audit_key_id, audit_head, last_sequence FROM agent_run WHERE id = $1",
        )
        .bind(&run)
        .fetch_optional(self.db.pool())
        .await
        .map_err(backend)?
        else {
            return Ok(None);
        };
        let seal = RunSeal {
            key_id: seal.try_get("audit_key_id").map_err(backend)?,
            head: seal.try_get("audit_head").map_err(backend)?,
            last_sequence: seal.try_get("last_sequence").map_err(backend)?,
            began_ms: id.get_timestamp().map(|ts| {
                let (secs, nanos) = ts.to_unix();
                i64::try_from(secs).unwrap_or(i64::MAX) * 1000 + i64::from(nanos / 1_000_000)
            }),
        };
        let rows = sqlx::query(
            "SELECT sequence, kind, round, duration_ms, payload, created_at_ms, prev_hash, hash \
             FROM agent_run_event WHERE run_id = $1 ORDER BY sequence",
        )
        .bind(&run)
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        let rows = rows
            .iter()
            .map(|row| {
                Ok(ChainRow {
                    sequence: row.try_get("sequence")?,
                    kind: row.try_get("kind")?,
                    round: row.try_get("round")?,
                    duration_ms: row.try_get("duration_ms")?,
                    payload: row.try_get("payload")?,
                    created_at_ms: row.try_get("created_at_ms")?,
                    prev_hash: row.try_get("prev_hash")?,
                    hash: row.try_get("hash")?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(backend)?;
        Ok(Some(chain::verify(
            self.db.audit_key(),
            since,
            &run,
            &rows,
            &seal,
        )))
    }

    /// Records that this database's audit key is in use from `now_ms` on, unless it already is
    /// (every instance calls this at start). A run that begins after it must be keyed.
    pub async fn anchor_audit_key(&self, now_ms: i64) -> Result<(), StoreError> {
        let key = self.db.audit_key();
        let statement = sqlx::query(
            "INSERT INTO audit_anchor (key_id, since_ms, mac) VALUES ($1, $2, $3) \
             ON CONFLICT (key_id) DO NOTHING",
        )
        .bind(key.id())
        .bind(now_ms)
        .bind(key.anchor_mac(now_ms));
        self.db.write(statement).await.map_err(backend)?;
        Ok(())
    }

    /// Since when this database's audit key is in use, as its anchor says (`None`: no anchor,
    /// or one that does not hold under the key).
    pub async fn audit_since(&self) -> Result<Option<i64>, StoreError> {
        let key = self.db.audit_key();
        let anchor: Option<(i64, String)> =
            sqlx::query_as("SELECT since_ms, mac FROM audit_anchor WHERE key_id = $1")
                .bind(key.id())
                .fetch_optional(self.db.pool())
                .await
                .map_err(backend)?;
        Ok(anchor
            .filter(|(since, mac)| *mac == key.anchor_mac(*since))
            .map(|(since, _)| since))
    }

    /// Verifies every run's log, `page` runs at a time, calling `each` with every run's verdict
    /// (in creation order); how many runs were checked.
    pub async fn verify_all(
        &self,
        page: u32,
        mut each: impl FnMut(Uuid, &ChainVerdict),
    ) -> Result<usize, StoreError> {
        let since = self.audit_since().await?;
        let mut after = String::new();
        let mut checked = 0;
        loop {
            let ids: Vec<String> =
                sqlx::query_scalar("SELECT id FROM agent_run WHERE id > $1 ORDER BY id LIMIT $2")
                    .bind(&after)
                    .bind(i64::from(page.max(1)))
                    .fetch_all(self.db.pool())
                    .await
                    .map_err(backend)?;
            let Some(last) = ids.last().cloned() else {
                return Ok(checked);
            };
            for id in ids {
                let Ok(uuid) = Uuid::parse_str(&id) else {
                    continue;
                };
                if let Some(verdict) = self.verify_with(uuid, since).await? {
                    each(uuid, &verdict);
                    checked += 1;
                }
            }
            after = last;
        }
    }
}
