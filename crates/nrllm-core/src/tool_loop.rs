//! The agent loop (ADR-084's `ToolLoopService`). `run` assembles a transcript and asks the model in
//! rounds; a turn that holds a call to an offered tool requiring approval suspends the run
//! **before any call of that turn runs**, returned as [`LoopOutcome::Suspended`] — a value, never
//! an error. `resume` applies an operator's decision to the pending turn and continues without
//! re-assembly; counters carry on, so totals span the whole run, and a resumed run may suspend again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::assembly::{assemble, Skill};
use crate::clock::{Clock, SystemClock};
use crate::decision::{refusal_text, Choice, Decision, DecisionError};
use crate::events::{CallChoice, Event, EventSink};
use crate::failpoint;
use crate::preview::{preview_pending, CallPreview};
use crate::provider::{ChatResponse, Provider, ProviderError, RetryNotice, ToolChoice};
use crate::registry::{Gate, ToolRegistry};
use crate::rules::ApprovalRule;
use crate::state::Answer;
use crate::state::{Counters, RunSettings, StateError, SuspendedState, UnknownCall};
use crate::step_machine::{Ask, CallPlan, Machine, Next};
use crate::tool::{ToolContext, ToolError};
use crate::transcript::{Message, ToolCall, ToolOutcome};

/// Tool results and error texts longer than this many bytes are cut (on a UTF-8 boundary) with a
/// marker.
pub const MAX_RESULT_BYTES: usize = 50_000;

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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunContext {
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
}

impl RunContext {
    /// Whether the run may go on here (its lease is held, or nobody leases it).
    fn lease_held(&self) -> bool {
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

/// Splits a transcript that ends in an assistant turn with calls not all answered: the turn's
/// calls and the answers given so far (taken off the transcript, which then ends with the turn).
/// `None` (and the transcript untouched) when there is no such turn.
pub fn split_pending_turn(transcript: &mut Vec<Message>) -> Option<(Vec<ToolCall>, Vec<Answer>)> {
    let turn = transcript
        .iter()
        .rposition(|m| !matches!(m, Message::Tool { .. }))?;
    let calls = transcript[turn].tool_calls().to_vec();
    let answered: Vec<Answer> = transcript[turn + 1..]
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                outcome,
            } => Some(Answer {
                call_id: tool_call_id.clone(),
                result: content.clone(),
                outcome: *outcome,
            }),
            _ => None,
        })
        .collect();
    if calls.is_empty()
        || calls
            .iter()
            .all(|c| answered.iter().any(|a| a.call_id == c.id))
    {
        return None;
    }
    transcript.truncate(turn + 1);
    Some((calls, answered))
}

/// A continued turn's next step with the calls its parent dispatched (`inherited`) marked as
/// outcome unknown: the turn then waits for an operator, whatever the gate and the rules let
/// through, and its step says which calls and with which effect keys.
fn inherit(next: Next, inherited: &[UnknownCall], sink: &dyn EventSink) -> Next {
    let (mut state, waits) = match next {
        Next::Decided(state) => (state, false),
        Next::Suspend(state) => (state, true),
        // Nothing of the turn is gated today: its calls have no effect to repeat.
        other => return other,
    };
    state.unknown = inherited
        .iter()
        .filter(|u| state.pending.iter().any(|c| c.id == u.call_id))
        .filter(|u| !state.answered.iter().any(|a| a.call_id == u.call_id))
        .cloned()
        .collect();
    if state.unknown.is_empty() {
        return match waits {
            true => Next::Suspend(state),
            false => Next::Decided(state),
        };
    }
    sink.emit(Event::OutcomeUnknown {
        round: state.counters.iterations,
        calls: state
            .unknown
            .iter()
            .filter_map(|u| {
                let call = state.pending.iter().find(|c| c.id == u.call_id)?;
                Some(crate::events::UnknownStep {
                    call_id: u.call_id.clone(),
                    tool: call.name.clone(),
                    effect_key: u.effect_key.clone(),
                    dispatched_at_ms: u.dispatched_at_ms,
                })
            })
            .collect(),
    });
    // Every gated call waits for the operator, those a rule let through included.
    for unknown in &state.unknown {
        if !state.gated.contains(&unknown.call_id) {
            state.gated.push(unknown.call_id.clone());
        }
    }
    state
        .ruled
        .retain(|r| !state.unknown.iter().any(|u| u.call_id == r.call_id));
    Next::Suspend(state)
}

