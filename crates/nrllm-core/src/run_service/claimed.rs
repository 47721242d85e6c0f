//! A decided turn on its way to being carried out: the claimed run, the queued work that holds
//! it, and the verdict a decision amounts to.

use std::collections::BTreeMap;
use std::sync::Arc;

use uuid::Uuid;

use crate::decision::{Choice, Decision};
use crate::preview::CallPreview;
use crate::run_store::{CancelRequest, RunConfiguration, RunRecord, Verdict};
use crate::state::SuspendedState;
use crate::tool_loop::ToolLoopService;

/// A waiting run claimed by one caller, ready to continue.
pub struct ClaimedRun {
    pub id: Uuid,
    /// The run's trace, for the log lines of carrying it out ([`super::run_span`]).
    pub(super) trace: Option<crate::trace::RunTrace>,
    pub(super) version: i64,
    pub(super) last_sequence: i64,
    pub(super) state: SuspendedState,
    pub(super) configuration: RunConfiguration,
    /// Who started the run (whose daily spend it counts toward).
    pub(super) requested_by: String,
    pub(super) tool_loop: Arc<dyn ToolLoopService>,
    pub(super) decision: Decision,
    pub(super) decided_by: String,
    pub(super) verdict: Verdict,
    /// The claim is a recovery after a restart (its calls say so when they run again).
    pub(super) recovering: bool,
    /// Each approved call's preview basis, by call id, as taken at the claim.
    pub(super) approved_bases: BTreeMap<String, String>,
    /// A cancel asked for before the decision was carried out.
    pub(super) cancel: Option<CancelRequest>,
}

impl ClaimedRun {
    /// A claimed run rebuilt from its record and what was read from it (state, configuration,
    /// loop, decision): for a worker that took it from the queue, or a recovery (`recovering`).
    pub(super) fn from_record(
        run: &RunRecord,
        (state, configuration, tool_loop, decision): (
            SuspendedState,
            RunConfiguration,
            Arc<dyn ToolLoopService>,
            Decision,
        ),
        recovering: bool,
    ) -> ClaimedRun {
        // A recovery does not check the targets again: its calls may have taken effect already
        // and changed them (their effect keys keep them from applying twice).
        let approved_bases = match recovering {
            true => BTreeMap::new(),
            false => run
                .approved_bases
                .as_deref()
                .and_then(|text| serde_json::from_str(text).ok())
                .unwrap_or_default(),
        };
        ClaimedRun {
            id: run.id,
            trace: run.trace.clone(),
            version: run.version,
            last_sequence: run.last_sequence,
            state,
            configuration,
            requested_by: run.requested_by.clone(),
            tool_loop,
            decision,
            decided_by: run.decided_by.clone().unwrap_or_default(),
            verdict: verdict_of_record(run),
            recovering,
            approved_bases,
            cancel: run.cancel_requested.clone(),
        }
    }
}

/// The decision a claimed run carries out, as recorded on it by the claim.
pub(super) fn decision_on_record(run: &RunRecord) -> Option<Decision> {
    run.decision_record
        .as_deref()
        .and_then(|text| serde_json::from_str(text).ok())
}

/// A waiting run's pending turn with its previews and digest ([`RunService::pending`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PendingTurn {
    pub state: SuspendedState,
    pub previews: Vec<CallPreview>,
    pub digest: String,
}

/// The verdict a decision amounts to.
pub fn verdict_of(decision: &Decision) -> Verdict {
    match decision {
        Decision::ApproveAll | Decision::RaiseBudget { .. } | Decision::ContinueAtBudget => {
            Verdict::Approved
        }
        Decision::StopAtBudget => Verdict::Denied,
        Decision::DenyAll { .. } => Verdict::Denied,
        Decision::Reply { reply } => match reply.action {
            crate::elicit::ReplyAction::Accept => Verdict::Approved,
            _ => Verdict::Denied,
        },
        Decision::PerCall { calls }
            if !calls.is_empty()
                && calls
                    .iter()
                    .all(|c| matches!(c.choice, Choice::Expired { .. })) =>
        {
            Verdict::Expired
        }
        Decision::PerCall { calls } => {
            let denied = calls
                .iter()
                .filter(|c| matches!(c.choice, Choice::Deny { .. }))
                .count();
            match denied {
                0 => Verdict::Approved,
                n if n == calls.len() => Verdict::Denied,
                _ => Verdict::Mixed,
            }
        }
    }
}

/// Queued work a worker took: a new run to drive, or a claimed decision to carry out.
pub enum Work {
    Start(Box<RunRecord>),
    Decided(Box<ClaimedRun>),
}

impl Work {
    /// The run the work is for.
    pub fn id(&self) -> Uuid {
        match self {
            Work::Start(run) => run.id,
            Work::Decided(claimed) => claimed.id,
        }
    }
}

/// The verdict recorded on a claimed run.
pub(super) fn verdict_of_record(run: &RunRecord) -> Verdict {
    match run.decision.as_deref() {
        Some("denied") => Verdict::Denied,
        Some("mixed") => Verdict::Mixed,
        Some("expired") => Verdict::Expired,
        _ => Verdict::Approved,
    }
}
