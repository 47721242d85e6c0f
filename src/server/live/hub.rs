//! The live hub: a broadcast channel per running run that someone follows, and the caps on
//! live streams.

use super::forming::Writing;
use crate::page_data::{Forming, ProgressView};
use nrllm_core::events::Event;
use nrllm_core::provider::{Delta, Prices};
use nrllm_core::run_service::RunListener;
use nrllm_core::run_store::{RunConfiguration, RunStatus, SequencedEvent};
use nrllm_core::tool::Progress;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::broadcast;
use uuid::Uuid;

/// Slots of a run's broadcast channel: a subscriber that falls this far behind is dropped (and
/// its browser reconnects from its last step).
pub(super) const CHANNEL_CAPACITY: usize = 256;

/// How long a browser waits before it reconnects to a stream that ended (the polling cadence of a
/// page whose run runs in another process, or whose stream was refused).
pub(super) const RECONNECT_AFTER: Duration = Duration::from_secs(2);

/// How long a run counts as followed from another instance after that instance last said so
/// (it says so every [`super::WATCHING_EVERY`]).
pub(super) const WATCHED_FOR: Duration = Duration::from_secs(12);

/// What a live run reports.
#[derive(Debug, Clone)]
pub enum LiveMessage {
    Event(SequencedEvent),
    Status(RunStatus),
    /// What the model wrote since the last such message (or, with `reset`, the start over).
    Forming(Forming),
    /// How far a running call has come (the latest report; reports in between are dropped).
    Progress(ProgressView),
}

/// At most one live message of a run's call progress this often (reports in between are
/// dropped, but the one that completes the total).
pub const PROGRESS_EVERY: Duration = Duration::from_millis(100);

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
    pub(super) inner: Mutex<Hub>,
    pub(super) limits: StreamLimits,
    /// Told whenever a run starts running here: the streams waiting for a queued run look again
    /// at once (between those, they look every `QUEUE_RECHECK`).
    pub(super) started: tokio::sync::Notify,
    /// A run configuration's prices, for what each live step cost (none set: nothing costs).
    pub(super) prices_of: Option<PricesOf>,
}

/// A run configuration's prices.
pub type PricesOf = Arc<dyn Fn(&RunConfiguration) -> Prices + Send + Sync>;

#[derive(Default)]
pub(super) struct Hub {
    pub(super) runs: HashMap<Uuid, LiveRun>,
    /// Every stream open here: live ones and those waiting for a queued run.
    pub(super) subscribers: usize,
    /// Streams waiting for a queued run to be taken, by run.
    pub(super) waiting: HashMap<Uuid, usize>,
}

#[derive(Default)]
pub(super) struct LiveRun {
    pub(super) channel: Option<broadcast::Sender<LiveMessage>>,
    pub(super) subscribers: usize,
    pub(super) unpersisted: Vec<SequencedEvent>,
    /// The response its model is writing now.
    pub(super) writing: Writing,
    /// When a call's progress was last sent.
    pub(super) progress_sent: Option<Instant>,
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
    pub(super) receiver: broadcast::Receiver<LiveMessage>,
    /// The run's events emitted but not committed yet, as of subscribing.
    pub(super) unpersisted: Vec<SequencedEvent>,
    /// The response being written as of subscribing, whole.
    pub(super) forming: Option<Forming>,
    pub(super) slot: Slot,
}

