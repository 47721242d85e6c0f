//! The notification outbox: mails and Slack messages telling people that a run waits for them,
//! in rounds per waiting turn (its run id and version) — `waiting` when it begins to wait, then a
//! `reminder` and an `escalation` when a configuration asks for them. A round and its
//! notifications are written in one transaction by whichever instance gets there first, so each
//! goes out once however many instances look; each notification is then claimed for a while by
//! the instance that sends it (a lease, as the webhook outbox's) and recorded attempt by attempt.
//! Nothing here is a journal step: the turn's digest, and with it every open page, mailed link
//! and Slack button, stays valid while people are told.
//!
//! Decision links that decided are recorded here too, so that each decides once.

use nrllm_core::offer::Channel;
use nrllm_core::run_store::{RunStatus, StoreError};
use sqlx::any::AnyRow;
use sqlx::Row;
use uuid::Uuid;

use crate::db::Database;
use crate::error::backend;
use crate::outbox::{Attempt, DeliveryState};

/// Which round of a waiting turn's notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// When the turn begins to wait, to the people the configuration names.
    Waiting,
    /// The same people again, `remind_after` later.
    Reminder,
    /// Others (`escalate_to`), `escalate_after` later.
    Escalation,
}

impl Round {
    pub const ALL: [Round; 3] = [Round::Waiting, Round::Reminder, Round::Escalation];

    pub fn as_str(self) -> &'static str {
        match self {
            Round::Waiting => "waiting",
            Round::Reminder => "reminder",
            Round::Escalation => "escalation",
        }
    }

    pub fn parse(text: &str) -> Option<Round> {
        Round::ALL.into_iter().find(|round| round.as_str() == text)
    }
}

/// A waiting turn whose round is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueTurn {
    pub run_id: Uuid,
    pub run_version: i64,
    pub waiting_since_ms: i64,
}

/// A notification to make: to whom, how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNotification {
    pub channel: Channel,
    /// The user's name (email) or the channel (Slack).
    pub recipient: String,
    /// The mail address, or the Slack channel.
    pub address: String,
}

/// One notification, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub id: Uuid,
    pub run_id: Uuid,
    pub run_version: i64,
    pub round: Round,
    pub channel: Channel,
    pub recipient: String,
    pub address: String,
    pub state: DeliveryState,
    pub attempts: i64,
    pub next_attempt_at_ms: i64,
    pub lease_until_ms: i64,
    /// Why the last attempt failed, in the server's words.
    pub last_error: Option<String>,
    /// What the channel calls the message (Slack: `channel ts`), to update it later.
    pub message_ref: Option<String>,
    /// When a posted message was updated to say how its turn was decided.
    pub closed_at_ms: Option<i64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub delivered_at_ms: Option<i64>,
}

/// A notification this instance holds until its `lease_until_ms`, with whether its run still
/// waits on the same turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedNotification {
    pub notification: Notification,
    pub still_waiting: bool,
}

/// A decision link that decided: by whom, when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkUse {
    pub used_by: String,
    pub used_at_ms: i64,
}

/// How the outbox stands, for `/system`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboxHealth {
    pub pending: i64,
    /// Pending after at least one failed attempt.
    pub retrying: i64,
    /// Gave up since `since_ms`.
    pub failed: i64,
    pub delivered: i64,
    /// The latest failure's words and when, if any since `since_ms`.
    pub last_error: Option<(String, i64)>,
}

const COLUMNS: &str = "id, run_id, run_version, round, channel, recipient, address, state, \
     attempts, next_attempt_at_ms, lease_until_ms, last_error, message_ref, closed_at_ms, \
     created_at_ms, updated_at_ms, delivered_at_ms";

fn uuid_of(row: &AnyRow, name: &str) -> Result<Uuid, StoreError> {
    let text: String = row.try_get(name).map_err(backend)?;
    Uuid::parse_str(&text).map_err(|err| StoreError::Corrupt(format!("{name} `{text}`: {err}")))
}

