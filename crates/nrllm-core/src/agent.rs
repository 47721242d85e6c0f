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
use crate::preview::{preview_pending, CallPreview};
use crate::provider::{
    ChatRequest, ChatResponse, Provider, ProviderError, RetryNotice, ToolChoice,
};
use crate::registry::{Gate, ToolRegistry};
use crate::state::{Counters, RunSettings, StateError, SuspendedState, STATE_SCHEMA_VERSION};
use crate::tool::{ToolContext, ToolError};
use crate::transcript::{Message, ToolCall, ToolOutcome};

/// Tool results longer than this many bytes are cut (on a UTF-8 boundary) with a marker.
pub const MAX_RESULT_BYTES: usize = 50_000;

/// What a run starts from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunInput {
    pub system_prompt: Option<String>,
    pub skills: Vec<Skill>,
    /// The user's messages (usually one).
    pub messages: Vec<Message>,
    pub settings: RunSettings,
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
    /// The provider failed; `counters` are the run's totals up to the failure.
    #[error("the model provider failed: {error}")]
    Provider {
        error: ProviderError,
        counters: Counters,
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
    fn check_decision(&self, state: &SuspendedState, decision: &Decision) -> Result<(), LoopError>;

    /// The previews of the pending turn's gated calls, as the operator sees them. A loop whose
    /// tools have no previews need not say.
    async fn preview(&self, _state: &SuspendedState, _run_id: &str) -> Vec<CallPreview> {
        Vec::new()
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

    /// Rounds until the model answers without tools, a turn needs approval, or the cap is hit.
    /// `recorded` is how many messages of the transcript earlier `request` events hold already.
    #[allow(clippy::too_many_arguments)]
    async fn drive(
        &self,
        mut messages: Vec<Message>,
        mut recorded: usize,
        mut counters: Counters,
        settings: RunSettings,
        ctx: &RunContext,
        sink: &dyn EventSink,
        mut invocations: Vec<ToolInvocation>,
    ) -> Result<LoopOutcome, LoopError> {
        loop {
            let capped = counters.iterations >= settings.max_rounds;
            // The gate is taken fresh each round: a tool disabled meanwhile is no longer offered.
            let gate = self.gate(&settings);
            // The capped round still declares the tools (formats such as Anthropic's reject a
            // transcript with tool calls but no tools) and forbids calling them.
            let choice = if capped {
                ToolChoice::Disabled
            } else {
                ToolChoice::Auto
            };
            counters.iterations += 1;
            let round = counters.iterations;
            let response = self
                .ask(
                    round,
                    (&messages, recorded),
                    (gate.specs(), choice),
                    &settings,
                    &mut counters,
                    sink,
                )
                .await?;
            recorded = messages.len();

            if capped || response.tool_calls.is_empty() {
                let content = response.content.unwrap_or_default();
                // A model that calls tools in the tool-less round is answered by its text alone.
                messages.push(Message::assistant_text(content.clone()));
                return Ok(LoopOutcome::Completed(Completed {
                    content,
                    invocations,
                    counters,
                    truncated: capped,
                    messages,
                }));
            }

            let calls = response.tool_calls;
            messages.push(Message::Assistant {
                content: response.content,
                tool_calls: calls.clone(),
            });
            // The whole turn is checked before any of its calls runs.
            let gated: Vec<String> = calls
                .iter()
                .filter(|call| gate.requires_approval(&call.name))
                .map(|call| call.id.clone())
                .collect();
            if !gated.is_empty() {
                sink.emit(Event::ApprovalRequested {
                    round,
                    calls: calls.clone(),
                    gated: gated.clone(),
                });
                return Ok(LoopOutcome::Suspended(SuspendedState {
                    schema_version: STATE_SCHEMA_VERSION,
                    messages,
                    pending: calls,
                    gated,
                    counters,
                    settings,
                    recorded_messages: recorded,
                }));
            }
            for call in &calls {
                let invocation = self
                    .answer(&gate, call, &Choice::Approve, round, false, ctx, sink)
                    .await;
                counters.tool_calls += 1;
                messages.push(Message::tool_answer(
                    &call.id,
                    &invocation.result,
                    invocation.outcome,
                ));
                invocations.push(invocation);
            }
        }
    }

    /// One provider request with its events.
    async fn ask(
        &self,
        round: u32,
        (messages, recorded): (&[Message], usize),
        (tools, tool_choice): (Vec<crate::tool::ToolSpec>, ToolChoice),
        settings: &RunSettings,
        counters: &mut Counters,
        sink: &dyn EventSink,
    ) -> Result<ChatResponse, LoopError> {
        let first = recorded.min(messages.len());
        sink.emit(Event::Request {
            round,
            first: Some(first),
            messages: messages[first..].to_vec(),
            tools_offered: match tool_choice {
                ToolChoice::Auto => tools.iter().map(|t| t.name.clone()).collect(),
                ToolChoice::Disabled => Vec::new(),
            },
        });
        let request = ChatRequest {
            messages: messages.to_vec(),
            tools,
            tool_choice,
            options: settings.model.clone(),
        };
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
        match self.provider.complete(&request, &on_retry).await {
            Ok(response) => {
                counters.usage += response.usage;
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
                Err(LoopError::Provider {
                    error,
                    counters: *counters,
                })
            }
        }
    }

    /// Answers one call: runs the tool if the gate offers it (with `edited` arguments if given),
    /// otherwise says why not. Never fails; failures become `Error:` results.
    #[allow(clippy::too_many_arguments)]
    async fn answer(
        &self,
        gate: &Gate,
        call: &ToolCall,
        choice: &Choice,
        round: u32,
        on_resume: bool,
        ctx: &RunContext,
        sink: &dyn EventSink,
    ) -> ToolInvocation {
        let started = Instant::now();
        let edited = match choice {
            Choice::ApproveEdited { arguments } => Some(arguments),
            _ => None,
        };
        let (result, outcome, executed) = match (gate.tool(&call.name), choice) {
            (_, Choice::Deny { reason }) => {
                (refusal_text(reason.as_deref()), ToolOutcome::Denied, false)
            }
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
                    approved_basis: ctx.approved_bases.get(&call.id).cloned(),
                };
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
                        (err.model_text(), ToolOutcome::Error, true)
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
        let invocation = ToolInvocation {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: edited.map_or_else(|| call.arguments.clone(), Value::to_string),
            result,
            outcome,
            executed,
            duration_ms: elapsed_ms(started),
        };
        sink.emit(Event::Tool {
            round,
            call_id: invocation.call_id.clone(),
            name: invocation.name.clone(),
            arguments: invocation.arguments.clone(),
            result: invocation.result.clone(),
            is_error: !outcome.is_ok(),
            outcome: Some(outcome),
            executed,
            duration_ms: invocation.duration_ms,
            on_resume,
        });
        invocation
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
        self.drive(
            assembly.messages,
            0,
            Counters::default(),
            input.settings,
            ctx,
            sink,
            Vec::new(),
        )
        .await
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
        let choices = decision.resolve(&state.pending, &gate)?;
        sink.emit(Event::ApprovalDecided {
            round: Some(state.counters.iterations),
            decided_by: ctx.actor.clone(),
            choices: state
                .pending
                .iter()
                .zip(&choices)
                .map(|(call, choice)| CallChoice {
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    choice: choice.clone(),
                    original_arguments: matches!(choice, Choice::ApproveEdited { .. })
                        .then(|| call.arguments.clone()),
                })
                .collect(),
        });
        let mut messages = state.messages.clone();
        let mut counters = state.counters;
        let round = counters.iterations;
        for (call, choice) in state.pending.iter().zip(&choices) {
            let answered = self
                .answer(&gate, call, choice, round, true, ctx, sink)
                .await;
            counters.tool_calls += 1;
            messages.push(Message::tool_answer(
                &call.id,
                answered.result,
                answered.outcome,
            ));
        }
        self.drive(
            messages,
            state.recorded_messages,
            counters,
            state.settings.clone(),
            ctx,
            sink,
            Vec::new(),
        )
        .await
    }

    fn check_decision(&self, state: &SuspendedState, decision: &Decision) -> Result<(), LoopError> {
        state.check()?;
        decision.resolve(&state.pending, &self.gate(&state.settings))?;
        Ok(())
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