/// Who an automatic decision is recorded as made by.
pub const AUTOMATIC: &str = "automatic (approval rules and the tools' own checks)";

/// The decision for a turn that rules and the tools' own checks decided ([`LoopOutcome::Decided`]):
/// each call approved, except those a rule refuses.
pub fn automatic_decision(state: &SuspendedState) -> Decision {
    Decision::PerCall {
        calls: state
            .pending
            .iter()
            .map(|call| crate::decision::CallDecision {
                call_id: call.id.clone(),
                choice: Choice::Approve,
            })
            .collect(),
    }
}

/// `choices` with every call a rule refuses denied, with the rule's words, and every question
/// left unanswered said to be so: an operator's choice cannot run them.
fn enforce_rules(state: &SuspendedState, mut choices: Vec<Choice>) -> Vec<Choice> {
    for (call, choice) in state.pending.iter().zip(choices.iter_mut()) {
        // A turn that expired stays expired: nothing of it runs either way.
        if matches!(choice, Choice::Expired { .. }) {
            continue;
        }
        // A question is answered, never run.
        if state.questions.contains(&call.id) && choice.runs() {
            *choice = Choice::Respond {
                result: "(The operator did not answer this question.)".into(),
            };
            continue;
        }
        if let Some(ruled) = state
            .ruled
            .iter()
            .find(|r| r.call_id == call.id && !r.allow)
        {
            *choice = Choice::Deny {
                reason: Some(ruled.note.clone()),
            };
        }
    }
    choices
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
        error: ProviderError,
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

/// The loop over one provider and one tool registry.
pub struct ToolLoop {
    provider: Arc<dyn Provider>,
    registry: Arc<ToolRegistry>,
    clock: Arc<dyn Clock>,
}

impl ToolLoop {
    /// A loop asking `provider` and calling tools from `registry`.
    pub fn new(provider: Arc<dyn Provider>, registry: Arc<ToolRegistry>) -> ToolLoop {
        ToolLoop {
            provider,
            registry,
            clock: Arc::new(SystemClock),
        }
    }

    /// Times previews with `clock` (the system clock unless a test says otherwise).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> ToolLoop {
        self.clock = clock;
        self
    }

    fn gate(&self, settings: &RunSettings) -> Gate {
        self.registry.gate(&settings.allow_list, settings.admin)
    }

    /// Performs the machine's steps — asks the model, answers calls — until it finishes or
    /// suspends. `next` is a step already decided (the pending turn, on resume).
    async fn drive(
        &self,
        mut machine: Machine,
        mut next: Option<Next>,
        ctx: &RunContext,
        sink: &dyn EventSink,
    ) -> Result<LoopOutcome, LoopError> {
        let mut invocations = Vec::new();
        // Tools that ran on the operator's approval in this segment (a later failure says so).
        let mut approved_ran: Vec<String> = Vec::new();
        loop {
            let step = match next.take() {
                Some(step) => step,
                None => {
                    // The gate is taken fresh each round: a tool disabled meanwhile is no longer
                    // offered.
                    let gate = self.gate(machine.settings());
                    let ask = machine.ask(gate.specs());
                    if !ctx.lease_held() {
                        return Err(LoopError::LeaseLost);
                    }
                    let response = match self.ask(&ask, sink).await {
                        Ok(response) => response,
                        Err(error) => {
                            return Err(LoopError::Provider {
                                error,
                                counters: machine.counters(),
                                transcript: machine.messages().to_vec(),
                                approved_ran,
                            })
                        }
                    };
                    machine.answered(&ask, response, |call| gate.pass(call, &ctx.rules))
                }
            };
            match step {
                Next::Run {
                    round,
                    calls,
                    on_resume,
                } => {
                    let gate = self.gate(machine.settings());
                    let mut answers = Vec::with_capacity(calls.len());
                    for (call, plan) in &calls {
                        if !ctx.lease_held() {
                            return Err(LoopError::LeaseLost);
                        }
                        let invocation = self
                            .answer(&gate, call, plan, round, on_resume, ctx, sink)
                            .await;
                        if on_resume && invocation.executed {
                            approved_ran.push(invocation.name.clone());
                        }
                        answers.push(Answer {
                            call_id: invocation.call_id.clone(),
                            result: invocation.result.clone(),
                            outcome: invocation.outcome,
                        });
                        invocations.push(invocation);
                    }
                    machine.ran(answers);
                    if on_resume {
                        failpoint::reach("after_results_before_model");
                    }
                }
                Next::Decided(state) => return Ok(LoopOutcome::Decided(state)),
                Next::Suspend(state) => {
                    sink.emit(Event::ApprovalRequested {
                        round: state.counters.iterations,
                        calls: state.pending.clone(),
                        gated: state.gated.clone(),
                    });
                    return Ok(LoopOutcome::Suspended(state));
                }
                Next::Finish(done) => {
                    return Ok(LoopOutcome::Completed(Completed {
                        content: done.content,
                        invocations,
                        counters: done.counters,
                        truncated: done.truncated,
                        messages: done.messages,
                    }));
                }
            }
        }
    }

    /// One provider request with its events.
    async fn ask(&self, ask: &Ask, sink: &dyn EventSink) -> Result<ChatResponse, ProviderError> {
        let round = ask.round;
        sink.emit(Event::Request {
            round,
            first: Some(ask.first),
            messages: ask.request.messages[ask.first..].to_vec(),
            tools_offered: match ask.request.tool_choice {
                ToolChoice::Auto => ask.request.tools.iter().map(|t| t.name.clone()).collect(),
                ToolChoice::Disabled => Vec::new(),
            },
        });
        let started = Instant::now();
        let on_retry = |notice: RetryNotice| {
            sink.emit(Event::ProviderRetry {
                round,
                retry: notice.retry,
                wait_ms: notice.wait_ms,
                reason: notice.reason,
                hint: notice.hint,
            })
        };
        failpoint::reach("during_model_call");
        match self.provider.complete(&ask.request, &on_retry).await {
            Ok(response) => {
                sink.emit(Event::Llm {
                    round,
                    content: response.content.clone(),
                    tool_calls: response.tool_calls.clone(),
                    usage: response.usage,
                    finish_reason: response.finish_reason.clone(),
                    duration_ms: elapsed_ms(started),
                    raw: response.raw.clone(),
                });
                Ok(response)
            }
            Err(error) => {
                sink.emit(Event::LlmFailed {
                    round,
                    message: error.message.clone(),
                    duration_ms: elapsed_ms(started),
                });
                Err(error)
            }
        }
    }

    /// Answers one call as planned: runs the tool if the gate offers it (with edited arguments
    /// if given), or answers without running it (denied, a result the operator wrote, a failure
    /// the operator reports, a result journaled before a restart). Never fails: failures become
    /// `Error:` results.
    #[allow(clippy::too_many_arguments)]
    async fn answer(
        &self,
        gate: &Gate,
        call: &ToolCall,
        plan: &CallPlan,
        round: u32,
        on_resume: bool,
        ctx: &RunContext,
        sink: &dyn EventSink,
    ) -> ToolInvocation {
        let started = Instant::now();
        let choice = match plan {
            CallPlan::Known(known) => {
                return self.record(
                    call,
                    known.clone(),
                    (
                        round,
                        on_resume,
                        "its result was journaled already; it does not run again",
                    ),
                    started,
                    sink,
                )
            }
            CallPlan::Decide(choice) => choice,
        };
        let edited = match choice {
            Choice::ApproveEdited { arguments } => Some(arguments),
            _ => None,
        };
        let (result, outcome, executed) = match (gate.tool(&call.name), choice) {
            (_, Choice::Deny { reason }) => {
                (refusal_text(reason.as_deref()), ToolOutcome::Denied, false)
            }
            // The operator's answer to a question is the call's whole result.
            (Some(tool), Choice::Respond { result }) if tool.spec().asks_operator => {
                (result.clone(), ToolOutcome::Ok, false)
            }
            (_, Choice::Respond { result }) => (
                format!("(The operator answered this call without running the tool.)\n{result}"),
                ToolOutcome::Ok,
                false,
            ),
            (_, Choice::Failed { note }) => {
                (failed_text(note.as_deref()), ToolOutcome::Error, false)
            }
            (_, Choice::Expired { text }) => (text.clone(), ToolOutcome::Denied, false),
            (None, _) if on_resume => (
                format!(
                    "Error: tool `{}` is no longer permitted, not executed",
                    call.name
                ),
                ToolOutcome::Error,
                false,
            ),
            (None, _) => (
                format!("Error: tool `{}` is not available to this run", call.name),
                ToolOutcome::Error,
                false,
            ),
            (Some(tool), _) => {
                let arguments = match edited {
                    Some(arguments) => Ok(arguments.clone()),
                    None => call
                        .parsed_arguments()
                        .map_err(|err| ToolError::InvalidArguments {
                            field: "arguments".to_owned(),
                            message: format!("not valid JSON ({err})"),
                        }),
                };
                let tool_ctx = ToolContext {
                    run_id: ctx.run_id.clone(),
                    actor: ctx.actor.clone(),
                    call_id: call.id.clone(),
                    lease_epoch: ctx.lease_epoch,
                    approved_basis: ctx.approved_bases.get(&call.id).cloned(),
                    // An approved call's effect is keyed ([`call_effect_key`]), so that running
                    // it again after a restart applies nothing twice.
                    effect_key: on_resume.then(|| {
                        ctx.effect_keys
                            .get(&call.id)
                            .cloned()
                            .unwrap_or_else(|| effect_key(&ctx.run_id, round, &call.id))
                    }),
                };
                if on_resume {
                    failpoint::reach("before_approved_tool");
                }
                let ran = match arguments {
                    Ok(arguments) => tool.execute(&arguments, &tool_ctx).await,
                    Err(err) => Err(err),
                };
                match ran {
                    Ok(text) => (cap_result(text), ToolOutcome::Ok, true),
                    Err(err) => {
                        if let ToolError::Internal(detail) = &err {
                            tracing::error!(tool = %call.name, call_id = %call.id, run_id = %ctx.run_id, %detail, "tool failed");
                        }
                        (cap_result(err.model_text()), ToolOutcome::Error, true)
                    }
                }
            }
        };
        let result = match edited {
            Some(arguments) if executed => {
                format!("(The operator edited the arguments to {arguments}.)\n{result}")
            }
            _ => result,
        };
        let again = (ctx.recovering && executed && on_resume)
            .then_some("run again with the same effect key after a restart");
        let note = match (ctx.call_notes.get(&call.id), again) {
            (Some(ruled), Some(again)) => Some(format!("{ruled}; {again}")),
            (Some(ruled), None) => Some(ruled.clone()),
            (None, again) => again.map(str::to_owned),
        };
        let invocation = ToolInvocation {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: edited.map_or_else(|| call.arguments.clone(), Value::to_string),
            result,
            outcome,
            executed,
            duration_ms: elapsed_ms(started),
        };
        emit_tool(sink, &invocation, round, on_resume, note.as_deref());
        invocation
    }

    /// Answers a call with a result known already (nothing runs).
    fn record(
        &self,
        call: &ToolCall,
        known: Answer,
        (round, on_resume, note): (u32, bool, &str),
        started: Instant,
        sink: &dyn EventSink,
    ) -> ToolInvocation {
        let invocation = ToolInvocation {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            result: known.result,
            outcome: known.outcome,
            executed: true,
            duration_ms: elapsed_ms(started),
        };
        emit_tool(sink, &invocation, round, on_resume, Some(note));
        invocation
    }
}

