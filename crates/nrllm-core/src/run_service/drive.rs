//! Driving a segment and persisting how it ends: suspended again, decided by rules, completed,
//! failed, cancelled or too large to keep.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::claimed::{verdict_of, ClaimedRun};
use super::segment::{Segment, SegmentSink};
use super::{dispatches, recorded_decision, unavailable, wait_deadline, RunService};
use crate::events::{Event, EventSink, UnknownStep};
use crate::failpoint;
use crate::interrupt::Stop;
use crate::run_store::{
    CancelRequest, ClaimRecord, Finish, RunRecord, RunStatus, SequencedEvent, StoreError,
    TerminationReason, Verdict,
};
use crate::state::{Counters, Kept, SuspendedState};
use crate::tool_loop::{
    automatic_decision, decision_event, LoopError, LoopOutcome, RunContext, AUTOMATIC,
};

impl RunService {
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

    /// Carries out a claimed decision that this instance holds, in the run's span
    /// ([`super::in_run_span`]).
    pub(super) async fn carry_out_here(
        &self,
        claimed: ClaimedRun,
    ) -> Result<RunRecord, StoreError> {
        let sink = SegmentSink::new(
            self,
            claimed.id,
            claimed.last_sequence,
            &claimed.configuration,
        );
        let (id, trace) = (claimed.id, claimed.trace.clone());
        super::in_run_span(id, trace.as_ref(), Box::pin(self.carry_out(claimed, &sink))).await
    }

    /// Carries out a claimed decision in `sink`'s segment, and persists how the segment ends.
    pub(super) async fn carry_out(
        &self,
        claimed: ClaimedRun,
        sink: &SegmentSink,
    ) -> Result<RunRecord, StoreError> {
        let id = claimed.id;
        let ctx = RunContext {
            prices: self.loops.prices(&claimed.configuration),
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
            spend: self.spend_watch(&claimed.configuration, &claimed.requested_by),
            quorum: self.loops.quorum(&claimed.configuration),
            progress: self.progress_hook(id),
            trace: crate::spans::carried(claimed.trace.as_ref()),
            ..RunContext::default()
        };
        let work = claimed
            .tool_loop
            .resume(&claimed.state, &claimed.decision, &ctx, sink);
        let segment = Segment {
            id,
            version: claimed.version,
            configuration: &claimed.configuration,
            requested_by: &claimed.requested_by,
            counters: claimed.state.counters,
            sink,
            verdict: Some(claimed.verdict),
            tool_loop: Some(&claimed.tool_loop),
        };
        self.drive_segment(segment, claimed.cancel.clone(), work)
            .await
    }

