//! New runs that go on from old ones: a retry of a failed model call, a fork at a step.

use uuid::Uuid;

use super::errors::{ForkError, RetryError, ServiceError};
use super::RunService;
use crate::authority::{Act, Actor, Refusal};
use crate::events::Event;
use crate::run_store::{Continuation, RunRecord, SequencedEvent};
use crate::state::Answer;
use crate::state::UnknownCall;
use crate::transcript::Message;
use crate::transcript::ToolCall;

impl RunService {
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
        let retried = self
            .create_traced(configuration, requested_by, linked_trace(&run))
            .await?;
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
        let pending = crate::tool_loop::split_pending_turn(&mut turn);
        let waiting = pending.is_some();
        let inherited = match &pending {
            Some((calls, answered)) => self.inherited(id, &copied, calls, answered).await?,
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
        let origin = (requested_by, linked_trace(&parent));
        Ok(self
            .insert_copying(configuration, origin, drive_here, copied)
            .await?)
    }

    /// The parent's calls of the fork's pending turn that it dispatched after the fork's last
    /// step (approved by an operator, a rule or the tool's own check): they may have taken
    /// effect, so the fork never runs them on its own.
    async fn inherited(
        &self,
        id: Uuid,
        copied: &[SequencedEvent],
        calls: &[ToolCall],
        answered: &[Answer],
    ) -> Result<Vec<UnknownCall>, ServiceError> {
        let round = copied
            .iter()
            .rev()
            .find(|e| matches!(e.event, Event::Llm { .. }))
            .and_then(|e| e.event.round());
        Ok(self
            .store
            .effects(id)
            .await?
            .into_iter()
            .filter(|e| Some(e.round) == round)
            .filter(|e| calls.iter().any(|c| c.id == e.call_id))
            .filter(|e| !answered.iter().any(|a| a.call_id == e.call_id))
            .map(|e| UnknownCall {
                call_id: e.call_id,
                effect_key: e.effect_key,
                dispatched_at_ms: e.dispatched_at_ms,
            })
            .collect())
    }
}

/// The trace of a run that goes on from `from` (a fork or a retry): its own, linked to `from`'s.
fn linked_trace(from: &RunRecord) -> crate::trace::RunTrace {
    from.trace.as_ref().map_or_else(
        || crate::trace::RunTrace::start(None),
        crate::trace::RunTrace::linked_to,
    )
}