fn read(row: &AnyRow) -> Result<Notification, StoreError> {
    let text = |name: &str| -> Result<String, StoreError> { row.try_get(name).map_err(backend) };
    let corrupt =
        |what: &str, value: String| StoreError::Corrupt(format!("notification {what} `{value}`"));
    let round = text("round")?;
    let channel = text("channel")?;
    let state = text("state")?;
    Ok(Notification {
        id: uuid_of(row, "id")?,
        run_id: uuid_of(row, "run_id")?,
        run_version: row.try_get("run_version").map_err(backend)?,
        round: Round::parse(&round).ok_or_else(|| corrupt("round", round.clone()))?,
        channel: Channel::parse(&channel).ok_or_else(|| corrupt("channel", channel.clone()))?,
        recipient: text("recipient")?,
        address: text("address")?,
        state: DeliveryState::parse(&state).ok_or_else(|| corrupt("state", state.clone()))?,
        attempts: row.try_get("attempts").map_err(backend)?,
        next_attempt_at_ms: row.try_get("next_attempt_at_ms").map_err(backend)?,
        lease_until_ms: row.try_get("lease_until_ms").map_err(backend)?,
        last_error: row.try_get("last_error").map_err(backend)?,
        message_ref: row.try_get("message_ref").map_err(backend)?,
        closed_at_ms: row.try_get("closed_at_ms").map_err(backend)?,
        created_at_ms: row.try_get("created_at_ms").map_err(backend)?,
        updated_at_ms: row.try_get("updated_at_ms").map_err(backend)?,
        delivered_at_ms: row.try_get("delivered_at_ms").map_err(backend)?,
    })
}

impl crate::outbox::OutboxRow for Notification {
    fn run_turn(&self) -> (Uuid, i64) {
        (self.run_id, self.run_version)
    }

    fn lease(&mut self) -> (Uuid, &mut i64) {
        (self.id, &mut self.lease_until_ms)
    }
}

/// The notifications and decision-link uses.
#[derive(Clone)]
pub struct NotificationStore {
    db: Database,
}

impl NotificationStore {
    pub fn new(db: Database) -> NotificationStore {
        NotificationStore { db }
    }

