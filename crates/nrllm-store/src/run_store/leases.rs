//! The queue and the leases: taking queued runs, renewing and taking over leases.

use async_trait::async_trait;
use nrllm_core::run_store::{LeaseStore, Renewal, RunRecord, RunStatus, StoreError};
use uuid::Uuid;

use crate::db::Backend;
use crate::error::backend;
use crate::transition::{Cells as _, Statement};

use super::queries::*;
use super::write::*;
use super::*;

#[async_trait]
impl LeaseStore for SqlRunStore {
    async fn take_queued(&self, now_ms: i64, limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        self.take(now_ms, limit, false).await
    }

    async fn take_held(&self, now_ms: i64, limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        self.take(now_ms, limit, true).await
    }

    async fn take_run(&self, id: Uuid, now_ms: i64) -> Result<Option<RunRecord>, StoreError> {
        let statement = self
            .bind_take(take_sql("id = $6"), now_ms)
            .bind(id.to_string());
        let mut tx = self.db.begin_typed().await?;
        let row = tx.query_one(&statement).await?;
        tx.commit().await?;
        if row.is_some() {
            self.committed();
        }
        row.as_ref().map(read_run).transpose()
    }

    async fn renew_lease(&self, id: Uuid, now_ms: i64) -> Result<Renewal, StoreError> {
        let renewed = sqlx::query(
            "UPDATE agent_run SET lease_until_ms = $1 \
             WHERE id = $2 AND status = $3 AND lease_owner = $4 RETURNING cancel_by, cancel_reason",
        )
        .bind(now_ms + self.lease_ms)
        .bind(id.to_string())
        .bind(RunStatus::Running.as_str())
        .bind(&*self.owner)
        .fetch_optional(self.db.pool())
        .await
        .map_err(backend)?;
        let Some(row) = renewed else {
            return Ok(Renewal::Gone);
        };
        Ok(Renewal::Held(cancel_request(&row)?))
    }

    async fn expired_leases(&self, now_ms: i64, limit: u32) -> Result<Vec<Uuid>, StoreError> {
        self.overdue(Sweep::Leases, now_ms, limit).await
    }

    async fn renew_holds(&self, now_ms: i64) -> Result<u64, StoreError> {
        // Holding nothing is the common case: a read answers it without a write.
        let any: Option<String> =
            sqlx::query_scalar("SELECT id FROM agent_run WHERE held_by = $1 LIMIT 1")
                .bind(&*self.owner)
                .fetch_optional(self.db.pool())
                .await
                .map_err(backend)?;
        if any.is_none() {
            return Ok(0);
        }
        let statement = sqlx::query(
            "UPDATE agent_run SET held_until_ms = $1 WHERE held_by = $2 AND status IN ($3, $4)",
        )
        .bind(now_ms + self.lease_ms)
        .bind(&*self.owner)
        .bind(RunStatus::WaitingForInput.as_str())
        .bind(RunStatus::Queued.as_str());
        let renewed = self.db.write(statement).await.map_err(backend)?;
        Ok(renewed.rows_affected())
    }

    async fn release_holds(&self) -> Result<u64, StoreError> {
        let statement = sqlx::query(
            "UPDATE agent_run SET held_by = NULL, held_until_ms = NULL \
             WHERE held_by IS NOT NULL AND held_by <> $1",
        )
        .bind(&*self.owner);
        let released = self.db.write(statement).await.map_err(backend)?;
        Ok(released.rows_affected())
    }

    async fn take_lease(&self, id: Uuid, now_ms: i64, force: bool) -> Result<bool, StoreError> {
        // One statement: of two reapers, exactly one update matches the expired lease. The
        // version moves on: it is the lease's epoch, so the instance that held the run before
        // can no longer write, nor apply an effect its tools fence on the epoch.
        let statement = sqlx::query(
            "UPDATE agent_run SET lease_owner = $1, lease_until_ms = $2, version = version + 1 \
             WHERE id = $3 AND status = $4 AND (lease_until_ms <= $5 OR $6 = 1)",
        )
        .bind(&*self.owner)
        .bind(now_ms + self.lease_ms)
        .bind(id.to_string())
        .bind(RunStatus::Running.as_str())
        .bind(now_ms)
        .bind(i64::from(force));
        let taken = self.db.write(statement).await.map_err(backend)?;
        if taken.rows_affected() == 1 {
            self.committed();
        }
        Ok(taken.rows_affected() == 1)
    }
}

