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
use crate::outbox::{self, OutboxRow};
pub use crate::outbox::{Attempt, DeliveryState};
use crate::run_store::queries::indexed_by;

/// A waiting run that has no delivery for its current turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unannounced {
    pub run_id: Uuid,
    pub run_version: i64,
    /// The run's last step: a delivery is made for each (a waiting run's steps move on only
    /// when an approval counts toward a turn that needs several).
    pub run_sequence: i64,
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

impl OutboxRow for Delivery {
    fn run_turn(&self) -> (Uuid, i64) {
        (self.run_id, self.run_version)
    }

    fn lease(&mut self) -> (Uuid, &mut i64) {
        (self.id, &mut self.lease_until_ms)
    }
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
            "SELECT r.id, r.version, r.last_sequence, r.provider FROM agent_run r {index} \
             WHERE {} AND r.updated_at_ms >= $1 AND NOT EXISTS \
             (SELECT 1 FROM webhook_delivery d WHERE d.run_id = r.id AND d.run_version = r.version \
             AND (d.run_sequence IS NULL OR d.run_sequence = r.last_sequence)) \
             ORDER BY r.updated_at_ms LIMIT $2",
            RunStatus::sql_any("r.status", &RunStatus::WAITING)
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
                    run_sequence: row.try_get("last_sequence").map_err(backend)?,
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
        let statement = sqlx::query(
            "INSERT INTO webhook_delivery (id, run_id, run_version, run_sequence, target, body, \
             state, attempts, next_attempt_at_ms, lease_until_ms, created_at_ms, updated_at_ms) \
             VALUES ($1, $2, $3, $8, $4, $5, $6, 0, $7, 0, $7, $7) \
             ON CONFLICT (run_id, run_version, run_sequence) DO NOTHING",
        )
        .bind(Uuid::new_v4().to_string())
        .bind(run.run_id.to_string())
        .bind(run.run_version)
        .bind(target)
        .bind(body)
        .bind(state.as_str())
        .bind(now_ms)
        .bind(run.run_sequence);
        let inserted = self.db.write(statement).await.map_err(backend)?;
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
        let claimed = outbox::claim_due(
            &self.db,
            ("webhook_delivery", COLUMNS, read_delivery),
            (now_ms, lease_until_ms, limit),
        )
        .await?;
        Ok(claimed
            .into_iter()
            .map(|(delivery, still_waiting)| Claimed {
                delivery,
                still_waiting,
            })
            .collect())
    }

    /// Records an attempt on a delivery this instance holds (by its lease). `false` if the lease
    /// was lost meanwhile (nothing is written).
    pub async fn record(
        &self,
        claimed: &Delivery,
        attempt: &Attempt,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let outcome = outbox::Outcome::of(
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
        let statement = sqlx::query(
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
        .bind(claimed.lease_until_ms);
        let written = self.db.write(statement).await.map_err(backend)?;
        Ok(written.rows_affected() == 1)
    }

    /// A run's deliveries, the latest turn first.
    pub async fn for_run(&self, run_id: Uuid) -> Result<Vec<Delivery>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM webhook_delivery WHERE run_id = $1 \
             ORDER BY run_version DESC, created_at_ms DESC"
        ))
        .bind(run_id.to_string())
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter().map(read_delivery).collect()
    }
}
