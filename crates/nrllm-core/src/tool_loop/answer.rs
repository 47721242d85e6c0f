//! Answering a turn's calls: each run (or not) as its plan says, its result cut to size and
//! recorded with its effect key.

use std::sync::Arc;

use super::base::*;
use super::service::*;
use crate::decision::{refusal_text, Choice};
use crate::elicit::Asked;
use crate::events::{Event, EventSink};
use crate::failpoint;
use crate::registry::Gate;
use crate::spans;
use crate::state::Answer;
use crate::state::SuspendedState;
use crate::step_machine::CallPlan;
use crate::tool::DynTool;
use crate::tool::{ToolContext, ToolError};
use crate::transcript::{ToolCall, ToolOutcome};
use serde_json::Value;
use std::time::Instant;

/// Tool results and error texts longer than this many bytes are cut (on a UTF-8 boundary) with a
/// marker.
pub const MAX_RESULT_BYTES: usize = 50_000;

/// The `tool` step of an answered call.
pub(super) fn emit_tool(
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

pub(super) fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl ToolLoop {
    /// Answers one call as planned: runs the tool if the gate offers it (with edited arguments
    /// if given), or answers without running it (denied, a result the operator wrote, a failure
    /// the operator reports, a result journaled before a restart). Failures become `Error:`
    /// results; `Err` is the one thing that is not an answer: the tool's server asked the
    /// operator first ([`crate::elicit`]), and nothing of the call is journaled yet.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn answer(
        &self,
        gate: &Gate,
        call: &ToolCall,
        plan: &CallPlan,
        round: u32,
        on_resume: bool,
        ctx: &RunContext,
        sink: &dyn EventSink,
    ) -> Result<ToolInvocation, Box<Asked>> {
        let started = Instant::now();
        let choice = match plan {
            CallPlan::Known(known) => {
                return Ok(self.record(
                    call,
                    known.clone(),
                    (
                        round,
                        on_resume,
                        "its result was journaled already; it does not run again",
                    ),
                    started,
                    sink,
                ))
            }
            CallPlan::Decide(choice) => choice,
        };
        let edited = match choice {
            Choice::ApproveEdited { arguments } => Some(arguments),
            _ => None,
        };
        let (result, outcome, executed) = match gate.tool(&call.name) {
            Some(tool) if choice.runs() => {
                self.run_tool(tool, call, edited, (round, on_resume), ctx)
                    .await?
            }
            tool => not_run(
                call,
                tool.map(|t| t.spec().asks_operator),
                choice,
                on_resume,
            ),
        };
        let result = match edited {
            Some(arguments) if executed => {
                format!("(The operator edited the arguments to {arguments}.)\n{result}")
            }
            _ => result,
        };
        let note = call_note(ctx, &call.id, executed && on_resume);
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
        Ok(invocation)
    }

    /// Runs the tool of an approved or free call (with the operator's edited arguments, if
    /// any), keyed by its effect key when it follows a decision. Its result, cut to size.
    async fn run_tool(
        &self,
        tool: &Arc<dyn DynTool>,
        call: &ToolCall,
        edited: Option<&Value>,
        (round, on_resume): (u32, bool),
        ctx: &RunContext,
    ) -> Result<(String, ToolOutcome, bool), Box<Asked>> {
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
            progress: ctx
                .progress
                .as_ref()
                .map(|hook| hook.for_call(&call.id, &call.name)),
            approved_basis: ctx.approved_bases.get(&call.id).cloned(),
            // An approved call's effect is keyed ([`call_effect_key`]), so that running
            // it again after a restart applies nothing twice.
            effect_key: on_resume.then(|| {
                ctx.effect_keys
                    .get(&call.id)
                    .cloned()
                    .unwrap_or_else(|| effect_key(&ctx.run_id, round, &call.id))
            }),
            reply: ctx
                .reply
                .as_ref()
                .filter(|(id, _)| *id == call.id)
                .map(|(_, replied)| replied.clone()),
        };
        if on_resume {
            failpoint::reach("before_approved_tool");
        }
        let ran = match arguments {
            Ok(arguments) => {
                let called = spans::ToolCalled {
                    trace: ctx.trace.as_ref(),
                    name: &call.name,
                    call_id: &call.id,
                    effect_key: tool_ctx.effect_key.as_deref(),
                    arguments: &arguments,
                };
                let work = tool.execute(&arguments, &tool_ctx);
                spans::tool(called, work).await
            }
            Err(err) => Err(err),
        };
        match ran {
            Ok(text) => Ok((cap_result(text), ToolOutcome::Ok, true)),
            Err(ToolError::Asks(asked)) => Err(asked),
            Err(err) => {
                if let ToolError::Internal(detail) = &err {
                    tracing::error!(tool = %call.name, call_id = %call.id, run_id = %ctx.run_id, %detail, "tool failed");
                }
                Ok((cap_result(err.model_text()), ToolOutcome::Error, true))
            }
        }
    }

    /// Answers a call with a result known already (nothing runs).
    pub(super) fn record(
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

/// The note of a call's step: the rule or check that let it through, and that it ran again after
/// a restart (under the same effect key).
fn call_note(ctx: &RunContext, call_id: &str, ran_on_resume: bool) -> Option<String> {
    let again = (ctx.recovering && ran_on_resume)
        .then_some("run again with the same effect key after a restart");
    match (ctx.call_notes.get(call_id), again) {
        (Some(ruled), Some(again)) => Some(format!("{ruled}; {again}")),
        (Some(ruled), None) => Some(ruled.clone()),
        (None, again) => again.map(str::to_owned),
    }
}

/// The answer to a call that does not run: denied, answered by the operator (a question's
/// answer is its whole result), reported failed, expired, or a tool that is not offered (any
/// more). `asks_operator`: whether the call's tool, if offered, is a question.
fn not_run(
    call: &ToolCall,
    asks_operator: Option<bool>,
    choice: &Choice,
    on_resume: bool,
) -> (String, ToolOutcome, bool) {
    match (asks_operator, choice) {
        (_, Choice::Deny { reason }) => {
            (refusal_text(reason.as_deref()), ToolOutcome::Denied, false)
        }
        (Some(true), Choice::Respond { result }) => (result.clone(), ToolOutcome::Ok, false),
        (_, Choice::Respond { result }) => (
            format!("(The operator answered this call without running the tool.)\n{result}"),
            ToolOutcome::Ok,
            false,
        ),
        (_, Choice::Failed { note }) => (failed_text(note.as_deref()), ToolOutcome::Error, false),
        (_, Choice::Expired { text }) => (text.clone(), ToolOutcome::Denied, false),
        (_, _) if on_resume => (
            format!(
                "Error: tool `{}` is no longer available (it was disabled, or its MCP server no \
                 longer lists it), so it was not executed",
                call.name
            ),
            ToolOutcome::Error,
            false,
        ),
        (_, _) => (
            format!("Error: tool `{}` is not available to this run", call.name),
            ToolOutcome::Error,
            false,
        ),
    }
}