    /// Drives a segment with `work`, unless a cancel comes first (`already`: asked before it
    /// began), and persists how it ends.
    pub(super) async fn drive_segment(
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
            (Ok(Ok(mut outcome)), None) => {
                if let LoopOutcome::Suspended(state) = &mut outcome {
                    state.waiting_since_ms = Some(self.clock.now_ms());
                }
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
    pub(super) async fn end_too_large(
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
    pub(super) async fn close(
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
    pub(super) fn decided_here<'a>(
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
            let decision = recorded_decision(&state, (&automatic_decision(&state), &choices));
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
                vote: None,
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
                // Carried out within the segment's own span.
                trace: None,
                version,
                last_sequence: last_sequence_of(&claim.events),
                state,
                configuration: segment.configuration.clone(),
                requested_by: segment.requested_by.to_owned(),
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
    pub(super) async fn end_cancelled(
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

    /// Writes the end of a segment: suspended again, completed, or failed — with its events. A
    /// state to keep comes with its JSON if the caller serialized it already (to measure it).
    pub(super) async fn persist(
        &self,
        segment: &Segment<'_>,
        outcome: Result<LoopOutcome, LoopError>,
        state_json: Option<String>,
    ) -> Result<RunRecord, StoreError> {
        let events = segment.sink.take();
        match outcome {
            // A decided turn is carried out by `drive_segment`; should one reach here, it waits
            // for an operator rather than run unjournaled.
            Ok(LoopOutcome::Suspended(state) | LoopOutcome::Decided(state)) => {
                let kept = match state_json {
                    Some(json) => Kept::serialized(&state, json),
                    None => Kept::new(&state),
                };
                self.persist_waiting(segment, &state, kept, events).await
            }
            Ok(LoopOutcome::Completed(done)) if done.budget_stopped.is_some() => {
                self.end_at_budget(segment, done, events).await
            }
            Ok(LoopOutcome::Completed(done)) => {
                let reason = if done.truncated {
                    TerminationReason::MaxIterations
                } else if segment.verdict == Some(Verdict::Expired) {
                    TerminationReason::ApprovalExpired
                } else if segment.verdict == Some(Verdict::Denied) {
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
                        .estimate_cost_micros(segment.configuration, done.counters.usage),
                };
                self.close(segment, &finish, &events).await
            }
            Err(err) => {
                let (counters, summary) = failure_summary(&err);
                tracing::warn!(run_id = %segment.id, error = %err, "run failed");
                let finish = Finish {
                    status: RunStatus::Failed,
                    reason: TerminationReason::ProviderFailed,
                    counters,
                    truncated: false,
                    final_answer: None,
                    error_summary: Some(summary),
                    estimated_cost_micros: self
                        .loops
                        .estimate_cost_micros(segment.configuration, counters.usage),
                };
                self.close(segment, &finish, &events).await
            }
        }
    }

    /// Ends a run that waited at its budget where a person (or the deadline) stopped it:
    /// completed with no answer, `budget_exhausted` (`budget_expired` for the deadline), and a
    /// step that says which limit and what did not happen.
    async fn end_at_budget(
        &self,
        segment: &Segment<'_>,
        done: crate::tool_loop::Completed,
        mut events: Vec<SequencedEvent>,
    ) -> Result<RunRecord, StoreError> {
        let expired = segment.verdict == Some(Verdict::Expired);
        let (reason, why) = match expired {
            true => (
                TerminationReason::BudgetExpired,
                "nobody raised its budget before the deadline",
            ),
            false => (
                TerminationReason::BudgetExhausted,
                "it was stopped at its budget",
            ),
        };
        let summary = match done.budget_stopped {
            Some(stop) => format!("The run ended: {why} ({}).", stop.explain()),
            None => format!("The run ended: {why}."),
        };
        segment.sink.emit(Event::Ended {
            reason: reason.as_str().to_owned(),
            explanation: summary.clone(),
        });
        events.extend(segment.sink.take());
        let finish = Finish {
            status: RunStatus::Completed,
            reason,
            counters: done.counters,
            truncated: false,
            final_answer: None,
            error_summary: Some(summary),
            estimated_cost_micros: self
                .loops
                .estimate_cost_micros(segment.configuration, done.counters.usage),
        };
        self.close(segment, &finish, &events).await
    }

    /// Suspends a segment's run to wait for a person, unless a cancel asked for on another
    /// instance came first (then it stops instead).
    async fn persist_waiting(
        &self,
        segment: &Segment<'_>,
        state: &SuspendedState,
        kept: Kept<'_>,
        events: Vec<SequencedEvent>,
    ) -> Result<RunRecord, StoreError> {
        let now = self.clock.now_ms();
        let waiting = match self
            .store
            .suspend(
                segment.id,
                segment.version,
                kept,
                &events,
                now,
                wait_deadline(segment.configuration, state, now),
            )
            .await
        {
            Err(StoreError::CancelRequested { request, .. }) => {
                return self.end_cancelled(segment, events, request).await;
            }
            other => other?,
        };
        self.notify_status(segment.id, state.waiting_for());
        Ok(waiting)
    }
}

/// The sequence of the last of `events` (0 for none).
pub(super) fn last_sequence_of(events: &[SequencedEvent]) -> i64 {
    events.last().map_or(0, |e| e.sequence)
}

/// What a failed segment's run keeps (its counters) and what the operator reads about it.
fn failure_summary(err: &LoopError) -> (Counters, String) {
    match err {
        LoopError::Provider {
            error,
            counters,
            approved_ran,
            ..
        } if !approved_ran.is_empty() => (
            *counters,
            format!(
                "The calls you approved ran ({}): their effects happened. Then the model call \
                 failed: {}. Retry asks the model again from here without running them again.",
                approved_ran.join(", "),
                error.message
            ),
        ),
        LoopError::Provider {
            error, counters, ..
        } => (*counters, error.message.clone()),
        // Decision and state errors are refused before a claim; should one reach here, its
        // detail stays in the log, not in the operator's summary.
        _ => (
            Counters::default(),
            "The run could not continue; the details are in the server log.".to_owned(),
        ),
    }
}
