//! Persisted runs: the `agent_run` row with its status machine (DESIGN §3) and the `agent_run_event`
//! stream, as the types and the [`RunStore`] trait consumers program against. The store itself is
//! elsewhere (`nrllm-store` implements it on SQLite and Postgres); nothing here does I/O.
//!
//! Every transition is fenced by the run's `version` and commits together with the events it
//! produced, in one transaction: a failure leaves neither. Transitions:
//! - create: a new run, `running`;
//! - suspend: `running` → `waiting_for_approval`, stores the state (not terminal);
//! - claim for resume: `waiting_for_approval` → `running` by one compare-and-set; exactly one wins,
//!   and the same commit journals the decision and dispatches the approved calls;
//! - finish: any non-terminal → `completed | failed | cancelled`, clears the state (once only);
//! - cancel: `queued | waiting_for_*` → `cancelled`.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::assembly::Skill;
use crate::events::Event;
use crate::quorum::Vote;
use crate::rules::{ApprovalRule, RuleDraft};
use crate::state::{Counters, Kept, RunSettings};
use crate::transcript::ToolOutcome;

pub use crate::listing::{RunFilter, SearchWords, WaitingFilter, WaitingOrder};
pub use nrllm_types::{RunStatus, TerminationReason, Verdict};

/// What a run was started with (stored as JSON in `configuration`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfiguration {
    /// The provider configuration's name (`demo`, …).
    pub provider: String,
    pub model: String,
    pub prompt: String,
    #[serde(default)]
    pub system_prompt: Option<String>,
    #[serde(default)]
    pub skills: Vec<Skill>,
    pub settings: RunSettings,
    /// The run goes on from another run's journal instead of starting from the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<Continuation>,
    /// How long each of its turns may wait for a decision; past it the turn expires (`None`: it
    /// waits until decided).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_timeout_ms: Option<u64>,
}

/// Where a run that continues another one starts: that run's transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Continuation {
    pub parent: Uuid,
    pub transcript: Vec<crate::transcript::Message>,
    /// Why, in a few words (for its first step).
    pub note: String,
    /// Calls of the transcript's pending turn that the parent dispatched (an operator, a rule or
    /// the tool's own check let them run) and whose results the transcript does not hold: they
    /// may have taken effect, so the new run never runs them on its own — they wait for an
    /// operator as outcome unknown, and run again only with the parent's effect key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inherited: Vec<crate::state::UnknownCall>,
}

/// A run to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    pub id: Uuid,
    pub configuration: RunConfiguration,
    pub requested_by: String,
    /// Steps copied from the run it goes on from (a fork: the parent's steps up to the fork
    /// point, with their sequence numbers), stored with it; the run's own steps follow them.
    pub copied: Vec<SequencedEvent>,
    /// Its place in a distributed trace ([`crate::trace`]).
    pub trace: crate::trace::RunTrace,
}

/// One stored run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub id: Uuid,
    pub status: RunStatus,
    /// The configuration, or `None` if the stored JSON no longer reads.
    pub configuration: Option<RunConfiguration>,
    pub requested_by: String,
    pub counters: Counters,
    pub truncated: bool,
    pub estimated_cost_micros: Option<i64>,
    pub termination_reason: Option<String>,
    pub error_summary: Option<String>,
    pub final_answer: Option<String>,
    /// The raw suspended state, kept as stored (also when it is corrupted).
    pub suspended_state: Option<String>,
    pub decided_by: Option<String>,
    pub decided_at_ms: Option<i64>,
    pub decision: Option<String>,
    /// The decision being carried out (JSON of its choices), from the claim until the run
    /// suspends again or ends.
    pub decision_record: Option<String>,
    pub version: i64,
    pub last_sequence: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    /// While it waits: when the turn expires if nobody decides.
    pub approval_deadline_ms: Option<i64>,
    /// While it waits: how many distinct people must approve its turn ([`crate::quorum`]).
    pub approvals_required: u32,
    /// While it is queued: since when (its place in the queue).
    pub queued_at_ms: Option<i64>,
    /// A claimed decision's preview bases by call id (JSON), as taken at the claim.
    pub approved_bases: Option<String>,
    /// While it runs: a cancel asked for, which the instance driving it carries out at its next
    /// step.
    pub cancel_requested: Option<CancelRequest>,
    /// Its place in a distributed trace; `None` for a run created before runs had one.
    pub trace: Option<crate::trace::RunTrace>,
    /// While it runs: the instance that holds its lease (drives it), by the name that instance
    /// gave its store.
    pub lease_owner: Option<String>,
}

