//! Runs driven by another instance: their steps, read from the database when the database
//! announces them, and the response their model is writing, as the instance driving them
//! announces it to the instances whose browsers follow them.

use super::forming::FORMING_ELSEWHERE_EVERY;
use super::hub::*;
use super::sse::*;
use crate::page_data::{Forming, FORMING_BYTES, FORMING_CALLS};
use axum::response::sse::Event as SseEvent;
use nrllm_core::run_store::{RunRecord, RunStatus, RunStore};
use nrllm_store::db::Database;
use nrllm_store::notify::{Heard, Notice, Reassembly, RunNotifications};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use uuid::Uuid;

/// How long a stream of a run driven elsewhere waits for a commit before it reads the run again
/// anyway (a notification lost to a reconnect is caught up).
pub(super) const REMOTE_RECHECK: Duration = Duration::from_secs(3);

/// How often a stream of a queued run looks whether a worker took it.
pub(super) const QUEUE_RECHECK: Duration = Duration::from_millis(300);

/// How often an instance says again that its browsers still follow a run driven elsewhere.
pub const WATCHING_EVERY: Duration = Duration::from_secs(4);

/// The longest forming message read from another instance, in bytes (its texts are bounded
/// by [`FORMING_BYTES`] each; a JSON escape, `\u001f` at worst, is six bytes for one).
const MAX_FORMING_MESSAGE: usize = 6 * (3 + FORMING_CALLS) * FORMING_BYTES;

/// What the feed tells the streams of a run driven elsewhere.
#[derive(Debug, Clone)]
pub(super) enum Remote {
    /// New steps of the run were committed.
    Committed,
    /// What the run's model wrote, as its instance announced it.
    Forming(Arc<Forming>),
}

/// How many announcements of one run a stream may fall behind by before it reads the run again.
const RUN_CHANNEL_CAPACITY: usize = 16;

/// The channel of one run driven elsewhere, with how many listen to it and how many of those
/// are streams (which follow its forming response too).
struct RunChannel {
    sender: broadcast::Sender<Remote>,
    listeners: usize,
    streams: usize,
}

/// What the feed announces of one run, to one listener: each listener hears only its run, so
/// a commit wakes the streams of that run and no other. The last one dropped closes the channel;
/// the last stream's stops the following of the run's response.
pub(super) struct RunFeed {
    feed: Arc<RemoteFeed>,
    id: Uuid,
    receiver: broadcast::Receiver<Remote>,
    stream: bool,
}

impl RunFeed {
    /// The next announcement of the run (`Err(Lagged)`: some were missed).
    pub(super) async fn recv(&mut self) -> Result<Remote, broadcast::error::RecvError> {
        self.receiver.recv().await
    }
}

impl Drop for RunFeed {
    fn drop(&mut self) {
        let mut channels = self.feed.lock_channels();
        if let Some(channel) = channels.get_mut(&self.id) {
            if self.stream {
                channel.streams -= 1;
                if channel.streams == 0 {
                    let _ = self.feed.follow.send((self.id, false));
                }
            }
            channel.listeners -= 1;
            if channel.listeners == 0 {
                channels.remove(&self.id);
            }
        }
    }
}

/// Commits of runs announced by any instance (Postgres `LISTEN/NOTIFY`), for the live streams of
/// runs that another instance drives, each on its run's own channel. Capped like the hub's
/// streams.
pub struct RemoteFeed {
    pub(super) url: String,
    /// The channels of the runs someone here listens to (a stream, or a wait for a queued run).
    channels: Mutex<HashMap<Uuid, RunChannel>>,
    pub(super) open: std::sync::atomic::AtomicUsize,
    pub(super) limit: usize,
    /// Rung when the tool settings may have changed.
    pub(super) tool_settings: tokio::sync::Notify,
    /// Rung when another instance may have queued a run.
    pub(super) queued: tokio::sync::Notify,
    /// Runs someone asked to cancel.
    pub(super) cancels: broadcast::Sender<Uuid>,
    /// To the listening task: follow a run's forming response (`true`), or no more.
    follow: mpsc::UnboundedSender<(Uuid, bool)>,
    following: Mutex<Option<mpsc::UnboundedReceiver<(Uuid, bool)>>>,
    /// The runs driven here: told when another instance follows one.
    hub: Arc<LiveHub>,
    /// Where this instance announces what it follows, and what its runs' models write.
    db: Database,
    /// This instance's name as the owner of the leases it takes (`None`: not known).
    instance: Option<String>,
}