    /// Turns of configuration `configuration`'s runs that began waiting between `since_ms` and
    /// `until_ms` and have no `round` yet, the longest waiting first, at most `limit`.
    pub async fn due(
        &self,
        configuration: &str,
        round: Round,
        (since_ms, until_ms): (i64, i64),
        limit: u32,
    ) -> Result<Vec<DueTurn>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT r.id, r.version, r.updated_at_ms FROM agent_run r \
             WHERE {} AND r.provider = $1 AND r.updated_at_ms >= $2 \
             AND r.updated_at_ms <= $3 AND NOT EXISTS (SELECT 1 FROM notification_round n \
             WHERE n.run_id = r.id AND n.run_version = r.version AND n.round = $4) \
             ORDER BY r.updated_at_ms LIMIT $5",
            RunStatus::sql_any("r.status", &RunStatus::WAITING)
        ))
        .bind(configuration)
        .bind(since_ms)
        .bind(until_ms)
        .bind(round.as_str())
        .bind(i64::from(limit))
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter()
            .map(|row| {
                Ok(DueTurn {
                    run_id: uuid_of(row, "id")?,
                    run_version: row.try_get("version").map_err(backend)?,
                    waiting_since_ms: row.try_get("updated_at_ms").map_err(backend)?,
                })
            })
            .collect()
    }

    /// Writes `round` of `turn` with its notifications, each due at once, in one transaction.
    /// `false` if the round was there already (another instance wrote it): nothing is written.
    pub async fn add_round(
        &self,
        turn: &DueTurn,
        round: Round,
        notifications: &[NewNotification],
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.db.begin_write().await.map_err(backend)?;
        let inserted = sqlx::query(
            "INSERT INTO notification_round (run_id, run_version, round, created_at_ms) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (run_id, run_version, round) DO NOTHING",
        )
        .bind(turn.run_id.to_string())
        .bind(turn.run_version)
        .bind(round.as_str())
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        if inserted.rows_affected() != 1 {
            return Ok(false);
        }
        for note in notifications {
            sqlx::query(
                "INSERT INTO notification (id, run_id, run_version, round, channel, recipient, \
                 address, state, attempts, next_attempt_at_ms, lease_until_ms, created_at_ms, \
                 updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, 0, $9, $9) \
                 ON CONFLICT (run_id, run_version, round, channel, recipient) DO NOTHING",
            )
            .bind(Uuid::new_v4().to_string())
            .bind(turn.run_id.to_string())
            .bind(turn.run_version)
            .bind(round.as_str())
            .bind(note.channel.as_str())
            .bind(&note.recipient)
            .bind(&note.address)
            .bind(DeliveryState::Pending.as_str())
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(true)
    }

    /// Claims up to `limit` pending notifications that are due and held by nobody, each until
    /// `lease_until_ms`; one another instance claims first is left out.
    pub async fn claim_due(
        &self,
        now_ms: i64,
        lease_until_ms: i64,
        limit: u32,
    ) -> Result<Vec<ClaimedNotification>, StoreError> {
        let claimed = crate::outbox::claim_due(
            &self.db,
            ("notification", COLUMNS, read),
            (now_ms, lease_until_ms, limit),
        )
        .await?;
        Ok(claimed
            .into_iter()
            .map(|(notification, still_waiting)| ClaimedNotification {
                notification,
                still_waiting,
            })
            .collect())
    }

    /// Records an attempt on a notification this instance holds (by its lease), with what the
    /// channel calls the message it posted. `false` if the lease was lost meanwhile.
    pub async fn record(
        &self,
        claimed: &Notification,
        attempt: &Attempt,
        message_ref: Option<&str>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let outcome = crate::outbox::Outcome::of(
            attempt,
            (claimed.attempts, claimed.next_attempt_at_ms),
            claimed.last_error.as_deref(),
            now_ms,
        );
        let statement = sqlx::query(
            "UPDATE notification SET state = $1, attempts = $2, last_error = $3, \
             next_attempt_at_ms = $4, delivered_at_ms = $5, updated_at_ms = $6, \
             message_ref = COALESCE($7, message_ref), lease_until_ms = 0 \
             WHERE id = $8 AND lease_until_ms = $9",
        )
        .bind(outcome.state.as_str())
        .bind(outcome.attempts)
        .bind(outcome.error)
        .bind(outcome.next_attempt_at_ms)
        .bind(outcome.delivered_at_ms)
        .bind(now_ms)
        .bind(message_ref)
        .bind(claimed.id.to_string())
        .bind(claimed.lease_until_ms);
        let written = self.db.write(statement).await.map_err(backend)?;
        Ok(written.rows_affected() == 1)
    }

    /// A run's notifications, the latest turn first, then by round and recipient.
    pub async fn for_run(&self, run_id: Uuid) -> Result<Vec<Notification>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM notification WHERE run_id = $1 \
             ORDER BY run_version DESC, created_at_ms, channel, recipient"
        ))
        .bind(run_id.to_string())
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter().map(read).collect()
    }

    /// Posted messages (with a reference) whose turn no longer waits and that were not updated
    /// to say so yet, at most `limit`.
    pub async fn to_close(&self, limit: u32) -> Result<Vec<Notification>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM notification n WHERE n.state = $1 AND n.closed_at_ms IS NULL \
             AND n.message_ref IS NOT NULL AND NOT EXISTS (SELECT 1 FROM agent_run r \
             WHERE r.id = n.run_id AND r.version = n.run_version AND {}) \
             ORDER BY n.updated_at_ms LIMIT $2",
            RunStatus::sql_any("r.status", &RunStatus::WAITING)
        ))
        .bind(DeliveryState::Delivered.as_str())
        .bind(i64::from(limit))
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter().map(read).collect()
    }

    /// Marks a posted message as updated after its turn was decided. `false` if another
    /// instance did first.
    pub async fn close(&self, id: Uuid, now_ms: i64) -> Result<bool, StoreError> {
        let statement = sqlx::query(
            "UPDATE notification SET closed_at_ms = $1 WHERE id = $2 AND closed_at_ms IS NULL",
        )
        .bind(now_ms)
        .bind(id.to_string());
        let done = self.db.write(statement).await.map_err(backend)?;
        Ok(done.rows_affected() == 1)
    }

    /// How the outbox stands: what waits, what retries, and what failed or was delivered since
    /// `since_ms`.
    pub async fn health(&self, since_ms: i64) -> Result<OutboxHealth, StoreError> {
        let row = sqlx::query(
            "SELECT \
             COALESCE(SUM(CASE WHEN state = 'pending' THEN 1 ELSE 0 END), 0) AS pending, \
             COALESCE(SUM(CASE WHEN state = 'pending' AND attempts > 0 THEN 1 ELSE 0 END), 0) \
             AS retrying, \
             COALESCE(SUM(CASE WHEN state = 'failed' AND updated_at_ms >= $1 THEN 1 ELSE 0 END), 0) \
             AS failed, \
             COALESCE(SUM(CASE WHEN state = 'delivered' AND updated_at_ms >= $1 THEN 1 ELSE 0 END), 0) \
             AS delivered FROM notification",
        )
        .bind(since_ms)
        .fetch_one(self.db.pool())
        .await
        .map_err(backend)?;
        let last_error = sqlx::query(
            "SELECT last_error, updated_at_ms FROM notification WHERE last_error IS NOT NULL \
             AND updated_at_ms >= $1 ORDER BY updated_at_ms DESC LIMIT 1",
        )
        .bind(since_ms)
        .fetch_optional(self.db.pool())
        .await
        .map_err(backend)?
        .map(|row| -> Result<(String, i64), StoreError> {
            Ok((
                row.try_get("last_error").map_err(backend)?,
                row.try_get("updated_at_ms").map_err(backend)?,
            ))
        })
        .transpose()?;
        let count = |name: &str| -> Result<i64, StoreError> { row.try_get(name).map_err(backend) };
        Ok(OutboxHealth {
            pending: count("pending")?,
            retrying: count("retrying")?,
            failed: count("failed")?,
            delivered: count("delivered")?,
            last_error,
        })
    }

    /// Records that decision link `link_id` (of run `run_id`) decided, by `used_by`. `false` if
    /// it had decided before.
    pub async fn use_link(
        &self,
        link_id: &str,
        run_id: Uuid,
        used_by: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let statement = sqlx::query(
            "INSERT INTO decision_link_use (link_id, run_id, used_by, used_at_ms) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (link_id) DO NOTHING",
        )
        .bind(link_id)
        .bind(run_id.to_string())
        .bind(used_by)
        .bind(now_ms);
        let inserted = self.db.write(statement).await.map_err(backend)?;
        Ok(inserted.rows_affected() == 1)
    }

    /// Whether decision link `link_id` decided already, and by whom when.
    pub async fn link_use(&self, link_id: &str) -> Result<Option<LinkUse>, StoreError> {
        let row =
            sqlx::query("SELECT used_by, used_at_ms FROM decision_link_use WHERE link_id = $1")
                .bind(link_id)
                .fetch_optional(self.db.pool())
                .await
                .map_err(backend)?;
        row.map(|row| {
            Ok(LinkUse {
                used_by: row.try_get("used_by").map_err(backend)?,
                used_at_ms: row.try_get("used_at_ms").map_err(backend)?,
            })
        })
        .transpose()
    }
}
