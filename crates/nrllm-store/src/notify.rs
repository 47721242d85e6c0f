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
//!
//! The response a run's model is writing is never committed: the instance driving the run
//! announces it on a channel of the run's own ([`forming_channel`]), heard only by instances whose
//! browsers follow that run (they ask with [`Notice::Watch`]), in messages cut into payloads under
//! Postgres's 8,000-byte limit ([`chunks`], put together again by [`Reassembly`]).

use sqlx::postgres::PgListener;
use sqlx::{AnyConnection, Connection, Executor};
use tokio::sync::mpsc;
use uuid::Uuid;

/// The channel commits are announced on.
pub const CHANNEL: &str = "nrllm_run_events";

const TOOL_SETTINGS: &str = "tool_settings";
const QUEUED: &str = "queued";
const CANCEL: &str = "cancel:";
const WATCH: &str = "watch:";
const WATCHING: &str = "watching:";
const FORMING: &str = "nrllm_forming_";

/// The channel run `id`'s forming response is announced on.
pub fn forming_channel(id: Uuid) -> String {
    format!("{FORMING}{}", id.simple())
}

/// The run a forming channel is of.
fn forming_run(channel: &str) -> Option<Uuid> {
    Uuid::try_parse(channel.strip_prefix(FORMING)?).ok()
}

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
    /// A browser on another instance began to follow this run live: the instance driving it
    /// announces what its model has written so far, then what it writes, on the run's channel.
    Watch(Uuid),
    /// Browsers on another instance still follow this run (said every few seconds).
    Watching(Uuid),
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
            Notice::Watch(id) => format!("{WATCH}{id}"),
            Notice::Watching(id) => format!("{WATCHING}{id}"),
            Notice::Other => String::new(),
        }
    }

    fn parse(payload: &str) -> Notice {
        match payload {
            TOOL_SETTINGS => Notice::ToolSettings,
            QUEUED => Notice::Queued,
            payload => {
                let about = |prefix: &str, notice: fn(Uuid) -> Notice| {
                    let id = payload.strip_prefix(prefix)?;
                    Some(Uuid::parse_str(id).map_or(Notice::Other, notice))
                };
                about(CANCEL, Notice::Cancel)
                    .or_else(|| about(WATCH, Notice::Watch))
                    .or_else(|| about(WATCHING, Notice::Watching))
                    .unwrap_or_else(|| Uuid::parse_str(payload).map_or(Notice::Other, Notice::Run))
            }
        }
    }
}

/// The most bytes of a payload: Postgres refuses one of 8,000 bytes or more.
pub const MAX_PAYLOAD_BYTES: usize = 7_900;

/// Message `number` as the payloads that carry it, in order, each under [`MAX_PAYLOAD_BYTES`]:
/// `number:index:count|` and a piece of the text (cut between characters).
pub fn chunks(number: u64, message: &str) -> Vec<String> {
    // Room for the header (three numbers and three marks).
    let room = MAX_PAYLOAD_BYTES - 64;
    let mut pieces = Vec::new();
    let mut rest = message;
    while !rest.is_empty() || pieces.is_empty() {
        let mut end = rest.len().min(room);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        pieces.push(&rest[..end]);
        rest = &rest[end..];
    }
    let count = pieces.len();
    pieces
        .into_iter()
        .enumerate()
        .map(|(index, piece)| format!("{number}:{index}:{count}|{piece}"))
        .collect()
}

/// Puts the messages of one channel together again from their payloads ([`chunks`]), in the
/// order they were sent. A message missing a piece (a notification lost to a reconnect) is
/// dropped; so is one longer than `limit` bytes.
#[derive(Debug)]
pub struct Reassembly {
    limit: usize,
    /// The message being put together: its number, how many pieces, the text so far.
    current: Option<(u64, usize, String)>,
    next_index: usize,
}

impl Reassembly {
    /// Messages of at most `limit` bytes.
    pub fn new(limit: usize) -> Reassembly {
        Reassembly {
            limit,
            current: None,
            next_index: 0,
        }
    }

    /// Adds one payload: the whole message once its last piece came.
    pub fn add(&mut self, payload: &str) -> Option<String> {
        let (header, piece) = payload.split_once('|')?;
        let mut numbers = header.splitn(3, ':').map(str::parse::<u64>);
        let (Some(Ok(number)), Some(Ok(index)), Some(Ok(count))) =
            (numbers.next(), numbers.next(), numbers.next())
        else {
            return None;
        };
        let (index, count) = (usize::try_from(index).ok()?, usize::try_from(count).ok()?);
        if index == 0 {
            self.current = Some((number, count, String::new()));
            self.next_index = 0;
        }
        let (current, expected, text) = self.current.as_mut()?;
        if *current != number || index != self.next_index || *expected != count {
            // A piece was lost: this message is dropped.
            self.current = None;
            return None;
        }
        if text.len() + piece.len() > self.limit {
            self.current = None;
            return None;
        }
        text.push_str(piece);
        self.next_index += 1;
        if self.next_index < count {
            return None;
        }
        self.current.take().map(|(_, _, text)| text)
    }
}

