//! Runs waiting at a daily spend cap across runs go on by themselves once the cap has room
//! again ([`crate::spend`]): an administrator raised it for the day, or a new UTC day began.

use std::collections::HashMap;

use super::errors::{RaiseCapError, ResumeError};
use super::RunService;
use crate::authority::{authorize, Act, Actor};
use crate::run_store::{RunStatus, StoreError, WaitingFilter};
use crate::spend::{utc_day, DaySpend, SpendKey};
use crate::state::SuspendedState;

/// Runs waiting at their budget looked at in one pass.
const ALLOWANCE_BATCH: u32 = 200;

impl RunService {
    /// Raises today's cap of `key` by `micros` more, for administrator `actor` (the authority
    /// decides), and lets the runs waiting at it go on if it has room now. The day's count as
    /// it now is, and how many runs went on.
    pub async fn raise_spend_cap(
        &self,
        actor: &Actor,
        key: &SpendKey,
        micros: u64,
    ) -> Result<(DaySpend, usize), RaiseCapError> {
        authorize(actor, Act::RaiseSpendCap, None)?;
        let ledger = self.spend.as_ref().ok_or(RaiseCapError::NoLedger)?;
        let day = utc_day(self.clock.now_ms());
        let count = ledger.raise_cap(day, key, micros, &actor.label()).await?;
        tracing::info!(by = %actor.label(), scope = key.scope.as_str(), name = %key.name, micros, "a daily spend cap raised for the day");
        let claimed = self.continue_allowed().await?;
        Ok((count, claimed))
    }

    /// Claims, for the allowance, every run waiting at a daily cap whose cap has room now; each
    /// is queued to go on where it stopped. Of several instances, the claim lets exactly one
    /// take each run. How many this instance claimed.
    pub async fn continue_allowed(&self) -> Result<usize, StoreError> {
        if self.spend.is_none() {
            return Ok(0);
        }
        let filter = WaitingFilter {
            kind: Some(RunStatus::WaitingForBudget),
            limit: ALLOWANCE_BATCH,
            ..WaitingFilter::default()
        };
        let mut claimed = 0;
        // Runs of one configuration and requester share their caps: read once a pass.
        let mut room: HashMap<(String, String), bool> = HashMap::new();
        for run in self.store.waiting(&filter).await? {
            let (Some(configuration), Some(raw)) = (&run.configuration, &run.suspended_state)
            else {
                continue;
            };
            let at_daily_cap = SuspendedState::from_json(raw)
                .ok()
                .and_then(|state| state.budget)
                .is_some_and(|stop| stop.daily.is_some());
            if !at_daily_cap {
                continue;
            }
            let keys = (configuration.provider.clone(), run.requested_by.clone());
            let has_room = match room.get(&keys) {
                Some(has_room) => *has_room,
                None => {
                    let Some(watch) = self.spend_watch(configuration, &run.requested_by) else {
                        return Ok(claimed);
                    };
                    let has_room = watch.has_room().await?;
                    room.insert(keys, has_room);
                    has_room
                }
            };
            if !has_room {
                continue;
            }
            match self.claim_allowance(run.id).await {
                Ok(_) => {
                    tracing::info!(run_id = %run.id, "its daily spend cap has room again; the run goes on");
                    claimed += 1;
                }
                // Decided, stopped or claimed elsewhere meanwhile.
                Err(ResumeError::NotWaiting(_)) => {}
                Err(ResumeError::Store(err)) => return Err(err),
                Err(err) => {
                    tracing::warn!(run_id = %run.id, %err, "a run at its daily cap cannot go on now")
                }
            }
        }
        Ok(claimed)
    }
}