/// The `tool` step of an answered call.
fn emit_tool(
    sink: &dyn EventSink,
    invocation: &ToolInvocation,
    round: u32,
    on_resume: bool,
    note: Option<&str>,
) {
    sink.emit(Event::Tool {
        round,
        call_id: invocation.call_id.clone(),
        name: invocation.name.clone(),
        arguments: invocation.arguments.clone(),
        result: invocation.result.clone(),
        is_error: !invocation.outcome.is_ok(),
        outcome: Some(invocation.outcome),
        executed: invocation.executed,
        duration_ms: invocation.duration_ms,
        on_resume,
        note: note.map(str::to_owned),
    });
}

/// The key of an approved call's effect: the run, the round of its turn, the call. A tool uses it
/// to apply its effect at most once, however often the call is run.
pub fn effect_key(run_id: &str, round: u32, call_id: &str) -> String {
    format!("{run_id}/{round}/{call_id}")
}

/// The effect key call `call_id` of `state`'s pending turn runs under in run `run_id`: the key it
/// was dispatched with if its outcome is unknown (a fork's: its parent's), else
/// [`effect_key`] of the turn's round.
pub fn call_effect_key(state: &SuspendedState, run_id: &str, call_id: &str) -> String {
    state
        .unknown
        .iter()
        .find(|u| u.call_id == call_id)
        .map(|u| u.effect_key.clone())
        .unwrap_or_else(|| effect_key(run_id, state.counters.iterations, call_id))
}

