//! Live step lists: the run service tells [`LiveHub`] about every event as it happens, and
//! `GET /api/runs/{id}/events` streams them to browsers as server-sent events. Each event carries
//! its sequence number as the SSE id, so a reconnecting browser (`Last-Event-ID`) resumes exactly
//! where it left off: first from the database, then from the live feed.
//!
//! Resources stay bounded whatever clients do (the way Mercure and Centrifugo do it):
//! - nothing is allocated for a run that is not running here: an unknown id is a 404 before
//!   anything else, and a finished or waiting run's stream replays its steps and ends;
//! - a running run's broadcast channel exists only while someone listens: it is made by the first
//!   subscriber and dropped with the last one, or when the run stops running;
//! - a stream is a plain value, not a task: when the client goes, the connection drops it and its
//!   subscription with it, at once;
//! - live streams are capped per run and in total; over the cap the answer is 503 and the page
//!   polls instead.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::future::ready;
use futures::StreamExt;
use nrllm_core::service::RunListener;
use nrllm_core::store::{RunStatus, RunStore, SequencedEvent, StoredEvent};
use nrllm_store::notify::Notice;
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;
use uuid::Uuid;

use super::{views, AppState};

/// Slots of a run's broadcast channel: a subscriber that falls this far behind is dropped (and
/// its browser reconnects from its last step).
const CHANNEL_CAPACITY: usize = 256;
/// How long a browser waits before it reconnects to a stream that ended (the polling cadence of a
/// page whose run runs in another process, or whose stream was refused).
const RECONNECT_AFTER: Duration = Duration::from_secs(2);

/// What a live run reports.
#[derive(Debug, Clone)]
pub enum LiveMessage {
    Event(SequencedEvent),
    Status(RunStatus),
}

/// Caps on live streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    pub per_run: usize,
    pub total: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits {
            per_run: 50,
            total: 1000,
        }
    }
}

/// The runs running in this process: each one's not-yet-committed events, and its channel while
/// anyone listens.
#[derive(Default)]
pub struct LiveHub {
    inner: Mutex<Hub>,
    limits: StreamLimits,
}

#[derive(Default)]
struct Hub {
    runs: HashMap<Uuid, LiveRun>,
    /// Every stream open here: live ones and those waiting for a queued run.
    subscribers: usize,
    /// Streams waiting for a queued run to be taken, by run.
    waiting: HashMap<Uuid, usize>,
}

#[derive(Default)]
struct LiveRun {
    channel: Option<broadcast::Sender<LiveMessage>>,
    subscribers: usize,
    unpersisted: Vec<SequencedEvent>,
}

/// How many runs, channels and subscribers the hub holds (for tests and the system page).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HubStats {
    pub runs: usize,
    pub channels: usize,
    pub subscribers: usize,
}

/// Why a subscription was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The run is not running in this process (finished, waiting, or driven elsewhere).
    NotRunningHere,
    /// A stream cap is reached.
    Full,
}

/// A live subscription to one run. Dropping it gives its slot back, and the run's channel goes
/// with the last one.
pub struct Subscription {
    receiver: broadcast::Receiver<LiveMessage>,
    /// The run's events emitted but not committed yet, as of subscribing.
    unpersisted: Vec<SequencedEvent>,
    slot: Slot,
}

/// A stream's place in the hub's counts, given back when it is dropped: a live subscriber's,
/// or (`waiting`) that of a stream waiting for a queued run to be taken.
pub struct Slot {
    hub: Arc<LiveHub>,
    run_id: Uuid,
    waiting: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut guard = self.hub.lock();
        let hub = &mut *guard;
        hub.subscribers = hub.subscribers.saturating_sub(1);
        if self.waiting {
            if let Some(count) = hub.waiting.get_mut(&self.run_id) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    hub.waiting.remove(&self.run_id);
                }
            }
        } else if let Some(run) = hub.runs.get_mut(&self.run_id) {
            run.subscribers = run.subscribers.saturating_sub(1);
            if run.subscribers == 0 {
                run.channel = None;
            }
        }
    }
}