/// A stream's place in [`RemoteFeed`]'s count, given back when the stream is dropped.
pub struct RemoteSlot(Arc<RemoteFeed>);

impl Drop for RemoteSlot {
    fn drop(&mut self) {
        self.0
            .open
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl RemoteFeed {
    /// A feed of the database at `url` (through `db`), for at most `limit` streams at once;
    /// `hub` holds the runs driven here.
    pub fn new(url: &str, limit: usize, hub: Arc<LiveHub>, db: Database) -> RemoteFeed {
        let (follow, following) = mpsc::unbounded_channel();
        RemoteFeed {
            url: url.to_owned(),
            channels: Mutex::default(),
            open: Default::default(),
            limit,
            tool_settings: tokio::sync::Notify::new(),
            queued: tokio::sync::Notify::new(),
            cancels: broadcast::channel(CHANNEL_CAPACITY).0,
            follow,
            following: Mutex::new(Some(following)),
            hub,
            db,
            instance: None,
        }
    }

    /// The feed of the instance named `instance` (the owner of the leases it takes): streams
    /// here of a run it does not hold the lease of follow that run as driven elsewhere at once.
    pub fn of_instance(mut self, instance: &str) -> RemoteFeed {
        self.instance = Some(instance.to_owned());
        self
    }

    /// Whether `run` runs under another instance's lease (as read; `false` when this
    /// instance's name is not known).
    pub(super) fn driven_elsewhere(&self, run: &RunRecord) -> bool {
        match (&self.instance, &run.lease_owner) {
            (Some(here), Some(owner)) => run.status == RunStatus::Running && owner != here,
            _ => false,
        }
    }

    fn lock_channels(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, RunChannel>> {
        self.channels
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What is announced of run `id` from now on (not counted as a stream).
    pub(super) fn run_feed(self: &Arc<Self>, id: Uuid) -> RunFeed {
        self.listen(id, false)
    }

    /// A listener of run `id`'s channel; a `stream` also follows its forming response, asked for
    /// under the channels' lock (see [`RemoteFeed::run`]).
    fn listen(self: &Arc<Self>, id: Uuid, stream: bool) -> RunFeed {
        let mut channels = self.lock_channels();
        let channel = channels.entry(id).or_insert_with(|| RunChannel {
            sender: broadcast::channel(RUN_CHANNEL_CAPACITY).0,
            listeners: 0,
            streams: 0,
        });
        channel.listeners += 1;
        if stream {
            channel.streams += 1;
            // Every new stream asks for everything written so far (its browser has nothing yet).
            let _ = self.follow.send((id, true));
        }
        RunFeed {
            feed: Arc::clone(self),
            id,
            receiver: channel.sender.subscribe(),
            stream,
        }
    }

    /// The runs with a channel now (someone here listens to them).
    #[cfg(test)]
    pub(super) fn channels(&self) -> usize {
        self.lock_channels().len()
    }

    /// Tells the listeners of run `id`, if any, what was announced of it.
    pub(super) fn deliver(&self, id: Uuid, remote: Remote) {
        if let Some(channel) = self.lock_channels().get(&id) {
            let _ = channel.sender.send(remote);
        }
    }

    /// Listens for commits and forming responses until `shutdown`, reconnecting after a lost
    /// connection.
    pub async fn run(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        let Some(mut follow) = self
            .following
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
        else {
            return;
        };
        let mut watching_tick = tokio::time::interval(WATCHING_EVERY);
        loop {
            let connected = tokio::select! {
                _ = shutdown.cancelled() => return,
                connected = RunNotifications::connect(&self.url) => connected,
            };
            let mut notifications = match connected {
                Ok(notifications) => notifications,
                Err(err) => {
                    tracing::warn!(%err, "cannot listen for other instances' commits");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            // (Re)connected: changes made while nobody listened are read now, and the runs
            // followed are followed again.
            self.tool_settings.notify_one();
            self.queued.notify_one();
            let mut listening = Listening::default();
            // The runs followed now, once each: what was asked before is in the list (asking
            // happens under the same lock).
            let followed: Vec<Uuid> = {
                let channels = self.lock_channels();
                while follow.try_recv().is_ok() {}
                channels
                    .iter()
                    .filter(|(_, channel)| channel.streams > 0)
                    .map(|(id, _)| *id)
                    .collect()
            };
            for id in followed {
                if let Err(err) = listening.follow(&mut notifications, &self.db, id).await {
                    tracing::warn!(%err, "following a run's response on another instance");
                }
            }
            loop {
                let outcome = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    next = notifications.next() => match next {
                        Ok(heard) => {
                            self.heard(heard, &mut listening);
                            Ok(())
                        }
                        Err(err) => Err(err),
                    },
                    Some((id, on)) = follow.recv() => match on {
                        true => listening.follow(&mut notifications, &self.db, id).await,
                        false => listening.leave(&mut notifications, id).await,
                    },
                    _ = watching_tick.tick() => {
                        let still: Vec<Notice> =
                            listening.runs.keys().map(|id| Notice::Watching(*id)).collect();
                        self.db.announce(still);
                        Ok(())
                    }
                };
                if let Err(err) = outcome {
                    tracing::warn!(%err, "listening for other instances' commits");
                    break;
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Acts on what the listening connection heard.
    fn heard(&self, heard: Heard, listening: &mut Listening) {
        match heard {
            Heard::Notice(Notice::Run(id)) => self.deliver(id, Remote::Committed),
            Heard::Notice(Notice::Queued) => self.queued.notify_one(),
            Heard::Notice(Notice::Cancel(id)) => {
                let _ = self.cancels.send(id);
            }
            Heard::Notice(Notice::ToolSettings) => self.tool_settings.notify_one(),
            Heard::Notice(Notice::Watch(id)) => self.hub.watched_elsewhere(id, true),
            Heard::Notice(Notice::Watching(id)) => self.hub.watched_elsewhere(id, false),
            Heard::Notice(Notice::Other) => {}
            Heard::Forming { run, payload } => {
                let Some(message) = listening
                    .runs
                    .get_mut(&run)
                    .and_then(|reassembly| reassembly.add(&payload))
                else {
                    return;
                };
                // Another instance's words: read as the bounded, typed message they must be.
                match serde_json::from_str::<Forming>(&message) {
                    Ok(forming) => self.deliver(run, Remote::Forming(Arc::new(forming))),
                    Err(err) => {
                        tracing::warn!(%err, run_id = %run, "an unreadable forming message")
                    }
                }
            }
        }
    }

    /// Holds a place for a stream of run `id` driven elsewhere: its feed, and the following of
    /// its response; `None` over the cap.
    pub(super) fn subscribe(self: &Arc<Self>, id: Uuid) -> Option<(RunFeed, RemoteSlot)> {
        let open = self.open.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let slot = RemoteSlot(Arc::clone(self));
        if open >= self.limit {
            return None;
        }
        Some((self.listen(id, true), slot))
    }

    /// Waits until the tool settings may have changed (another instance changed them, or the
    /// listening connection was made again).
    pub async fn tool_settings_changed(&self) {
        self.tool_settings.notified().await;
    }

    /// Waits until another instance may have queued a run.
    pub async fn queued_elsewhere(&self) {
        self.queued.notified().await;
    }

    /// The runs someone asks to cancel from now on (for the worker; not counted as a stream).
    pub fn cancels(&self) -> broadcast::Receiver<Uuid> {
        self.cancels.subscribe()
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.open.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The runs whose forming responses the listening connection follows, each with its messages
/// being put together.
#[derive(Default)]
struct Listening {
    runs: HashMap<Uuid, Reassembly>,
}

impl Listening {
    /// Follows run `id`'s response (listening first, so nothing sent in answer is missed), and
    /// asks its instance for everything written so far.
    async fn follow(
        &mut self,
        notifications: &mut RunNotifications,
        db: &Database,
        id: Uuid,
    ) -> Result<(), sqlx::Error> {
        if let std::collections::hash_map::Entry::Vacant(entry) = self.runs.entry(id) {
            notifications.follow_forming(id, true).await?;
            entry.insert(Reassembly::new(MAX_FORMING_MESSAGE));
        }
        db.announce(vec![Notice::Watch(id)]);
        Ok(())
    }

    async fn leave(
        &mut self,
        notifications: &mut RunNotifications,
        id: Uuid,
    ) -> Result<(), sqlx::Error> {
        if self.runs.remove(&id).is_some() {
            notifications.follow_forming(id, false).await?;
        }
        Ok(())
    }
}

/// Announces, until `shutdown`, what the models of the runs driven here wrote to the instances
/// whose browsers follow them: at most one message per run every [`FORMING_ELSEWHERE_EVERY`],
/// outside every transaction of the run.
pub async fn announce_forming(
    hub: Arc<LiveHub>,
    db: Database,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(FORMING_ELSEWHERE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut number = 0u64;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        for (id, forming) in hub.elsewhere_due() {
            number += 1;
            match serde_json::to_string(&forming) {
                Ok(message) => db.announce_forming(id, number, &message),
                Err(err) => tracing::warn!(%err, run_id = %id, "a forming message"),
            }
        }
    }
}

/// The live part of a stream of a run driven by another instance: at each commit of the run (or
/// every few seconds), its new steps; what its model writes, as its instance announces it; when
/// it stops running, its status, and the end.
pub(super) struct RemoteTail {
    pub(super) store: Arc<dyn RunStore>,
    pub(super) id: Uuid,
    pub(super) last: i64,
    pub(super) receiver: RunFeed,
    pub(super) _slot: RemoteSlot,
    pub(super) done: bool,
    /// What the run's steps cost.
    pub(super) prices: nrllm_core::provider::Prices,
}

impl RemoteTail {
    pub(super) async fn next_batch(mut self) -> Option<(Vec<SseEvent>, RemoteTail)> {
        if self.done {
            return None;
        }
        loop {
            let woke = tokio::time::timeout(REMOTE_RECHECK, self.receiver.recv()).await;
            match woke {
                Ok(Err(broadcast::error::RecvError::Closed)) => return None,
                Ok(Ok(Remote::Forming(forming))) => {
                    return Some((vec![forming_event(&forming)], self))
                }
                // A commit, lost notices or none for a while: read the run.
                Ok(Ok(Remote::Committed) | Err(broadcast::error::RecvError::Lagged(_)))
                | Err(_) => {}
            }
            // A read that fails ends the stream; the browser reconnects. The status first: the
            // steps committed with it are then read too.
            let status = self.store.get(self.id).await.ok()??.status;
            let events = self.store.events(self.id, self.last).await.ok()?;
            let mut batch = stored_steps(&events, &mut self.last, &self.prices);
            if status != RunStatus::Running {
                batch.push(status_event(status));
                self.done = true;
            }
            if !batch.is_empty() {
                return Some((batch, self));
            }
        }
    }
}
