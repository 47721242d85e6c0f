//! The count of a turn that needs several people's approvals ([`crate::quorum`]): an approval
//! that does not complete it is recorded with its step and the run keeps waiting; the one that
//! completes it claims the run, with every approver named.

use super::claim::{Asked, Attempt, Checked, Claiming, Taking};
use super::errors::ResumeError;
use super::RunService;
use crate::decision::{Choice, DecisionError};
use crate::events::Event;
use crate::moves::TurnMove;
use crate::quorum::{fingerprint, needs_quorum, Tally, Vote};
use crate::run_store::{ClaimRecord, RunRecord, SequencedEvent, Verdict};
use crate::spans::{self, WaitEnded};
use crate::state::SuspendedState;
use crate::tool_loop::call_choices;

impl RunService {
    /// Claims the checked run, or, for a turn that needs several approvals and a decision that
    /// lets something happen, counts this one and claims only with the one that completes the
    /// count.
    pub(super) async fn count_or_claim(&self, checked: Checked, asked: Asked<'_>) -> Attempt {
        let Asked {
            turn_move,
            actor,
            claiming,
            ..
        } = asked;
        let Checked {
            run,
            rules,
            choices,
            taking,
        } = checked;
        let state = &taking.state;
        // No person (the deadline, the allowance): the server's own move, by its name.
        let (mut decided_by, token) = match actor {
            Some(actor) => (actor.name.clone(), actor.token.as_deref()),
            None => (turn_move.server_name().to_owned(), None),
        };
        let mut completing = None;
        if let Some(actor) = actor.filter(|_| {
            turn_move.act().is_some() && run.approvals_required > 1 && needs_quorum(state, &choices)
        }) {
            // A rule would decide later turns by one person's say: not with a count.
            if !rules.is_empty() {
                return Some(Err(DecisionError::RuleWithCount.into()));
            }
            let vote = Vote {
                approver: actor.name.clone(),
                token: actor.token.clone(),
                fingerprint: fingerprint(state, &choices),
                decision: serde_json::to_string(&taking.decision).unwrap_or_default(),
                at_ms: self.clock.now_ms(),
            };
            let tally = match self.store.approvals(run.id, run.version).await {
                Ok(votes) => Tally {
                    required: run.approvals_required,
                    votes,
                },
                Err(err) => return Some(Err(err.into())),
            };
            // The same person approving the same again (a second press): counted once already.
            if tally
                .votes
                .iter()
                .any(|v| v.approver == vote.approver && v.fingerprint == vote.fingerprint)
                && !tally.reached(&vote.fingerprint)
            {
                return Some(Err(ResumeError::Counted(Box::new(tally))));
            }
            let tally = tally.with(vote.clone());
            if !tally.reached(&vote.fingerprint) {
                return self.count(&run, (state, &choices), vote, tally).await;
            }
            let names: Vec<&str> = tally
                .for_choices(&vote.fingerprint)
                .map(|v| v.approver.as_str())
                .collect();
            decided_by = names.join(", ");
            completing = Some(vote);
        }
        let mut claim = self.claim_record(
            &run,
            (state, &choices, &taking.decision),
            (&decided_by, token),
            &taking.approved_bases,
            rules,
        );
        claim.vote = completing;
        if matches!(turn_move, TurnMove::Expire) {
            // Whatever the wait: nobody decided in time.
            claim.verdict = Verdict::Expired;
        }
        self.take_traced(&run, claim, (claiming, asked.digest), taking)
            .await
    }

    /// [`RunService::take_claim`], and once it is taken, the span of the wait it ended.
    async fn take_traced(
        &self,
        run: &RunRecord,
        claim: ClaimRecord,
        (claiming, digest): (Claiming, Option<&str>),
        taking: Taking,
    ) -> Attempt {
        let wait = spans::wait_span(run, |kind| {
            claimed_wait(run, (&claim, &taking.state), kind, digest)
        });
        let taken = self.take_claim(run, claim, claiming, taking).await;
        if let (Some(Ok(_)), Some((trace, wait))) = (&taken, wait) {
            spans::wait_ended(trace, &wait);
        }
        taken
    }

    /// Records `vote`, which does not complete `tally`, with its step: the run keeps waiting.
    async fn count(
        &self,
        run: &RunRecord,
        (state, choices): (&SuspendedState, &[Choice]),
        vote: Vote,
        tally: Tally,
    ) -> Attempt {
        let step = SequencedEvent {
            sequence: run.last_sequence + 1,
            event: Event::ApprovalCounted {
                round: state.counters.iterations,
                by: vote.approver.clone(),
                through_token: vote.token.clone(),
                count: u32::try_from(tally.for_choices(&vote.fingerprint).count())
                    .unwrap_or(u32::MAX),
                required: tally.required,
                choices: call_choices(state, choices),
            },
            created_at_ms: vote.at_ms,
        };
        match self
            .store
            .count_approval(run.id, (run.version, run.last_sequence), &vote, &step)
            .await
        {
            Ok(true) => {
                if let Some(listener) = &self.listener {
                    listener.event(run.id, &step);
                }
                Some(Err(ResumeError::Counted(Box::new(tally))))
            }
            // Another approval (or a claim) came first: weigh again.
            Ok(false) => None,
            Err(err) => Some(Err(err.into())),
        }
    }
}

/// The span of the wait that `claim` ends on `run` (waiting in `state`, for `kind`), with the
/// digest the decider saw.
fn claimed_wait(
    run: &RunRecord,
    (claim, state): (&ClaimRecord, &SuspendedState),
    kind: &'static str,
    digest: Option<&str>,
) -> WaitEnded {
    WaitEnded {
        kind,
        started_ms: state.waiting_since_ms.unwrap_or(run.updated_at_ms),
        ended_ms: claim.events[0].created_at_ms,
        decision: claim.verdict.as_str().to_owned(),
        decided_by: claim.decided_by.clone(),
        rules: claim
            .rules
            .iter()
            .map(|rule| format!("{} {}", rule.effect.as_str(), rule.tool))
            .collect(),
        digest: digest.map(str::to_owned),
    }
}