impl LiveHub {
    /// Holds a place for a stream of queued run `id` until it is taken: it counts toward the
    /// caps (in total, and per run) like a live stream.
    pub fn wait_slot(self: &Arc<Self>, id: Uuid) -> Result<Slot, Refused> {
        let mut guard = self.lock();
        let hub = &mut *guard;
        let waiting = hub.waiting.get(&id).copied().unwrap_or_default();
        if hub.subscribers >= self.limits.total || waiting >= self.limits.per_run {
            return Err(Refused::Full);
        }
        *hub.waiting.entry(id).or_default() += 1;
        hub.subscribers += 1;
        Ok(Slot {
            hub: Arc::clone(self),
            run_id: id,
            waiting: true,
        })
    }

    /// A hub with these stream caps.
    pub fn new(limits: StreamLimits) -> LiveHub {
        LiveHub {
            inner: Mutex::default(),
            limits,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Hub> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Listens to a run that is running in this process: the live feed from now on, and the
    /// events already emitted but not yet in the database.
    pub fn subscribe(self: &Arc<Self>, id: Uuid) -> Result<Subscription, Refused> {
        let mut guard = self.lock();
        let hub = &mut *guard;
        if hub.subscribers >= self.limits.total {
            return Err(Refused::Full);
        }
        let Some(run) = hub.runs.get_mut(&id) else {
            return Err(Refused::NotRunningHere);
        };
        if run.subscribers >= self.limits.per_run {
            return Err(Refused::Full);
        }
        let receiver = run
            .channel
            .get_or_insert_with(|| broadcast::channel(CHANNEL_CAPACITY).0)
            .subscribe();
        run.subscribers += 1;
        hub.subscribers += 1;
        Ok(Subscription {
            receiver,
            unpersisted: run.unpersisted.clone(),
            slot: Slot {
                hub: Arc::clone(self),
                run_id: id,
                waiting: false,
            },
        })
    }

    /// The events a running run has emitted but not yet committed (empty for other runs).
    pub fn unpersisted(&self, id: Uuid) -> Vec<SequencedEvent> {
        self.lock()
            .runs
            .get(&id)
            .map(|run| run.unpersisted.clone())
            .unwrap_or_default()
    }

    /// Forgets a run this process no longer drives although it never saw it stop (another
    /// instance took it over): its streams end, and reconnecting browsers follow the new driver.
    pub fn forget(&self, id: Uuid) {
        self.lock().runs.remove(&id);
    }

    /// What the hub holds now.
    pub fn stats(&self) -> HubStats {
        let hub = self.lock();
        HubStats {
            runs: hub.runs.len(),
            channels: hub.runs.values().filter(|r| r.channel.is_some()).count(),
            subscribers: hub.subscribers,
        }
    }
}

impl RunListener for LiveHub {
    fn event(&self, run_id: Uuid, event: &SequencedEvent) {
        let mut hub = self.lock();
        let run = hub.runs.entry(run_id).or_default();
        run.unpersisted.push(event.clone());
        if let Some(channel) = &run.channel {
            let _ = channel.send(LiveMessage::Event(event.clone()));
        }
    }

    fn status(&self, run_id: Uuid, status: RunStatus) {
        let mut hub = self.lock();
        if status == RunStatus::Running {
            // A run that starts (or resumes) running here gets its place; its events follow.
            hub.runs.entry(run_id).or_default();
            return;
        }
        // Any other status is reported after the segment's events were committed: the run is no
        // longer running here. Subscribers get the status, then their channel closes.
        if let Some(run) = hub.runs.remove(&run_id) {
            if let Some(channel) = run.channel {
                let _ = channel.send(LiveMessage::Status(status));
            }
        }
    }
}

/// `?after=N`: the last sequence the client has.
#[derive(Debug, serde::Deserialize)]
pub struct After {
    after: Option<i64>,
}

fn step_event(event: &SequencedEvent) -> SseEvent {
    let step = views::live_step(event);
    SseEvent::default()
        .id(event.sequence.to_string())
        .event("step")
        .data(serde_json::to_string(&step).unwrap_or_default())
}

/// The steps of stored events, moving `last` to the last one's sequence.
fn stored_steps(stored: &[StoredEvent], last: &mut i64) -> Vec<SseEvent> {
    stored
        .iter()
        .filter_map(|stored| {
            let event = stored.event()?;
            *last = stored.sequence;
            Some(step_event(&SequencedEvent {
                sequence: stored.sequence,
                event,
                created_at_ms: stored.created_at_ms,
            }))
        })
        .collect()
}

fn status_event(status: RunStatus) -> SseEvent {
    SseEvent::default().event("status").data(status.as_str())
}

/// Why a stream could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamError {
    NotFound,
    Full,
    Store,
}

/// The events of run `id` after sequence `after`, then — if it runs in this process — its live
/// events until it stops running. Nothing is allocated for an unknown id; the stream holds no
/// task, so dropping it (the client went away) frees everything at once.
/// (A boxed future, so that the stream of a queued run can go on as a new stream once it runs.)
pub fn event_stream(
    store: Arc<dyn RunStore>,
    hub: Arc<LiveHub>,
    remote: Option<Arc<RemoteFeed>>,
    id: Uuid,
    after: i64,
) -> futures::future::BoxFuture<
    'static,
    Result<futures::stream::BoxStream<'static, SseEvent>, StreamError>,
> {
    Box::pin(async move {
        let read = |err| {
            tracing::error!(%err, run_id = %id, "reading a run for its event stream");
            StreamError::Store
        };
        let run = store
            .get(id)
            .await
            .map_err(read)?
            .ok_or(StreamError::NotFound)?;
        let page = super::export::EVENTS_PAGE;
        let last = Arc::new(AtomicI64::new(after));
        let retry = futures::stream::once(ready(SseEvent::default().retry(RECONNECT_AFTER)));
        if run.status == RunStatus::Queued {
            // Its steps so far (a claimed decision's); once a worker takes it, the stream goes
            // on as a stream of the run as it is then, from the last step sent. It holds a
            // place under the caps while it waits.
            let slot = hub.wait_slot(id).map_err(|_| StreamError::Full)?;
            let replay = paged_steps(Arc::clone(&store), id, page, Arc::clone(&last));
            let taken = async move {
                loop {
                    tokio::time::sleep(QUEUE_RECHECK).await;
                    match store.get(id).await {
                        Ok(Some(run)) if run.status == RunStatus::Queued => continue,
                        Ok(Some(_)) => break,
                        // Gone or unreadable: the stream ends and the browser reconnects.
                        _ => return futures::stream::empty().boxed(),
                    }
                }
                // The stream of the taken run holds a place of its own.
                drop(slot);
                match event_stream(store, hub, remote, id, last.load(Ordering::Acquire)).await {
                    // Without the reconnection hint it sent already.
                    Ok(stream) => stream.skip(1).boxed(),
                    Err(_) => futures::stream::empty().boxed(),
                }
            };
            return Ok(retry
                .chain(replay)
                .chain(futures::stream::once(taken).flatten())
                .boxed());
        }
        if !matches!(run.status, RunStatus::Running) {
            return Ok(settled_replay(store, id, after, page));
        }
        // Subscribe before reading the events: nothing emitted in between is missed. A run
        // running elsewhere is followed through the commits that instance announces (Postgres).
        let subscription = match hub.subscribe(id) {
            Ok(subscription) => Some(subscription),
            Err(Refused::Full) => return Err(StreamError::Full),
            Err(Refused::NotRunningHere) => None,
        };
        let elsewhere = match (&subscription, &remote) {
            (None, Some(feed)) => Some(feed.subscribe().ok_or(StreamError::Full)?),
            _ => None,
        };
        let replay = paged_steps(Arc::clone(&store), id, page, Arc::clone(&last));
        let tail = async move {
            let mut last = last.load(Ordering::Acquire);
            if let Some(subscription) = subscription {
                let Subscription {
                    receiver,
                    slot,
                    unpersisted,
                } = subscription;
                let mut head = Vec::new();
                for event in &unpersisted {
                    if event.sequence > last {
                        last = event.sequence;
                        head.push(step_event(event));
                    }
                }
                let live = BroadcastStream::new(receiver)
                    // Fell behind: the stream ends and the browser reconnects from its last id.
                    .take_while(|message| ready(message.is_ok()))
                    // The slot lives as long as the stream: dropping the stream gives it back.
                    .scan((last, slot), |(last, _slot), message| {
                        let event = match message {
                            Ok(LiveMessage::Event(event)) if event.sequence > *last => {
                                *last = event.sequence;
                                Some(step_event(&event))
                            }
                            Ok(LiveMessage::Status(status)) if status != RunStatus::Running => {
                                Some(status_event(status))
                            }
                            _ => None,
                        };
                        ready(Some(event))
                    })
                    .filter_map(ready);
                return futures::stream::iter(head).chain(live).boxed();
            }
            // Not running here: if it still runs (elsewhere), follow its commits; else say how
            // it ended, its last steps first. Without announcements the stream ends and the
            // browser reconnects.
            let still_running = matches!(
                store.get(id).await,
                Ok(Some(run)) if run.status == RunStatus::Running
            );
            match (still_running, elsewhere) {
                (true, Some((receiver, slot))) => futures::stream::unfold(
                    RemoteTail {
                        store,
                        id,
                        last,
                        receiver,
                        _slot: slot,
                        done: false,
                    },
                    RemoteTail::next_batch,
                )
                .flat_map(futures::stream::iter)
                .boxed(),
                (true, None) => futures::stream::empty().boxed(),
                (false, _) => futures::stream::iter(settle(store, id, last).await).boxed(),
            }
        };
        Ok(retry
            .chain(replay)
            .chain(futures::stream::once(tail).flatten())
            .boxed())
    })
}

/// The stream of a run that does not run (it waits, or it ended): its steps after `after`, read
/// `page` at a time as the client takes them, then how it stands ([`settle`]).
fn settled_replay(
    store: Arc<dyn RunStore>,
    id: Uuid,
    after: i64,
    page: u32,
) -> futures::stream::BoxStream<'static, SseEvent> {
    let last = Arc::new(AtomicI64::new(after));
    let replay = paged_steps(Arc::clone(&store), id, page, Arc::clone(&last));
    let settled = async move { settle(store, id, last.load(Ordering::Acquire)).await };
    futures::stream::once(ready(SseEvent::default().retry(RECONNECT_AFTER)))
        .chain(replay)
        .chain(futures::stream::once(settled).flat_map(futures::stream::iter))
        .boxed()
}

