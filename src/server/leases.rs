//! Leases on running runs, so that several instances can share one database (the way job queues
//! on Postgres — Oban, River, Graphile Worker — hold their jobs):
//! - the instance that drives a run holds its lease: taken when the run is created or claimed,
//!   renewed by a heartbeat while the task driving it lives, given up when the run suspends or
//!   ends. Every write of a running run is fenced on the owner, so an instance that lost its
//!   lease (it stalled, or was cut off from the database) writes nothing more;
//! - every instance runs a reaper: a running run whose lease ran out (its instance died, or its
//!   task ended without settling the run) is taken over by exactly one reaper — one conditional
//!   update — and goes on from its last journaled step ([`RunService::recover`]).
//!
//! Each instance drives at most `max_running_runs` at once ([`Leases::free`]): its worker
//! (`super::queue`) takes queued runs only while there is room, and its reaper takes over only as
//! many runs as there is room for — another instance with room takes the rest.
//!
//! On the embedded SQLite database this process is the only instance: at start it takes over
//! every run the last stop left `running` at once, without waiting for their leases to run out.
//!
//! An instance that stalls (a stopped process, a machine that froze) may wake after its lease ran
//! out and another instance took the run over. So it keeps, for each lease, a deadline by its own
//! monotonic clock ([`LeaseClock`]) — three quarters of a lease after the lease was last taken or
//! renewed — and the run's loop asks it before every model request and tool call: past the
//! deadline, or once the heartbeat finds the lease gone, the run's segment stops and writes
//! nothing. What remains is an effect outside our database already in flight when the process
//! stalled (README, "Several instances").

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nrllm_core::clock::now_ms;
use nrllm_core::run_service::{ResumeError, RunService};
use nrllm_core::run_store::{Renewal, RunStore, StoreError};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

/// Runs recovered per reaper pass.
const REAP_BATCH: u32 = 50;

/// The deadline of each lease this instance holds, by its monotonic clock: what the run loop
/// asks before each model request and tool call ([`nrllm_core::lease::LeaseWatch`]).
pub struct LeaseClock {
    deadlines: Mutex<HashMap<Uuid, Instant>>,
    /// How long a lease holds after it is taken or renewed, less a margin for the time between
    /// the database's write and this clock's reading (and for clocks that disagree).
    holds_for: Duration,
}

