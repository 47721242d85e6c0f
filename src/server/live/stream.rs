//! One browser's stream of a run's steps: the replay from the database, then the live feed,
//! as server-sent events.

use super::hub::*;
use super::remote::*;
use super::sse::*;
use axum::response::sse::Event as SseEvent;
use futures::future::ready;
use futures::StreamExt;
use nrllm_core::provider::Prices;
use nrllm_core::run_store::{RunStatus, RunStore};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use tokio_stream::wrappers::BroadcastStream;
use uuid::Uuid;

/// `?after=N`: the last sequence the client has.
#[derive(Debug, serde::Deserialize)]
pub struct After {
    pub(super) after: Option<i64>,
}

/// How long a stream gives a run the store says is running to start running here before it
/// follows it as one driven elsewhere (none for a run under another instance's lease).
const START_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// Why a stream could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamError {
    NotFound,
    Full,
    Store,
}

/// A stream of a run's steps as server-sent events.
type Steps = futures::stream::BoxStream<'static, SseEvent>;

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
) -> futures::future::BoxFuture<'static, Result<Steps, StreamError>> {
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
        let page = crate::server::step_pages::EVENTS_PAGE;
        let prices = hub.prices(run.configuration.as_ref());
        let last = Arc::new(AtomicI64::new(after));
        let retry = futures::stream::once(ready(SseEvent::default().retry(RECONNECT_AFTER)));
        if run.status == RunStatus::Queued {
            // Its steps so far (a claimed decision's); once a worker takes it, the stream goes
            // on as a stream of the run as it is then, from the last step sent. It holds a
            // place under the caps while it waits.
            let slot = hub.wait_slot(id).map_err(|_| StreamError::Full)?;
            let replay = paged_steps(Arc::clone(&store), id, (page, prices), Arc::clone(&last));
            let taken = once_taken(store, hub, remote, id, (last, slot));
            return Ok(retry
                .chain(replay)
                .chain(futures::stream::once(taken).flatten())
                .boxed());
        }
        if !matches!(run.status, RunStatus::Running) {
            return Ok(settled_replay(store, id, after, (page, prices)));
        }
        // Subscribe before reading the events: nothing emitted in between is missed. A run
        // running elsewhere is followed through the commits that instance announces (Postgres).
        let still_running = || {
            let store = Arc::clone(&store);
            async move {
                // Only a status read as not running ends the wait (an error keeps it).
                !matches!(store.get(id).await, Ok(Some(run)) if run.status != RunStatus::Running)
            }
        };
        // A run another instance holds the lease of will not start here: its steps are
        // followed at once (under load, most runs a browser follows after a decision there).
        let grace = match &remote {
            Some(feed) if feed.driven_elsewhere(&run) => std::time::Duration::ZERO,
            _ => START_GRACE,
        };
        let subscription = match hub.subscribe_soon(id, grace, still_running).await {
            Ok(subscription) => Some(subscription),
            Err(Refused::Full) => return Err(StreamError::Full),
            Err(Refused::NotRunningHere) => None,
        };
        let elsewhere = match (&subscription, &remote) {
            (None, Some(feed)) => Some(feed.subscribe(id).ok_or(StreamError::Full)?),
            _ => None,
        };
        let replay = paged_steps(Arc::clone(&store), id, (page, prices), Arc::clone(&last));
        let tail = async move {
            let last = last.load(Ordering::Acquire);
            match subscription {
                Some(subscription) => live_tail(subscription, last, prices),
                None => elsewhere_tail(store, id, (last, prices), elsewhere).await,
            }
        };
        Ok(retry
            .chain(replay)
            .chain(futures::stream::once(tail).flatten())
            .boxed())
    })
}

/// A queued run's stream once a worker takes it: the stream of the run as it is then, from the
/// last step sent (the `slot` held its place under the caps while it waited).
async fn once_taken(
    store: Arc<dyn RunStore>,
    hub: Arc<LiveHub>,
    remote: Option<Arc<RemoteFeed>>,
    id: Uuid,
    (last, slot): (Arc<AtomicI64>, Slot),
) -> Steps {
    // Another instance's worker may take it: its first commit says so.
    let mut commits = remote.as_ref().map(|feed| feed.run_feed(id));
    loop {
        // Made before the look, so that a run started meanwhile wakes it.
        let started = hub.started.notified();
        match store.get(id).await {
            Ok(Some(run)) if run.status == RunStatus::Queued => {}
            Ok(Some(_)) => break,
            // Gone or unreadable: the stream ends and the browser reconnects.
            _ => return futures::stream::empty().boxed(),
        }
        // A run taken here says so at once (its response may be written within the wait);
        // one taken by another instance at its first commit, or at the next look.
        tokio::select! {
            _ = started => {}
            _ = committed_elsewhere(&mut commits) => {}
            _ = tokio::time::sleep(QUEUE_RECHECK) => {}
        }
    }
    // The stream of the taken run holds a place of its own.
    drop(slot);
    match event_stream(store, hub, remote, id, last.load(Ordering::Acquire)).await {
        // Without the reconnection hint it sent already.
        Ok(stream) => stream.skip(1).boxed(),
        Err(_) => futures::stream::empty().boxed(),
    }
}