/// Run `id`'s stored steps after `last`, read `page` at a time as the client takes them (a long
/// run's replay never sits in memory whole); `last` follows the last step sent. The stream ends
/// at the last stored step (or at an error, logged: the browser reconnects from its last id).
fn paged_steps(
    store: Arc<dyn RunStore>,
    id: Uuid,
    page: u32,
    last: Arc<AtomicI64>,
) -> impl futures::Stream<Item = SseEvent> + Send + 'static {
    let after = last.load(Ordering::Acquire);
    super::export::event_pages(store, id, after, page)
        .map(move |read| match read {
            Ok(events) => {
                let mut sent = after;
                let steps = stored_steps(&events, &mut sent);
                if let Some(read) = events.last() {
                    last.store(read.sequence, Ordering::Release);
                }
                steps
            }
            Err(err) => {
                tracing::error!(%err, run_id = %id, "reading a run's steps for its stream");
                Vec::new()
            }
        })
        .flat_map(futures::stream::iter)
}

/// How a run that does not run (it waits, or it ended) stands, after its steps up to `last`
/// were sent: the steps it took since, then its status. Nothing if it runs or is queued again
/// (the stream ends and the browser reconnects to follow it) or cannot be read.
async fn settle(store: Arc<dyn RunStore>, id: Uuid, mut last: i64) -> Vec<SseEvent> {
    let mut out = Vec::new();
    loop {
        let run = match store.get(id).await {
            Ok(run) => run,
            Err(err) => {
                tracing::error!(%err, run_id = %id, "reading a run for its stream");
                return out;
            }
        };
        let status = match run.map(|run| run.status) {
            None | Some(RunStatus::Running | RunStatus::Queued) => return out,
            Some(status) => status,
        };
        match store.events(id, last).await {
            Ok(more) if more.is_empty() => {
                out.push(status_event(status));
                return out;
            }
            // Steps it took meanwhile (few: the replay read the rest): sent, then look again.
            Ok(more) => out.extend(stored_steps(&more, &mut last)),
            Err(err) => {
                tracing::error!(%err, run_id = %id, "reading a run's steps for its stream");
                return out;
            }
        }
    }
}

