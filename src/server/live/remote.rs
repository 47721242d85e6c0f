//! Runs driven by another instance: their steps, read from the database when the database
//! announces them.

use super::hub::*;
use super::sse::*;
use axum::response::sse::Event as SseEvent;
use nrllm_core::run_store::{RunStatus, RunStore};
use nrllm_store::notify::Notice;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use uuid::Uuid;

/// How long a stream of a run driven elsewhere waits for a commit before it reads the run again
/// anyway (a notification lost to a reconnect is caught up).
pub(super) const REMOTE_RECHECK: Duration = Duration::from_secs(3);

/// How often a stream of a queued run looks whether a worker took it.
pub(super) const QUEUE_RECHECK: Duration = Duration::from_millis(300);

/// Commits of runs announced by any instance (Postgres `LISTEN/NOTIFY`), for the live streams of
/// runs that another instance drives. Capped like the hub's streams.
pub struct RemoteFeed {
    pub(super) url: String,
    pub(super) sender: broadcast::Sender<Uuid>,
    pub(super) open: std::sync::atomic::AtomicUsize,
    pub(super) limit: usize,
    /// Rung when the tool settings may have changed.
    pub(super) tool_settings: tokio::sync::Notify,
    /// Rung when another instance may have queued a run.
    pub(super) queued: tokio::sync::Notify,
    /// Runs someone asked to cancel.
    pub(super) cancels: broadcast::Sender<Uuid>,
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

    pub(super) fn subscribe(self: &Arc<Self>) -> Option<(broadcast::Receiver<Uuid>, RemoteSlot)> {
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
pub(super) struct RemoteTail {
    pub(super) store: Arc<dyn RunStore>,
    pub(super) id: Uuid,
    pub(super) last: i64,
    pub(super) receiver: broadcast::Receiver<Uuid>,
    pub(super) _slot: RemoteSlot,
    pub(super) done: bool,
}

impl RemoteTail {
    pub(super) async fn next_batch(mut self) -> Option<(Vec<SseEvent>, RemoteTail)> {
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
