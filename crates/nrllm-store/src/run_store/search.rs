//! The search index's writer. A run's own writes only queue it (a new run for its prompt, a
//! finished one for its answer: the migration's triggers); the queued runs are indexed here in
//! batches, so that no transition's commit writes the index (on SQLite an FTS5 write in every
//! commit halved the approve cycle). A run is found by search once the indexer has passed.

use sqlx::Row as _;

use nrllm_core::run_store::StoreError;

use crate::db::Backend;
use crate::error::backend;

use super::SqlRunStore;

impl SqlRunStore {
    /// Indexes up to `limit` queued runs' prompts and answers in one transaction: how many runs
    /// it took from the queue. Instances may call it at the same time (on Postgres each takes
    /// other runs; on SQLite they take turns).
    pub async fn index_queued(&self, limit: u32) -> Result<usize, StoreError> {
        let limit = i64::from(limit.clamp(1, 1000));
        match self.db.backend() {
            Backend::Sqlite => self.index_queued_sqlite(limit).await,
            Backend::Postgres => self.index_queued_postgres(limit).await,
        }
    }

    async fn index_queued_sqlite(&self, limit: i64) -> Result<usize, StoreError> {
        // Most of the time nothing waits: a read says so without taking the write turn.
        let queued: Option<String> =
            sqlx::query_scalar("SELECT run_id FROM agent_run_search_queue LIMIT 1")
                .fetch_optional(self.db.pool())
                .await
                .map_err(backend)?;
        if queued.is_none() {
            return Ok(0);
        }
        let mut tx = self.db.begin_write().await.map_err(backend)?;
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT run_id FROM agent_run_search_queue ORDER BY run_id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&mut *tx)
        .await
        .map_err(backend)?;
        if ids.is_empty() {
            return Ok(0);
        }
        let list = (1..=ids.len())
            .map(|n| format!("${n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let statements = [
            // A run indexed before (its prompt) is indexed again whole (with its answer).
            format!(
                "DELETE FROM agent_run_search WHERE rowid IN \
                 (SELECT n FROM agent_run_search_key WHERE run_id IN ({list}))"
            ),
            format!(
                "INSERT OR IGNORE INTO agent_run_search_key (run_id) \
                 SELECT id FROM agent_run WHERE id IN ({list})"
            ),
            format!(
                "INSERT INTO agent_run_search (rowid, prompt, answer) \
                 SELECT k.n, CASE WHEN json_valid(r.configuration) \
                 THEN json_extract(r.configuration, '$.prompt') END, r.final_answer \
                 FROM agent_run r JOIN agent_run_search_key k ON k.run_id = r.id \
                 WHERE r.id IN ({list})"
            ),
            format!("DELETE FROM agent_run_search_queue WHERE run_id IN ({list})"),
        ];
        for sql in &statements {
            ids.iter()
                .fold(sqlx::query(sql), |query, id| query.bind(id))
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(ids.len())
    }

    async fn index_queued_postgres(&self, limit: i64) -> Result<usize, StoreError> {
        // One statement: the runs taken (locked rows skipped: another instance indexes them),
        // their documents written (a data-modifying CTE runs whether it is read or not); a run
        // finished meanwhile is queued again and indexed next.
        let row = sqlx::query(
            "WITH taken AS (
                 DELETE FROM agent_run_search_queue WHERE run_id IN (
                     SELECT run_id FROM agent_run_search_queue ORDER BY run_id LIMIT $1
                     FOR UPDATE SKIP LOCKED)
                 RETURNING run_id),
             written AS (
                 INSERT INTO agent_run_search (run_id, document)
                 SELECT r.id, agent_run_search_document(r.configuration, r.final_answer)
                 FROM agent_run r JOIN taken t ON t.run_id = r.id
                 ON CONFLICT (run_id) DO UPDATE SET document = EXCLUDED.document)
             SELECT COUNT(*) AS taken FROM taken",
        )
        .bind(limit)
        .fetch_one(self.db.pool())
        .await
        .map_err(backend)?;
        let taken: i64 = row.try_get("taken").map_err(backend)?;
        Ok(usize::try_from(taken).unwrap_or_default())
    }

    /// Runs waiting in the search index's queue.
    pub async fn search_queue_len(&self) -> Result<i64, StoreError> {
        sqlx::query_scalar("SELECT COUNT(*) FROM agent_run_search_queue")
            .fetch_one(self.db.pool())
            .await
            .map_err(backend)
    }
}