/// A stream's place in the hub's counts, given back when it is dropped: a live subscriber's,
/// or (`waiting`) that of a stream waiting for a queued run to be taken.
pub struct Slot {
    pub(super) hub: Arc<LiveHub>,
    pub(super) run_id: Uuid,
    pub(super) waiting: bool,
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
            started: tokio::sync::Notify::new(),
            prices_of: None,
        }
    }

    /// Prices each live step's usage with `prices_of` (the run's configuration's prices).
    pub fn with_prices(mut self, prices_of: PricesOf) -> LiveHub {
        self.prices_of = Some(prices_of);
        self
    }

    /// What the steps of a run of `configuration` cost.
    pub fn prices(&self, configuration: Option<&RunConfiguration>) -> Prices {
        match (&self.prices_of, configuration) {
            (Some(prices_of), Some(configuration)) => prices_of(configuration),
            _ => Prices::default(),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Hub> {
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
        let channel = run
            .channel
            .get_or_insert_with(|| broadcast::channel(CHANNEL_CAPACITY).0);
        // What the streams already here have not been sent yet goes to them now: the new one
        // gets it in the response so far, and must not get it twice.
        if let Some(pending) = run.writing.flush() {
            let _ = channel.send(LiveMessage::Forming(pending));
        }
        let receiver = channel.subscribe();
        run.subscribers += 1;
        hub.subscribers += 1;
        Ok(Subscription {
            receiver,
            unpersisted: run.unpersisted.clone(),
            forming: run.writing.snapshot(),
            slot: Slot {
                hub: Arc::clone(self),
                run_id: id,
                waiting: false,
            },
        })
    }

    /// [`LiveHub::subscribe`], allowing a run the store says is running `grace` to start running
    /// here: a worker's take commits before the worker tells the hub, and a stream that came in
    /// between would otherwise follow the run as one driven elsewhere (and miss its response as
    /// it is written). A run that ended meanwhile (`still_running` says no: it was quick, and
    /// ran here before the stream looked) is not waited for: its steps are in the store.
    pub async fn subscribe_soon<F, Fut>(
        self: &Arc<Self>,
        id: Uuid,
        grace: std::time::Duration,
        still_running: F,
    ) -> Result<Subscription, Refused>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let until = tokio::time::Instant::now() + grace;
        // Looks at the store after 5 ms, then twice as long each time: a few reads at most.
        let mut look_in = std::time::Duration::from_millis(5);
        loop {
            // Made before the look, so that a start in between wakes it.
            let started = self.started.notified();
            match self.subscribe(id) {
                Err(Refused::NotRunningHere) if tokio::time::Instant::now() < until => {}
                other => return other,
            }
            let look = (tokio::time::Instant::now() + look_in).min(until);
            tokio::select! {
                _ = started => {}
                _ = tokio::time::sleep_until(look) => {
                    look_in *= 2;
                    if !still_running().await {
                        return Err(Refused::NotRunningHere);
                    }
                }
            }
        }
    }

    /// The events a running run has emitted but not yet committed (empty for other runs).
    pub fn unpersisted(&self, id: Uuid) -> Vec<SequencedEvent> {
        self.lock()
            .runs
            .get(&id)
            .map(|run| run.unpersisted.clone())
            .unwrap_or_default()
    }

    /// Browsers on another instance follow run `id` (if it runs here): its forming response is
    /// announced to them from now on — with `fresh` (one joined), everything written so far first.
    pub fn watched_elsewhere(&self, id: Uuid, fresh: bool) {
        if let Some(run) = self.lock().runs.get_mut(&id) {
            run.writing
                .watched_elsewhere(fresh, Instant::now() + WATCHED_FOR);
        }
    }

    /// The forming responses of the runs followed from other instances that they were not told
    /// yet, taken now (runs nobody has said they follow for a while are no more followed).
    pub fn elsewhere_due(&self) -> Vec<(Uuid, Forming)> {
        let now = Instant::now();
        self.lock()
            .runs
            .iter_mut()
            .filter_map(|(id, run)| Some((*id, run.writing.elsewhere_due(now)?)))
            .collect()
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
        // The response's step replaces what was shown of it; a retry starts it over (and says
        // so, so that pages drop what they show).
        match &event.event {
            Event::Llm { .. } | Event::LlmFailed { .. } => run.writing.landed(),
            Event::ProviderRetry { .. } => {
                let over = run.writing.over();
                if let Some(channel) = &run.channel {
                    let _ = channel.send(LiveMessage::Forming(over));
                }
            }
            _ => {}
        }
        if let Some(channel) = &run.channel {
            let _ = channel.send(LiveMessage::Event(event.clone()));
        }
    }

    fn progress(&self, run_id: Uuid, (call_id, tool): (&str, &str), progress: &Progress) {
        let mut hub = self.lock();
        let Some(run) = hub.runs.get_mut(&run_id) else {
            return;
        };
        let Some(channel) = &run.channel else {
            return;
        };
        let done = progress
            .total
            .is_some_and(|total| progress.progress >= total);
        let due = run
            .progress_sent
            .is_none_or(|sent| sent.elapsed() >= PROGRESS_EVERY);
        if !(due || done) {
            return;
        }
        run.progress_sent = Some(Instant::now());
        let _ = channel.send(LiveMessage::Progress(ProgressView {
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            progress: progress.progress,
            total: progress.total,
            message: progress.message.clone(),
        }));
    }

    fn delta(&self, run_id: Uuid, round: u32, delta: &Delta) {
        let mut hub = self.lock();
        // Only a run running here has a place (and its events a feed).
        let Some(run) = hub.runs.get_mut(&run_id) else {
            return;
        };
        let message = run.writing.add(round, delta, run.channel.is_some());
        if let (Some(message), Some(channel)) = (message, &run.channel) {
            let _ = channel.send(LiveMessage::Forming(message));
        }
    }

    fn status(&self, run_id: Uuid, status: RunStatus) {
        let mut hub = self.lock();
        if status == RunStatus::Running {
            // A run that starts (or resumes) running here gets its place; its events follow.
            hub.runs.entry(run_id).or_default();
            drop(hub);
            self.started.notify_waiters();
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