/// How long a stream of a run driven elsewhere waits for a commit before it reads the run again
/// anyway (a notification lost to a reconnect is caught up).
const REMOTE_RECHECK: Duration = Duration::from_secs(3);

/// How often a stream of a queued run looks whether a worker took it.
const QUEUE_RECHECK: Duration = Duration::from_millis(300);

/// Commits of runs announced by any instance (Postgres `LISTEN/NOTIFY`), for the live streams of
/// runs that another instance drives. Capped like the hub's streams.
pub struct RemoteFeed {
    url: String,
    sender: broadcast::Sender<Uuid>,
    open: std::sync::atomic::AtomicUsize,
    limit: usize,
    /// Rung when the tool settings may have changed.
    tool_settings: tokio::sync::Notify,
    /// Rung when another instance may have queued a run.
    queued: tokio::sync::Notify,
    /// Runs someone asked to cancel.
    cancels: broadcast::Sender<Uuid>,
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
    /// A feed of the database at `url`, for at most `limit` streams at once.
    pub fn new(url: &str, limit: usize) -> RemoteFeed {
        RemoteFeed {
            url: url.to_owned(),
            sender: broadcast::channel(CHANNEL_CAPACITY).0,
            open: Default::default(),
            limit,
            tool_settings: tokio::sync::Notify::new(),
            queued: tokio::sync::Notify::new(),
            cancels: broadcast::channel(CHANNEL_CAPACITY).0,
        }
    }

