//! The loop over one provider and one tool registry: round by round until the model answers or a
//! turn waits for a person.

use super::answer::*;
use super::automatic::*;
use super::base::*;
use super::service::*;
use super::turn::*;
use crate::assembly::assemble;
use crate::decision::{Choice, Decision};
use crate::events::{Event, EventSink};
use crate::failpoint;
use crate::preview::{preview_pending, CallPreview};
use crate::provider::{ChatResponse, Delta, ProviderError, RetryNotice, ToolChoice, Usage};
use crate::spans;
use crate::state::Answer;
use crate::state::SuspendedState;
use crate::step_machine::{Ask, CallPlan, Machine, Next};
use crate::transcript::{Message, ToolCall};
use async_trait::async_trait;
use std::time::Instant;

impl ToolLoop {
    /// Performs the machine's steps — asks the model, answers calls — until it finishes or
    /// suspends. `next` is a step already decided (the pending turn, on resume).
    pub(super) async fn drive(
        &self,
        mut machine: Machine,
        mut next: Option<Next>,
        ctx: &RunContext,
        sink: &dyn EventSink,
    ) -> Result<LoopOutcome, LoopError> {
        let mut invocations = Vec::new();
        // Tools that ran on the operator's approval in this segment (a later failure says so).
        let mut approved_ran: Vec<String> = Vec::new();
        // The time this segment runs counts toward the run's time limit (its waits do not).
        let (started, before) = (self.clock.now_ms(), machine.counters().running_ms);
        let running = || before + u64::try_from(self.clock.now_ms() - started).unwrap_or(0);
        loop {
            let step = match next.take() {
                Some(step) => step,
                None => {
                    self.next_request(&mut machine, ctx, sink, &approved_ran, &running)
                        .await?
                }
            };
            match step {
                Next::Run {
                    round,
                    calls,
                    on_resume,
                } => {
                    let ran = (&mut approved_ran, &mut invocations);
                    let turn = (round, calls.as_slice(), on_resume);
                    match self.answer_turn(&machine, turn, ctx, sink, ran).await? {
                        Ok(answers) => machine.ran(answers),
                        Err(waiting) => {
                            sink.emit(waiting_event(&waiting));
                            return Ok(LoopOutcome::Suspended(*waiting));
                        }
                    }
                    if on_resume {
                        failpoint::reach("after_results_before_model");
                    }
                }
                Next::Decided(state) => return Ok(LoopOutcome::Decided(state)),
                Next::Suspend(mut state) => {
                    state.approvals_required = ctx.quorum.for_turn(&state);
                    sink.emit(waiting_event(&state));
                    return Ok(LoopOutcome::Suspended(state));
                }
                Next::Finish(done) => {
                    return Ok(LoopOutcome::Completed(Completed {
                        content: done.content,
                        invocations,
                        counters: done.counters,
                        truncated: done.truncated,
                        messages: done.messages,
                        budget_stopped: None,
                    }));
                }
            }
        }
    }