/// Until a commit of the run is announced (never without a feed; at once if announcements
/// were missed).
pub(super) async fn committed_elsewhere(commits: &mut Option<RunFeed>) {
    use tokio::sync::broadcast::error::RecvError;
    let Some(receiver) = commits else {
        return std::future::pending().await;
    };
    loop {
        match receiver.recv().await {
            Ok(Remote::Committed) | Err(RecvError::Lagged(_)) => return,
            Ok(Remote::Forming(_)) => {}
            Err(RecvError::Closed) => return std::future::pending().await,
        }
    }
}

/// A run running here, from its live feed: the events emitted but not yet committed, then each
/// new one, until it stops running or the client falls behind.
fn live_tail(subscription: Subscription, mut last: i64, prices: Prices) -> Steps {
    let Subscription {
        receiver,
        slot,
        unpersisted,
        forming,
    } = subscription;
    let mut head = Vec::new();
    for event in &unpersisted {
        if event.sequence > last {
            last = event.sequence;
            head.push(step_event(event, &prices));
        }
    }
    // A browser that joins mid-response first gets what was written so far.
    head.extend(forming.as_ref().map(forming_event));
    let live = BroadcastStream::new(receiver)
        // Fell behind: the stream ends and the browser reconnects from its last id.
        .take_while(|message| ready(message.is_ok()))
        // The slot lives as long as the stream: dropping the stream gives it back.
        .scan((last, slot), move |(last, _slot), message| {
            let event = match message {
                Ok(LiveMessage::Event(event)) if event.sequence > *last => {
                    *last = event.sequence;
                    Some(step_event(&event, &prices))
                }
                Ok(LiveMessage::Status(status)) if status != RunStatus::Running => {
                    Some(status_event(status))
                }
                Ok(LiveMessage::Forming(forming)) => Some(forming_event(&forming)),
                Ok(LiveMessage::Progress(progress)) => Some(progress_event(&progress)),
                _ => None,
            };
            ready(Some(event))
        })
        .filter_map(ready);
    futures::stream::iter(head).chain(live).boxed()
}

/// A run not running here: if it still runs (elsewhere), its commits as that instance
/// announces them; else how it ended, its last steps first. Without announcements the stream
/// ends and the browser reconnects.
async fn elsewhere_tail(
    store: Arc<dyn RunStore>,
    id: Uuid,
    (last, prices): (i64, Prices),
    elsewhere: Option<(RunFeed, RemoteSlot)>,
) -> Steps {
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
                prices,
            },
            RemoteTail::next_batch,
        )
        .flat_map(futures::stream::iter)
        .boxed(),
        (true, None) => futures::stream::empty().boxed(),
        (false, _) => futures::stream::iter(settle(store, id, last, &prices).await).boxed(),
    }
}

/// The stream of a run that does not run (it waits, or it ended): its steps after `after`, read
/// `page` at a time as the client takes them, then how it stands ([`settle`]).
pub(super) fn settled_replay(
    store: Arc<dyn RunStore>,
    id: Uuid,
    after: i64,
    (page, prices): (u32, Prices),
) -> futures::stream::BoxStream<'static, SseEvent> {
    let last = Arc::new(AtomicI64::new(after));
    let replay = paged_steps(Arc::clone(&store), id, (page, prices), Arc::clone(&last));
    let settled = async move { settle(store, id, last.load(Ordering::Acquire), &prices).await };
    futures::stream::once(ready(SseEvent::default().retry(RECONNECT_AFTER)))
        .chain(replay)
        .chain(futures::stream::once(settled).flat_map(futures::stream::iter))
        .boxed()
}

/// Run `id`'s stored steps after `last`, read `page` at a time as the client takes them (a long
/// run's replay never sits in memory whole); `last` follows the last step sent. The stream ends
/// at the last stored step (or at an error, logged: the browser reconnects from its last id).
pub(super) fn paged_steps(
    store: Arc<dyn RunStore>,
    id: Uuid,
    (page, prices): (u32, Prices),
    last: Arc<AtomicI64>,
) -> impl futures::Stream<Item = SseEvent> + Send + 'static {
    let after = last.load(Ordering::Acquire);
    crate::server::step_pages::event_pages(store, id, after, page)
        .map(move |read| match read {
            Ok(events) => {
                let mut sent = after;
                let steps = stored_steps(&events, &mut sent, &prices);
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
pub(super) async fn settle(
    store: Arc<dyn RunStore>,
    id: Uuid,
    mut last: i64,
    prices: &Prices,
) -> Vec<SseEvent> {
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
            Ok(more) => out.extend(stored_steps(&more, &mut last, prices)),
            Err(err) => {
                tracing::error!(%err, run_id = %id, "reading a run's steps for its stream");
                return out;
            }
        }
    }
}