/// Who asked to cancel a run, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelRequest {
    pub by: String,
    pub reason: Option<String>,
}

/// What renewing a lease found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// Still held by this instance, with the cancel asked for meanwhile, if any.
    Held(Option<CancelRequest>),
    /// No longer held: the run stopped running, or another instance took it over.
    Gone,
}

/// An event with the sequence number it is stored under.
#[derive(Debug, Clone, PartialEq)]
pub struct SequencedEvent {
    pub sequence: i64,
    pub event: Event,
    pub created_at_ms: i64,
}

/// One stored event row.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub run_id: Uuid,
    pub sequence: i64,
    pub kind: String,
    pub round: Option<i64>,
    pub duration_ms: Option<i64>,
    /// The event as JSON (an [`Event`] for every kind this build writes).
    pub payload: serde_json::Value,
    pub created_at_ms: i64,
}

impl StoredEvent {
    /// The payload as an [`Event`], if this build knows its kind.
    pub fn event(&self) -> Option<Event> {
        serde_json::from_value(self.payload.clone()).ok()
    }
}

/// How a run ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    pub status: RunStatus,
    pub reason: TerminationReason,
    pub counters: Counters,
    pub truncated: bool,
    pub final_answer: Option<String>,
    /// Safe text for operators; never an internal cause.
    pub error_summary: Option<String>,
    pub estimated_cost_micros: Option<i64>,
}

/// What a claim commits besides the status: the whole decision, durable before anything runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimRecord {
    pub decided_by: String,
    pub verdict: Verdict,
    /// The decision as resolved against the pending turn (JSON), kept on the run until it is
    /// answered: a run cut off after its claim continues from it.
    pub decision: String,
    /// The `approval_decided` step.
    pub events: Vec<SequencedEvent>,
    /// The approved calls, dispatched.
    pub dispatched: Vec<Dispatch>,
    /// Each approved call's preview basis by call id (JSON), for whichever instance carries the
    /// decision out.
    pub approved_bases: String,
    /// Approval rules the decider asked for with the decision (stored in the same commit, as
    /// theirs).
    pub rules: Vec<RuleDraft>,
    /// The approval that completes the turn's count, if it needs several ([`crate::quorum`]):
    /// recorded with the claim.
    pub vote: Option<Vote>,
}

/// An approved call about to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch {
    pub round: u32,
    pub call_id: String,
    pub tool: String,
    pub arguments: String,
    pub effect_key: String,
}

/// An approved call as the journal has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectRecord {
    pub round: u32,
    pub call_id: String,
    pub tool: String,
    pub effect_key: String,
    pub dispatched_at_ms: i64,
    /// The result, once journaled (with the segment's next transition).
    pub result: Option<(String, ToolOutcome)>,
}

/// What a claim for resume came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// This caller holds the run; write with `version` from now on. The suspended state is the
    /// one read at the version claimed (a waiting run's state never changes).
    Won { version: i64 },
    /// Someone else decided first (or the run is no longer waiting).
    Lost(Box<RunRecord>),
}

/// What the purge removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PurgeReport {
    pub runs: u64,
    pub events: u64,
}

/// A store failure. `Conflict`, `NotFound`, `AlreadySettled` and `InvalidTransition` are answers;
/// `Backend` is a fault of the database behind the store, whose cause is for the log, not for
/// operators. It holds the backend's own error, so this type names no database library.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("run {0} not found")]
    NotFound(Uuid),
    #[error("run {id} changed meanwhile (expected version {expected})")]
    Conflict { id: Uuid, expected: i64 },
    #[error("run {id} is already {status}; a finished run never changes again")]
    AlreadySettled { id: Uuid, status: RunStatus },
    #[error("run {id} is {status}; it cannot be {action}")]
    InvalidTransition {
        id: Uuid,
        status: RunStatus,
        action: &'static str,
    },
    /// The run is running under another instance's lease: this instance lost it (it stopped
    /// renewing, and another instance's reaper took the run over).
    #[error("run {id} is driven by another instance now; this one lost its lease")]
    LeaseLost { id: Uuid },
    /// The run was to suspend, but an operator asked to cancel it meanwhile.
    #[error("run {id} was asked to stop by {}", request.by)]
    CancelRequested { id: Uuid, request: CancelRequest },
    #[error("database error: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("stored data is not valid: {0}")]
    Corrupt(String),
}

