//! The run service: ties the loop to the store. It starts runs, drives them until they complete or
//! suspend, and resumes a waiting run with a decision — check the decision, claim the run (exactly
//! one claimer wins), resume the loop, persist. The web app and headless programs both use it.
//!
//! What is durable when (the journal):
//! - the claim commits the whole decision — its step, the choices on the run, and a `dispatched`
//!   record (with its effect key) for every approved call — before any call runs, and queues the
//!   run: a worker of any instance takes it ([`RunService::take_next`]) and carries it out;
//! - the rest of a segment's steps, and the results of its calls, commit with the segment's
//!   closing transition (suspend or finish), so a run's rows and its events never disagree;
//! - a run cut off anywhere is recovered from its last durable step ([`RunService::recover`]): a
//!   run that never suspended asks the model again (nothing happened that matters); one cut off
//!   after a claim answers its turn again — a call with a journaled result is not run, a call of a
//!   tool that is idempotent by key runs again with the same key, and any other dispatched call
//!   has an unknown outcome and waits for an operator.
//!
//! A [`RunListener`] sees each event at once, for live views.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use crate::agent::{
    automatic_decision, call_effect_key, decision_event, LoopError, LoopOutcome, RunContext,
    RunInput, ToolLoopService, AUTOMATIC,
};
use crate::authority::{authorize, Act, Actor, Lineage, Refusal, RunFacts, StateRefusal};
use crate::clock::{format_utc, Clock, SystemClock};
use crate::decision::{Choice, Decision, DecisionError, Submission};
use crate::events::{Event, EventSink, UnknownStep};
use crate::failpoint;
use crate::interrupt::{Interrupts, Stop};
use crate::lease::{LeaseGuard, LeaseWatch};
use crate::machine::Answer;
use crate::moves::TurnMove;
use crate::preview::{check_digest, pending_digest, CallPreview, DigestCheck};
use crate::provider::Usage;
use crate::question::FormAnswer;
use crate::rules::{ApprovalRule, RuleDraft, RuleError, RuleScope};
use crate::state::{Counters, Kept, StateError, SuspendedState, UnknownCall};
use crate::store::{
    CancelRequest, Claim, ClaimRecord, Continuation, Dispatch, Finish, NewRun, RunConfiguration,
    RunRecord, RunStatus, RunStore, SequencedEvent, StoreError, TerminationReason, Verdict,
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

/// Several listeners as one, told in turn.
pub struct Listeners(pub Vec<Arc<dyn RunListener>>);

impl RunListener for Listeners {
    fn event(&self, run_id: Uuid, event: &SequencedEvent) {
        for listener in &self.0 {
            listener.event(run_id, event);
        }
    }

    fn status(&self, run_id: Uuid, status: RunStatus) {
        for listener in &self.0 {
            listener.status(run_id, status);
        }
    }
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
    /// The approval deadline passed before this decision came: the turn expires (it is ended
    /// as expired, and the model reads that nobody decided).
    #[error("expired at {0}: nobody decided in time, and no call of the turn runs")]
    Expired(String),
    /// The target of these calls changed after the operator saw its preview; nothing ran.
    #[error("what {} would change has changed since you looked, so nothing was run: check the new preview and decide again", .0.join(", "))]
    TargetChanged(Vec<String>),
    #[error(transparent)]
    InvalidDecision(#[from] DecisionError),
    /// The stored state could not be read; the run is now failed and the state kept for inspection.
    #[error("the run's saved state cannot be read; the run was marked failed")]
    StateCorrupted,
    /// The run was saved by a newer version of the server; this one leaves it waiting.
    #[error("this run was saved by a newer version of the server (state version {0}); it is left waiting for that version")]
    NewerVersion(u64),
    /// The run's configuration cannot be driven now (for example its provider has no API key).
    #[error("{0}")]
    Unavailable(String),
    /// The authority refused the caller ([`crate::authority`]).
    #[error(transparent)]
    Refused(Refusal),
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
    /// The claim is a recovery after a restart (its calls say so when they run again).
    recovering: bool,
    /// Each approved call's preview basis, by call id, as taken at the claim.
    approved_bases: BTreeMap<String, String>,
    /// A cancel asked for before the decision was carried out.
    cancel: Option<CancelRequest>,
}

impl ClaimedRun {
    /// A claimed run rebuilt from its record and what was read from it (state, configuration,
    /// loop, decision): for a worker that took it from the queue, or a recovery (`recovering`).
    fn from_record(
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
            version: run.version,
            last_sequence: run.last_sequence,
            state,
            configuration,
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

/// The failure of a run whose configuration cannot be driven now (`message` says why).
fn unavailable(message: String, counters: Counters) -> LoopError {
    LoopError::Provider {
        error: crate::provider::ProviderError::permanent(message),
        counters,
        transcript: Vec::new(),
        approved_ran: Vec::new(),
    }
}

/// The decision a claimed run carries out, as recorded on it by the claim.
fn decision_on_record(run: &RunRecord) -> Option<Decision> {
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

/// "already decided (approved) at <time>" or why else the run is not waiting.
pub fn already_decided_text(run: &RunRecord) -> String {
    match (&run.decision, run.decided_at_ms) {
        (Some(decision), Some(at)) if decision == Verdict::Expired.as_str() => format!(
            "expired at {}: nobody decided in time, and no call of the turn ran",
            format_utc(at)
        ),
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

/// Failure to start, drive, cancel or add a rule for a run.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    Configuration(String),
    /// There is no such run (or rule).
    #[error("{0}")]
    NotFound(String),
    /// The rule does not hold together (a field is named).
    #[error(transparent)]
    InvalidRule(RuleError),
    /// The authority refused the caller ([`crate::authority`]).
    #[error(transparent)]
    Refused(Refusal),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The verdict a decision amounts to.
pub fn verdict_of(decision: &Decision) -> Verdict {
    match decision {
        Decision::ApproveAll => Verdict::Approved,
        Decision::DenyAll { .. } => Verdict::Denied,
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

/// The decision as a recorded list of choices, in call order.
fn recorded_decision(state: &SuspendedState, choices: &[Choice]) -> Decision {
    Decision::PerCall {
        calls: state
            .pending
            .iter()
            .zip(choices)
            .map(|(call, choice)| crate::decision::CallDecision {
                call_id: call.id.clone(),
                choice: choice.clone(),
            })
            .collect(),
    }
}

/// A dispatch record for each call of the turn that the decision runs and that has an effect
/// (and no journaled result yet), keyed so that it applies at most once.
fn dispatches(id: Uuid, state: &SuspendedState, choices: &[Choice]) -> Vec<Dispatch> {
    let round = state.counters.iterations;
    state
        .pending
        .iter()
        .zip(choices)
        .filter(|(call, choice)| {
            choice.runs()
                && state.gated.contains(&call.id)
                && !state.answered.iter().any(|a| a.call_id == call.id)
        })
        .map(|(call, choice)| Dispatch {
            round,
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: match choice {
                Choice::ApproveEdited { arguments } => arguments.to_string(),
                _ => call.arguments.clone(),
            },
            effect_key: call_effect_key(state, &id.to_string(), &call.id),
        })
        .collect()
}

/// The sequence of the last of `events` (0 for none).
fn last_sequence_of(events: &[SequencedEvent]) -> i64 {
    events.last().map_or(0, |e| e.sequence)
}

/// The largest state a waiting run keeps unless the service is told otherwise: 8 MB of JSON.
pub const DEFAULT_MAX_STATE_BYTES: usize = 8 * 1024 * 1024;

pub use crate::moves::EXPIRED_TEXT;

/// What an operator reads on a run that could not go on after a restart.
pub const INTERRUPTED_SUMMARY: &str = "The server stopped while this run was running, and it \
could not go on from its last journaled step; see the steps for where it stopped.";

/// A segment being driven: the run at the version this instance holds, and where its events go.
#[derive(Clone, Copy)]
struct Segment<'a> {
    id: Uuid,
    version: i64,
    configuration: &'a RunConfiguration,
    /// The run's counters as the segment began (what a cancelled segment keeps).
    counters: Counters,
    sink: &'a SegmentSink,
    verdict: Option<Verdict>,
    /// The loop driving it (none when the configuration cannot be driven).
    tool_loop: Option<&'a Arc<dyn ToolLoopService>>,
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
    /// Cancels for the segments this service drives now.
    interrupts: Interrupts,
    /// The largest state a run may keep while it waits, in bytes of its JSON.
    max_state_bytes: usize,
    /// Whether four-eyes holds for runs of a configuration (by name; `None`: unreadable).
    four_eyes: Arc<FourEyes>,
    /// The leases this instance holds, by its own clock (none: nobody else takes runs over).
    leases: Option<Arc<dyn LeaseWatch>>,
}

/// Whether four-eyes holds for the runs of a configuration (by its name; `None` when the run's
/// configuration cannot be read).
pub type FourEyes = dyn Fn(Option<&str>) -> bool + Send + Sync;

/// What the authority weighs about a run besides its record ([`RunService::weigh`]).
struct Weighed {
    lineage: Lineage,
    four_eyes: bool,
}

impl Weighed {
    /// The facts the authority is given about `run`.
    fn facts<'a>(&'a self, run: &'a RunRecord) -> RunFacts<'a> {
        RunFacts {
            status: run.status,
            termination_reason: run.termination_reason.as_deref(),
            lineage: &self.lineage,
            four_eyes: self.four_eyes,
        }
    }
}

/// How far up a run's lineage four-eyes looks (forks of forks of …).
const MAX_LINEAGE: usize = 64;

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

impl RunService {
    /// A service over `store`, building loops with `loops`.
    pub fn new(store: Arc<dyn RunStore>, loops: Arc<dyn LoopFactory>) -> RunService {
        RunService {
            store,
            loops,
            listener: None,
            clock: Arc::new(SystemClock),
            interrupts: Interrupts::default(),
            max_state_bytes: DEFAULT_MAX_STATE_BYTES,
            four_eyes: Arc::new(|_| false),
            leases: None,
        }
    }

    /// Asks `leases` before each model request and tool call of a run driven here whether this
    /// instance still holds the run's lease; once it does not, the segment stops and writes
    /// nothing ([`crate::lease`]).
    pub fn with_lease_watch(mut self, leases: Arc<dyn LeaseWatch>) -> RunService {
        self.leases = Some(leases);
        self
    }

    fn lease_guard(&self, run: Uuid) -> Option<LeaseGuard> {
        self.leases.as_ref().map(|watch| LeaseGuard {
            run,
            watch: Arc::clone(watch),
        })
    }

    /// Four-eyes as the deployment sets it: `holds` says, for a configuration's name, whether
    /// nobody in a run's lineage may decide it (off for every run unless said).
    pub fn with_four_eyes(
        mut self,
        holds: impl Fn(Option<&str>) -> bool + Send + Sync + 'static,
    ) -> RunService {
        self.four_eyes = Arc::new(holds);
        self
    }

    /// Who started `run` and every run it goes on from (forks and retries, up to
    /// [`MAX_LINEAGE`] runs up; a purged ancestor ends the walk).
    pub async fn lineage(&self, run: &RunRecord) -> Result<Lineage, StoreError> {
        let parent_of = |run: &RunRecord| {
            run.configuration
                .as_ref()
                .and_then(|c| c.continues.as_ref())
                .map(|c| c.parent)
        };
        let mut lineage = Lineage {
            requesters: vec![run.requested_by.clone()],
        };
        let mut parent = parent_of(run);
        for _ in 0..MAX_LINEAGE {
            let Some(id) = parent else { break };
            let Some(up) = self.store.get(id).await? else {
                break;
            };
            if !lineage.includes(&up.requested_by) {
                lineage.requesters.push(up.requested_by.clone());
            }
            parent = parent_of(&up);
        }
        Ok(lineage)
    }

    /// The authority's answer ([`crate::authority::authorize`]) for `actor` doing `act` to
    /// `run` as the caller read it, with the run's lineage and four-eyes filled in. Pages ask
    /// it to say why someone cannot decide; every move of a run below asks it before it acts.
    pub async fn may(
        &self,
        actor: &Actor,
        act: Act<'_>,
        run: &RunRecord,
    ) -> Result<Result<(), Refusal>, StoreError> {
        let weighed = self.weigh(run, act).await?;
        Ok(authorize(actor, act, Some(&weighed.facts(run))))
    }

    /// What the authority weighs about `run` for `act`, read once: four-eyes for its
    /// configuration, and its lineage where four-eyes bears on the act (most runs have no
    /// parent anyway, and the approve cycle reads nothing more).
    async fn weigh(&self, run: &RunRecord, act: Act<'_>) -> Result<Weighed, StoreError> {
        let four_eyes = (self.four_eyes)(run.configuration.as_ref().map(|c| c.provider.as_str()));
        let lineage = match four_eyes && act.under_four_eyes() {
            true => self.lineage(run).await?,
            false => Lineage {
                requesters: vec![run.requested_by.clone()],
            },
        };
        Ok(Weighed { lineage, four_eyes })
    }

    /// Adds an approval rule for `actor`: a run's rule if they may decide that run (its lineage
    /// may not, under four-eyes), a configuration's if they are an administrator.
    pub async fn add_rule(
        &self,
        actor: &Actor,
        draft: &RuleDraft,
    ) -> Result<ApprovalRule, ServiceError> {
        self.may_rule(actor, &draft.scope).await?;
        draft.check().map_err(ServiceError::InvalidRule)?;
        let rule = self
            .store
            .add_rule(draft, &actor.name, self.clock.now_ms())
            .await?;
        tracing::info!(by = %actor.label(), rule = rule.id, what = %rule.describe(), "approval rule added");
        Ok(rule)
    }

    /// Removes approval rule `id` for `actor`, who must be allowed to add it; the rule as it was.
    pub async fn remove_rule(&self, actor: &Actor, id: i64) -> Result<ApprovalRule, ServiceError> {
        let missing = || ServiceError::NotFound(format!("There is no rule {id}."));
        let rule = self.store.rule(id).await?.ok_or_else(missing)?;
        self.may_rule(actor, &rule.scope).await?;
        let removed = self.store.remove_rule(id).await?.ok_or_else(missing)?;
        tracing::info!(by = %actor.label(), rule = id, what = %removed.describe(), "approval rule removed");
        Ok(removed)
    }

    async fn may_rule(&self, actor: &Actor, scope: &RuleScope) -> Result<(), ServiceError> {
        let refused = match scope {
            RuleScope::Run(run) => {
                let run = self
                    .store
                    .get(*run)
                    .await?
                    .ok_or_else(|| ServiceError::NotFound(format!("There is no run {run}.")))?;
                self.may(actor, Act::Rule(scope), &run).await?.err()
            }
            // A configuration's rule is about no run.
            RuleScope::Configuration(_) => authorize(actor, Act::Rule(scope), None).err(),
        };
        match refused {
            Some(refusal) => {
                tracing::warn!(who = %actor.label(), %refusal, "refused: an approval rule");
                Err(ServiceError::Refused(refusal))
            }
            None => Ok(()),
        }
    }

    /// Refuses to keep a waiting run's state above `bytes` (of its JSON): the run fails with
    /// `state_too_large` instead of suspending ([`DEFAULT_MAX_STATE_BYTES`] unless said).
    pub fn with_state_limit(mut self, bytes: usize) -> RunService {
        self.max_state_bytes = bytes;
        self
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

    /// Records a new run, `queued` for a worker of any instance ([`RunService::take_next`]).
    pub async fn create(
        &self,
        configuration: RunConfiguration,
        requested_by: &str,
    ) -> Result<RunRecord, ServiceError> {
        self.insert(configuration, requested_by, false).await
    }

    async fn insert(
        &self,
        configuration: RunConfiguration,
        requested_by: &str,
        drive_here: bool,
    ) -> Result<RunRecord, ServiceError> {
        self.insert_copying(configuration, requested_by, drive_here, Vec::new())
            .await
    }

    async fn insert_copying(
        &self,
        configuration: RunConfiguration,
        requested_by: &str,
        drive_here: bool,
        copied: Vec<SequencedEvent>,
    ) -> Result<RunRecord, ServiceError> {
        // Refuse a configuration that cannot be driven before anything is stored.
        self.loops
            .tool_loop(&configuration)
            .map_err(ServiceError::Configuration)?;
        let run = NewRun {
            id: Uuid::now_v7(),
            configuration,
            requested_by: requested_by.to_owned(),
            copied,
        };
        Ok(self
            .store
            .create(&run, self.clock.now_ms(), drive_here)
            .await?)
    }

    /// Creates a run and drives it here, at once, until it completes or suspends (headless
    /// programs and tests; the app queues its runs).
    pub async fn start(
        &self,
        configuration: RunConfiguration,
        requested_by: &str,
    ) -> Result<RunRecord, ServiceError> {
        let run = self.insert(configuration, requested_by, true).await?;
        self.drive(run).await
    }

    /// Takes up to `limit` queued runs for this instance, oldest first: new runs to drive and
    /// claimed decisions to carry out ([`RunService::work`]).
    pub async fn take_next(&self, limit: u32) -> Result<Vec<Work>, StoreError> {
        let taken = self.store.take_queued(self.clock.now_ms(), limit).await?;
        let mut work = Vec::with_capacity(taken.len());
        for run in taken {
            self.notify_status(run.id, RunStatus::Running);
            if let Some(item) = self.work_of(run).await? {
                work.push(item);
            }
        }
        Ok(work)
    }

    /// What a run just taken from the queue asks for; `None` if it could not be read (it was
    /// failed, kept for inspection).
    async fn work_of(&self, run: RunRecord) -> Result<Option<Work>, StoreError> {
        let Some(decision) = decision_on_record(&run) else {
            return Ok(Some(Work::Start(Box::new(run))));
        };
        let state = SuspendedState::from_json(run.suspended_state.as_deref().unwrap_or_default());
        let (Some(configuration), Ok(state)) = (run.configuration.clone(), state) else {
            tracing::error!(run_id = %run.id, "a claimed run's state or configuration cannot be read");
            self.fail_corrupted(
                &run,
                "The run's saved state could not be read; it is kept for inspection.",
            )
            .await?;
            return Ok(None);
        };
        let tool_loop = match self.loops.tool_loop(&configuration) {
            Ok(tool_loop) => tool_loop,
            // Its model cannot be reached now (say, its key was removed): it fails with the
            // reason, as a new run would.
            Err(message) => {
                let sink = SegmentSink::new(self, run.id, run.last_sequence);
                let segment = Segment {
                    id: run.id,
                    version: run.version,
                    configuration: &configuration,
                    counters: state.counters,
                    sink: &sink,
                    verdict: None,
                    tool_loop: None,
                };
                self.persist(&segment, Err(unavailable(message, state.counters)), None)
                    .await?;
                return Ok(None);
            }
        };
        Ok(Some(Work::Decided(Box::new(ClaimedRun::from_record(
            &run,
            (state, configuration, tool_loop, decision),
            false,
        )))))
    }

    /// Does work taken from the queue, until the run completes, fails or suspends.
    pub async fn work(&self, work: Work) -> Result<RunRecord, ServiceError> {
        match work {
            Work::Start(run) => self.drive(*run).await,
            Work::Decided(claimed) => Ok(self.carry_out_here(*claimed).await?),
        }
    }

    /// Drives a run from its first round (or, for a continuation, from the transcript it
    /// continues) until it completes or suspends.
    pub async fn drive(&self, run: RunRecord) -> Result<RunRecord, ServiceError> {
        self.drive_from_start(run, None).await
    }

    async fn drive_from_start(
        &self,
        run: RunRecord,
        recovered: Option<Event>,
    ) -> Result<RunRecord, ServiceError> {
        let Some(configuration) = run.configuration.clone() else {
            // Nothing can drive it: end it with a reason instead of leaving it `running`.
            tracing::error!(run_id = %run.id, "a run's stored configuration cannot be read");
            self.fail_corrupted(
                &run,
                "The run's saved configuration could not be read; it is kept for inspection.",
            )
            .await?;
            return Err(ServiceError::Configuration(
                "the run's configuration cannot be read".into(),
            ));
        };
        let sink = SegmentSink::new(self, run.id, run.last_sequence);
        if let Some(event) = recovered {
            sink.emit(event);
        }
        let ctx = RunContext {
            run_id: run.id.to_string(),
            actor: run.requested_by.clone(),
            rules: self
                .store
                .rules_for(run.id, &configuration.provider)
                .await?,
            inherited: configuration
                .continues
                .as_ref()
                .map(|c| c.inherited.clone())
                .unwrap_or_default(),
            lease: self.lease_guard(run.id),
            lease_epoch: Some(run.version),
            ..RunContext::default()
        };
        let tool_loop = self.loops.tool_loop(&configuration);
        let work = async {
            match &tool_loop {
                Ok(tool_loop) => {
                    let input = match &configuration.continues {
                        Some(continuation) => {
                            sink.emit(Event::Recovered {
                                resumes_at: format!(
                                    "continues run {} from its journal: {}",
                                    continuation.parent, continuation.note
                                ),
                            });
                            RunInput {
                                transcript: Some(continuation.transcript.clone()),
                                settings: configuration.settings.clone(),
                                ..RunInput::default()
                            }
                        }
                        None => RunInput {
                            system_prompt: configuration.system_prompt.clone(),
                            skills: configuration.skills.clone(),
                            messages: vec![Message::user(configuration.prompt.clone())],
                            settings: configuration.settings.clone(),
                            transcript: None,
                        },
                    };
                    tool_loop.run(input, &ctx, &sink).await
                }
                Err(message) => Err(unavailable(message.clone(), Counters::default())),
            }
        };
        let segment = Segment {
            id: run.id,
            version: run.version,
            configuration: &configuration,
            counters: run.counters,
            sink: &sink,
            verdict: None,
            tool_loop: tool_loop.as_ref().ok(),
        };
        Ok(self
            .drive_segment(segment, run.cancel_requested.clone(), work)
            .await?)
    }

    /// Resumes a waiting run with an operator's decision and carries it out here, at once:
    /// [`RunService::claim`] and [`RunService::continue_claimed`] in one commit fewer (the claim
    /// takes the run for this instance instead of queueing it).
    pub async fn resume(
        &self,
        id: Uuid,
        decision: &Decision,
        actor: &Actor,
        digest: Option<&str>,
    ) -> Result<RunRecord, ResumeError> {
        let claimed = self
            .claim_with(
                id,
                TurnMove::Decision(decision),
                Some(actor),
                digest,
                Claiming::Here,
            )
            .await?;
        Ok(self.carry_out_here(claimed).await?)
    }

    /// A waiting run's pending turn as an operator sees it: the state, each call's preview and
    /// the digest a decision on this view must carry. `None` for a run that is not waiting, or
    /// whose state or configuration cannot be read (the claim explains those).
    pub async fn pending(&self, run: &RunRecord) -> Option<PendingTurn> {
        if !RunStatus::WAITING.contains(&run.status) {
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

    /// Claims a waiting run whose approval deadline passed, for the deadline: every pending call
    /// is answered as expired — not run; the model reads `text` — and the turn's step is
    /// `approval_expired`. Refused (`NotWaiting`) if the run is not waiting or not yet due.
    pub async fn claim_expired(&self, id: Uuid) -> Result<ClaimedRun, ResumeError> {
        self.claim_with(id, TurnMove::Expire, None, None, Claiming::Expired)
            .await
    }

    /// Checks a decision against a waiting run and claims the run for it. `digest`, when given,
    /// must match the turn and previews the operator saw ([`PendingTurn::digest`]). Every refusal
    /// leaves the run as it was (except a state that cannot be read at all, which fails the
    /// run). After `Ok`, this caller alone continues the run.
    pub async fn claim(
        &self,
        id: Uuid,
        decision: &Decision,
        actor: &Actor,
        digest: Option<&str>,
    ) -> Result<ClaimedRun, ResumeError> {
        self.claim_with(
            id,
            TurnMove::Decision(decision),
            Some(actor),
            digest,
            Claiming::Queue,
        )
        .await
    }

    /// [`RunService::claim`] for a submitted approval form: the decision is what the form showed
    /// for the pending turn ([`Submission::resolve`]), a question of the turn answered by its
    /// call's entry. The rules asked for with it must be the decider's to add.
    pub async fn claim_submission(
        &self,
        id: Uuid,
        submission: &Submission,
        actor: &Actor,
        digest: Option<&str>,
    ) -> Result<ClaimedRun, ResumeError> {
        self.claim_with(
            id,
            TurnMove::Submit(submission),
            Some(actor),
            digest,
            Claiming::Queue,
        )
        .await
    }

    /// [`RunService::claim`] for an operator's answer to a question of the pending turn
    /// (`call_id`, or the first question): the answer is checked against the question's choices
    /// or schema, and becomes the call's result. An answer decides only what it answers: a turn
    /// that also waits for a decision on another call ([`SuspendedState::undecided`]) is refused
    /// ([`DecisionError::UndecidedCalls`]), to be decided whole with
    /// [`RunService::claim_submission`]. Any other question of the turn is answered as left
    /// unanswered; calls the gate lets through (read-only, ruled) go ahead as they would have.
    pub async fn claim_answer(
        &self,
        id: Uuid,
        call_id: Option<&str>,
        answer: &FormAnswer,
        actor: &Actor,
        digest: Option<&str>,
    ) -> Result<ClaimedRun, ResumeError> {
        self.claim_with(
            id,
            TurnMove::Answer { call_id, answer },
            Some(actor),
            digest,
            Claiming::Queue,
        )
        .await
    }

    /// Claims waiting run `id` for `turn_move`, made by `actor` (none: the deadline's): the
    /// authority first, then the digest, then the decision checked against the turn, then the
    /// claim itself (exactly one claimer wins).
    async fn claim_with(
        &self,
        id: Uuid,
        turn_move: TurnMove<'_>,
        actor: Option<&Actor>,
        digest: Option<&str>,
        claiming: Claiming,
    ) -> Result<ClaimedRun, ResumeError> {
        let expiring = claiming == Claiming::Expired;
        let run = self.store.get(id).await?.ok_or(ResumeError::NotFound(id))?;
        if !RunStatus::WAITING.contains(&run.status) {
            return Err(ResumeError::NotWaiting(Box::new(run)));
        }
        // The one authority: who may decide this run (the deadline needs nobody's leave). What
        // it weighs is read once, for the decision and for the rules asked with it.
        let asking = match (actor, turn_move.act()) {
            (Some(actor), Some(act)) => {
                let weighed = self.weigh(&run, act).await?;
                if let Err(refusal) = authorize(actor, act, Some(&weighed.facts(&run))) {
                    tracing::warn!(who = %actor.label(), run_id = %id, %refusal, "refused: a decision");
                    return Err(match refusal {
                        Refusal::State(StateRefusal::NotWaiting(_)) => {
                            ResumeError::NotWaiting(Box::new(run))
                        }
                        refusal => ResumeError::Refused(refusal),
                    });
                }
                Some((actor, weighed))
            }
            _ => None,
        };
        let (decided_by, token) = match actor {
            Some(actor) => (actor.name.as_str(), actor.token.as_deref()),
            None => ("deadline", None),
        };
        match run.approval_deadline_ms {
            // Too late for an operator: the deadline decides (the sweeper, or this instance's
            // next pass).
            Some(deadline) if !expiring && deadline <= self.clock.now_ms() => {
                return Err(ResumeError::Expired(format_utc(deadline)));
            }
            // Not yet due: nothing to expire.
            Some(deadline) if expiring && deadline > self.clock.now_ms() => {
                return Err(ResumeError::NotWaiting(Box::new(run)));
            }
            None if expiring => return Err(ResumeError::NotWaiting(Box::new(run))),
            _ => {}
        }
        let (state, configuration) = self.readable(&run).await?;
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
        let (decision, rules) = turn_move.decide(&state, (id, &configuration.provider))?;
        // Rules asked for with the decision are the decider's to add (a configuration's is an
        // administrator's).
        if let Some((actor, weighed)) = &asking {
            let facts = weighed.facts(&run);
            for rule in &rules {
                authorize(actor, Act::Rule(&rule.scope), Some(&facts))
                    .map_err(ResumeError::Refused)?;
            }
        }
        // A bad decision is refused before the claim: the run stays waiting.
        let choices = match tool_loop.resolve_decision(&state, &decision) {
            Err(LoopError::Decision(err)) => return Err(err.into()),
            Err(_) => return Err(ResumeError::StateCorrupted),
            Ok(choices) => choices,
        };
        let decision = recorded_decision(&state, &choices);
        let verdict = verdict_of(&decision);
        let sequence = run.last_sequence + 1;
        let now = self.clock.now_ms();
        let approved_bases: BTreeMap<String, String> = previews
            .iter()
            .filter_map(|p| Some((p.call_id.clone(), p.basis()?.to_owned())))
            .collect();
        let claim = ClaimRecord {
            approved_bases: serde_json::to_string(&approved_bases).unwrap_or_default(),
            decided_by: decided_by.to_owned(),
            verdict,
            decision: serde_json::to_string(&decision).unwrap_or_default(),
            events: vec![SequencedEvent {
                sequence,
                event: decision_event(&state, &choices, decided_by, token),
                created_at_ms: now,
            }],
            dispatched: dispatches(id, &state, &choices),
            rules,
        };
        let version = match self
            .store
            .claim_for_resume(id, run.version, &claim, now, claiming == Claiming::Here)
            .await?
        {
            Claim::Won { version } => version,
            Claim::Lost(winner) => return Err(ResumeError::NotWaiting(winner)),
        };
        if let Some(listener) = &self.listener {
            listener.event(id, &claim.events[0]);
            listener.status(
                id,
                match claiming {
                    Claiming::Here => RunStatus::Running,
                    _ => RunStatus::Queued,
                },
            );
        }
        failpoint::reach("after_claim_commit");
        Ok(ClaimedRun {
            id,
            version,
            last_sequence: sequence,
            state,
            configuration,
            tool_loop,
            decision,
            decided_by: decided_by.to_owned(),
            verdict,
            recovering: false,
            approved_bases,
            cancel: None,
        })
    }

    /// The run's suspended state and configuration, or the refusal: a state saved by a newer
    /// version is left waiting; one that cannot be read fails the run (kept for inspection).
    async fn readable(
        &self,
        run: &RunRecord,
    ) -> Result<(SuspendedState, RunConfiguration), ResumeError> {
        let raw = run.suspended_state.as_deref().unwrap_or_default();
        match (SuspendedState::from_json(raw), run.configuration.clone()) {
            (Ok(state), Some(configuration)) => Ok((state, configuration)),
            (Err(StateError::UnsupportedVersion { found }), Some(_))
                if found > u64::from(crate::state::STATE_SCHEMA_VERSION) =>
            {
                Err(ResumeError::NewerVersion(found))
            }
            (state, _) => {
                let detail = state
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "configuration unreadable".into());
                tracing::error!(run_id = %run.id, %detail, "suspended state cannot be resumed");
                match self
                    .fail_corrupted(
                        run,
                        "The run's saved state could not be read; it is kept for inspection.",
                    )
                    .await
                {
                    Ok(()) => Err(ResumeError::StateCorrupted),
                    Err(StoreError::Conflict { .. }) | Err(StoreError::AlreadySettled { .. }) => {
                        Err(self.lost(run.id).await)
                    }
                    Err(err) => Err(err.into()),
                }
            }
        }
    }

    async fn fail_corrupted(&self, run: &RunRecord, summary: &str) -> Result<(), StoreError> {
        let event = Event::Ended {
            reason: TerminationReason::StateCorrupted.as_str().to_owned(),
            explanation: summary.to_owned(),
        };
        self.store
            .fail_corrupted(run.id, run.version, summary, &event, self.clock.now_ms())
            .await?;
        self.notify_status(run.id, RunStatus::Failed);
        Ok(())
    }

    /// Takes a claimed run from the queue here, at once, and runs it on from its decision until
    /// it completes, fails or suspends again (headless programs and tests; the app leaves the
    /// queue to its workers). If a worker took it first, the run as it is now.
    pub async fn continue_claimed(&self, claimed: ClaimedRun) -> Result<RunRecord, StoreError> {
        let id = claimed.id;
        let Some(taken) = self.store.take_run(id, self.clock.now_ms()).await? else {
            return self.store.get(id).await?.ok_or(StoreError::NotFound(id));
        };
        self.notify_status(id, RunStatus::Running);
        let claimed = ClaimedRun {
            version: taken.version,
            cancel: taken.cancel_requested,
            ..claimed
        };
        self.carry_out_here(claimed).await
    }

    /// Carries out a claimed decision that this instance holds.
    async fn carry_out_here(&self, claimed: ClaimedRun) -> Result<RunRecord, StoreError> {
        let sink = SegmentSink::new(self, claimed.id, claimed.last_sequence);
        self.carry_out(claimed, &sink).await
    }

    /// Carries out a claimed decision in `sink`'s segment, and persists how the segment ends.
    async fn carry_out(
        &self,
        claimed: ClaimedRun,
        sink: &SegmentSink,
    ) -> Result<RunRecord, StoreError> {
        let id = claimed.id;
        let ctx = RunContext {
            run_id: id.to_string(),
            actor: claimed.decided_by.clone(),
            approved_bases: claimed.approved_bases.clone(),
            decision_recorded: true,
            recovering: claimed.recovering,
            rules: self
                .store
                .rules_for(id, &claimed.configuration.provider)
                .await?,
            lease: self.lease_guard(id),
            lease_epoch: Some(claimed.version),
            ..RunContext::default()
        };
        let work = claimed
            .tool_loop
            .resume(&claimed.state, &claimed.decision, &ctx, sink);
        let segment = Segment {
            id,
            version: claimed.version,
            configuration: &claimed.configuration,
            counters: claimed.state.counters,
            sink,
            verdict: Some(claimed.verdict),
            tool_loop: Some(&claimed.tool_loop),
        };
        self.drive_segment(segment, claimed.cancel.clone(), work)
            .await
    }

    /// Recovers a run that a stop of the server cut off while it was running (status `running`,
    /// nothing driving it): it goes on from its last durable step, as the module says — or, if a
    /// dispatched call's outcome is unknown, it waits for an operator with that call marked.
    /// The run as it is afterwards.
    pub async fn recover(&self, id: Uuid) -> Result<RunRecord, ServiceError> {
        let run = self.store.get(id).await?.ok_or(StoreError::NotFound(id))?;
        if run.status != RunStatus::Running {
            return Ok(run);
        }
        let (Some(raw_state), Some(decision)) =
            (run.suspended_state.clone(), decision_on_record(&run))
        else {
            // It never got past its first model calls and read-only tools: ask again.
            let note = Event::Recovered {
                resumes_at: "the server stopped before the run's first suspension; it starts \
                             again from its prompt (only model calls and read-only tools had run)"
                    .to_owned(),
            };
            return self.drive_from_start(run, Some(note)).await;
        };
        let Some(configuration) = run.configuration.clone() else {
            self.fail_corrupted(
                &run,
                "The run's saved configuration could not be read; it is kept for inspection.",
            )
            .await?;
            return Ok(self.store.get(id).await?.ok_or(StoreError::NotFound(id))?);
        };
        let (mut state, tool_loop) = match (
            SuspendedState::from_json(&raw_state),
            self.loops.tool_loop(&configuration),
        ) {
            (Ok(state), Ok(tool_loop)) => (state, tool_loop),
            (Err(StateError::UnsupportedVersion { found }), _)
                if found > u64::from(crate::state::STATE_SCHEMA_VERSION) =>
            {
                tracing::warn!(run_id = %id, found, "a run saved by a newer version is left to it");
                return Ok(run);
            }
            (Err(_), _) => {
                self.fail_corrupted(
                    &run,
                    "The run's saved state could not be read; it is kept for inspection.",
                )
                .await?;
                return Ok(self.store.get(id).await?.ok_or(StoreError::NotFound(id))?);
            }
            (_, Err(reason)) => {
                return self.end_interrupted(&run, &configuration, &reason).await;
            }
        };
        // What the journal says about each approved call of the turn.
        let round = state.counters.iterations;
        let effects = self.store.effects(id).await?;
        let mut unknown = Vec::new();
        for effect in effects.iter().filter(|e| e.round == round) {
            match &effect.result {
                Some((result, outcome)) => {
                    if !state.answered.iter().any(|a| a.call_id == effect.call_id) {
                        state.answered.push(Answer {
                            call_id: effect.call_id.clone(),
                            result: result.clone(),
                            outcome: *outcome,
                        });
                    }
                }
                None if tool_loop.idempotent_by_key(&state, &effect.tool) => {}
                None => unknown.push(effect.clone()),
            }
        }
        let sink = SegmentSink::new(self, id, run.last_sequence);
        if unknown.is_empty() {
            sink.emit(Event::Recovered {
                resumes_at: format!(
                    "the server stopped after the decision on round {round}; the decision is \
                     carried out again: calls with a journaled result are not run again, calls \
                     of tools that are idempotent by key run again with the same effect key"
                ),
            });
            let claimed =
                ClaimedRun::from_record(&run, (state, configuration, tool_loop, decision), true);
            return Ok(self.carry_out(claimed, &sink).await?);
        }
        // Some call may or may not have taken effect: the operator decides, with the call marked.
        state.unknown = unknown
            .iter()
            .map(|effect| UnknownCall {
                call_id: effect.call_id.clone(),
                effect_key: effect.effect_key.clone(),
                dispatched_at_ms: effect.dispatched_at_ms,
            })
            .collect();
        sink.emit(Event::OutcomeUnknown {
            round,
            calls: unknown
                .iter()
                .map(|effect| UnknownStep {
                    call_id: effect.call_id.clone(),
                    tool: effect.tool.clone(),
                    effect_key: effect.effect_key.clone(),
                    dispatched_at_ms: effect.dispatched_at_ms,
                })
                .collect(),
        });
        let events = sink.take();
        let waiting = self
            .store
            .suspend(
                id,
                run.version,
                Kept::new(&state),
                &events,
                self.clock.now_ms(),
                approval_deadline(&configuration, self.clock.now_ms()),
            )
            .await?;
        self.notify_status(id, state.waiting_for());
        Ok(waiting)
    }

    /// Ends a run that cannot go on after a restart (its configuration cannot be driven now).
    async fn end_interrupted(
        &self,
        run: &RunRecord,
        configuration: &RunConfiguration,
        reason: &str,
    ) -> Result<RunRecord, ServiceError> {
        let sink = SegmentSink::new(self, run.id, run.last_sequence);
        sink.emit(Event::Ended {
            reason: TerminationReason::Interrupted.as_str().to_owned(),
            explanation: format!(
                "The server stopped while this run was running, and it cannot go on now: {reason}"
            ),
        });
        let finish = Finish {
            status: RunStatus::Failed,
            reason: TerminationReason::Interrupted,
            counters: run.counters,
            truncated: false,
            final_answer: None,
            error_summary: Some(INTERRUPTED_SUMMARY.to_owned()),
            estimated_cost_micros: self
                .loops
                .estimate_cost_micros(configuration, run.counters.usage),
        };
        let ended = self
            .store
            .finish(
                run.id,
                run.version,
                &finish,
                &sink.take(),
                self.clock.now_ms(),
            )
            .await?;
        self.notify_status(run.id, RunStatus::Failed);
        Ok(ended)
    }

    /// Starts a new run that goes on from a failed run's journal: the transcript its last model
    /// call sent, so the model is asked again and no tool of the failed run runs again.
    /// The new run is `actor`'s: four-eyes keeps them, and the failed run's lineage, from
    /// deciding it.
    pub async fn retry(&self, id: Uuid, actor: &Actor) -> Result<RunRecord, RetryError> {
        let run = self
            .store
            .get(id)
            .await
            .map_err(ServiceError::from)?
            .ok_or(RetryError::NotFound(id))?;
        match self
            .may(actor, Act::Retry, &run)
            .await
            .map_err(ServiceError::from)?
        {
            Ok(()) => {}
            Err(Refusal::State(_)) => return Err(RetryError::NotRetryable(run.status)),
            Err(refusal) => return Err(RetryError::Service(ServiceError::Refused(refusal))),
        }
        let requested_by = actor.name.as_str();
        let events = self.store.events(id, 0).await.map_err(ServiceError::from)?;
        let requests: Vec<Event> = events
            .iter()
            .filter(|e| e.kind == "request")
            .filter_map(|e| e.event())
            .collect();
        let transcript = crate::events::transcript_at(&requests);
        let Some(mut configuration) = run.configuration.clone().filter(|_| !transcript.is_empty())
        else {
            return Err(RetryError::NoJournal);
        };
        configuration.continues = Some(Continuation {
            parent: id,
            transcript,
            note: "the model call that failed is asked again".to_owned(),
            inherited: Vec::new(),
        });
        let retried = self.create(configuration, requested_by).await?;
        Ok(retried)
    }

    /// Forks run `id` at its step `at` (a sequence number): a new run, queued, whose steps
    /// 1..=`at` are copies of the parent's and whose transcript is the journal up to there. Its
    /// first own step says where it came from; then it goes on — a turn whose calls were not all
    /// answered by `at` is decided again (the gate and the rules apply as to any turn; calls
    /// answered before `at` keep their answers), else the model is asked, with `prompt` added as
    /// a new user message if given. Nothing the parent ran runs again: its steps are copied, not
    /// replayed. `drive_here`: the caller drives it at once (headless programs, tests). The new
    /// run is `actor`'s: four-eyes keeps them, and the parent's lineage, from deciding it.
    pub async fn fork(
        &self,
        id: Uuid,
        at: i64,
        prompt: Option<&str>,
        actor: &Actor,
        drive_here: bool,
    ) -> Result<RunRecord, ForkError> {
        let parent = self
            .store
            .get(id)
            .await
            .map_err(ServiceError::from)?
            .ok_or(ForkError::NotFound(id))?;
        if let Err(refusal) = self
            .may(actor, Act::Fork, &parent)
            .await
            .map_err(ServiceError::from)?
        {
            return Err(ForkError::Service(ServiceError::Refused(refusal)));
        }
        let requested_by = actor.name.as_str();
        let events = self.store.events(id, 0).await.map_err(ServiceError::from)?;
        if !events.iter().any(|e| e.sequence == at) {
            return Err(ForkError::NoStep(at));
        }
        let copied: Vec<SequencedEvent> = events
            .iter()
            .filter(|e| e.sequence <= at)
            .filter_map(|e| {
                Some(SequencedEvent {
                    sequence: e.sequence,
                    event: e.event()?,
                    created_at_ms: e.created_at_ms,
                })
            })
            .collect();
        let mut transcript = crate::events::journal_at(copied.iter().map(|e| &e.event));
        if transcript.is_empty() {
            return Err(ForkError::BeforeFirstRequest);
        }
        let mut turn = transcript.clone();
        let pending = crate::agent::split_pending_turn(&mut turn);
        let waiting = pending.is_some();
        // The parent's calls of that turn that it dispatched after step `at` (approved by an
        // operator, a rule or the tool's own check) may have taken effect: the fork never runs
        // them on its own.
        let inherited = match &pending {
            Some((calls, answered)) => {
                let round = copied
                    .iter()
                    .rev()
                    .find(|e| matches!(e.event, Event::Llm { .. }))
                    .and_then(|e| e.event.round());
                self.store
                    .effects(id)
                    .await
                    .map_err(ServiceError::from)?
                    .into_iter()
                    .filter(|e| Some(e.round) == round)
                    .filter(|e| calls.iter().any(|c| c.id == e.call_id))
                    .filter(|e| !answered.iter().any(|a| a.call_id == e.call_id))
                    .map(|e| UnknownCall {
                        call_id: e.call_id,
                        effect_key: e.effect_key,
                        dispatched_at_ms: e.dispatched_at_ms,
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        let note = match (prompt, waiting) {
            (Some(_), true) => return Err(ForkError::PromptOnPendingTurn),
            (Some(prompt), false) => {
                transcript.push(Message::user(prompt));
                format!("forked at step {at} with a new prompt; steps 1–{at} are copied from it")
            }
            (None, true) => format!(
                "forked at step {at}, whose turn is decided again; steps 1–{at} are copied from it"
            ),
            (None, false) => format!("forked at step {at}; steps 1–{at} are copied from it"),
        };
        let Some(mut configuration) = parent.configuration.clone() else {
            return Err(ForkError::Service(ServiceError::Configuration(
                "the run's configuration cannot be read".into(),
            )));
        };
        configuration.continues = Some(Continuation {
            parent: id,
            transcript,
            note,
            inherited,
        });
        Ok(self
            .insert_copying(configuration, requested_by, drive_here, copied)
            .await?)
    }

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
            _ => self.notify_status(id, RunStatus::Cancelled),
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

    /// Drives a segment with `work`, unless a cancel comes first (`already`: asked before it
    /// began), and persists how it ends.
    async fn drive_segment(
        &self,
        segment: Segment<'_>,
        already: Option<CancelRequest>,
        work: impl std::future::Future<Output = Result<LoopOutcome, LoopError>>,
    ) -> Result<RunRecord, StoreError> {
        let mut watched = self.interrupts.watch(segment.id, already);
        let outcome = watched.run(work).await;
        let late = watched.requested();
        drop(watched);
        match (outcome, late) {
            // The lease is gone: whatever the segment did is not this instance's to write.
            (Err(Stop::LeaseLost), _)
            | (Ok(Err(LoopError::LeaseLost)), _)
            | (_, Some(Stop::LeaseLost)) => {
                let _ = segment.sink.take();
                tracing::warn!(run_id = %segment.id, "this instance lost the run's lease: its segment stops here and writes nothing; the instance that took the run over goes on from its journal");
                Err(StoreError::LeaseLost { id: segment.id })
            }
            // Asked to stop as it was about to wait for a person (or to carry out a decision):
            // it stops instead.
            (
                Ok(Ok(LoopOutcome::Suspended(_) | LoopOutcome::Decided(_))),
                Some(Stop::Cancel(request)),
            )
            | (Err(Stop::Cancel(request)), _) => {
                let events = segment.sink.take();
                self.end_cancelled(&segment, events, request).await
            }
            (Ok(Ok(outcome)), None) => {
                // A state to keep is serialized once: measured, then kept as measured.
                let json = match &outcome {
                    LoopOutcome::Suspended(state) | LoopOutcome::Decided(state) => {
                        let json = state.to_json();
                        if json.len() > self.max_state_bytes {
                            return self.end_too_large(&segment, state, json.len()).await;
                        }
                        Some(json)
                    }
                    _ => None,
                };
                match (outcome, json) {
                    (LoopOutcome::Decided(state), Some(json)) => {
                        self.decided_here(&segment, state, json).await
                    }
                    (outcome, json) => self.persist(&segment, Ok(outcome), json).await,
                }
            }
            (Ok(outcome), _) => self.persist(&segment, outcome, None).await,
        }
    }

    /// Ends a segment whose state is too large to keep while it waits: `failed` with
    /// `state_too_large` and a step that says how large and what the limit is; nothing of the
    /// turn ran.
    async fn end_too_large(
        &self,
        segment: &Segment<'_>,
        state: &SuspendedState,
        bytes: usize,
    ) -> Result<RunRecord, StoreError> {
        let size = |bytes: usize| match bytes {
            0..=1_048_575 => format!("{} KB", bytes.div_ceil(1024)),
            _ => format!("{:.1} MB", bytes as f64 / (1024.0 * 1024.0)),
        };
        let summary = format!(
            "The run stopped: the state it would keep while it waits is {}, above the limit of \
             {} (setting max_state_bytes). None of the calls of its last turn ran.",
            size(bytes),
            size(self.max_state_bytes)
        );
        tracing::warn!(run_id = %segment.id, bytes, limit = self.max_state_bytes, "a run's state is too large to keep");
        segment.sink.emit(Event::Ended {
            reason: TerminationReason::StateTooLarge.as_str().to_owned(),
            explanation: summary.clone(),
        });
        let finish = Finish {
            status: RunStatus::Failed,
            reason: TerminationReason::StateTooLarge,
            counters: state.counters,
            truncated: false,
            final_answer: None,
            error_summary: Some(summary),
            estimated_cost_micros: self
                .loops
                .estimate_cost_micros(segment.configuration, state.counters.usage),
        };
        let events = segment.sink.take();
        self.close(segment, &finish, &events).await
    }

    /// Ends a segment's run as `finish` says, with the segment's events, and tells listeners.
    /// The run as it now is.
    async fn close(
        &self,
        segment: &Segment<'_>,
        finish: &Finish,
        events: &[SequencedEvent],
    ) -> Result<RunRecord, StoreError> {
        let ended = self
            .store
            .finish(
                segment.id,
                segment.version,
                finish,
                events,
                self.clock.now_ms(),
            )
            .await?;
        self.notify_status(segment.id, finish.status);
        Ok(ended)
    }

    /// A turn that rules and the tools' own checks decided: the decision is journaled like an
    /// operator's claim (its step, each running call dispatched with its effect key) while this
    /// instance keeps the run, then carried out in the same segment. A restart after the
    /// journal carries it out again exactly as it does an operator's decision.
    ///
    /// Boxed with its `Send` bound spelled out: carrying the decision out drives a segment that
    /// may decide again.
    fn decided_here<'a>(
        &'a self,
        segment: &'a Segment<'a>,
        state: SuspendedState,
        json: String,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<RunRecord, StoreError>> + Send + 'a>,
    > {
        Box::pin(async move {
            let Some(tool_loop) = segment.tool_loop else {
                let err = unavailable("the run's model is not available".into(), state.counters);
                return self.persist(segment, Err(err), None).await;
            };
            let choices = match tool_loop.resolve_decision(&state, &automatic_decision(&state)) {
                Ok(choices) => choices,
                Err(err) => return self.persist(segment, Err(err), None).await,
            };
            let decision = recorded_decision(&state, &choices);
            let verdict = verdict_of(&decision);
            segment
                .sink
                .emit(decision_event(&state, &choices, AUTOMATIC, None));
            let claim = ClaimRecord {
                approved_bases: "{}".to_owned(),
                decided_by: AUTOMATIC.to_owned(),
                verdict,
                decision: serde_json::to_string(&decision).unwrap_or_default(),
                events: segment.sink.take(),
                dispatched: dispatches(segment.id, &state, &choices),
                rules: Vec::new(),
            };
            let now = self.clock.now_ms();
            let version = match self
                .store
                .decide_running(
                    segment.id,
                    segment.version,
                    Kept::serialized(&state, json),
                    &claim,
                    now,
                )
                .await
            {
                // A cancel asked for on another instance came first: nothing of the turn runs.
                Err(StoreError::CancelRequested { request, .. }) => {
                    return self.end_cancelled(segment, claim.events, request).await;
                }
                other => other?,
            };
            failpoint::reach("after_automatic_decision");
            let claimed = ClaimedRun {
                id: segment.id,
                version,
                last_sequence: last_sequence_of(&claim.events),
                state,
                configuration: segment.configuration.clone(),
                tool_loop: Arc::clone(tool_loop),
                decision,
                decided_by: AUTOMATIC.to_owned(),
                verdict,
                recovering: false,
                approved_bases: BTreeMap::new(),
                cancel: None,
            };
            // The decision's segment goes on in the same sink.
            self.carry_out(claimed, segment.sink).await
        })
    }

    /// Ends a running segment as cancelled, with its steps so far: what was in flight is
    /// abandoned, and an approved call dispatched without a journaled result is named as
    /// outcome unknown.
    async fn end_cancelled(
        &self,
        segment: &Segment<'_>,
        mut events: Vec<SequencedEvent>,
        request: CancelRequest,
    ) -> Result<RunRecord, StoreError> {
        let answered: Vec<&str> = events
            .iter()
            .filter_map(|e| match &e.event {
                Event::Tool {
                    call_id,
                    executed: true,
                    on_resume: true,
                    ..
                } => Some(call_id.as_str()),
                _ => None,
            })
            .collect();
        // This segment's turn only, as in a recovery: a call of an earlier turn answered by an
        // operator keeps no result of its own.
        let round = segment.counters.iterations;
        let unknown: Vec<UnknownStep> = self
            .store
            .effects(segment.id)
            .await?
            .into_iter()
            .filter(|e| {
                e.round == round && e.result.is_none() && !answered.contains(&e.call_id.as_str())
            })
            .map(|e| UnknownStep {
                call_id: e.call_id,
                tool: e.tool,
                effect_key: e.effect_key,
                dispatched_at_ms: e.dispatched_at_ms,
            })
            .collect();
        let abandoned = match events.last().map(|e| &e.event) {
            Some(Event::Request { .. }) => "a model call in flight was abandoned",
            _ if !unknown.is_empty() => "the approved calls in flight were abandoned",
            _ => "it stopped between steps",
        };
        segment.sink.emit(Event::Cancelled {
            by: request.by.clone(),
            reason: request.reason.clone(),
            abandoned: Some(abandoned.to_owned()),
            unknown,
        });
        events.extend(segment.sink.take());
        let finish = Finish {
            status: RunStatus::Cancelled,
            reason: TerminationReason::Cancelled,
            counters: segment.counters,
            truncated: false,
            final_answer: None,
            error_summary: None,
            estimated_cost_micros: self
                .loops
                .estimate_cost_micros(segment.configuration, segment.counters.usage),
        };
        tracing::info!(run_id = %segment.id, by = %request.by, abandoned, "a running run was cancelled");
        self.close(segment, &finish, &events).await
    }

    async fn lost(&self, id: Uuid) -> ResumeError {
        match self.store.get(id).await {
            Ok(Some(run)) => ResumeError::NotWaiting(Box::new(run)),
            Ok(None) => ResumeError::NotFound(id),
            Err(err) => err.into(),
        }
    }

    /// Writes the end of a segment: suspended again, completed, or failed — with its events. A
    /// state to keep comes with its JSON if the caller serialized it already (to measure it).
    async fn persist(
        &self,
        segment: &Segment<'_>,
        outcome: Result<LoopOutcome, LoopError>,
        state_json: Option<String>,
    ) -> Result<RunRecord, StoreError> {
        let Segment {
            id,
            version,
            configuration,
            sink,
            verdict,
            ..
        } = *segment;
        let events = sink.take();
        let now = self.clock.now_ms();
        match outcome {
            // A decided turn is carried out by `drive_segment`; should one reach here, it waits
            // for an operator rather than run unjournaled.
            Ok(LoopOutcome::Suspended(state) | LoopOutcome::Decided(state)) => {
                let kept = match state_json {
                    Some(json) => Kept::serialized(&state, json),
                    None => Kept::new(&state),
                };
                let waiting = match self
                    .store
                    .suspend(
                        id,
                        version,
                        kept,
                        &events,
                        now,
                        approval_deadline(configuration, now),
                    )
                    .await
                {
                    // A cancel asked for on another instance came first: it stops instead.
                    Err(StoreError::CancelRequested { request, .. }) => {
                        return self.end_cancelled(segment, events, request).await;
                    }
                    other => other?,
                };
                self.notify_status(id, state.waiting_for());
                Ok(waiting)
            }
            Ok(LoopOutcome::Completed(done)) => {
                let reason = if done.truncated {
                    TerminationReason::MaxIterations
                } else if verdict == Some(Verdict::Expired) {
                    TerminationReason::ApprovalExpired
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
                let ended = self
                    .store
                    .finish(id, version, &finish, &events, now)
                    .await?;
                self.notify_status(id, RunStatus::Completed);
                Ok(ended)
            }
            Err(err) => {
                let (counters, summary) = match &err {
                    LoopError::Provider {
                        error,
                        counters,
                        approved_ran,
                        ..
                    } if !approved_ran.is_empty() => (
                        *counters,
                        format!(
                            "The calls you approved ran ({}): their effects happened. Then the \
                             model call failed: {}. Retry asks the model again from here without \
                             running them again.",
                            approved_ran.join(", "),
                            error.message
                        ),
                    ),
                    LoopError::Provider {
                        error, counters, ..
                    } => (*counters, error.message.clone()),
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
                let ended = self
                    .store
                    .finish(id, version, &finish, &events, now)
                    .await?;
                self.notify_status(id, RunStatus::Failed);
                Ok(ended)
            }
        }
    }

    fn notify_status(&self, id: Uuid, status: RunStatus) {
        if let Some(listener) = &self.listener {
            listener.status(id, status);
        }
    }
}

/// When a turn suspended at `now_ms` must be decided by, under `configuration`'s timeout.
fn approval_deadline(configuration: &RunConfiguration, now_ms: i64) -> Option<i64> {
    configuration
        .approval_timeout_ms
        .map(|timeout| now_ms.saturating_add(i64::try_from(timeout).unwrap_or(i64::MAX)))
}

/// Who carries out a claimed decision, and for whom the claim is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claiming {
    /// An operator's decision, queued for a worker of any instance.
    Queue,
    /// An operator's decision, carried out by the claimer at once.
    Here,
    /// The approval deadline's, queued.
    Expired,
}

/// The verdict recorded on a claimed run.
fn verdict_of_record(run: &RunRecord) -> Verdict {
    match run.decision.as_deref() {
        Some("denied") => Verdict::Denied,
        Some("mixed") => Verdict::Mixed,
        Some("expired") => Verdict::Expired,
        _ => Verdict::Approved,
    }
}

/// Why a fork was refused.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    #[error("run {0} not found")]
    NotFound(Uuid),
    #[error("the run has no step {0}")]
    NoStep(i64),
    #[error("there is nothing to go on from before the run's first request to the model; fork from a later step")]
    BeforeFirstRequest,
    #[error("at this step the model's calls still wait for their answers, so a new prompt cannot follow them; fork without a prompt (and decide the calls again), or from a later step")]
    PromptOnPendingTurn,
    #[error(transparent)]
    Service(#[from] ServiceError),
}

/// Why a retry was refused.
#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    #[error("run {0} not found")]
    NotFound(Uuid),
    #[error("only a run whose model call failed can be retried (this one is {0})")]
    NotRetryable(RunStatus),
    #[error("the run's journal has no model call to ask again")]
    NoJournal,
    #[error(transparent)]
    Service(#[from] ServiceError),
}
