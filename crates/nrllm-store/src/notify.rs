//! Commits heard across instances (Postgres `LISTEN/NOTIFY`): every transaction that writes a
//! run's steps (or queues it, or asks to cancel it) also sends the run's id on [`CHANNEL`], and a
//! change of the tool settings sends [`TOOL_SETTINGS`], delivered to every listening connection
//! when — and only if — it commits. Instances wake on them and read the rows; a notification
//! carries nothing else.

use sqlx::postgres::PgListener;
use uuid::Uuid;

/// The channel commits are announced on.
pub const CHANNEL: &str = "nrllm_run_events";

/// The payload that says the tool settings changed.
pub const TOOL_SETTINGS: &str = "tool_settings";

/// What a notification announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// A commit of this run.
    Run(Uuid),
    /// The tool settings changed.
    ToolSettings,
    /// A payload this build does not know.
    Other,
}

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

    /// The next notice.
    pub async fn next(&mut self) -> Result<Notice, sqlx::Error> {
        let notification = self.listener.recv().await?;
        Ok(match notification.payload() {
            TOOL_SETTINGS => Notice::ToolSettings,
            payload => Uuid::parse_str(payload).map_or(Notice::Other, Notice::Run),
        })
    }
}
