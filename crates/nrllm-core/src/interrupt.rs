//! Cancels of running runs. An operator's cancel of a run that is running is recorded on the run
//! ([`crate::run_store::RunRecord::cancel_requested`]); the instance that drives it hears of it — at
//! once if the cancel came in here, else at its next heartbeat — and the segment in progress is
//! abandoned where it stands: a model call in flight is dropped, and an approved call in flight
//! is journaled as outcome unknown. A segment whose instance lost the run's lease is abandoned
//! the same way, but writes nothing: the instance that took the run over goes on from its
//! journal.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

use tokio::sync::watch;
use uuid::Uuid;

use crate::run_store::CancelRequest;

/// Why a segment driven here must stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// An operator cancelled the run.
    Cancel(CancelRequest),
    /// This instance no longer holds the run's lease.
    LeaseLost,
}

type Senders = HashMap<Uuid, watch::Sender<Option<Stop>>>;

/// The stops asked for the runs this process drives now, by run id.
#[derive(Default)]
pub(crate) struct Interrupts(Mutex<Senders>);

impl Interrupts {
    fn lock(&self) -> std::sync::MutexGuard<'_, Senders> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Watches run `id` for a cancel while a segment of it is driven here (`already`: one asked
    /// for before the segment began).
    pub(crate) fn watch(&self, id: Uuid, already: Option<CancelRequest>) -> Watched<'_> {
        let (sender, receiver) = watch::channel(already.map(Stop::Cancel));
        self.lock().insert(id, sender);
        Watched {
            interrupts: self,
            id,
            receiver,
        }
    }

    /// Tells the segment driving run `id` here to stop; `false` if no segment of it runs here.
    pub(crate) fn interrupt(&self, id: Uuid, stop: Stop) -> bool {
        match self.lock().get(&id) {
            Some(sender) => {
                sender.send_replace(Some(stop));
                true
            }
            None => false,
        }
    }
}

/// A segment watched for a cancel; dropping it stops watching.
pub(crate) struct Watched<'a> {
    interrupts: &'a Interrupts,
    id: Uuid,
    receiver: watch::Receiver<Option<Stop>>,
}

impl Watched<'_> {
    /// Runs `work` unless a stop comes first: `Err` with the stop, and `work` is dropped
    /// wherever it stood.
    pub(crate) async fn run<T>(&mut self, work: impl Future<Output = T>) -> Result<T, Stop> {
        let receiver = &mut self.receiver;
        let cancelled = async move {
            loop {
                if let Some(request) = receiver.borrow_and_update().clone() {
                    return request;
                }
                if receiver.changed().await.is_err() {
                    // The sender went (not while we watch): never cancelled.
                    std::future::pending::<()>().await;
                }
            }
        };
        let work = std::pin::pin!(work);
        let cancelled = std::pin::pin!(cancelled);
        match futures::future::select(work, cancelled).await {
            futures::future::Either::Left((done, _)) => Ok(done),
            futures::future::Either::Right((request, _)) => Err(request),
        }
    }

    /// A stop that came in after the work ended (the run was about to suspend).
    pub(crate) fn requested(&self) -> Option<Stop> {
        self.receiver.borrow().clone()
    }
}

impl Drop for Watched<'_> {
    fn drop(&mut self) {
        let mut map = self.interrupts.lock();
        // Only this segment's entry (another segment of the run may have begun since).
        if map
            .get(&self.id)
            .is_some_and(|sender| self.receiver.same_channel(&sender.subscribe()))
        {
            map.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> CancelRequest {
        CancelRequest {
            by: "olga".into(),
            reason: Some("wrong page".into()),
        }
    }

    #[tokio::test]
    async fn an_interrupt_stops_the_work_where_it_stands() {
        let interrupts = Interrupts::default();
        let id = Uuid::now_v7();
        let mut watched = interrupts.watch(id, None);
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let work = async move {
            let _ = started_tx.send(());
            std::future::pending::<u32>().await
        };
        let outcome = futures::future::join(watched.run(work), async {
            let _ = started_rx.await;
            assert!(interrupts.interrupt(id, Stop::Cancel(request())));
        })
        .await
        .0;
        assert_eq!(outcome, Err(Stop::Cancel(request())));
    }

    #[tokio::test]
    async fn work_that_ends_first_is_kept_and_nothing_is_watched_after() {
        let interrupts = Interrupts::default();
        let id = Uuid::now_v7();
        {
            let mut watched = interrupts.watch(id, None);
            assert_eq!(watched.run(async { 7 }).await, Ok(7));
            assert_eq!(watched.requested(), None);
        }
        assert!(
            !interrupts.interrupt(id, Stop::Cancel(request())),
            "no segment is watched any more"
        );
    }

    #[tokio::test]
    async fn a_cancel_asked_before_the_segment_stops_it_at_once() {
        let interrupts = Interrupts::default();
        let id = Uuid::now_v7();
        let mut watched = interrupts.watch(id, Some(request()));
        assert_eq!(
            watched.run(std::future::pending::<()>()).await,
            Err(Stop::Cancel(request()))
        );
    }

    #[tokio::test]
    async fn an_old_segment_ending_leaves_the_new_one_watched() {
        let interrupts = Interrupts::default();
        let id = Uuid::now_v7();
        let old = interrupts.watch(id, None);
        let new = interrupts.watch(id, None);
        drop(old);
        assert!(interrupts.interrupt(id, Stop::Cancel(request())));
        assert_eq!(new.requested(), Some(Stop::Cancel(request())));
    }
}
