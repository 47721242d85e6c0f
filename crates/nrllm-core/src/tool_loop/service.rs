//! The loop as the run service sees it: what it is given, what it gives back, the trait.

use crate::assembly::Skill;
use crate::decision::{Choice, Decision, DecisionError};
use crate::events::EventSink;
use crate::preview::CallPreview;
use crate::provider::{Prices, ProviderError};
use crate::rules::ApprovalRule;
use crate::state::{BudgetStop, Counters, RunSettings, StateError, SuspendedState, UnknownCall};
use crate::transcript::{Message, ToolOutcome};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a run starts from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunInput {
    pub system_prompt: Option<String>,
    pub skills: Vec<Skill>,
    /// The user's messages (usually one).
    pub messages: Vec<Message>,
    pub settings: RunSettings,
    /// A transcript to go on from instead of assembling one (a run that continues another run's
    /// journal): the next step asks the model with it.
    pub transcript: Option<Vec<Message>>,
}

/// Who and what the loop is working for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunContext {
    /// The prices of the run's configuration: what its cost limit is measured with (none set:
    /// no cost limit applies).
    pub prices: Prices,
    pub run_id: String,
    /// The requester on `run`; the deciding operator on `resume`.
    pub actor: String,
    /// On `resume`: the preview basis each call was approved against, by call id (the tool
    /// refuses to write if its target no longer has it).
    pub approved_bases: BTreeMap<String, String>,
    /// On `resume`: the decision is journaled already (the run service writes it with the
    /// claim), so the loop does not emit its step again.
    pub decision_recorded: bool,
    /// The segment is being recovered after a restart: calls run again say so in their step.
    pub recovering: bool,
    /// The approval rules that hold for this run now ([`crate::rules`]).
    pub rules: Vec<ApprovalRule>,
    /// How many people must approve its turns ([`crate::quorum`]): a call that needs more than
    /// one is let through by no rule or check, and a waiting turn says how many it needs.
    pub quorum: crate::quorum::Quorum,
    /// Where its calls' progress goes while they run (none: nowhere).
    pub progress: Option<crate::tool::ProgressHook>,
    /// On `resume`: what the step of each call decided without an operator says, by call id.
    pub call_notes: BTreeMap<String, String>,
    /// On `run` of a continued transcript (a fork): calls of its pending turn that the parent
    /// dispatched with no result in the transcript. They wait for an operator as outcome
    /// unknown, whatever the gate and the rules say.
    pub inherited: Vec<UnknownCall>,
    /// On `resume`: the effect key each pending call runs under ([`call_effect_key`]).
    pub effect_keys: BTreeMap<String, String>,
    /// This instance's lease on the run, asked before each model request and each tool call
    /// (none: nobody else can take the run over, as in tests and headless programs).
    pub lease: Option<crate::lease::LeaseGuard>,
    /// The run's version while this instance holds it (see [`crate::lease`]), for the tools.
    pub lease_epoch: Option<i64>,
    /// The daily caps across runs its spend counts toward ([`crate::spend`]; none: no cap is
    /// checked and nothing is counted).
    pub spend: Option<crate::spend::SpendWatch>,
    /// On `resume` of a turn whose call's server asked the operator: the call and the reply it
    /// is sent again with ([`crate::elicit`]).
    pub reply: Option<(String, crate::elicit::Replied)>,
    /// The run's trace: the spans of its model requests and tool calls are children of its
    /// root span ([`crate::spans`]); none: no spans.
    pub trace: Option<crate::trace::RunTrace>,
}

impl RunContext {
    /// Whether the run may go on here (its lease is held, or nobody leases it).
    pub(super) fn lease_held(&self) -> bool {
        self.lease.as_ref().is_none_or(|lease| lease.holds())
    }
}

/// One tool call answered during this segment of the loop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolInvocation {
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    pub result: String,
    pub outcome: ToolOutcome,
    pub executed: bool,
    pub duration_ms: u64,
}

/// A run that finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completed {
    /// The model's final answer.
    pub content: String,
    /// Tool calls answered in this segment (calls answered at resume are in the event stream).
    pub invocations: Vec<ToolInvocation>,
    /// Totals over the whole run.
    pub counters: Counters,
    /// The round cap was hit and the final round ran without tools.
    pub truncated: bool,
    /// The whole transcript.
    pub messages: Vec<Message>,
    /// The run waited at its budget and a person stopped it there (no answer was written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_stopped: Option<BudgetStop>,
}

/// How a call to `run` or `resume` ended.
#[derive(Debug, Clone, PartialEq)]
pub enum LoopOutcome {
    Completed(Completed),
    /// Waiting for an operator; persist the state and call `resume` later.
    Suspended(SuspendedState),
    /// The turn was decided without an operator (approval rules, the tools' own checks) and has
    /// effects: journal [`automatic_decision`] with the state, then `resume` with it.
    Decided(SuspendedState),
}

/// A segment of the loop that could not go on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LoopError {
    /// The decision does not fit the pending turn; nothing happened.
    #[error(transparent)]
    Decision(#[from] DecisionError),
    /// The stored state cannot be resumed; nothing happened.
    #[error(transparent)]
    State(#[from] StateError),
    /// This instance no longer holds the run's lease (it stalled, and another instance may have
    /// taken the run over): the segment stops before its next step, and nothing is written.
    #[error("this instance no longer holds the run's lease")]
    LeaseLost,
    /// The provider failed; `counters` are the run's totals up to the failure, `transcript` the
    /// messages the failed request sent, and `approved_ran` the tools that ran on the operator's
    /// approval in this segment (their effects happened).
    #[error("the model provider failed: {error}")]
    Provider {
        /// Boxed: the other errors are small, and results carry this one rarely.
        error: Box<ProviderError>,
        counters: Counters,
        transcript: Vec<Message>,
        approved_ran: Vec<String>,
    },
}

/// Run and resume: the loop behind a trait, so consumers can substitute a double in their tests.
#[async_trait]
pub trait ToolLoopService: Send + Sync {
    /// Assembles the transcript and runs until the run completes or suspends.
    async fn run(
        &self,
        input: RunInput,
        ctx: &RunContext,
        sink: &dyn EventSink,
    ) -> Result<LoopOutcome, LoopError>;

    /// Applies `decision` to the pending turn of `state` and continues the run. A refused
    /// decision leaves `state` as it was, ready for another decision.
    async fn resume(
        &self,
        state: &SuspendedState,
        decision: &Decision,
        ctx: &RunContext,
        sink: &dyn EventSink,
    ) -> Result<LoopOutcome, LoopError>;

    /// Checks `decision` against `state` without doing anything (so a caller can refuse a bad
    /// decision before claiming the run).
    fn check_decision(&self, state: &SuspendedState, decision: &Decision) -> Result<(), LoopError> {
        self.resolve_decision(state, decision).map(|_| ())
    }

    /// The choice `decision` makes for each pending call of `state`, in call order, or why it
    /// does not fit the turn (nothing happens either way).
    fn resolve_decision(
        &self,
        state: &SuspendedState,
        decision: &Decision,
    ) -> Result<Vec<Choice>, LoopError>;

    /// The previews of the pending turn's gated calls, as the operator sees them. A loop whose
    /// tools have no previews need not say.
    async fn preview(&self, _state: &SuspendedState, _run_id: &str) -> Vec<CallPreview> {
        Vec::new()
    }

    /// Whether running `tool` again with the same effect key applies its effect at most once
    /// (so a call cut off by a restart may simply run again). No, unless the tool says so.
    fn idempotent_by_key(&self, _state: &SuspendedState, _tool: &str) -> bool {
        false
    }
}