/// Runs and their events, durable: a run's transitions, each with the steps it commits. It reads
/// runs, rules and leases too (its supertraits), so one handle serves the run service.
#[async_trait]
pub trait RunStore: RunReader + RuleStore + LeaseStore {
    /// Inserts a new run: `queued` for any instance's worker, or (`drive_here`) `running` under
    /// this instance's lease, for a caller that drives it at once.
    async fn create(
        &self,
        run: &NewRun,
        now_ms: i64,
        drive_here: bool,
    ) -> Result<RunRecord, StoreError>;
    /// `running` → `waiting_for_approval`, storing the state and the segment's events, and when
    /// the turn expires if nobody decides (`deadline_ms`). The state is kept as the JSON the
    /// service measured, not serialized again. The run as it now is.
    async fn suspend(
        &self,
        id: Uuid,
        version: i64,
        state: Kept<'_>,
        events: &[SequencedEvent],
        now_ms: i64,
        deadline_ms: Option<i64>,
    ) -> Result<RunRecord, StoreError>;
    /// Records `vote` on run `id`'s waiting turn at `version`, with its step (numbered after
    /// the run's last), if the run still waits there and nothing was written to it since step
    /// `last_sequence` (so a vote that would complete the count is never recorded without its
    /// claim). `false`, nothing written, if it moved on. The run's version stays.
    async fn count_approval(
        &self,
        id: Uuid,
        (version, last_sequence): (i64, i64),
        vote: &Vote,
        step: &SequencedEvent,
    ) -> Result<bool, StoreError>;
    /// `waiting_for_approval` → `queued` if the run is still at `version` and its last step is
    /// the one before the claim's first (an approval counted meanwhile, which adds a step, makes
    /// the claimer weigh again); exactly one caller wins, and a worker of any instance carries the decision out. The same commit journals the
    /// whole decision (its step, the record on the run) and a `dispatched` record for every
    /// approved call, before any of them runs. With `drive_here` the winner takes the run at once
    /// (`running`, under this instance's lease, as [`LeaseStore::take_run`] would) instead of
    /// queueing it: the caller carries the decision out itself.
    async fn claim_for_resume(
        &self,
        id: Uuid,
        version: i64,
        claim: &ClaimRecord,
        now_ms: i64,
        drive_here: bool,
    ) -> Result<Claim, StoreError>;
    /// Journals a turn decided without an operator (approval rules, the tools' own checks) like
    /// a claim — its step, the decision, the state, and a dispatch record for each call that
    /// runs — while the run stays `running` with this instance. Fenced like `suspend` (version,
    /// lease, no cancel asked; the state kept as in `suspend`); returns the new version.
    async fn decide_running(
        &self,
        id: Uuid,
        version: i64,
        state: Kept<'_>,
        claim: &ClaimRecord,
        now_ms: i64,
    ) -> Result<i64, StoreError>;
    /// Ends a non-terminal run at `version`, clearing its state, with the segment's events. The
    /// run as it now is.
    async fn finish(
        &self,
        id: Uuid,
        version: i64,
        finish: &Finish,
        events: &[SequencedEvent],
        now_ms: i64,
    ) -> Result<RunRecord, StoreError>;
    /// Ends a run whose stored state cannot be read: `failed` with `state_corrupted`, keeping the
    /// raw state for inspection, with a step that says so.
    async fn fail_corrupted(
        &self,
        id: Uuid,
        version: i64,
        summary: &str,
        event: &Event,
        now_ms: i64,
    ) -> Result<(), StoreError>;
    /// `queued | waiting_for_*` → `cancelled`, with a step that says who and why. A running run
    /// stays running with the request recorded ([`RunRecord::cancel_requested`]): the instance
    /// driving it stops it at its next step.
    async fn cancel(
        &self,
        id: Uuid,
        by: &str,
        reason: Option<&str>,
        now_ms: i64,
    ) -> Result<RunRecord, StoreError>;
    /// Deletes terminal runs finished before `terminal_before_ms` and waiting runs last changed
    /// before `waiting_before_ms`, with their events, `chunk` runs per transaction.
    async fn purge(
        &self,
        terminal_before_ms: i64,
        waiting_before_ms: i64,
        chunk: u32,
    ) -> Result<PurgeReport, StoreError>;
}