impl SqlRunStore {
    /// The queued runs, as a query's `FROM … WHERE` that the conditions of a take follow. The
    /// status is written out, not bound, so that SQLite may read the queue's partial index
    /// (`agent_run_queue`, in the queue's order): without statistics its planner read the
    /// status index instead and sorted every queued run to take the first few — thousands a
    /// take when decisions come faster than the workers finish. A take of runs held here
    /// reads the index of held runs, which its planner finds.
    pub(super) fn queued(&self, held_here: bool) -> String {
        let index = match held_here {
            true => String::new(),
            false => indexed_by(self.db.backend(), "agent_run_queue"),
        };
        format!(
            "agent_run {index} WHERE status = '{}'",
            RunStatus::Queued.as_str()
        )
    }

    /// Takes up to `limit` queued runs for this instance, oldest first: any it may take, or
    /// (`held_here`) only those held for it.
    async fn take(
        &self,
        now: i64,
        limit: u32,
        held_here: bool,
    ) -> Result<Vec<RunRecord>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // An idle queue is the common case: a read answers it without a write transaction.
        // On SQLite the reads and the take run on this thread, on the store's own connections
        // (`Database::query`, `Database::begin_typed`): through sqlx's pool each statement was
        // a trip to its connection's thread and back, a decision's largest share of them.
        let queued = self.queued(held_here);
        let any = Statement::new(format!(
            "SELECT id FROM {queued} AND {} LIMIT 1",
            picked(held_here, 1, 2)
        ))
        .bind(&*self.owner)
        .bind(now);
        if self.db.query(&any).await?.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.db.begin_typed().await?;
        let rows = match self.db.backend() {
            // One statement; rows another instance is taking now are skipped, not waited for.
            Backend::Postgres => {
                // The pick is a CTE so that it runs once: as a plain `IN (…)` subquery the
                // planner may run it again for every row, and each run skips the rows just
                // taken — taking them all.
                let sql = format!(
                    "WITH next AS (SELECT id FROM {queued} AND {} \
                     ORDER BY queued_at_ms, id LIMIT $6 FOR UPDATE SKIP LOCKED) {}",
                    picked(held_here, 2, 4),
                    take_sql("id IN (SELECT id FROM next)")
                );
                tx.query(&self.bind_take(sql, now).bind(i64::from(limit)))
                    .await?
            }
            // The immediate transaction lets one taker in at a time: pick, then take each (SQLite
            // would evaluate a LIMIT subquery again as the update goes).
            Backend::Sqlite => {
                let pick = Statement::new(pick_sql(&queued, held_here))
                    .bind(&*self.owner)
                    .bind(now)
                    .bind(i64::from(limit));
                let ids = tx.query(&pick).await?;
                let sql = take_sql("id = $6");
                let mut rows = Vec::with_capacity(ids.len());
                for id in ids {
                    let take = self
                        .bind_take(sql.clone(), now)
                        .bind(id.required_text("id")?);
                    rows.extend(tx.query_one(&take).await?);
                }
                rows
            }
        };
        let runs = rows.iter().map(read_run).collect::<Result<Vec<_>, _>>()?;
        tx.commit().await?;
        if !runs.is_empty() {
            self.committed();
        }
        Ok(runs)
    }
}

/// The first of the `queued` runs ([`SqlRunStore::queued`]) a take may have, in the queue's
/// order (parameters: this instance, now, how many); SQLite's, which picks before it takes.
pub(super) fn pick_sql(queued: &str, held_here: bool) -> String {
    format!(
        "SELECT id FROM {queued} AND {} ORDER BY queued_at_ms, id LIMIT $3",
        picked(held_here, 1, 2)
    )
}
