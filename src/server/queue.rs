//! This instance's worker: it takes queued runs — new runs, and runs whose decision was claimed —
//! while it drives fewer than `max_running_runs`, oldest first. Every instance runs one, so a run
//! queued through instance A may be driven by B; the store makes sure no run is taken twice
//! (Postgres `FOR UPDATE SKIP LOCKED`, SQLite one writer at a time).
//!
//! It looks at the queue when something is queued here, when a run it drives ends, when another
//! instance announces a queued run (Postgres), and every [`POLL`] in any case (a cheap read when
//! the queue is empty). It also hears of cancels asked through other instances, for the runs it
//! drives.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nrllm_core::run_service::RunService;
use nrllm_core::run_store::{RunStatus, RunStore, StoreError};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::leases::Leases;
use super::live::RemoteFeed;

/// How often the queue is looked at without being told to.
const POLL: Duration = Duration::from_millis(500);

pub struct Queue {
    runs: Arc<RunService>,
    store: Arc<dyn RunStore>,
    leases: Arc<Leases>,
    /// Runs this instance took from the queue since start.
    taken: AtomicU64,
}

impl Queue {
    pub fn new(runs: Arc<RunService>, store: Arc<dyn RunStore>, leases: Arc<Leases>) -> Queue {
        Queue {
            runs,
            store,
            leases,
            taken: AtomicU64::new(0),
        }
    }

    /// Something was queued here: look at the queue now.
    pub fn wake(&self) {
        self.leases.ring();
    }

    /// Runs this instance took from the queue since start.
    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }

    /// Takes queued work while this instance has room; how many runs it took.
    pub async fn fill(&self) -> Result<usize, StoreError> {
        let mut total = 0;
        loop {
            // Runs answered through a call held open here first: each has its slot already, the
            // held call's (so a full instance still takes the replies that free its slots).
            let held = self.leases.held_calls();
            let mut work = match held {
                0 => Vec::new(),
                held => {
                    self.runs
                        .take_held(u32::try_from(held).unwrap_or(u32::MAX))
                        .await?
                }
            };
            let free = self.leases.free();
            if free > 0 {
                let more = self
                    .runs
                    .take_next(u32::try_from(free).unwrap_or(u32::MAX))
                    .await?;
                work.extend(more);
            }
            if work.is_empty() {
                return Ok(total);
            }
            total += work.len();
            self.taken.fetch_add(work.len() as u64, Ordering::Relaxed);
            for item in work {
                let runs = Arc::clone(&self.runs);
                let id = item.id();
                self.leases.drive(id, async move {
                    if let Err(err) = runs.work(item).await {
                        tracing::error!(run_id = %id, %err, "driving a run taken from the queue failed");
                    }
                });
            }
        }
    }

    /// Reads the cancel asked for run `id`, if this instance drives it, and stops it (its
    /// heartbeat would read it too, later).
    async fn cancel_if_asked(&self, id: Uuid) {
        if !self.leases.drives(id) {
            return;
        }
        match self.store.get(id).await {
            Ok(Some(run)) if run.status == RunStatus::Running => {
                if let Some(request) = run.cancel_requested {
                    self.runs.interrupt(id, request);
                }
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(run_id = %id, %err, "reading a run for a cancel"),
        }
    }

    /// Looks at the queue whenever there may be work, until `shutdown`. `remote`: what other
    /// instances announce (Postgres) — runs queued, and cancels of runs driven here.
    pub async fn run(
        self: Arc<Self>,
        remote: Option<Arc<RemoteFeed>>,
        shutdown: CancellationToken,
    ) {
        let mut cancels = remote.as_ref().map(|feed| feed.cancels());
        loop {
            // No run is taken once the server stops, even when the bell rang at the same time.
            if shutdown.is_cancelled() {
                return;
            }
            if let Err(err) = self.fill().await {
                tracing::error!(%err, "taking queued runs");
            }
            let queued_elsewhere = async {
                match &remote {
                    Some(feed) => feed.queued_elsewhere().await,
                    None => std::future::pending().await,
                }
            };
            let cancel = async {
                match cancels.as_mut().map(|receiver| receiver.recv()) {
                    Some(received) => received.await.ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.leases.bell() => {}
                _ = queued_elsewhere => {}
                id = cancel => {
                    if let Some(id) = id {
                        self.cancel_if_asked(id).await;
                    }
                }
                _ = tokio::time::sleep(POLL) => {}
            }
        }
    }
}
