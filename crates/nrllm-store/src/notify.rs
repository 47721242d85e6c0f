//! Commits heard across instances (Postgres `LISTEN/NOTIFY`): every transaction that writes a
//! run's steps also sends the run's id on [`CHANNEL`], delivered to every listening connection
//! when — and only if — it commits. An instance's live streams for runs that another instance
//! drives wake on it and read the new rows; the notification carries nothing else.

use sqlx::postgres::PgListener;
use uuid::Uuid;

/// The channel commits are announced on.
pub const CHANNEL: &str = "nrllm_run_events";

/// A connection listening to [`CHANNEL`]. It reconnects by itself after a lost connection
/// (notifications sent meanwhile are lost: listeners read the database again anyway).
pub struct RunNotifications {
    listener: PgListener,
}

impl RunNotifications {
    /// Listens on the Postgres database at `url`.
    pub async fn connect(url: &str) -> Result<RunNotifications, sqlx::Error> {
        let mut listener = PgListener::connect(url).await?;
        listener.listen(CHANNEL).await?;
        Ok(RunNotifications { listener })
    }

    /// The next run whose steps were committed (`None` for a payload that is not a run id).
    pub async fn next(&mut self) -> Result<Option<Uuid>, sqlx::Error> {
        let notification = self.listener.recv().await?;
        Ok(Uuid::parse_str(notification.payload()).ok())
    }
}
