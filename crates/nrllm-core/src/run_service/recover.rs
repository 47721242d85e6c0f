//! Recovery of a run a stop of the server cut off, from its last durable step.

use std::sync::Arc;

use uuid::Uuid;

use super::claimed::decision_on_record;
use super::claimed::ClaimedRun;
use super::errors::ServiceError;
use super::segment::SegmentSink;
use super::{approval_deadline, RunService, INTERRUPTED_SUMMARY};
use crate::events::{Event, EventSink, UnknownStep};
use crate::run_store::EffectRecord;
use crate::run_store::{
    Finish, RunConfiguration, RunRecord, RunStatus, StoreError, TerminationReason,
};
use crate::state::Answer;
use crate::state::{Kept, StateError, SuspendedState, UnknownCall};
use crate::tool_loop::ToolLoopService;

impl RunService {
    /// Recovers a run that a stop of the server cut off while it was running (status `running`,
    /// nothing driving it): it goes on from its last durable step, as the module says — or, if a
    /// dispatched call's outcome is unknown, it waits for an operator with that call marked.
    /// The run as it is afterwards.
    pub async fn recover(&self, id: Uuid) -> Result<RunRecord, ServiceError> {
        let run = self.store.get(id).await?.ok_or(StoreError::NotFound(id))?;
        let trace = run.trace.clone();
        super::in_run_span(id, trace.as_ref(), Box::pin(self.recover_run(run))).await
    }

    async fn recover_run(&self, run: RunRecord) -> Result<RunRecord, ServiceError> {
        let id = run.id;
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
        let round = state.counters.iterations;
        let unknown = self.journaled(id, &mut state, &tool_loop).await?;
        let sink = SegmentSink::new(self, id, run.last_sequence, &configuration);
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
        Ok(self
            .wait_on_unknown(&run, state, &configuration, unknown, sink)
            .await?)
    }

    /// What the journal says about each approved call of the turn: a journaled result becomes
    /// the call's answer in `state`; the calls returned may or may not have taken effect (a
    /// call of a tool that is idempotent by key simply runs again with its key).
    async fn journaled(
        &self,
        id: Uuid,
        state: &mut SuspendedState,
        tool_loop: &Arc<dyn ToolLoopService>,
    ) -> Result<Vec<EffectRecord>, StoreError> {
        let round = state.counters.iterations;
        let mut unknown = Vec::new();
        for effect in self.store.effects(id).await? {
            if effect.round != round {
                continue;
            }
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
                None if tool_loop.idempotent_by_key(state, &effect.tool) => {}
                None => unknown.push(effect),
            }
        }
        Ok(unknown)
    }

    /// Some call may or may not have taken effect: the run waits for an operator, with the
    /// calls marked.
    async fn wait_on_unknown(
        &self,
        run: &RunRecord,
        mut state: SuspendedState,
        configuration: &RunConfiguration,
        unknown: Vec<EffectRecord>,
        sink: SegmentSink,
    ) -> Result<RunRecord, StoreError> {
        if state.elicited.take().is_some() {
            // The stop cut off a call sent again with a reply to its server's question: the
            // rest of the turn is decided again with it, by a person.
            state.gated = state
                .pending
                .iter()
                .filter(|call| !state.answered.iter().any(|a| a.call_id == call.id))
                .map(|call| call.id.clone())
                .collect();
        }
        state.unknown = unknown
            .iter()
            .map(|effect| UnknownCall {
                call_id: effect.call_id.clone(),
                effect_key: effect.effect_key.clone(),
                dispatched_at_ms: effect.dispatched_at_ms,
            })
            .collect();
        sink.emit(Event::OutcomeUnknown {
            round: state.counters.iterations,
            calls: unknown
                .into_iter()
                .map(|effect| UnknownStep {
                    call_id: effect.call_id,
                    tool: effect.tool,
                    effect_key: effect.effect_key,
                    dispatched_at_ms: effect.dispatched_at_ms,
                })
                .collect(),
        });
        state.approvals_required = self.loops.quorum(configuration).for_turn(&state);
        let now = self.clock.now_ms();
        let waiting = self
            .store
            .suspend(
                run.id,
                run.version,
                Kept::new(&state),
                &sink.take(),
                now,
                approval_deadline(configuration, now),
            )
            .await?;
        self.notify_status(run.id, state.waiting_for());
        Ok(waiting)
    }

    /// Ends a run that cannot go on after a restart (its configuration cannot be driven now).
    pub(super) async fn end_interrupted(
        &self,
        run: &RunRecord,
        configuration: &RunConfiguration,
        reason: &str,
    ) -> Result<RunRecord, ServiceError> {
        let sink = SegmentSink::new(self, run.id, run.last_sequence, configuration);
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
}
