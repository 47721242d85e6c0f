//! The webhook outbox: one delivery per waiting turn of a run (its id and version), kept in the
//! database so that no notification is lost to a restart and no two instances send the same one.
//!
//! A delivery is made for every run that waits without one (a scan, so a run that began waiting
//! just before a crash is still announced), claimed for a while by the instance that sends it (a
//! lease: another instance leaves it alone, and a crashed sender's lease runs out), and recorded
//! attempt by attempt. Only the target's name is stored: URL and secret are read from the
//! settings when it is sent, so no secret is ever written here.

use nrllm_core::run_store::{RunStatus, StoreError};
use sqlx::any::AnyRow;
use sqlx::Row;
use uuid::Uuid;

use crate::db::Database;
use crate::error::backend;
use crate::run_store::queries::indexed_by;

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    /// Not delivered yet; sent (again) when it is due.
    Pending,
    Delivered,
    /// Every attempt failed.
    Failed,
    /// The run was decided (or ended) before the delivery got through; it is not sent any more.
    Obsolete,
    /// No webhook applies to the run's configuration.
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

/// A waiting run that has no delivery for its current turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unannounced {
    pub run_id: Uuid,
    pub run_version: i64,
    /// The run's configuration name.
    pub configuration: String,
}

/// One delivery, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: Uuid,
    pub run_id: Uuid,
    pub run_version: i64,
    /// The configuration whose webhook it goes to.
    pub target: String,
    pub body: String,
    pub state: DeliveryState,
    pub attempts: i64,
    pub next_attempt_at_ms: i64,
    pub lease_until_ms: i64,
    /// The HTTP status of the last answer, if there was one.
    pub last_status: Option<i64>,
    /// Why the last attempt failed, in the server's words.
    pub last_error: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub delivered_at_ms: Option<i64>,
}

/// A delivery this instance holds until `lease_until_ms`, with whether its run still waits on
/// the same turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub delivery: Delivery,
    pub still_waiting: bool,
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
pub(crate) async fn take_lease(
    db: &Database,
    table: &str,
    id: Uuid,
    (old, new): (i64, i64),
) -> Result<bool, StoreError> {
    let taken = sqlx::query(&format!(
        "UPDATE {table} SET lease_until_ms = $1 WHERE id = $2 AND state = $3 AND lease_until_ms = $4"
    ))
    .bind(new)
    .bind(id.to_string())
    .bind(DeliveryState::Pending.as_str())
    .bind(old)
    .execute(db.pool())
    .await
    .map_err(backend)?;
    Ok(taken.rows_affected() == 1)
}

/// The version of run `run_id` if it waits (on that turn), else `None`.
pub(crate) async fn waiting_version(
    db: &Database,
    run_id: Uuid,
) -> Result<Option<i64>, StoreError> {
    sqlx::query_scalar(&format!(
        "SELECT version FROM agent_run WHERE id = $1 AND status IN ({})",
        RunStatus::sql_list(&RunStatus::WAITING)
    ))
    .bind(run_id.to_string())
    .fetch_optional(db.pool())
    .await
    .map_err(backend)
}

const COLUMNS: &str = "id, run_id, run_version, target, body, state, attempts, \
     next_attempt_at_ms, lease_until_ms, last_status, last_error, created_at_ms, updated_at_ms, \
     delivered_at_ms";

fn read_delivery(row: &AnyRow) -> Result<Delivery, StoreError> {
    let uuid = |name: &str| -> Result<Uuid, StoreError> {
        let text: String = row.try_get(name).map_err(backend)?;
        Uuid::parse_str(&text).map_err(|err| StoreError::Corrupt(format!("{name} `{text}`: {err}")))
    };
    let state: String = row.try_get("state").map_err(backend)?;
    Ok(Delivery {
        id: uuid("id")?,
        run_id: uuid("run_id")?,
        run_version: row.try_get("run_version").map_err(backend)?,
        target: row.try_get("target").map_err(backend)?,
        body: row.try_get("body").map_err(backend)?,
        state: DeliveryState::parse(&state)
            .ok_or_else(|| StoreError::Corrupt(format!("webhook delivery state `{state}`")))?,
        attempts: row.try_get("attempts").map_err(backend)?,
        next_attempt_at_ms: row.try_get("next_attempt_at_ms").map_err(backend)?,
        lease_until_ms: row.try_get("lease_until_ms").map_err(backend)?,
        last_status: row.try_get("last_status").map_err(backend)?,
        last_error: row.try_get("last_error").map_err(backend)?,
        created_at_ms: row.try_get("created_at_ms").map_err(backend)?,
        updated_at_ms: row.try_get("updated_at_ms").map_err(backend)?,
        delivered_at_ms: row.try_get("delivered_at_ms").map_err(backend)?,
    })
}

/// The webhook deliveries.
#[derive(Clone)]
pub struct WebhookStore {
    db: Database,
}

impl WebhookStore {
    pub fn new(db: Database) -> WebhookStore {
        WebhookStore { db }
    }