/// Reading runs, their steps and their journaled effects.
#[async_trait]
pub trait RunReader: Send + Sync {
    /// One run.
    async fn get(&self, id: Uuid) -> Result<Option<RunRecord>, StoreError>;
    /// Runs, newest first.
    async fn list(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError>;
    /// Waiting runs, oldest first (the approvals inbox).
    async fn waiting(&self, filter: &WaitingFilter) -> Result<Vec<RunRecord>, StoreError>;
    /// A run's events with a sequence above `after`, in order.
    async fn events(&self, id: Uuid, after: i64) -> Result<Vec<StoredEvent>, StoreError>;
    /// Each person's latest approval of run `id`'s turn at `version`, in the order they came
    /// ([`crate::quorum`]).
    async fn approvals(&self, id: Uuid, version: i64) -> Result<Vec<Vote>, StoreError>;
    /// At most `limit` of a run's events with a sequence above `after`, in order: one page, for
    /// readers that go through a long run's log with bounded memory.
    async fn events_page(
        &self,
        id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>, StoreError>;
    /// The effects journaled for a run: every approved call dispatched, with its result once
    /// journaled.
    async fn effects(&self, id: Uuid) -> Result<Vec<EffectRecord>, StoreError>;
    /// The runs that go on from run `id`'s journal (its forks and retries), oldest first, at
    /// most `limit`.
    async fn children(&self, id: Uuid, limit: u32) -> Result<Vec<RunRecord>, StoreError>;
    /// A queued run's place in the queue (1 = next); `None` if it is not queued.
    async fn queue_position(&self, id: Uuid) -> Result<Option<u64>, StoreError>;
    /// Waiting runs whose approval deadline passed before `now_ms`, the longest overdue first.
    async fn expired_approvals(&self, now_ms: i64, limit: u32) -> Result<Vec<Uuid>, StoreError>;
}

/// Approval rules.
#[async_trait]
pub trait RuleStore: Send + Sync {
    /// The rules that hold for run `run` of configuration `configuration`.
    async fn rules_for(
        &self,
        run: Uuid,
        configuration: &str,
    ) -> Result<Vec<ApprovalRule>, StoreError>;
    /// Every rule (newest first, at most `limit`).
    async fn list_rules(&self, limit: u32) -> Result<Vec<ApprovalRule>, StoreError>;
    /// Stores a rule (checked by the caller with [`RuleDraft::check`]).
    async fn add_rule(
        &self,
        draft: &RuleDraft,
        by: &str,
        now_ms: i64,
    ) -> Result<ApprovalRule, StoreError>;
    /// One rule, if there is one with this id.
    async fn rule(&self, id: i64) -> Result<Option<ApprovalRule>, StoreError>;
    /// Removes a rule; the rule as it was, or `None` if there was none.
    async fn remove_rule(&self, id: i64) -> Result<Option<ApprovalRule>, StoreError>;
}

/// The queue and the leases: which instance drives which run, and for how long.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Takes up to `limit` queued runs, oldest first, for this instance: each becomes `running`
    /// under its lease, at a new version. Runs another instance is taking at the same moment are
    /// skipped, never taken twice.
    async fn take_queued(&self, now_ms: i64, limit: u32) -> Result<Vec<RunRecord>, StoreError>;
    /// [`LeaseStore::take_queued`], of only the runs held for this instance (answered through a
    /// call it holds open: each has its running slot already, the held call's).
    async fn take_held(&self, now_ms: i64, limit: u32) -> Result<Vec<RunRecord>, StoreError>;
    /// Takes queued run `id` for this instance (`None`: not queued, or taken by someone else).
    async fn take_run(&self, id: Uuid, now_ms: i64) -> Result<Option<RunRecord>, StoreError>;
    /// Extends this instance's lease on a running run it drives, and says whether someone asked
    /// to cancel it; `Gone` if it no longer holds it (the run stopped running, or another
    /// instance took it over).
    async fn renew_lease(&self, id: Uuid, now_ms: i64) -> Result<Renewal, StoreError>;
    /// Running runs whose lease ran out by `now_ms`, the longest expired first.
    async fn expired_leases(&self, now_ms: i64, limit: u32) -> Result<Vec<Uuid>, StoreError>;
    /// Takes the lease of a running run for this instance: only if it ran out (a reaper), or
    /// whoever holds it (`force`: the only instance, recovering at start). `false` if the run is
    /// not running or another instance got it first.
    async fn take_lease(&self, id: Uuid, now_ms: i64, force: bool) -> Result<bool, StoreError>;
    /// Extends the holds of this instance: the runs waiting for (or queued with) a reply to a
    /// question their server asked inside a call this instance holds open, which only it takes
    /// from the queue while the hold lasts ([`crate::elicit::Asked::held_until_ms`]). How many.
    async fn renew_holds(&self, now_ms: i64) -> Result<u64, StoreError>;
    /// Ends every hold of another instance (the only instance, at start: the calls they held
    /// died with the last process). How many.
    async fn release_holds(&self) -> Result<u64, StoreError>;
}
