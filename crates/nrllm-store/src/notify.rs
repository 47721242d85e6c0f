//! Commits heard across instances (Postgres `LISTEN/NOTIFY`), each announced on [`CHANNEL`] with
//! what changed ([`Notice`]) and delivered to every listening connection when — and only if — it
//! commits: a run's new steps (live streams read them), a run queued (workers look at the queue),
//! a cancel asked for (the instance driving the run stops it), the tool settings (every instance
//! reads them again). A notification carries nothing else: listeners read the rows.

use sqlx::postgres::PgListener;
use uuid::Uuid;

use crate::db::Backend;
use crate::transition::Statement;

/// The channel commits are announced on.
pub const CHANNEL: &str = "nrllm_run_events";

const TOOL_SETTINGS: &str = "tool_settings";
const QUEUED: &str = "queued";
const CANCEL: &str = "cancel:";

/// What a notification announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// New steps of this run were committed.
    Run(Uuid),
    /// A run was queued (a new run, or a claimed decision).
    Queued,
    /// Someone asked to cancel this running run.
    Cancel(Uuid),
    /// The tool settings changed.
    ToolSettings,
    /// A payload this build does not know.
    Other,
}

impl Notice {
    /// The payload that announces it.
    pub fn payload(self) -> String {
        match self {
            Notice::Run(id) => id.to_string(),
            Notice::Queued => QUEUED.to_owned(),
            Notice::Cancel(id) => format!("{CANCEL}{id}"),
            Notice::ToolSettings => TOOL_SETTINGS.to_owned(),
            Notice::Other => String::new(),
        }
    }

    fn parse(payload: &str) -> Notice {
        match payload {
            TOOL_SETTINGS => Notice::ToolSettings,
            QUEUED => Notice::Queued,
            payload => match payload.strip_prefix(CANCEL) {
                Some(id) => Uuid::parse_str(id).map_or(Notice::Other, Notice::Cancel),
                None => Uuid::parse_str(payload).map_or(Notice::Other, Notice::Run),
            },
        }
    }

    /// Announces it when the transaction open on `conn` commits, on Postgres (nothing on
    /// SQLite: one instance).
    pub async fn announce(self, conn: &mut sqlx::AnyConnection) -> Result<(), sqlx::Error> {
        let backend = match conn.backend_name() {
            "PostgreSQL" => Backend::Postgres,
            _ => Backend::Sqlite,
        };
        if let Some(statement) = self.statement(backend) {
            statement.query().execute(&mut *conn).await?;
        }
        Ok(())
    }

    /// The statement that announces it in a transaction on `backend` (none on SQLite).
    pub(crate) fn statement(self, backend: Backend) -> Option<Statement> {
        // One prepared statement for every payload (a `NOTIFY` with the payload written into it
        // would be parsed and planned again for each run).
        (backend == Backend::Postgres).then(|| {
            Statement::new("SELECT 1 FROM pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(self.payload())
        })
    }
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
        Ok(Notice::parse(notification.payload()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_notice_reads_back_from_its_payload() {
        let id = Uuid::now_v7();
        for notice in [
            Notice::Run(id),
            Notice::Queued,
            Notice::Cancel(id),
            Notice::ToolSettings,
        ] {
            assert_eq!(Notice::parse(&notice.payload()), notice);
        }
        assert_eq!(Notice::parse("cancel:not-an-id"), Notice::Other);
        assert_eq!(Notice::parse("something new"), Notice::Other);
    }
}