    /// Runs waiting since `since_ms` or later that have no delivery for the turn they wait on,
    /// oldest first, at most `limit`.
    pub async fn unannounced(
        &self,
        since_ms: i64,
        limit: u32,
    ) -> Result<Vec<Unannounced>, StoreError> {
        // The waiting runs' own index (without statistics SQLite would pick the status index and
        // sort).
        let index = indexed_by(self.db.backend(), "agent_run_waiting");
        let rows = sqlx::query(&format!(
            "SELECT r.id, r.version, r.provider FROM agent_run r {index} \
             WHERE r.status IN ({}) AND r.updated_at_ms >= $1 AND NOT EXISTS \
             (SELECT 1 FROM webhook_delivery d WHERE d.run_id = r.id AND d.run_version = r.version) \
             ORDER BY r.updated_at_ms LIMIT $2",
            RunStatus::sql_list(&RunStatus::WAITING)
        ))
        .bind(since_ms)
        .bind(i64::from(limit))
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter()
            .map(|row| {
                let id: String = row.try_get("id").map_err(backend)?;
                Ok(Unannounced {
                    run_id: Uuid::parse_str(&id)
                        .map_err(|err| StoreError::Corrupt(format!("run id `{id}`: {err}")))?,
                    run_version: row.try_get("version").map_err(backend)?,
                    configuration: row
                        .try_get::<Option<String>, _>("provider")
                        .map_err(backend)?
                        .unwrap_or_default(),
                })
            })
            .collect()
    }

    /// Records a delivery for a run's turn: `Pending` with its body, due at once, or `Skipped`.
    /// `false` if the turn already has one (another instance made it first).
    pub async fn add(
        &self,
        run: &Unannounced,
        target: &str,
        body: &str,
        state: DeliveryState,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO webhook_delivery (id, run_id, run_version, target, body, state, attempts, \
             next_attempt_at_ms, lease_until_ms, created_at_ms, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, 0, $7, 0, $7, $7) \
             ON CONFLICT (run_id, run_version) DO NOTHING",
        )
        .bind(Uuid::new_v4().to_string())
        .bind(run.run_id.to_string())
        .bind(run.run_version)
        .bind(target)
        .bind(body)
        .bind(state.as_str())
        .bind(now_ms)
        .execute(self.db.pool())
        .await
        .map_err(backend)?;
        Ok(inserted.rows_affected() == 1)
    }

    /// Claims up to `limit` pending deliveries that are due and not held by anyone, each until
    /// `lease_until_ms`. A delivery another instance claims first is left out.
    pub async fn claim_due(
        &self,
        now_ms: i64,
        lease_until_ms: i64,
        limit: u32,
    ) -> Result<Vec<Claimed>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM webhook_delivery \
             WHERE state = $1 AND next_attempt_at_ms <= $2 AND lease_until_ms <= $2 \
             ORDER BY next_attempt_at_ms LIMIT $3"
        ))
        .bind(DeliveryState::Pending.as_str())
        .bind(now_ms)
        .bind(i64::from(limit))
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        let mut claimed = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut delivery = read_delivery(row)?;
            let held = (delivery.lease_until_ms, lease_until_ms);
            if !take_lease(&self.db, "webhook_delivery", delivery.id, held).await? {
                continue;
            }
            delivery.lease_until_ms = lease_until_ms;
            let still_waiting = waiting_version(&self.db, delivery.run_id).await?;
            claimed.push(Claimed {
                still_waiting: still_waiting == Some(delivery.run_version),
                delivery,
            });
        }
        Ok(claimed)
    }

    /// Records an attempt on a delivery this instance holds (by its lease). `false` if the lease
    /// was lost meanwhile (nothing is written).
    pub async fn record(
        &self,
        claimed: &Delivery,
        attempt: &Attempt,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let outcome = Outcome::of(
            attempt,
            (claimed.attempts, claimed.next_attempt_at_ms),
            claimed.last_error.as_deref(),
            now_ms,
        );
        let status = match attempt {
            Attempt::Delivered { status } => Some(*status),
            Attempt::Failed { status, .. } => *status,
            Attempt::Obsolete => claimed.last_status,
        };
        let written = sqlx::query(
            "UPDATE webhook_delivery SET state = $1, attempts = $2, last_status = $3, \
             last_error = $4, next_attempt_at_ms = $5, delivered_at_ms = $6, updated_at_ms = $7, \
             lease_until_ms = 0 WHERE id = $8 AND lease_until_ms = $9",
        )
        .bind(outcome.state.as_str())
        .bind(outcome.attempts)
        .bind(status)
        .bind(outcome.error)
        .bind(outcome.next_attempt_at_ms)
        .bind(outcome.delivered_at_ms)
        .bind(now_ms)
        .bind(claimed.id.to_string())
        .bind(claimed.lease_until_ms)
        .execute(self.db.pool())
        .await
        .map_err(backend)?;
        Ok(written.rows_affected() == 1)
    }

    /// A run's deliveries, the latest turn first.
    pub async fn for_run(&self, run_id: Uuid) -> Result<Vec<Delivery>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM webhook_delivery WHERE run_id = $1 ORDER BY run_version DESC"
        ))
        .bind(run_id.to_string())
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter().map(read_delivery).collect()
    }
}
