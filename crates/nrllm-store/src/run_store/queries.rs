//! The queries that list runs (the run list, the inbox, the queue, the overdue sweeps), their
//! binding, and the plans they run with.

use nrllm_core::run_store::{RunRecord, RunStatus, StoreError};
use nrllm_core::state::Counters;
use uuid::Uuid;

use crate::db::Backend;
use crate::error::backend;
use crate::transition::{Cells, Statement};

use super::write::*;
use super::*;

impl SqlRunStore {
    /// The runs `sweep` finds overdue at `now_ms`, the longest overdue first.
    pub(super) async fn overdue(
        &self,
        sweep: Sweep,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<Uuid>, StoreError> {
        let ids: Vec<String> = sqlx::query_scalar(&sweep.sql(self.db.backend()))
            .bind(now_ms)
            .bind(i64::from(limit))
            .fetch_all(self.db.pool())
            .await
            .map_err(backend)?;
        Ok(ids
            .iter()
            .filter_map(|id| Uuid::parse_str(id).ok())
            .collect())
    }

    /// The take-from-the-queue update ([`take_sql`]) with its first five parameters bound:
    /// running, this instance's lease from `now_ms`, from queued.
    pub(super) fn bind_take(&self, sql: String, now_ms: i64) -> Statement {
        Statement::new(sql)
            .bind(RunStatus::Running.as_str())
            .bind(&*self.owner)
            .bind(now_ms + self.lease_ms)
            .bind(now_ms)
            .bind(RunStatus::Queued.as_str())
    }
}

pub(super) const RUN_COLUMNS: &str =
    "id, status, configuration, requested_by, iterations, tool_calls, truncated, \
    prompt_tokens, completion_tokens, estimated_cost_micros, termination_reason, error_summary, \
    final_answer, suspended_state, decided_by, decided_at_ms, decision, decision_record, version, \
    last_sequence, created_at_ms, updated_at_ms, started_at_ms, finished_at_ms, \
    approval_deadline_ms, queued_at_ms, approved_bases, cancel_by, cancel_reason, unreported_usage, \
    cached_input_tokens, cache_write_tokens, reasoning_tokens, approvals_required, trace, lease_owner";

/// The queued runs this instance (parameter `owner`, at parameter `now`) may take: all but those
/// whose server's call another instance still holds open for them (`held_by`, renewed by its
/// heartbeat until `held_until_ms`).
pub(super) fn takeable(owner: u8, now: u8) -> String {
    format!("(held_by IS NULL OR held_by = ${owner} OR held_until_ms < ${now})")
}

/// [`takeable`], or (`held_here`) only the runs held for this instance.
pub(super) fn picked(held_here: bool, owner: u8, now: u8) -> String {
    match held_here {
        true => format!("(held_by = ${owner} AND held_until_ms >= ${now})"),
        false => takeable(owner, now),
    }
}

/// The update that takes the queued runs matching `which` for this instance ($1–$5: see
/// [`SqlRunStore::bind_take`]), returning them; a hold ends as its run is taken.
pub(super) fn take_sql(which: &str) -> String {
    format!(
        "UPDATE agent_run SET status = $1, lease_owner = $2, lease_until_ms = $3, \
         version = version + 1, updated_at_ms = $4, \
         started_at_ms = COALESCE(started_at_ms, $4), queued_at_ms = NULL, \
         held_by = NULL, held_until_ms = NULL \
         WHERE status = $5 AND {} AND {which} RETURNING {RUN_COLUMNS}",
        takeable(2, 4)
    )
}

pub(super) use crate::db::AnyQuery;

/// The clause that has SQLite read a query through `index` (SQLite keeps no statistics here, so
/// its planner guesses); nothing on Postgres, whose planner has them.
pub(crate) fn indexed_by(backend: Backend, index: &str) -> String {
    match backend {
        Backend::Sqlite => format!("INDEXED BY {index}"),
        Backend::Postgres => String::new(),
    }
}

/// A periodic look for overdue runs: running runs whose lease ran out, waiting runs whose
/// approval deadline passed.
#[derive(Debug, Clone, Copy)]
pub(super) enum Sweep {
    Leases,
    Deadlines,
}

impl Sweep {
    /// Its query: ids of runs past their time at `$1`, the longest overdue first, `$2` of them.
    pub(super) fn sql(self, backend: Backend) -> String {
        let (statuses, column, index): (&[RunStatus], _, _) = match self {
            // Running runs are the few being driven now.
            Sweep::Leases => (
                &[RunStatus::Running],
                "lease_until_ms",
                "agent_run_status_created",
            ),
            Sweep::Deadlines => (
                &RunStatus::WAITING,
                "approval_deadline_ms",
                "agent_run_deadline",
            ),
        };
        // SQLite without statistics would read the deadline sweep through the status index: every
        // waiting run, each sweep (~100 ms at 100k waiting runs).
        let index = indexed_by(backend, index);
        format!(
            "SELECT id FROM agent_run {index} WHERE {} AND {column} <= $1 \
             ORDER BY {column} LIMIT $2",
            RunStatus::sql_any("status", statuses)
        )
    }
}

pub(super) fn read_run(row: &impl Cells) -> Result<RunRecord, StoreError> {
    let text = row.required_text("id")?;
    let id = Uuid::parse_str(&text)
        .map_err(|err| StoreError::Corrupt(format!("run id `{text}`: {err}")))?;
    let status_text = row.required_text("status")?;
    let status = RunStatus::parse(&status_text)
        .ok_or_else(|| StoreError::Corrupt(format!("run {id}: unknown status `{status_text}`")))?;
    let configuration = row.required_text("configuration")?;
    let get_u64 = |name: &str| -> Result<u64, StoreError> {
        Ok(u64::try_from(row.required_int(name)?).unwrap_or_default())
    };
    Ok(RunRecord {
        id,
        status,
        configuration: serde_json::from_str(&configuration).ok(),
        requested_by: row.required_text("requested_by")?,
        counters: Counters {
            iterations: u32::try_from(get_u64("iterations")?).unwrap_or(u32::MAX),
            tool_calls: u32::try_from(get_u64("tool_calls")?).unwrap_or(u32::MAX),
            usage: nrllm_core::provider::Usage {
                prompt_tokens: get_u64("prompt_tokens")?,
                completion_tokens: get_u64("completion_tokens")?,
                unreported: u32::try_from(get_u64("unreported_usage")?).unwrap_or(u32::MAX),
                cached_input_tokens: get_u64("cached_input_tokens")?,
                cache_write_tokens: get_u64("cache_write_tokens")?,
                reasoning_tokens: get_u64("reasoning_tokens")?,
            },
            // Kept in the suspended state, which the budget reads; not a column.
            running_ms: 0,
        },
        truncated: row.required_int("truncated")? != 0,
        estimated_cost_micros: row.int("estimated_cost_micros")?,
        termination_reason: row.text("termination_reason")?,
        error_summary: row.text("error_summary")?,
        final_answer: row.text("final_answer")?,
        suspended_state: row.text("suspended_state")?,
        decided_by: row.text("decided_by")?,
        decided_at_ms: row.int("decided_at_ms")?,
        decision: row.text("decision")?,
        decision_record: row.text("decision_record")?,
        version: row.required_int("version")?,
        last_sequence: row.required_int("last_sequence")?,
        created_at_ms: row.required_int("created_at_ms")?,
        updated_at_ms: row.required_int("updated_at_ms")?,
        started_at_ms: row.int("started_at_ms")?,
        finished_at_ms: row.int("finished_at_ms")?,
        approval_deadline_ms: row.int("approval_deadline_ms")?,
        approvals_required: u32::try_from(row.int("approvals_required")?.unwrap_or(1)).unwrap_or(1),
        queued_at_ms: row.int("queued_at_ms")?,
        approved_bases: row.text("approved_bases")?,
        cancel_requested: cancel_request(row)?,
        trace: row
            .text("trace")?
            .as_deref()
            .and_then(nrllm_core::trace::RunTrace::from_json),
        lease_owner: row.text("lease_owner")?,
    })
}