/// Announces notices of committed transitions, and forming responses, in batches, on Postgres.
#[derive(Debug)]
pub(crate) struct Announcer {
    payloads: mpsc::UnboundedSender<(String, String)>,
}

/// The most notices one announcing transaction sends.
const ANNOUNCED_AT_ONCE: usize = 256;

impl Announcer {
    /// Starts announcing on a connection of its own to the database at `url` (until every
    /// clone of the database is dropped).
    pub(crate) fn start(url: String) -> Announcer {
        let (payloads, mut queued) = mpsc::unbounded_channel::<(String, String)>();
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
                // The same notice twice says nothing more. The pieces of a forming message are
                // each different already, and keep their order (Postgres delivers a
                // transaction's notifications in the order sent).
                let mut seen = std::collections::HashSet::new();
                batch.retain(|(channel, payload)| {
                    channel != CHANNEL || seen.insert(payload.clone())
                });
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
            let _ = self.payloads.send((CHANNEL.to_owned(), notice.payload()));
        }
    }

    /// Announces `payloads` (the pieces of one message) on `channel`.
    pub(crate) fn announce_on(&self, channel: &str, payloads: Vec<String>) {
        for payload in payloads {
            let _ = self.payloads.send((channel.to_owned(), payload));
        }
    }
}

/// One statement — one round trip, one transaction — that notifies `payloads`, on a connection
/// whose commits do not wait for their flush (a lost notice only delays a listener; the commits
/// it announces are already durable).
async fn send(
    conn: &mut Option<AnyConnection>,
    url: &str,
    payloads: &[(String, String)],
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
        sql.push_str(&format!(", pg_notify(${}, ${})", 2 * i + 1, 2 * i + 2));
    }
    let mut query = sqlx::query(&sql);
    for (channel, payload) in payloads {
        query = query.bind(channel.as_str()).bind(payload.as_str());
    }
    query.execute(&mut *conn).await.map(|_| ())
}

/// What a listening connection heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    Notice(Notice),
    /// A payload on run `run`'s forming channel (a piece of a message: see [`Reassembly`]).
    Forming {
        run: Uuid,
        payload: String,
    },
}

/// A connection listening to [`CHANNEL`], and to the forming channels of the runs it is asked
/// to. It reconnects by itself after a lost connection (notifications sent meanwhile are lost:
/// listeners read the database again anyway).
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

    /// Listens to run `id`'s forming response too (or no more, with `listen` false).
    pub async fn follow_forming(&mut self, id: Uuid, listen: bool) -> Result<(), sqlx::Error> {
        let channel = forming_channel(id);
        match listen {
            true => self.listener.listen(&channel).await,
            false => self.listener.unlisten(&channel).await,
        }
    }

    /// The next thing heard.
    pub async fn next(&mut self) -> Result<Heard, sqlx::Error> {
        let notification = self.listener.recv().await?;
        Ok(match forming_run(notification.channel()) {
            Some(run) => Heard::Forming {
                run,
                payload: notification.payload().to_owned(),
            },
            None => Heard::Notice(Notice::parse(notification.payload())),
        })
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
            Notice::Watch(id),
            Notice::Watching(id),
        ] {
            assert_eq!(Notice::parse(&notice.payload()), notice);
        }
        assert_eq!(forming_run(&forming_channel(id)), Some(id));
        assert!(
            forming_channel(id).len() < 64,
            "a channel name is an identifier"
        );
        assert_eq!(forming_run(CHANNEL), None);
        assert_eq!(Notice::parse("cancel:not-an-id"), Notice::Other);
        assert_eq!(Notice::parse("something new"), Notice::Other);
    }

    #[test]
    fn a_long_message_goes_in_pieces_under_the_limit_and_comes_back_whole() {
        let message = format!("{}{}", "é".repeat(9_000), "x".repeat(3));
        let pieces = chunks(7, &message);
        assert_eq!(pieces.len(), 3);
        assert!(pieces.iter().all(|p| p.len() < MAX_PAYLOAD_BYTES));
        let mut reassembly = Reassembly::new(1 << 20);
        let mut whole = None;
        for piece in &pieces {
            assert_eq!(whole, None, "only the last piece gives the message");
            whole = reassembly.add(piece);
        }
        assert_eq!(whole.as_deref(), Some(message.as_str()));
        // An empty message is one piece.
        assert_eq!(reassembly.add(&chunks(8, "")[0]).as_deref(), Some(""));
    }

    #[test]
    fn a_message_missing_a_piece_or_too_long_is_dropped_and_the_next_one_is_read() {
        let long = "a".repeat(20_000);
        let pieces = chunks(1, &long);
        let mut reassembly = Reassembly::new(1 << 20);
        // The middle piece was lost.
        assert_eq!(reassembly.add(&pieces[0]), None);
        assert_eq!(reassembly.add(&pieces[2]), None);
        assert_eq!(
            reassembly.add(&chunks(2, "next")[0]).as_deref(),
            Some("next")
        );
        // Longer than the limit.
        let mut small = Reassembly::new(10_000);
        let mut out = None;
        for piece in &pieces {
            out = out.or(small.add(piece));
        }
        assert_eq!(out, None);
        assert_eq!(small.add("garbage"), None);
        assert_eq!(small.add("1:x:2|y"), None);
    }
}
