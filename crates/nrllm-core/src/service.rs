//! The run service: ties the loop to the store. It starts runs, drives them until they complete or
//! suspend, and resumes a waiting run with a decision — check the decision, claim the run (exactly
//! one claimer wins), resume the loop, persist. The web app and headless programs both use it.
//!
//! Events of a segment are numbered as they happen (continuing the run's sequence) and committed
//! with the segment's closing transition, so a run's rows and its events never disagree. A
//! [`RunListener`] sees each event at once, for live views.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use crate::agent::{LoopError, LoopOutcome, RunContext, RunInput, ToolLoopService};
use crate::clock::{format_utc, Clock, SystemClock};
use crate::decision::{Choice, Decision, DecisionError, Submission};
use crate::events::{Event, EventSink};
use crate::preview::{check_digest, pending_digest, CallPreview, DigestCheck};
use crate::provider::Usage;
use crate::state::{Counters, SuspendedState};
use crate::store::{
    Claim, Finish, NewRun, RunConfiguration, RunRecord, RunStatus, RunStore, SequencedEvent,
    StoreError, TerminationReason, Verdict,
};
use crate::transcript::Message;

/// Builds the loop for a run's configuration (its provider and model).
pub trait LoopFactory: Send + Sync {
    /// The loop to drive a run with, or a message an operator can act on (e.g. "no API key").
    fn tool_loop(
        &self,
        configuration: &RunConfiguration,
    ) -> Result<Arc<dyn ToolLoopService>, String>;

    /// Estimated cost of `usage` under the configuration's prices, in millionths of a dollar.
    fn estimate_cost_micros(
        &self,
        _configuration: &RunConfiguration,
        _usage: Usage,
    ) -> Option<i64> {
        None
    }
}

/// A factory that uses one loop for every run.
pub struct SingleLoop(pub Arc<dyn ToolLoopService>);

impl LoopFactory for SingleLoop {
    fn tool_loop(
        &self,
        _configuration: &RunConfiguration,
    ) -> Result<Arc<dyn ToolLoopService>, String> {
        Ok(Arc::clone(&self.0))
    }
}

/// Sees a run's events and status changes as they happen.
pub trait RunListener: Send + Sync {
    fn event(&self, run_id: Uuid, event: &SequencedEvent);
    fn status(&self, run_id: Uuid, status: RunStatus);
}

/// Why a resume was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("run {0} not found")]
    NotFound(Uuid),
    /// The run is not waiting: someone decided first, or it ended.
    #[error("{}", already_decided_text(.0))]
    NotWaiting(Box<RunRecord>),
    /// The decision was made on a page that showed another pending turn.
    #[error("this decision was made on an outdated page: the run's pending calls have changed; reload and decide again")]
    Stale,
    /// The target of these calls changed after the operator saw its preview; nothing ran.
    #[error("what {} would change has changed since you looked, so nothing was run: check the new preview and decide again", .0.join(", "))]
    TargetChanged(Vec<String>),
    #[error(transparent)]
    InvalidDecision(#[from] DecisionError),
    /// The stored state could not be read; the run is now failed and the state kept for inspection.
    #[error("the run's saved state cannot be read; the run was marked failed")]
    StateCorrupted,
    /// The run's configuration cannot be driven now (for example its provider has no API key).
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A waiting run claimed by one caller, ready to continue.
pub struct ClaimedRun {
    pub id: Uuid,
    version: i64,
    last_sequence: i64,
    state: SuspendedState,
    configuration: RunConfiguration,
    tool_loop: Arc<dyn ToolLoopService>,
    decision: Decision,
    decided_by: String,
    verdict: Verdict,
    /// Each approved call's preview basis, by call id, as taken at the claim.
    approved_bases: BTreeMap<String, String>,
}

/// A waiting run's pending turn with its previews and digest ([`RunService::pending`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PendingTurn {
    pub state: SuspendedState,
    pub previews: Vec<CallPreview>,
    pub digest: String,
}

/// "already decided (approved) at <time>" or why else the run is not waiting.
pub fn already_decided_text(run: &RunRecord) -> String {
    match (&run.decision, run.decided_at_ms) {
        (Some(decision), Some(at)) => format!(
            "already decided ({decision}) at {}{}",
            format_utc(at),
            run.decided_by
                .as_deref()
                .map(|who| format!(" by {who}"))
                .unwrap_or_default()
        ),
        _ => format!("the run is {}, not waiting for approval", run.status),
    }
}

