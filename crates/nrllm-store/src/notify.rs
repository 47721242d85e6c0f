//! Commits heard across instances (Postgres `LISTEN/NOTIFY`), each announced on [`CHANNEL`] with
//! what changed ([`Notice`]) once — and only if — it committed: a run's new steps (live streams
//! read them), a run queued (workers look at the queue), a cancel asked for (the instance driving
//! the run stops it), the tool settings (every instance reads them again). A notification carries
//! nothing else: listeners read the rows.
//!
//! A run's transitions do not notify inside their own transactions. Postgres serializes the
//! commits of every transaction that notified (one database-wide lock, held through the commit's
//! flush to disk), so notifying in each transition made every commit of every client wait in one
//! line. The [`Announcer`] sends them after the commit instead, batched, from transactions that do
//! not wait for their flush: commits of runs go ahead together again (BENCHMARKS.md, issue #19).
//! A notice lost to a crash between the commit and its announcement costs a listener only
//! latency: instances read the database again now and then anyway.

use sqlx::postgres::PgListener;
use sqlx::{AnyConnection, Connection, Executor};
use tokio::sync::mpsc;
use uuid::Uuid;

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
}

/// Announces notices of committed transitions, in batches, on Postgres.
#[derive(Debug)]
pub(crate) struct Announcer {
    payloads: mpsc::UnboundedSender<String>,
}

/// The most notices one announcing transaction sends.
const ANNOUNCED_AT_ONCE: usize = 256;

impl Announcer {
    /// Starts announcing on a connection of its own to the database at `url` (until every
    /// clone of the database is dropped).
    pub(crate) fn start(url: String) -> Announcer {
        let (payloads, mut queued) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            let mut conn: Option<AnyConnection> = None;
            let mut batch = Vec::new();
            while let Some(first) = queued.recv().await {
                batch.push(first);
                while batch.len() < ANNOUNCED_AT_ONCE {
                    match queued.try_recv() {
                        Ok(payload) => batch.push(payload),
                        Err(_) => break,
                    }
                }
                batch.sort_unstable();
                batch.dedup();
                if let Err(err) = send(&mut conn, &url, &batch).await {
                    // Connected again for the next batch.
                    conn = None;
                    tracing::warn!(%err, notices = batch.len(), "announcing commits to the other instances failed (they read the database again on their next notice or poll)");
                }
                batch.clear();
            }
        });
        Announcer { payloads }
    }

    /// Announces `notices`, whose transition has committed.
    pub(crate) fn announce(&self, notices: Vec<Notice>) {
        for notice in notices {
            // Closed only when the task ended with the runtime: nobody is left to tell.
            let _ = self.payloads.send(notice.payload());
        }
    }
}

/// One statement — one round trip, one transaction — that notifies `payloads`, on a connection
/// whose commits do not wait for their flush (a lost notice only delays a listener; the commits
/// it announces are already durable).
async fn send(
    conn: &mut Option<AnyConnection>,
    url: &str,
    payloads: &[String],
) -> Result<(), sqlx::Error> {
    let conn = match conn {
        Some(conn) => conn,
        None => {
            let mut fresh = AnyConnection::connect(url).await?;
            fresh.execute("SET synchronous_commit TO OFF").await?;
            conn.insert(fresh)
        }
    };
    let mut sql = String::from("SELECT 1");
    for i in 0..payloads.len() {
        sql.push_str(&format!(", pg_notify($1, ${})", i + 2));
    }
    let mut query = sqlx::query(&sql).bind(CHANNEL);
    for payload in payloads {
        query = query.bind(payload.as_str());
    }
    query.execute(&mut *conn).await.map(|_| ())
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