    /// Listens for commits until `shutdown`, reconnecting after a lost connection.
    pub async fn run(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        loop {
            let connected = tokio::select! {
                _ = shutdown.cancelled() => return,
                connected = nrllm_store::notify::RunNotifications::connect(&self.url) => connected,
            };
            match connected {
                Ok(mut notifications) => {
                    // (Re)connected: changes made while nobody listened are read now.
                    self.tool_settings.notify_one();
                    self.queued.notify_one();
                    loop {
                        tokio::select! {
                            _ = shutdown.cancelled() => return,
                            next = notifications.next() => match next {
                                Ok(Notice::Run(id)) => {
                                    let _ = self.sender.send(id);
                                }
                                Ok(Notice::Queued) => self.queued.notify_one(),
                                Ok(Notice::Cancel(id)) => {
                                    let _ = self.cancels.send(id);
                                }
                                Ok(Notice::ToolSettings) => self.tool_settings.notify_one(),
                                Ok(Notice::Other) => {}
                                Err(err) => {
                                    tracing::warn!(%err, "listening for other instances' commits");
                                    break;
                                }
                            },
                        }
                    }
                }
                Err(err) => tracing::warn!(%err, "cannot listen for other instances' commits"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    fn subscribe(self: &Arc<Self>) -> Option<(broadcast::Receiver<Uuid>, RemoteSlot)> {
        let open = self.open.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let slot = RemoteSlot(Arc::clone(self));
        (open < self.limit).then(|| (self.sender.subscribe(), slot))
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

/// The live part of a stream of a run driven by another instance: at each commit of the run (or
/// every few seconds), its new steps; when it stops running, its status, and the end.
struct RemoteTail {
    store: Arc<dyn RunStore>,
    id: Uuid,
    last: i64,
    receiver: broadcast::Receiver<Uuid>,
    _slot: RemoteSlot,
    done: bool,
}

impl RemoteTail {
    async fn next_batch(mut self) -> Option<(Vec<SseEvent>, RemoteTail)> {
        if self.done {
            return None;
        }
        loop {
            let id = self.id;
            let receiver = &mut self.receiver;
            let woke = tokio::time::timeout(REMOTE_RECHECK, async move {
                loop {
                    match receiver.recv().await {
                        Ok(run) if run == id => return true,
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(_)) => return true,
                        Err(broadcast::error::RecvError::Closed) => return false,
                    }
                }
            })
            .await;
            if woke == Ok(false) {
                return None;
            }
            // A read that fails ends the stream; the browser reconnects. The status first: the
            // steps committed with it are then read too.
            let status = self.store.get(self.id).await.ok()??.status;
            let events = self.store.events(self.id, self.last).await.ok()?;
            let mut batch = stored_steps(&events, &mut self.last);
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

/// `GET /api/runs/{id}/events`: the run's steps after `Last-Event-ID` (or `?after=`), then live
/// ones until the run stops running.
pub async fn run_events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<After>,
    headers: HeaderMap,
) -> Response {
    let Ok(id) = Uuid::parse_str(&id) else {
        return (StatusCode::NOT_FOUND, "There is no such run.").into_response();
    };
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .or(query.after)
        .unwrap_or(0);
    let remote = state.remote.clone();
    match event_stream(
        Arc::clone(&state.store),
        Arc::clone(&state.live),
        remote,
        id,
        after,
    )
    .await
    {
        Ok(stream) => {
            // A stopping server ends its streams, so its graceful shutdown is not held open by
            // them; the pages reconnect to the next instance (or refresh).
            let stream = stream
                .take_until(state.shutdown.clone().cancelled_owned())
                .map(Ok::<_, Infallible>);
            Sse::new(stream)
                .keep_alive(KeepAlive::default())
                .into_response()
        }
        Err(StreamError::NotFound) => {
            (StatusCode::NOT_FOUND, "There is no such run.").into_response()
        }
        Err(StreamError::Full) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "Too many live streams are open; the page refreshes instead.",
        )
            .into_response(),
        Err(StreamError::Store) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "The run could not be read.",
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use nrllm_core::store::NewRun;
    use nrllm_store::db::Database;
    use nrllm_store::SqlRunStore;

    async fn store() -> (tempfile::TempDir, Arc<SqlRunStore>) {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::connect(&format!("sqlite:{}/live.db", dir.path().display()))
            .await
            .unwrap();
        (dir, Arc::new(SqlRunStore::new(db)))
    }

    async fn running_run(store: &SqlRunStore) -> Uuid {
        new_run(store, true).await
    }

    /// A run stored as running under this store's lease, or (`running` false) queued.
    async fn new_run(store: &SqlRunStore, running: bool) -> Uuid {
        let run = NewRun {
            id: Uuid::now_v7(),
            configuration: nrllm_store::testing::demo_configuration("p"),
            requested_by: "operator".into(),
            copied: Vec::new(),
        };
        store.create(&run, 1, running).await.unwrap().id
    }

    #[tokio::test]
    async fn streams_of_a_queued_run_count_toward_the_caps_until_they_end() {
        let (_dir, store) = store().await;
        let hub = Arc::new(LiveHub::new(StreamLimits {
            per_run: 5,
            total: 2,
        }));
        // Queued: nothing in this process takes it.
        let id = new_run(&store, false).await;
        let open = || event_stream(store.clone(), hub.clone(), None, id, 0);
        let first = open().await.unwrap();
        let second = open().await.unwrap();
        assert_eq!(hub.stats().subscribers, 2);
        assert_eq!(open().await.err(), Some(StreamError::Full));
        drop(first);
        assert_eq!(hub.stats().subscribers, 1);
        let third = open().await.unwrap();
        drop((second, third));
        assert_eq!(hub.stats(), HubStats::default());
    }

    #[tokio::test]
    async fn a_finished_run_replays_every_step_a_page_at_a_time_then_its_status() {
        let (_dir, store) = store().await;
        let id = nrllm_store::testing::completed_run(store.as_ref(), 7, 1)
            .await
            .id;
        for (page, after) in [(1, 0), (2, 0), (3, 4), (500, 0)] {
            let sent: Vec<SseEvent> = settled_replay(store.clone(), id, after, page)
                .collect()
                .await;
            let text: Vec<String> = sent.iter().map(|e| format!("{e:?}")).collect();
            // The reconnect hint, each step after `after` in order, the status.
            assert_eq!(
                sent.len(),
                1 + (7 - after as usize) + 1,
                "page {page}: {text:?}"
            );
            for (i, sequence) in (after + 1..=7).enumerate() {
                assert!(
                    text[1 + i].contains(&format!("step {sequence}")),
                    "page {page}: {text:?}"
                );
            }
            assert!(text.last().unwrap().contains("completed"), "{text:?}");
        }
    }

    #[tokio::test]
    async fn a_running_run_replays_its_stored_steps_in_pages_then_follows_live() {
        let (_dir, store) = store().await;
        let hub = Arc::new(LiveHub::default());
        let step = |sequence: i64| SequencedEvent {
            sequence,
            event: nrllm_core::events::Event::Recovered {
                resumes_at: format!("step {sequence}"),
            },
            created_at_ms: 1,
        };
        // Running here, with the steps of an earlier segment stored (a fork's, copied).
        let run = NewRun {
            id: Uuid::now_v7(),
            configuration: nrllm_store::testing::demo_configuration("p"),
            requested_by: "operator".into(),
            copied: (1..=7).map(step).collect(),
        };
        let id = store.create(&run, 1, true).await.unwrap().id;
        let last = Arc::new(AtomicI64::new(2));
        let paged: Vec<SseEvent> = paged_steps(store.clone(), id, 2, Arc::clone(&last))
            .collect()
            .await;
        assert_eq!(paged.len(), 5, "steps 3 to 7, two at a time");
        assert_eq!(last.load(Ordering::Acquire), 7);

        hub.status(id, RunStatus::Running);
        let stream = event_stream(store.clone(), hub.clone(), None, id, 0)
            .await
            .unwrap();
        hub.event(id, &step(8));
        hub.status(id, RunStatus::Completed);
        let text: Vec<String> = stream
            .collect::<Vec<SseEvent>>()
            .await
            .iter()
            .map(|e| format!("{e:?}"))
            .collect();
        assert_eq!(
            text.len(),
            1 + 8 + 1,
            "hint, 7 stored, 1 live, status: {text:?}"
        );
        for sequence in 1..=8 {
            assert!(
                text[sequence].contains(&format!("step {sequence}")),
                "{text:?}"
            );
        }
        assert!(text[9].contains("completed"), "{text:?}");
        assert_eq!(hub.stats(), HubStats::default());
    }

    #[tokio::test]
    async fn an_unknown_run_is_refused_before_anything_is_allocated() {
        let (_dir, store) = store().await;
        let hub = Arc::new(LiveHub::default());
        let refused = event_stream(store.clone(), hub.clone(), None, Uuid::now_v7(), 0)
            .await
            .err();
        assert_eq!(refused, Some(StreamError::NotFound));
        assert_eq!(hub.stats(), HubStats::default());
    }

    #[tokio::test]
    async fn a_run_not_running_here_replays_its_steps_and_ends_without_a_channel() {
        let (_dir, store) = store().await;
        let hub = Arc::new(LiveHub::default());
        // Stored as running, but nothing in this process drives it: the stream replays and ends.
        let id = running_run(&store).await;
        let events: Vec<SseEvent> = event_stream(store.clone(), hub.clone(), None, id, 0)
            .await
            .unwrap()
            .collect()
            .await;
        assert_eq!(events.len(), 1, "only the reconnect hint");
        assert_eq!(hub.stats(), HubStats::default());
    }

    #[tokio::test]
    async fn a_disconnected_client_frees_its_channel_at_once_and_a_stopped_run_its_entry() {
        let (_dir, store) = store().await;
        let hub = Arc::new(LiveHub::default());
        let id = running_run(&store).await;
        hub.status(id, RunStatus::Running);
        let mut stream = Box::pin(
            event_stream(store.clone(), hub.clone(), None, id, 0)
                .await
                .unwrap(),
        );
        assert!(
            stream.next().await.is_some(),
            "the reconnect hint comes first"
        );
        assert_eq!(
            hub.stats(),
            HubStats {
                runs: 1,
                channels: 1,
                subscribers: 1
            }
        );
        // The client goes away: the connection drops the stream.
        drop(stream);
        assert_eq!(
            hub.stats(),
            HubStats {
                runs: 1,
                channels: 0,
                subscribers: 0
            }
        );
        hub.status(id, RunStatus::Completed);
        assert_eq!(hub.stats(), HubStats::default());
    }

    #[tokio::test]
    async fn live_steps_reach_a_subscriber_and_the_stream_ends_with_the_status() {
        let (_dir, store) = store().await;
        let hub = Arc::new(LiveHub::default());
        let id = running_run(&store).await;
        hub.status(id, RunStatus::Running);
        let stream = event_stream(store.clone(), hub.clone(), None, id, 0)
            .await
            .unwrap();
        let event = SequencedEvent {
            sequence: 1,
            event: nrllm_core::events::Event::LlmFailed {
                round: 1,
                message: "boom".into(),
                duration_ms: 3,
            },
            created_at_ms: 5,
        };
        hub.event(id, &event);
        hub.status(id, RunStatus::Failed);
        let events: Vec<SseEvent> = stream.collect().await;
        assert_eq!(events.len(), 3, "hint, the step, the status");
        assert_eq!(hub.stats(), HubStats::default());
    }

    #[tokio::test]
    async fn streams_over_the_caps_are_refused() {
        let (_dir, store) = store().await;
        let hub = Arc::new(LiveHub::new(StreamLimits {
            per_run: 2,
            total: 3,
        }));
        let first = running_run(&store).await;
        let second = running_run(&store).await;
        hub.status(first, RunStatus::Running);
        hub.status(second, RunStatus::Running);
        let a = hub.subscribe(first).unwrap();
        let _b = hub.subscribe(first).unwrap();
        assert!(matches!(hub.subscribe(first), Err(Refused::Full)));
        let _c = hub.subscribe(second).unwrap();
        assert!(matches!(hub.subscribe(second), Err(Refused::Full)), "total");
        drop(a);
        let _d = hub.subscribe(second).expect("a freed slot is free again");
        assert_eq!(
            event_stream(store.clone(), hub.clone(), None, first, 0)
                .await
                .err(),
            Some(StreamError::Full)
        );
    }
}
