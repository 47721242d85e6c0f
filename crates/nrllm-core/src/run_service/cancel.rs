//! Cancelling a run, and stopping a segment that runs here.

use uuid::Uuid;

use super::errors::ServiceError;
use super::RunService;
use crate::authority::{Act, Actor, Refusal};
use crate::interrupt::Stop;
use crate::run_store::{CancelRequest, RunRecord, RunStatus, StoreError};

impl RunService {
    /// Cancels a queued or waiting run, with who and why in its steps (a running one stops at
    /// its next step).
    pub async fn cancel(
        &self,
        id: Uuid,
        actor: &Actor,
        reason: Option<&str>,
    ) -> Result<RunRecord, ServiceError> {
        let run = self.store.get(id).await?.ok_or(StoreError::NotFound(id))?;
        match self.may(actor, Act::Cancel, &run).await? {
            Ok(()) => {}
            Err(Refusal::State(_)) => {
                return Err(StoreError::InvalidTransition {
                    id,
                    status: run.status,
                    action: "cancelled",
                }
                .into())
            }
            Err(refusal) => return Err(ServiceError::Refused(refusal)),
        }
        let before = run;
        let run = self
            .store
            .cancel(id, &actor.name, reason, self.clock.now_ms())
            .await?;
        match (run.status, run.cancel_requested.clone()) {
            (RunStatus::Running, Some(request)) => {
                // Stops at once if it runs here; else the instance driving it hears of it (the
                // store announces the request, and its heartbeat reads it in any case).
                self.interrupt(id, request);
            }
            _ => {
                self.notify_status(id, RunStatus::Cancelled);
                cancelled_spans(&before, &run, &actor.name);
            }
        }
        Ok(run)
    }

    /// Stops the segment of run `id` that runs here, if one does, at its next step; `false` if
    /// none does.
    pub fn interrupt(&self, id: Uuid, request: CancelRequest) -> bool {
        self.interrupts.interrupt(id, Stop::Cancel(request))
    }

    /// Stops the segment of run `id` that runs here, if one does, writing nothing: this instance
    /// lost the run's lease (another instance took it over). `false` if none runs here.
    pub fn abandon(&self, id: Uuid) -> bool {
        self.interrupts.interrupt(id, Stop::LeaseLost)
    }
}

/// The spans of `before`, cancelled by `by` as it waited or was queued (now `run`): its
/// wait's, if it waited, and its root span.
fn cancelled_spans(before: &RunRecord, run: &RunRecord, by: &str) {
    let wait = crate::spans::wait_span(before, |kind| crate::spans::WaitEnded {
        kind,
        started_ms: crate::state::SuspendedState::from_json(
            before.suspended_state.as_deref().unwrap_or_default(),
        )
        .ok()
        .and_then(|state| state.waiting_since_ms)
        .unwrap_or(before.updated_at_ms),
        ended_ms: run.updated_at_ms,
        decision: "cancelled".to_owned(),
        decided_by: by.to_owned(),
        rules: Vec::new(),
        digest: None,
    });
    if let Some((trace, wait)) = wait {
        crate::spans::wait_ended(trace, &wait);
    }
    crate::spans::run_ended(run);
}