impl LeaseClock {
    /// A clock for leases of `lease`.
    pub fn new(lease: Duration) -> LeaseClock {
        LeaseClock {
            deadlines: Mutex::default(),
            holds_for: lease.mul_f64(0.75),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Instant>> {
        self.deadlines
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The lease on `run` was taken or renewed as of `at`.
    fn renewed(&self, run: Uuid, at: Instant) {
        self.lock().insert(run, at + self.holds_for);
    }

    /// This instance holds no lease on `run` (any more).
    fn forget(&self, run: Uuid) {
        self.lock().remove(&run);
    }
}

impl nrllm_core::lease::LeaseWatch for LeaseClock {
    fn holds(&self, run: Uuid) -> bool {
        self.lock()
            .get(&run)
            .is_some_and(|deadline| Instant::now() < *deadline)
    }
}

/// This instance's leases: the runs its tasks drive, their heartbeat, and the reaper.
pub struct Leases {
    store: Arc<dyn RunStore>,
    runs: Arc<RunService>,
    tasks: TaskTracker,
    /// The runs a task of this process drives, with how many tasks (a run is driven by one task,
    /// but a recovery may start while a stalled task has not ended yet).
    driving: Mutex<HashMap<Uuid, usize>>,
    lease: Duration,
    /// How many runs this instance's reaper took over (for the system page and metrics).
    reaped: std::sync::atomic::AtomicU64,
    /// Told of runs this process stopped holding without seeing them stop (taken over).
    live: Arc<super::live::LiveHub>,
    /// How many runs this instance drives at most.
    capacity: usize,
    /// The most runs this instance drove at once since start.
    peak: std::sync::atomic::AtomicUsize,
    /// Rung when a run's task ends (room for queued work) or something is queued here.
    bell: Notify,
    /// Each held lease's deadline by this process's clock.
    clock: Arc<LeaseClock>,
    /// How many calls this process holds open for an operator's reply to the question their
    /// server asked inside them: each keeps its run's running slot.
    held_calls: Box<dyn Fn() -> usize + Send + Sync>,
}

/// Holds a run in [`Leases::driving`] while its task lives; dropping it (the task ended, or
/// panicked) stops the heartbeat for the run.
struct Driving {
    leases: Arc<Leases>,
    id: Uuid,
}

impl Drop for Driving {
    fn drop(&mut self) {
        let mut driving = self.leases.lock();
        if let Some(count) = driving.get_mut(&self.id) {
            *count -= 1;
            if *count == 0 {
                driving.remove(&self.id);
                self.leases.clock.forget(self.id);
            }
        }
        drop(driving);
        self.leases.bell.notify_one();
    }
}

impl Leases {
    pub fn new(
        store: Arc<dyn RunStore>,
        runs: Arc<RunService>,
        tasks: TaskTracker,
        (lease, clock): (Duration, Arc<LeaseClock>),
        live: Arc<super::live::LiveHub>,
        capacity: usize,
    ) -> Leases {
        Leases {
            store,
            runs,
            tasks,
            driving: Mutex::default(),
            lease,
            reaped: Default::default(),
            live,
            capacity: capacity.max(1),
            peak: Default::default(),
            bell: Notify::new(),
            clock,
            held_calls: Box::new(|| 0),
        }
    }

    /// The same leases, counting the calls `held_calls` says are held open here against the
    /// running slots ([`Leases::free`]).
    pub fn with_held_calls(
        mut self,
        held_calls: impl Fn() -> usize + Send + Sync + 'static,
    ) -> Leases {
        self.held_calls = Box::new(held_calls);
        self
    }

    /// How many calls this process holds open now for a question their server asked inside
    /// them.
    pub fn held_calls(&self) -> usize {
        (self.held_calls)()
    }

    /// How many more runs this instance may drive now.
    pub fn free(&self) -> usize {
        let busy: usize = self.lock().values().sum();
        self.capacity.saturating_sub(busy + self.held_calls())
    }

    /// The most runs this instance drove at once since start.
    pub fn peak(&self) -> usize {
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether a task of this process drives run `id` now.
    pub fn drives(&self, id: Uuid) -> bool {
        self.lock().contains_key(&id)
    }

    /// Tells the worker to look at the queue.
    pub fn ring(&self) {
        self.bell.notify_one();
    }

    /// Waits until a run's task ends or something is queued here.
    pub async fn bell(&self) {
        self.bell.notified().await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, usize>> {
        self.driving
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Drives run `id` with `work` as a tracked task (a shutdown waits for it); the heartbeat
    /// renews the run's lease for as long as the task lives.
    pub fn drive<F>(self: &Arc<Self>, id: Uuid, work: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        {
            // The run's lease was taken just now (by the claim, the queue or a takeover).
            self.clock.renewed(id, Instant::now());
            let mut driving = self.lock();
            *driving.entry(id).or_default() += 1;
            let busy: usize = driving.values().sum();
            self.peak
                .fetch_max(busy, std::sync::atomic::Ordering::Relaxed);
        }
        let held = Driving {
            leases: Arc::clone(self),
            id,
        };
        self.tasks.spawn(async move {
            let _held = held;
            work.await;
        });
    }

    /// The runs this process drives now.
    pub fn driving(&self) -> Vec<Uuid> {
        self.lock().keys().copied().collect()
    }

    /// Runs this instance's reaper took over since start.
    pub fn reaped(&self) -> u64 {
        self.reaped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes over run `id` and goes on from its last journaled step, as a tracked task.
    /// `force`: whoever holds its lease (the only instance, at start). `false` if another
    /// instance got it first, or it no longer runs.
    pub async fn take_over(self: &Arc<Self>, id: Uuid, force: bool) -> Result<bool, StoreError> {
        if !self.store.take_lease(id, now_ms(), force).await? {
            return Ok(false);
        }
        let runs = Arc::clone(&self.runs);
        self.drive(id, async move {
            match runs.recover(id).await {
                Ok(run) => tracing::info!(run_id = %id, status = %run.status, "took over a run and went on from its last journaled step"),
                Err(err) => tracing::error!(run_id = %id, %err, "recovering a run failed"),
            }
        });
        Ok(true)
    }

    /// Renews the lease of every run this process drives; a run whose lease is gone (another
    /// instance took it over) is no longer renewed, and its task's next write is refused. Renews
    /// too the holds on runs whose server's call is held open here (only this instance can
    /// answer through it).
    pub async fn heartbeat(&self) {
        let now = now_ms();
        for id in self.driving() {
            let asked = Instant::now();
            match self.store.renew_lease(id, now).await {
                Ok(Renewal::Held(None)) => self.clock.renewed(id, asked),
                Ok(Renewal::Held(Some(request))) => {
                    self.clock.renewed(id, asked);
                    // An operator asked (through another instance) to cancel it.
                    self.runs.interrupt(id, request);
                }
                Ok(Renewal::Gone) => {
                    // Suspended or ended meanwhile (nothing to hold; its task is about to end
                    // and take it off the list), or taken over: then the live streams here end,
                    // and browsers reconnect to follow the new driver. (The list is left to the
                    // tasks: a claim here may already hold the run again.)
                    if let Ok(Some(run)) = self.store.get(id).await {
                        if run.status == nrllm_core::run_store::RunStatus::Running {
                            tracing::warn!(run_id = %id, "another instance took this run over; its task here stops before its next step");
                            self.clock.forget(id);
                            self.runs.abandon(id);
                            self.live.forget(id);
                        }
                    }
                }
                Err(err) => tracing::warn!(run_id = %id, %err, "renewing a run's lease failed"),
            }
        }
        // The runs waiting for a reply that goes through a call held open here (none held:
        // nothing to renew, and a hold whose call is gone lapses).
        if self.held_calls() > 0 {
            if let Err(err) = self.store.renew_holds(now).await {
                tracing::warn!(%err, "renewing the holds of calls held open here failed");
            }
        }
    }

    /// Takes over the running runs whose lease ran out, as many as there is room for here; how
    /// many this instance took.
    pub async fn reap(self: &Arc<Self>) -> Result<usize, StoreError> {
        let mut taken = 0;
        for id in self.store.expired_leases(now_ms(), REAP_BATCH).await? {
            if self.free() == 0 {
                break;
            }
            if self.lock().contains_key(&id) {
                // Still driven here: the heartbeat fell behind; it renews on its next beat.
                continue;
            }
            if self.take_over(id, false).await? {
                tracing::warn!(run_id = %id, "a run's lease ran out; this instance took it over");
                self.reaped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                taken += 1;
            }
        }
        Ok(taken)
    }

    /// Ends the wait of every run whose approval deadline passed: its turn expires (no call of it
    /// runs, the model reads that nobody decided) and the run is queued to go on. Of several
    /// instances, the claim lets exactly one do it. How many this instance expired.
    pub async fn expire_overdue(self: &Arc<Self>) -> Result<usize, StoreError> {
        let mut expired = 0;
        for id in self.store.expired_approvals(now_ms(), REAP_BATCH).await? {
            match self.runs.claim_expired(id).await {
                Ok(_) => {
                    tracing::info!(run_id = %id, "nobody decided before the approval deadline; the turn expired");
                    self.ring();
                    expired += 1;
                }
                // Decided, or expired by another instance, meanwhile.
                Err(ResumeError::NotWaiting(_)) => {}
                Err(ResumeError::Store(err)) => return Err(err),
                Err(err) => {
                    tracing::warn!(run_id = %id, %err, "an overdue run cannot be expired now")
                }
            }
        }
        Ok(expired)
    }

    /// Lets every run waiting at a daily spend cap with room again go on (queued). How many
    /// this instance let go on.
    pub async fn continue_allowed(self: &Arc<Self>) -> Result<usize, StoreError> {
        let claimed = self.runs.continue_allowed().await?;
        if claimed > 0 {
            self.ring();
        }
        Ok(claimed)
    }

    /// While the server stops, the runs still driven here go on to their next saved step (for
    /// up to `shutdown_grace_secs`): their leases are renewed until the last has ended, so that
    /// a grace period longer than a lease neither stops them at their lease's end nor lets
    /// another instance take them over meanwhile. Nothing is taken over or expired.
    async fn drain(&self, beat: Duration) {
        // On the beat, however often a run's end rings the bell in between.
        let mut next = tokio::time::Instant::now() + beat;
        loop {
            let notified = self.bell.notified();
            if self.lock().is_empty() {
                return;
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(next) => {
                    self.heartbeat().await;
                    next = tokio::time::Instant::now() + beat;
                }
            }
        }
    }

    /// Heartbeat, reaper, deadlines and daily allowances, every third of a lease, until
    /// `shutdown`; then the heartbeat alone, until no run is driven here any more.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let beat = (self.lease / 3).max(Duration::from_millis(100));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return self.drain(beat).await,
                _ = tokio::time::sleep(beat) => {}
            }
            self.heartbeat().await;
            // No run is taken over once the server stops.
            if shutdown.is_cancelled() {
                return self.drain(beat).await;
            }
            if let Err(err) = self.reap().await {
                tracing::error!(%err, "looking for runs whose lease ran out");
            }
            if let Err(err) = self.expire_overdue().await {
                tracing::error!(%err, "looking for runs whose approval deadline passed");
            }
            if let Err(err) = self.continue_allowed().await {
                tracing::error!(%err, "looking for runs whose daily spend cap has room again");
            }
        }
    }
}