/// Failure to start or drive a run.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    Configuration(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The verdict a decision amounts to.
pub fn verdict_of(decision: &Decision) -> Verdict {
    match decision {
        Decision::ApproveAll => Verdict::Approved,
        Decision::DenyAll { .. } => Verdict::Denied,
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

/// Numbers a segment's events and keeps them until the segment's transition commits.
struct SegmentSink {
    run_id: Uuid,
    inner: Mutex<(i64, Vec<SequencedEvent>)>,
    listener: Option<Arc<dyn RunListener>>,
    clock: Arc<dyn Clock>,
}

impl SegmentSink {
    fn new(service: &RunService, run_id: Uuid, last_sequence: i64) -> SegmentSink {
        SegmentSink {
            run_id,
            inner: Mutex::new((last_sequence, Vec::new())),
            listener: service.listener.clone(),
            clock: Arc::clone(&service.clock),
        }
    }

    fn take(&self) -> Vec<SequencedEvent> {
        self.inner
            .lock()
            .map(|mut inner| std::mem::take(&mut inner.1))
            .unwrap_or_default()
    }
}

impl EventSink for SegmentSink {
    fn emit(&self, event: Event) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        inner.0 += 1;
        let sequenced = SequencedEvent {
            sequence: inner.0,
            event,
            created_at_ms: self.clock.now_ms(),
        };
        if let Some(listener) = &self.listener {
            listener.event(self.run_id, &sequenced);
        }
        inner.1.push(sequenced);
    }
}

/// Starts, drives and resumes persisted runs.
pub struct RunService {
    store: Arc<dyn RunStore>,
    loops: Arc<dyn LoopFactory>,
    listener: Option<Arc<dyn RunListener>>,
    clock: Arc<dyn Clock>,
}

impl RunService {
    /// A service over `store`, building loops with `loops`.
    pub fn new(store: Arc<dyn RunStore>, loops: Arc<dyn LoopFactory>) -> RunService {
        RunService {
            store,
            loops,
            listener: None,
            clock: Arc::new(SystemClock),
        }
    }

    /// Reads the time from `clock` (the system clock unless a test says otherwise).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> RunService {
        self.clock = clock;
        self
    }

    /// Also tells `listener` about every event and status change.
    pub fn with_listener(mut self, listener: Arc<dyn RunListener>) -> RunService {
        self.listener = Some(listener);
        self
    }

    /// The store behind the service.
    pub fn store(&self) -> &Arc<dyn RunStore> {
        &self.store
    }

    /// Records a new run (status `running`) without driving it yet.
    pub async fn create(
        &self,
        configuration: RunConfiguration,
        requested_by: &str,
    ) -> Result<RunRecord, ServiceError> {
        // Refuse a configuration that cannot be driven before anything is stored.
        self.loops
            .tool_loop(&configuration)
            .map_err(ServiceError::Configuration)?;
        let run = NewRun {
            id: Uuid::now_v7(),
            configuration,
            requested_by: requested_by.to_owned(),
        };
        Ok(self.store.create(&run, self.clock.now_ms()).await?)
    }

    /// Creates a run and drives it until it completes or suspends.
    pub async fn start(
        &self,
        configuration: RunConfiguration,
        requested_by: &str,
    ) -> Result<RunRecord, ServiceError> {
        let run = self.create(configuration, requested_by).await?;
        self.drive(run).await
    }

    /// Drives a freshly created run from its first round until it completes or suspends.
    pub async fn drive(&self, run: RunRecord) -> Result<RunRecord, ServiceError> {
        let Some(configuration) = run.configuration.clone() else {
            // Nothing can drive it: end it with a reason instead of leaving it `running`.
            tracing::error!(run_id = %run.id, "a new run's stored configuration cannot be read");
            self.store
                .fail_corrupted(
                    run.id,
                    run.version,
                    "The run's saved configuration could not be read; it is kept for inspection.",
                    self.clock.now_ms(),
                )
                .await?;
            self.notify_status(run.id, RunStatus::Failed);
            return Err(ServiceError::Configuration(
                "the run's configuration cannot be read".into(),
            ));
        };
        let sink = SegmentSink::new(self, run.id, run.last_sequence);
        let ctx = RunContext {
            run_id: run.id.to_string(),
            actor: run.requested_by.clone(),
            ..RunContext::default()
        };
        let outcome = match self.loops.tool_loop(&configuration) {
            Ok(tool_loop) => {
                let input = RunInput {
                    system_prompt: configuration.system_prompt.clone(),
                    skills: configuration.skills.clone(),
                    messages: vec![Message::user(configuration.prompt.clone())],
                    settings: configuration.settings.clone(),
                };
                tool_loop.run(input, &ctx, &sink).await
            }
            Err(message) => Err(LoopError::Provider {
                error: crate::provider::ProviderError::permanent(message),
                counters: Counters::default(),
            }),
        };
        self.persist(run.id, run.version, &configuration, outcome, &sink, None)
            .await?;
        Ok(self
            .store
            .get(run.id)
            .await?
            .ok_or(StoreError::NotFound(run.id))?)
    }

    /// Resumes a waiting run with an operator's decision: [`RunService::claim`] then
    /// [`RunService::continue_claimed`].
    pub async fn resume(
        &self,
        id: Uuid,
        decision: &Decision,
        decided_by: &str,
        digest: Option<&str>,
    ) -> Result<RunRecord, ResumeError> {
        let claimed = self.claim(id, decision, decided_by, digest).await?;
        Ok(self.continue_claimed(claimed).await?)
    }

    /// A waiting run's pending turn as an operator sees it: the state, each call's preview and
    /// the digest a decision on this view must carry. `None` for a run that is not waiting, or
    /// whose state or configuration cannot be read (the claim explains those).
    pub async fn pending(&self, run: &RunRecord) -> Option<PendingTurn> {
        if run.status != RunStatus::WaitingForApproval {
            return None;
        }
        let state = SuspendedState::from_json(run.suspended_state.as_deref()?).ok()?;
        let tool_loop = self.loops.tool_loop(run.configuration.as_ref()?).ok()?;
        let previews = tool_loop.preview(&state, &run.id.to_string()).await;
        let digest = pending_digest(run.id, run.version, &state, &previews);
        Some(PendingTurn {
            state,
            previews,
            digest,
        })
    }

    /// Checks a decision against a waiting run and claims the run for it. `digest`, when given,
    /// must match the turn and previews the operator saw ([`PendingTurn::digest`]). Every refusal
    /// leaves the run as it was (except a corrupted state, which fails the run). After `Ok`, this
    /// caller alone continues the run.
    pub async fn claim(
        &self,
        id: Uuid,
        decision: &Decision,
        decided_by: &str,
        digest: Option<&str>,
    ) -> Result<ClaimedRun, ResumeError> {
        self.claim_with(id, |_| Ok(decision.clone()), decided_by, digest)
            .await
    }

    /// [`RunService::claim`] for a submitted approval form: the decision is what the form showed
    /// for the pending turn ([`Submission::resolve`]).
    pub async fn claim_submission(
        &self,
        id: Uuid,
        submission: &Submission,
        decided_by: &str,
        digest: Option<&str>,
    ) -> Result<ClaimedRun, ResumeError> {
        self.claim_with(
            id,
            |state| submission.resolve(&state.pending),
            decided_by,
            digest,
        )
        .await
    }

    async fn claim_with(
        &self,
        id: Uuid,
        decide: impl FnOnce(&SuspendedState) -> Result<Decision, DecisionError>,
        decided_by: &str,
        digest: Option<&str>,
    ) -> Result<ClaimedRun, ResumeError> {
        let run = self.store.get(id).await?.ok_or(ResumeError::NotFound(id))?;
        if run.status != RunStatus::WaitingForApproval {
            return Err(ResumeError::NotWaiting(Box::new(run)));
        }
        let raw_state = run.suspended_state.clone().unwrap_or_default();
        let (state, configuration) = match (
            SuspendedState::from_json(&raw_state),
            run.configuration.clone(),
        ) {
            (Ok(state), Some(configuration)) => (state, configuration),
            (state, _) => {
                let detail = state
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "configuration unreadable".into());
                tracing::error!(run_id = %id, %detail, "suspended state cannot be resumed");
                return match self
                    .store
                    .fail_corrupted(
                        id,
                        run.version,
                        "The run's saved state could not be read; it is kept for inspection.",
                        self.clock.now_ms(),
                    )
                    .await
                {
                    Ok(()) => {
                        self.notify_status(id, RunStatus::Failed);
                        Err(ResumeError::StateCorrupted)
                    }
                    Err(StoreError::Conflict { .. }) | Err(StoreError::AlreadySettled { .. }) => {
                        Err(self.lost(id).await)
                    }
                    Err(err) => Err(err.into()),
                };
            }
        };
        let tool_loop = self
            .loops
            .tool_loop(&configuration)
            .map_err(ResumeError::Unavailable)?;
        // The previews are taken again now: their bases say whether the targets still are what
        // the operator saw, and each approved call's tool checks its basis again before it writes.
        let previews = tool_loop.preview(&state, &id.to_string()).await;
        if let Some(digest) = digest {
            match check_digest(
                digest,
                &pending_digest(id, run.version, &state, &previews),
                &previews,
            ) {
                DigestCheck::Same => {}
                DigestCheck::TurnChanged => return Err(ResumeError::Stale),
                DigestCheck::TargetChanged(tools) => return Err(ResumeError::TargetChanged(tools)),
            }
        }
        let decision = decide(&state)?;
        // A bad decision is refused before the claim: the run stays waiting.
        match tool_loop.check_decision(&state, &decision) {
            Err(LoopError::Decision(err)) => return Err(err.into()),
            Err(_) => return Err(ResumeError::StateCorrupted),
            Ok(()) => {}
        }
        let verdict = verdict_of(&decision);
        let version = match self
            .store
            .claim_for_resume(id, run.version, decided_by, verdict, self.clock.now_ms())
            .await?
        {
            Claim::Won { version } => version,
            Claim::Lost(winner) => return Err(ResumeError::NotWaiting(winner)),
        };
        self.notify_status(id, RunStatus::Running);
        let approved_bases = previews
            .iter()
            .filter_map(|p| Some((p.call_id.clone(), p.basis()?.to_owned())))
            .collect();
        Ok(ClaimedRun {
            id,
            version,
            last_sequence: run.last_sequence,
            state,
            configuration,
            tool_loop,
            decision,
            decided_by: decided_by.to_owned(),
            verdict,
            approved_bases,
        })
    }

    /// Runs a claimed run on from its decision until it completes, fails or suspends again.
    pub async fn continue_claimed(&self, claimed: ClaimedRun) -> Result<RunRecord, StoreError> {
        let id = claimed.id;
        let sink = SegmentSink::new(self, id, claimed.last_sequence);
        let ctx = RunContext {
            run_id: id.to_string(),
            actor: claimed.decided_by.clone(),
            approved_bases: claimed.approved_bases.clone(),
        };
        let outcome = claimed
            .tool_loop
            .resume(&claimed.state, &claimed.decision, &ctx, &sink)
            .await;
        self.persist(
            id,
            claimed.version,
            &claimed.configuration,
            outcome,
            &sink,
            Some(claimed.verdict),
        )
        .await?;
        self.store.get(id).await?.ok_or(StoreError::NotFound(id))
    }

    /// Cancels a queued or waiting run.
    pub async fn cancel(&self, id: Uuid, by: &str) -> Result<RunRecord, StoreError> {
        let run = self.store.cancel(id, by, self.clock.now_ms()).await?;
        self.notify_status(id, RunStatus::Cancelled);
        Ok(run)
    }

    async fn lost(&self, id: Uuid) -> ResumeError {
        match self.store.get(id).await {
            Ok(Some(run)) => ResumeError::NotWaiting(Box::new(run)),
            Ok(None) => ResumeError::NotFound(id),
            Err(err) => err.into(),
        }
    }

    /// Writes the end of a segment: suspended again, completed, or failed — with its events.
    async fn persist(
        &self,
        id: Uuid,
        version: i64,
        configuration: &RunConfiguration,
        outcome: Result<LoopOutcome, LoopError>,
        sink: &SegmentSink,
        verdict: Option<Verdict>,
    ) -> Result<(), StoreError> {
        let events = sink.take();
        let now = self.clock.now_ms();
        match outcome {
            Ok(LoopOutcome::Suspended(state)) => {
                self.store
                    .suspend(id, version, &state, &events, now)
                    .await?;
                self.notify_status(id, RunStatus::WaitingForApproval);
            }
            Ok(LoopOutcome::Completed(done)) => {
                let reason = if done.truncated {
                    TerminationReason::MaxIterations
                } else if verdict == Some(Verdict::Denied) {
                    TerminationReason::ApprovalDenied
                } else {
                    TerminationReason::Completed
                };
                let finish = Finish {
                    status: RunStatus::Completed,
                    reason,
                    counters: done.counters,
                    truncated: done.truncated,
                    final_answer: Some(done.content),
                    error_summary: None,
                    estimated_cost_micros: self
                        .loops
                        .estimate_cost_micros(configuration, done.counters.usage),
                };
                self.store
                    .finish(id, version, &finish, &events, now)
                    .await?;
                self.notify_status(id, RunStatus::Completed);
            }
            Err(err) => {
                let (counters, summary) = match &err {
                    LoopError::Provider { error, counters } => (*counters, error.message.clone()),
                    // Decision and state errors are refused before a claim; should one reach
                    // here, its detail stays in the log (below), not in the operator's summary.
                    _ => (
                        Counters::default(),
                        "The run could not continue; the details are in the server log.".to_owned(),
                    ),
                };
                tracing::warn!(run_id = %id, error = %err, "run failed");
                let finish = Finish {
                    status: RunStatus::Failed,
                    reason: TerminationReason::ProviderFailed,
                    counters,
                    truncated: false,
                    final_answer: None,
                    error_summary: Some(summary),
                    estimated_cost_micros: self
                        .loops
                        .estimate_cost_micros(configuration, counters.usage),
                };
                self.store
                    .finish(id, version, &finish, &events, now)
                    .await?;
                self.notify_status(id, RunStatus::Failed);
            }
        }
        Ok(())
    }

    fn notify_status(&self, id: Uuid, status: RunStatus) {
        if let Some(listener) = &self.listener {
            listener.status(id, status);
        }
    }
}