    /// Answers a turn's calls in order, each as planned: their answers, or — when a call's
    /// server asked the operator first — the state the run waits in (nothing of that call
    /// journaled; the calls after it not run). Executed calls are added to `approved_ran` (on
    /// resume) and every answer to `invocations`.
    async fn answer_turn(
        &self,
        machine: &Machine,
        (round, calls, on_resume): (u32, &[(ToolCall, CallPlan)], bool),
        ctx: &RunContext,
        sink: &dyn EventSink,
        (approved_ran, invocations): (&mut Vec<String>, &mut Vec<ToolInvocation>),
    ) -> Result<Result<Vec<Answer>, Box<SuspendedState>>, LoopError> {
        let gate = self.gate(machine.settings());
        let mut answers = Vec::with_capacity(calls.len());
        for (call, plan) in calls {
            if !ctx.lease_held() {
                return Err(LoopError::LeaseLost);
            }
            let invocation = match self
                .answer(&gate, call, plan, round, on_resume, ctx, sink)
                .await
            {
                Ok(invocation) => invocation,
                Err(asked) => {
                    let state = asked_state(machine, (round, calls), answers, call, *asked, ctx);
                    return Ok(Err(Box::new(state)));
                }
            };
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
        Ok(Ok(answers))
    }

    /// The step before the next model request: waiting at the budget if a limit is reached
    /// (measured now: the running time so far, the cost under the configuration's prices), else
    /// the model's answer.
    async fn next_request(
        &self,
        machine: &mut Machine,
        ctx: &RunContext,
        sink: &dyn EventSink,
        approved_ran: &[String],
        running: &(dyn Fn() -> u64 + Sync),
    ) -> Result<Next, LoopError> {
        machine.running_for(running());
        let cost = ctx.prices.cost_micros(&machine.counters().usage);
        if let Some(wait) = machine.budget_before_request(cost) {
            return Ok(wait);
        }
        if let Some(watch) = &ctx.spend {
            let round = machine.counters().iterations + 1;
            if let Some(stop) = watch.stop_before(round).await {
                return Ok(machine.wait_at(stop));
            }
        }
        self.ask_model(machine, ctx, sink, approved_ran, running)
            .await
    }

    /// Asks the model for the machine's next round and reads its answer into the next step. The
    /// gate is taken fresh each round: a tool disabled meanwhile is no longer offered.
    async fn ask_model(
        &self,
        machine: &mut Machine,
        ctx: &RunContext,
        sink: &dyn EventSink,
        approved_ran: &[String],
        running: &(dyn Fn() -> u64 + Sync),
    ) -> Result<Next, LoopError> {
        let gate = self.gate(machine.settings());
        let ask = machine.ask(gate.specs());
        if !ctx.lease_held() {
            return Err(LoopError::LeaseLost);
        }
        let (answer, spent) = self.ask(&ask, ctx.trace.as_ref(), sink).await;
        if let Some(watch) = &ctx.spend {
            let mut usage = spent;
            if let Ok(response) = &answer {
                usage += response.usage;
            }
            let cost = ctx.prices.cost_micros(&usage).unwrap_or(0);
            watch.add(u64::try_from(cost).unwrap_or(0)).await;
        }
        machine.spent(spent);
        machine.running_for(running());
        match answer {
            Ok(response) => Ok(machine.answered(&ask, response, |call| {
                gate.pass(call, &ctx.rules, ctx.quorum.for_tool(&call.name))
            })),
            Err(error) => Err(LoopError::Provider {
                error: Box::new(error),
                counters: machine.counters(),
                transcript: machine.messages().to_vec(),
                approved_ran: approved_ran.to_vec(),
            }),
        }
    }

    /// One provider request with its events, and what its failed attempts used (the usage of
    /// each stream that broke off: the steps that say so count it).
    pub(super) async fn ask(
        &self,
        ask: &Ask,
        trace: Option<&crate::trace::RunTrace>,
        sink: &dyn EventSink,
    ) -> (Result<ChatResponse, ProviderError>, Usage) {
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
        let spent = std::sync::Mutex::new(Usage::default());
        let on_retry = |notice: RetryNotice| {
            if let (Some(usage), Ok(mut spent)) = (notice.spent, spent.lock()) {
                *spent += usage;
            }
            sink.emit(Event::ProviderRetry {
                round,
                retry: notice.retry,
                wait_ms: notice.wait_ms,
                reason: notice.reason,
                hint: notice.hint,
                usage: notice.spent,
            })
        };
        // The first piece of the last attempt (a retry starts the response over).
        let first_token = std::sync::Mutex::new(None::<u64>);
        let on_retry = |notice: RetryNotice| {
            if let Ok(mut first) = first_token.lock() {
                *first = None;
            }
            on_retry(notice)
        };
        let on_delta = |delta: Delta| {
            if let Ok(mut first) = first_token.lock() {
                first.get_or_insert_with(|| elapsed_ms(started));
            }
            sink.delta(round, delta)
        };
        failpoint::reach("during_model_call");
        let answer = self
            .streamed(&ask.request, trace, (&on_retry, &on_delta))
            .await;
        let mut spent = spent.into_inner().unwrap_or_default();
        let answer = match answer {
            Ok(response) => {
                sink.emit(Event::Llm {
                    round,
                    content: response.content.clone(),
                    tool_calls: response.tool_calls.clone(),
                    usage: response.usage,
                    finish_reason: response.finish_reason.clone(),
                    duration_ms: elapsed_ms(started),
                    first_token_ms: first_token.lock().ok().and_then(|first| *first),
                    raw: response.raw.clone(),
                });
                Ok(response)
            }
            Err(error) => {
                if let Some(usage) = error.spent {
                    spent += usage;
                }
                sink.emit(Event::LlmFailed {
                    round,
                    message: error.message.clone(),
                    duration_ms: elapsed_ms(started),
                    usage: error.spent,
                });
                Err(error)
            }
        };
        (answer, spent)
    }

    /// The provider's answer to `request`, streamed, in its `chat` span ([`spans`]).
    async fn streamed(
        &self,
        request: &crate::provider::ChatRequest,
        trace: Option<&crate::trace::RunTrace>,
        (on_retry, on_delta): (
            crate::provider::RetryObserver<'_>,
            crate::provider::DeltaObserver<'_>,
        ),
    ) -> Result<ChatResponse, ProviderError> {
        let messages = || serde_json::to_string(&request.messages).unwrap_or_default();
        let asked = spans::ChatAsked {
            trace,
            provider: self.provider.name(),
            model: self.provider.model(),
            options: &request.options,
            messages: &messages,
        };
        spans::chat(asked, self.provider.stream(request, on_retry, on_delta)).await
    }
}

/// The step of a run that starts to wait: at its budget, or for a decision on its turn.
/// The state a turn waits in when `call`'s server asked the operator (`asked`), with `answers`
/// the answers of the calls before it: each call keeps the choice it was decided with, and the
/// keys, bases and notes it runs with.
fn asked_state(
    machine: &Machine,
    (round, calls): (u32, &[(ToolCall, CallPlan)]),
    answers: Vec<Answer>,
    call: &ToolCall,
    asked: crate::elicit::Asked,
    ctx: &RunContext,
) -> SuspendedState {
    let choices = calls
        .iter()
        .map(|(_, plan)| match plan {
            CallPlan::Decide(choice) => choice.clone(),
            // Answered with its result whatever the choice says.
            CallPlan::Known(_) => Choice::Approve,
        })
        .collect();
    let effect_keys = calls
        .iter()
        .map(|(call, _)| {
            let key = ctx
                .effect_keys
                .get(&call.id)
                .cloned()
                .unwrap_or_else(|| effect_key(&ctx.run_id, round, &call.id));
            (call.id.clone(), key)
        })
        .collect();
    let elicited = crate::elicit::Elicited {
        call_id: call.id.clone(),
        asked,
        choices,
        effect_keys,
        approved_bases: ctx.approved_bases.clone(),
        notes: ctx.call_notes.clone(),
    };
    machine.waiting_for_reply(calls, answers, elicited)
}

fn waiting_event(state: &SuspendedState) -> Event {
    if let Some(wait) = &state.elicited {
        return Event::InputAsked {
            round: state.counters.iterations,
            call_id: wait.call_id.clone(),
            tool: state
                .pending
                .iter()
                .find(|call| call.id == wait.call_id)
                .map(|call| call.name.clone())
                .unwrap_or_default(),
            server: wait.asked.server.clone(),
            message: wait.asked.message.clone(),
            schema: wait.asked.schema.clone(),
            link: wait.asked.link.clone(),
            held: wait.asked.held_until_ms.is_some(),
        };
    }
    match state.budget {
        Some(stop) => Event::BudgetReached {
            round: state.counters.iterations,
            stop,
        },
        None => Event::ApprovalRequested {
            round: state.counters.iterations,
            calls: state.pending.clone(),
            gated: state.gated.clone(),
            approvals_required: state.approvals_required,
        },
    }
}

impl ToolLoop {
    /// A turn that stopped at a call whose server asked the operator, replied: the call is
    /// sent again with the reply, and the turn goes on as it was decided (calls answered before
    /// it keep their results).
    async fn resume_with_reply(
        &self,
        state: &SuspendedState,
        wait: &crate::elicit::Elicited,
        reply: &crate::elicit::Reply,
        ctx: &RunContext,
        sink: &dyn EventSink,
    ) -> Result<LoopOutcome, LoopError> {
        if !ctx.decision_recorded {
            sink.emit(reply_event(state, wait, reply, (&ctx.actor, None)));
        }
        let mut ctx = ctx.clone();
        ctx.effect_keys = wait.effect_keys.clone();
        ctx.approved_bases.extend(wait.approved_bases.clone());
        ctx.call_notes = wait.notes.clone();
        ctx.reply = Some((
            wait.call_id.clone(),
            crate::elicit::Replied {
                key: wait.asked.key.clone(),
                request_state: wait.asked.request_state.clone(),
                reply: reply.clone(),
                held: wait.asked.held_until_ms.is_some(),
            },
        ));
        let plans = state
            .pending
            .iter()
            .zip(wait.choices.iter().cloned())
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

    /// A run that waited at its budget, decided: with the raised limits it goes on from
    /// exactly where it stopped (the model asked, or the pending turn's calls — checked again,
    /// and gated as before); stopped, it ends there with what it had.
    async fn resume_at_budget(
        &self,
        state: &SuspendedState,
        decision: &Decision,
        ctx: &RunContext,
        sink: &dyn EventSink,
    ) -> Result<LoopOutcome, LoopError> {
        if !ctx.decision_recorded {
            if let Some(event) = budget_decision_event(state, decision, &ctx.actor, None) {
                sink.emit(event);
            }
        }
        let limits = match decision {
            Decision::RaiseBudget { limits } => limits,
            // A daily cap with room again: its own limits as they are.
            Decision::ContinueAtBudget => &state.settings.limits,
            _ => {
                return Ok(LoopOutcome::Completed(Completed {
                    content: String::new(),
                    invocations: Vec::new(),
                    counters: state.counters,
                    truncated: false,
                    messages: state.messages.clone(),
                    budget_stopped: state.budget,
                }))
            }
        };
        let mut raised = state.clone();
        raised.settings.limits = *limits;
        let gate = self.gate(&raised.settings);
        let (machine, next) = Machine::resume_at_budget(&raised, |call| {
            gate.pass(call, &ctx.rules, ctx.quorum.for_tool(&call.name))
        });
        self.drive(machine, next, ctx, sink).await
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
                let next = machine.pending_turn(calls, answered, |call| {
                    gate.pass(call, &ctx.rules, ctx.quorum.for_tool(&call.name))
                });
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
        decision.fits_budget(state.budget.as_ref())?;
        decision.fits_reply(state.elicited.as_ref())?;
        if state.budget.is_some() {
            return self.resume_at_budget(state, decision, ctx, sink).await;
        }
        if let (Some(wait), Decision::Reply { reply }) = (&state.elicited, decision) {
            return self.resume_with_reply(state, wait, reply, ctx, sink).await;
        }
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
        decision.fits_budget(state.budget.as_ref())?;
        decision.fits_reply(state.elicited.as_ref())?;
        if state.budget.is_some() {
            // Nothing of the turn is decided: it goes on (or stops) where the budget stopped it.
            return Ok(Vec::new());
        }
        if let Some(wait) = &state.elicited {
            // The turn was decided before its call's server asked.
            return Ok(wait.choices.clone());
        }
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