/// The result the model reads for a call the operator reports as failed.
pub fn failed_text(note: Option<&str>) -> String {
    match note.map(str::trim).filter(|n| !n.is_empty()) {
        Some(note) => format!("Error: the operator reports that this call failed: {note}"),
        None => "Error: the operator reports that this call failed.".to_owned(),
    }
}

#[async_trait]
impl ToolLoopService for ToolLoop {
    async fn run(
        &self,
        input: RunInput,
        ctx: &RunContext,
        sink: &dyn EventSink,
    ) -> Result<LoopOutcome, LoopError> {
        if let Some(mut transcript) = input.transcript {
            // A journal whose last turn still has calls to answer goes on with that turn.
            let pending = split_pending_turn(&mut transcript);
            let mut machine = Machine::start(transcript, input.settings);
            let next = pending.map(|(calls, answered)| {
                let gate = self.gate(machine.settings());
                let next =
                    machine.pending_turn(calls, answered, |call| gate.pass(call, &ctx.rules));
                inherit(next, &ctx.inherited, sink)
            });
            return self.drive(machine, next, ctx, sink).await;
        }
        let assembly = assemble(
            input.system_prompt.as_deref(),
            &input.skills,
            input.messages,
        );
        sink.emit(Event::Assembled {
            system_prompt: matches!(assembly.messages.first(), Some(Message::System { .. })),
            skills_included: assembly.skills_included,
            skills_dropped: assembly.skills_dropped,
            messages: assembly.messages.len(),
        });
        let machine = Machine::start(assembly.messages, input.settings);
        self.drive(machine, None, ctx, sink).await
    }

