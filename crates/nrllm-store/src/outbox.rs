//! What the outboxes share (webhook deliveries, notifications): the due rows claimed by one
//! instance at a time (a lease a crashed sender's rows come free of), whether each row's run still
//! waits on its turn, and what an attempt writes.

use nrllm_core::run_store::{RunStatus, StoreError};
use sqlx::any::AnyRow;
use uuid::Uuid;

use crate::db::Database;
use crate::error::backend;

/// Where an outbox row (a delivery, a notification) stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    /// Not delivered yet; sent (again) when it is due.
    Pending,
    Delivered,
    /// Every attempt failed.
    Failed,
    /// The run was decided (or ended) before the delivery got through; it is not sent any more.
    Obsolete,
    /// Never meant to be sent (a webhook delivery for a configuration with no webhook).
    Skipped,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
            DeliveryState::Obsolete => "obsolete",
            DeliveryState::Skipped => "skipped",
        }
    }

    pub fn parse(text: &str) -> Option<DeliveryState> {
        [
            DeliveryState::Pending,
            DeliveryState::Delivered,
            DeliveryState::Failed,
            DeliveryState::Obsolete,
            DeliveryState::Skipped,
        ]
        .into_iter()
        .find(|state| state.as_str() == text)
    }
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    Delivered {
        status: i64,
    },
    /// Failed; tried again at `retry_at_ms`, or never if `None` (the last attempt).
    Failed {
        status: Option<i64>,
        error: String,
        retry_at_ms: Option<i64>,
    },
    /// The run no longer waits on this turn.
    Obsolete,
}

/// How a row of an outbox is read.
pub(crate) type ReadRow<R> = fn(&AnyRow) -> Result<R, StoreError>;

/// A row of an outbox, as its claim sees it.
pub(crate) trait OutboxRow {
    /// The run and the turn (its version) the row is about.
    fn run_turn(&self) -> (Uuid, i64);
    /// Its id, and the lease it is held until.
    fn lease(&mut self) -> (Uuid, &mut i64);
}

/// Claims up to `limit` pending rows of `table` that are due at `now_ms` and held by nobody, each
/// until `lease_until_ms`, with whether its run still waits on the row's turn. A row another
/// instance claims first is left out.
pub(crate) async fn claim_due<R: OutboxRow>(
    db: &Database,
    (table, columns, read): (&str, &str, ReadRow<R>),
    (now_ms, lease_until_ms, limit): (i64, i64, u32),
) -> Result<Vec<(R, bool)>, StoreError> {
    let rows = sqlx::query(&format!(
        "SELECT {columns} FROM {table} WHERE state = $1 AND next_attempt_at_ms <= $2 \
         AND lease_until_ms <= $2 ORDER BY next_attempt_at_ms LIMIT $3"
    ))
    .bind(DeliveryState::Pending.as_str())
    .bind(now_ms)
    .bind(i64::from(limit))
    .fetch_all(db.pool())
    .await
    .map_err(backend)?;
    let mut claimed = Vec::with_capacity(rows.len());
    for row in &rows {
        let mut item = read(row)?;
        let (id, lease) = item.lease();
        if !take_lease(db, table, id, (*lease, lease_until_ms)).await? {
            continue;
        }
        *lease = lease_until_ms;
        let (run_id, version) = item.run_turn();
        let still_waiting = waiting_version(db, run_id).await? == Some(version);
        claimed.push((item, still_waiting));
    }
    Ok(claimed)
}

/// What an attempt writes on an outbox row (a webhook delivery, a notification).
pub(crate) struct Outcome<'a> {
    pub state: DeliveryState,
    pub attempts: i64,
    pub error: Option<&'a str>,
    pub next_attempt_at_ms: i64,
    pub delivered_at_ms: Option<i64>,
}

impl<'a> Outcome<'a> {
    /// What `attempt` on a row that had `attempts` and was due at `next_attempt_at_ms` (its last
    /// error `last_error`) leaves.
    pub fn of(
        attempt: &'a Attempt,
        (attempts, next_attempt_at_ms): (i64, i64),
        last_error: Option<&'a str>,
        now_ms: i64,
    ) -> Outcome<'a> {
        match attempt {
            Attempt::Delivered { .. } => Outcome {
                state: DeliveryState::Delivered,
                attempts: attempts + 1,
                error: None,
                next_attempt_at_ms,
                delivered_at_ms: Some(now_ms),
            },
            Attempt::Failed {
                error, retry_at_ms, ..
            } => Outcome {
                state: match retry_at_ms {
                    Some(_) => DeliveryState::Pending,
                    None => DeliveryState::Failed,
                },
                attempts: attempts + 1,
                error: Some(error),
                next_attempt_at_ms: retry_at_ms.unwrap_or(next_attempt_at_ms),
                delivered_at_ms: None,
            },
            Attempt::Obsolete => Outcome {
                state: DeliveryState::Obsolete,
                attempts,
                error: last_error,
                next_attempt_at_ms,
                delivered_at_ms: None,
            },
        }
    }
}

/// Takes pending row `id` of outbox `table` from lease `old` to `new`; `false` if another
/// instance took it first.
async fn take_lease(
    db: &Database,
    table: &str,
    id: Uuid,
    (old, new): (i64, i64),
) -> Result<bool, StoreError> {
    let sql = format!(
        "UPDATE {table} SET lease_until_ms = $1 WHERE id = $2 AND state = $3 AND lease_until_ms = $4"
    );
    let statement = sqlx::query(&sql)
        .bind(new)
        .bind(id.to_string())
        .bind(DeliveryState::Pending.as_str())
        .bind(old);
    let taken = db.write(statement).await.map_err(backend)?;
    Ok(taken.rows_affected() == 1)
}

/// The version of run `run_id` if it waits (on that turn), else `None`.
async fn waiting_version(db: &Database, run_id: Uuid) -> Result<Option<i64>, StoreError> {
    sqlx::query_scalar(&format!(
        "SELECT version FROM agent_run WHERE id = $1 AND {}",
        RunStatus::sql_any("status", &RunStatus::WAITING)
    ))
    .bind(run_id.to_string())
    .fetch_optional(db.pool())
    .await
    .map_err(backend)
}