    async fn resume(
        &self,
        state: &SuspendedState,
        decision: &Decision,
        ctx: &RunContext,
        sink: &dyn EventSink,
    ) -> Result<LoopOutcome, LoopError> {
        state.check()?;
        // The gate is applied again: the allow-list is the run's, the enabled set is today's.
        let gate = self.gate(&state.settings);
        let choices = enforce_rules(state, decision.resolve(&state.pending, &gate)?);
        if !ctx.decision_recorded {
            sink.emit(decision_event(state, &choices, &ctx.actor, None));
        }
        // Each call that a rule refuses, or that runs as a rule or its tool's check let it,
        // says so in its step.
        let mut ctx = ctx.clone();
        ctx.call_notes = state
            .ruled
            .iter()
            .filter(|r| {
                !r.allow
                    || state
                        .pending
                        .iter()
                        .zip(&choices)
                        .any(|(call, choice)| call.id == r.call_id && choice.runs())
            })
            .map(|r| (r.call_id.clone(), r.note.clone()))
            .collect();
        ctx.effect_keys = state
            .pending
            .iter()
            .map(|call| {
                let key = call_effect_key(state, &ctx.run_id, &call.id);
                (call.id.clone(), key)
            })
            .collect();
        let plans = state
            .pending
            .iter()
            .zip(choices)
            .map(
                |(call, choice)| match state.answered.iter().find(|a| a.call_id == call.id) {
                    Some(known) => CallPlan::Known(known.clone()),
                    None => CallPlan::Decide(choice),
                },
            )
            .collect();
        let (machine, step) = Machine::resume(state, plans);
        self.drive(machine, Some(step), &ctx, sink).await
    }

    fn resolve_decision(
        &self,
        state: &SuspendedState,
        decision: &Decision,
    ) -> Result<Vec<Choice>, LoopError> {
        state.check()?;
        let choices = decision.resolve(&state.pending, &self.gate(&state.settings))?;
        Ok(enforce_rules(state, choices))
    }

    async fn preview(&self, state: &SuspendedState, run_id: &str) -> Vec<CallPreview> {
        preview_pending(
            &self.gate(&state.settings),
            state,
            run_id,
            self.clock.as_ref(),
        )
        .await
    }

    fn idempotent_by_key(&self, state: &SuspendedState, tool: &str) -> bool {
        self.gate(&state.settings)
            .tool(tool)
            .is_some_and(|tool| tool.spec().idempotent_by_key)
    }
}

/// The `approval_decided` step of a decision on `state`'s pending turn (`approval_expired` when
/// the deadline passed undecided), by `decided_by` (through API token `token`, if given).
pub fn decision_event(
    state: &SuspendedState,
    choices: &[Choice],
    decided_by: &str,
    token: Option<&str>,
) -> Event {
    let round = Some(state.counters.iterations);
    let choices = call_choices(state, choices);
    if choices
        .iter()
        .all(|c| matches!(c.choice, Choice::Expired { .. }))
        && !choices.is_empty()
    {
        return Event::ApprovalExpired { round, choices };
    }
    Event::ApprovalDecided {
        round,
        decided_by: decided_by.to_owned(),
        through_token: token.map(str::to_owned),
        choices,
    }
}

fn call_choices(state: &SuspendedState, choices: &[Choice]) -> Vec<CallChoice> {
    state
        .pending
        .iter()
        .zip(choices)
        .map(|(call, choice)| CallChoice {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            choice: choice.clone(),
            original_arguments: matches!(choice, Choice::ApproveEdited { .. })
                .then(|| call.arguments.clone()),
        })
        .collect()
}

/// Cuts `text` to [`MAX_RESULT_BYTES`] on a character boundary, with a marker saying so.
pub fn cap_result(text: String) -> String {
    if text.len() <= MAX_RESULT_BYTES {
        return text;
    }
    let mut cut = MAX_RESULT_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}\n[result truncated: {cut} of {} bytes shown]",
        &text[..cut],
        text.len()
    )
}

fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}
