//! The claim: a decision, an answer or the deadline checked against a waiting run and taken by
//! exactly one claimer.

use std::collections::BTreeMap;
use std::sync::Arc;

use uuid::Uuid;

use super::claimed::{verdict_of, ClaimedRun, PendingTurn};
use super::errors::ResumeError;
use super::{dispatches, recorded_decision, RunService, Weighed};
use crate::authority::{authorize, Act, Actor, Refusal, StateRefusal};
use crate::clock::format_utc;
use crate::decision::{Choice, Decision};
use crate::events::Event;
use crate::failpoint;
use crate::moves::{BudgetMove, TurnMove};
use crate::offer::Offer;
use crate::preview::{check_digest, pending_digest, DigestCheck};
use crate::question::FormAnswer;
use crate::rules::RuleDraft;
use crate::run_store::{
    Claim, ClaimRecord, RunConfiguration, RunRecord, RunStatus, SequencedEvent, StoreError,
    TerminationReason,
};
use crate::state::{StateError, SuspendedState};
use crate::submit::Submission;
use crate::tool_loop::{decided_event, LoopError, ToolLoopService};

impl RunService {
    /// Resumes a waiting run with an operator's decision and carries it out here, at once:
    /// [`RunService::claim`] and [`RunService::continue_claimed`] in one commit fewer (the claim
    /// takes the run for this instance instead of queueing it).
    pub async fn resume(
        &self,
        id: Uuid,
        decision: &Decision,
        actor: &Actor,
        digest: Option<&str>,
    ) -> Result<RunRecord, ResumeError> {
        // Boxed, as the segment after it ([`super::in_run_span`]): the claim's future is large.
        let claimed = Box::pin(self.claim_with(
            id,
            TurnMove::Decision(decision),
            Some(actor),
            digest,
            Claiming::Here,
        ))
        .await?;
        Ok(self.carry_out_here(claimed).await?)
    }

    /// A waiting run's pending turn as an operator sees it: the state, each call's preview and
    /// the digest a decision on this view must carry. `None` for a run that is not waiting, or
    /// whose state or configuration cannot be read (the claim explains those).
    pub async fn pending(&self, run: &RunRecord) -> Option<PendingTurn> {
        if !RunStatus::WAITING.contains(&run.status) {
            return None;
        }
        let state = SuspendedState::from_json(run.suspended_state.as_deref()?).ok()?;
        let tool_loop = self.loops.tool_loop(run.configuration.as_ref()?).ok()?;
        let previews = tool_loop.preview(&state, &run.id.to_string()).await;
        let digest = pending_digest(run.id, run.version, &state, &previews);
        Some(PendingTurn {
            state,
            previews,
            digest,
        })
    }

    /// Claims a waiting run whose approval deadline passed, for the deadline: every pending call
    /// is answered as expired — not run; the model reads `text` — and the turn's step is
    /// `approval_expired`. Refused (`NotWaiting`) if the run is not waiting or not yet due.
    pub async fn claim_expired(&self, id: Uuid) -> Result<ClaimedRun, ResumeError> {
        self.claim_with(id, TurnMove::Expire, None, None, Claiming::Expired)
            .await
    }

    /// Claims a run waiting at a daily spend cap across runs that has room again, for the
    /// allowance: it goes on where it stopped, with its own limits as they are (queued). Refused
    /// (`NoDailyCapWait`) for a run waiting at one of its own limits; the caller checks the room
    /// first ([`RunService::continue_allowed`]).
    pub async fn claim_allowance(&self, id: Uuid) -> Result<ClaimedRun, ResumeError> {
        self.claim_with(id, TurnMove::Allowance, None, None, Claiming::Queue)
            .await
    }

    /// Checks a decision against a waiting run and claims the run for it. `digest`, when given,
    /// must match the turn and previews the operator saw ([`PendingTurn::digest`]). Every refusal
    /// leaves the run as it was (except a state that cannot be read at all, which fails the
    /// run). After `Ok`, this caller alone continues the run.
    pub async fn claim(
        &self,
        id: Uuid,
        decision: &Decision,
        actor: &Actor,
        digest: Option<&str>,
    ) -> Result<ClaimedRun, ResumeError> {
        self.claim_with(
            id,
            TurnMove::Decision(decision),
            Some(actor),
            digest,
            Claiming::Queue,
        )
        .await
    }

    /// [`RunService::claim`] for a submitted approval form: the decision is what the form showed
    /// for the pending turn ([`crate::submit::resolve`]), a question of the turn answered by its
    /// call's entry. The rules asked for with it must be the decider's to add.
    pub async fn claim_submission(
        &self,
        id: Uuid,
        submission: &Submission,
        actor: &Actor,
        digest: Option<&str>,
    ) -> Result<ClaimedRun, ResumeError> {
        self.claim_with(
            id,
            TurnMove::Submit(submission),
            Some(actor),
            digest,
            Claiming::Queue,
        )
        .await
    }

    /// [`RunService::claim`] for an operator's answer to a question of the pending turn
    /// (`call_id`, or the first question): the answer is checked against the question's choices
    /// or schema, and becomes the call's result. An answer decides only what it answers: a turn
    /// that also waits for a decision on another call ([`SuspendedState::undecided`]) is refused
    /// ([`DecisionError::UndecidedCalls`]), to be decided whole with
    /// [`RunService::claim_submission`]. Any other question of the turn is answered as left
    /// unanswered; calls the gate lets through (read-only, ruled) go ahead as they would have.
    pub async fn claim_answer(
        &self,
        id: Uuid,
        call_id: Option<&str>,
        answer: &FormAnswer,
        actor: &Actor,
        digest: Option<&str>,
    ) -> Result<ClaimedRun, ResumeError> {
        self.claim_with(
            id,
            TurnMove::Answer { call_id, answer },
            Some(actor),
            digest,
            Claiming::Queue,
        )
        .await
    }

    /// [`RunService::claim`] for a person's decision on a run waiting at its budget: raise the
    /// limit that stopped it (the run goes on from exactly where it stopped) or stop it there.
    /// The same authority, digest and single winner as an approval.
    pub async fn claim_budget(
        &self,
        id: Uuid,
        budget: &BudgetMove,
        actor: &Actor,
        digest: Option<&str>,
    ) -> Result<ClaimedRun, ResumeError> {
        self.claim_with(
            id,
            TurnMove::Budget(budget),
            Some(actor),
            digest,
            Claiming::Queue,
        )
        .await
    }

    /// [`RunService::claim`] for a decision offered away from the app's pages (a mailed link, a
    /// chat button), made on the turn `digest` names: refused once the offer has expired, and by
    /// the authority to anyone but its recipient (a link is one person's). The web layer checks
    /// the offer's signature and whether it was used before; the turn's own claim makes it count
    /// once.
    pub async fn claim_offer(
        &self,
        id: Uuid,
        offer: &Offer,
        actor: &Actor,
        digest: &str,
    ) -> Result<ClaimedRun, ResumeError> {
        if offer.has_expired(self.clock.now_ms()) {
            return Err(ResumeError::OfferExpired(format_utc(offer.expires_at_ms)));
        }
        self.claim_with(
            id,
            TurnMove::Offer(offer),
            Some(actor),
            Some(digest),
            Claiming::Queue,
        )
        .await
    }

    /// Claims waiting run `id` for `turn_move`, made by `actor` (none: the deadline's): the
    /// authority first, then the digest, then the decision checked against the turn, then the
    /// claim itself (exactly one claimer wins). A turn that needs several approvals gathers them
    /// first ([`crate::quorum`]): an approval that does not complete the count is recorded and
    /// answered [`ResumeError::Counted`]; one that raced another is weighed again.
    async fn claim_with(
        &self,
        id: Uuid,
        turn_move: TurnMove<'_>,
        actor: Option<&Actor>,
        digest: Option<&str>,
        claiming: Claiming,
    ) -> Result<ClaimedRun, ResumeError> {
        let asked = Asked {
            turn_move,
            actor,
            digest,
            claiming,
        };
        for _ in 0..MAX_COUNT_RACES {
            if let Some(result) = self.claim_once(id, asked).await {
                return result;
            }
        }
        // Approvals kept coming in between this one's read and its write.
        Err(self.lost(id).await)
    }

    async fn claim_once(&self, id: Uuid, asked: Asked<'_>) -> Attempt {
        let run = match self.store.get(id).await {
            Ok(Some(run)) => run,
            Ok(None) => return Some(Err(ResumeError::NotFound(id))),
            Err(err) => return Some(Err(err.into())),
        };
        match self.checked(run, asked).await {
            Ok(checked) => self.count_or_claim(checked, asked).await,
            Err(err) => Some(Err(err)),
        }
    }

    /// The move checked against waiting `run`: the authority, the deadline, the digest, the
    /// decision against the turn and the rules asked for with it.
    async fn checked(&self, run: RunRecord, asked: Asked<'_>) -> Result<Checked, ResumeError> {
        let Asked {
            turn_move,
            actor,
            digest,
            claiming,
        } = asked;
        let id = run.id;
        if !RunStatus::WAITING.contains(&run.status) {
            return Err(ResumeError::NotWaiting(Box::new(run)));
        }
        let asking = self.ask_authority(&run, &turn_move, actor).await?;
        let run = self.check_deadline(run, claiming == Claiming::Expired)?;
        let (state, configuration) = self.readable(&run).await?;
        let tool_loop = self
            .loops
            .tool_loop(&configuration)
            .map_err(ResumeError::Unavailable)?;
        // The previews are taken again now: their bases say whether the targets still are what
        // the operator saw, and each approved call's tool checks its basis again before it writes.
        let previews = tool_loop.preview(&state, &id.to_string()).await;
        if let Some(digest) = digest {
            match check_digest(
                digest,
                &pending_digest(id, run.version, &state, &previews),
                &previews,
            ) {
                DigestCheck::Same => {}
                DigestCheck::TurnChanged => return Err(ResumeError::Stale),
                DigestCheck::TargetChanged(tools) => return Err(ResumeError::TargetChanged(tools)),
            }
        }
        let (decision, rules) = turn_move.decide(&state, (id, &configuration.provider))?;
        // Rules asked for with the decision are the decider's to add (a configuration's is an
        // administrator's).
        if let Some((actor, weighed)) = &asking {
            let facts = weighed.facts(&run);
            for rule in &rules {
                authorize(actor, Act::Rule(&rule.scope), Some(&facts))
                    .map_err(ResumeError::Refused)?;
            }
        }
        // A bad decision is refused before the claim: the run stays waiting.
        let choices = match tool_loop.resolve_decision(&state, &decision) {
            Err(LoopError::Decision(err)) => return Err(err.into()),
            Err(_) => return Err(ResumeError::StateCorrupted),
            Ok(choices) => choices,
        };
        let approved_bases: BTreeMap<String, String> = previews
            .iter()
            .filter_map(|p| Some((p.call_id.clone(), p.basis()?.to_owned())))
            .collect();
        let decision = recorded_decision(&state, (&decision, &choices));
        Ok(Checked {
            run,
            rules,
            choices,
            taking: Taking {
                state,
                configuration,
                tool_loop,
                decision,
                approved_bases,
            },
        })
    }

    /// The one authority: who may make `turn_move` on `run` (the deadline needs nobody's leave).
    /// What it weighs is read once, for the decision and for the rules asked with it.
    async fn ask_authority<'a>(
        &self,
        run: &RunRecord,
        turn_move: &TurnMove<'_>,
        actor: Option<&'a Actor>,
    ) -> Result<Option<(&'a Actor, Weighed)>, ResumeError> {
        let (Some(actor), Some(act)) = (actor, turn_move.act()) else {
            return Ok(None);
        };
        let weighed = self.weigh(run, act).await?;
        match authorize(actor, act, Some(&weighed.facts(run))) {
            Ok(()) => Ok(Some((actor, weighed))),
            Err(refusal) => {
                tracing::warn!(who = %actor.label(), run_id = %run.id, %refusal, "refused: a decision");
                Err(match refusal {
                    Refusal::State(StateRefusal::NotWaiting(_)) => {
                        ResumeError::NotWaiting(Box::new(run.clone()))
                    }
                    refusal => ResumeError::Refused(refusal),
                })
            }
        }
    }

    /// `run` if its approval deadline lets this claim through: an operator's before the
    /// deadline, the deadline's own (`expiring`) only once it is due.
    fn check_deadline(&self, run: RunRecord, expiring: bool) -> Result<RunRecord, ResumeError> {
        match run.approval_deadline_ms {
            // Too late for an operator: the deadline decides (the sweeper, or this instance's
            // next pass).
            Some(deadline) if !expiring && deadline <= self.clock.now_ms() => {
                Err(ResumeError::Expired(format_utc(deadline)))
            }
            // Not yet due: nothing to expire.
            Some(deadline) if expiring && deadline > self.clock.now_ms() => {
                Err(ResumeError::NotWaiting(Box::new(run)))
            }
            None if expiring => Err(ResumeError::NotWaiting(Box::new(run))),
            _ => Ok(run),
        }
    }

    /// What the claim commits: the decision's step, its verdict and choices, the approved
    /// calls' preview bases, a dispatch record for each call that runs, and the rules asked for.
    pub(super) fn claim_record(
        &self,
        run: &RunRecord,
        (state, choices, decision): (&SuspendedState, &[Choice], &Decision),
        (decided_by, token): (&str, Option<&str>),
        approved_bases: &BTreeMap<String, String>,
        rules: Vec<RuleDraft>,
    ) -> ClaimRecord {
        ClaimRecord {
            approved_bases: serde_json::to_string(approved_bases).unwrap_or_default(),
            decided_by: decided_by.to_owned(),
            verdict: verdict_of(decision),
            decision: serde_json::to_string(decision).unwrap_or_default(),
            events: vec![SequencedEvent {
                sequence: run.last_sequence + 1,
                event: decided_event(state, (decision, choices), decided_by, token),
                created_at_ms: self.clock.now_ms(),
            }],
            dispatched: dispatches(run.id, state, choices),
            rules,
            vote: None,
        }
    }

    /// Commits `claim` on `run` if nobody claimed it first (exactly one claimer wins), tells
    /// the listeners, and hands the claimed run on.
    pub(super) async fn take_claim(
        &self,
        run: &RunRecord,
        claim: ClaimRecord,
        claiming: Claiming,
        taking: Taking,
    ) -> Attempt {
        let id = run.id;
        let now = claim.events[0].created_at_ms;
        let version = match self
            .store
            .claim_for_resume(id, run.version, &claim, now, claiming == Claiming::Here)
            .await
        {
            Ok(Claim::Won { version }) => version,
            // Still waiting at the same turn: an approval came in meanwhile, weigh again.
            Ok(Claim::Lost(winner))
                if winner.version == run.version && RunStatus::WAITING.contains(&winner.status) =>
            {
                return None
            }
            Ok(Claim::Lost(winner)) => return Some(Err(ResumeError::NotWaiting(winner))),
            Err(err) => return Some(Err(err.into())),
        };
        if let Some(listener) = &self.listener {
            listener.event(id, &claim.events[0]);
            listener.status(
                id,
                match claiming {
                    Claiming::Here => RunStatus::Running,
                    _ => RunStatus::Queued,
                },
            );
        }
        failpoint::reach("after_claim_commit");
        Some(Ok(ClaimedRun {
            id,
            trace: run.trace.clone(),
            version,
            last_sequence: run.last_sequence + 1,
            state: taking.state,
            configuration: taking.configuration,
            requested_by: run.requested_by.clone(),
            tool_loop: taking.tool_loop,
            decision: taking.decision,
            decided_by: claim.decided_by,
            verdict: claim.verdict,
            recovering: false,
            approved_bases: taking.approved_bases,
            cancel: None,
        }))
    }

    /// The run's suspended state and configuration, or the refusal: a state saved by a newer
    /// version is left waiting; one that cannot be read fails the run (kept for inspection).
    pub(super) async fn readable(
        &self,
        run: &RunRecord,
    ) -> Result<(SuspendedState, RunConfiguration), ResumeError> {
        let raw = run.suspended_state.as_deref().unwrap_or_default();
        match (SuspendedState::from_json(raw), run.configuration.clone()) {
            (Ok(state), Some(configuration)) => Ok((state, configuration)),
            (Err(StateError::UnsupportedVersion { found }), Some(_))
                if found > u64::from(crate::state::STATE_SCHEMA_VERSION) =>
            {
                Err(ResumeError::NewerVersion(found))
            }
            (state, _) => {
                let detail = state
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "configuration unreadable".into());
                tracing::error!(run_id = %run.id, %detail, "suspended state cannot be resumed");
                match self
                    .fail_corrupted(
                        run,
                        "The run's saved state could not be read; it is kept for inspection.",
                    )
                    .await
                {
                    Ok(()) => Err(ResumeError::StateCorrupted),
                    Err(StoreError::Conflict { .. }) | Err(StoreError::AlreadySettled { .. }) => {
                        Err(self.lost(run.id).await)
                    }
                    Err(err) => Err(err.into()),
                }
            }
        }
    }

    pub(super) async fn fail_corrupted(
        &self,
        run: &RunRecord,
        summary: &str,
    ) -> Result<(), StoreError> {
        let event = Event::Ended {
            reason: TerminationReason::StateCorrupted.as_str().to_owned(),
            explanation: summary.to_owned(),
        };
        self.store
            .fail_corrupted(run.id, run.version, summary, &event, self.clock.now_ms())
            .await?;
        self.notify_status(run.id, RunStatus::Failed);
        // The run ended here: its root span (read again only when spans are exported).
        if crate::spans::exporting() {
            if let Ok(Some(ended)) = self.store.get(run.id).await {
                crate::spans::run_ended(&ended);
            }
        }
        Ok(())
    }

    pub(super) async fn lost(&self, id: Uuid) -> ResumeError {
        match self.store.get(id).await {
            Ok(Some(run)) => ResumeError::NotWaiting(Box::new(run)),
            Ok(None) => ResumeError::NotFound(id),
            Err(err) => err.into(),
        }
    }
}

/// How many times a claim is weighed again when approvals keep racing it.
const MAX_COUNT_RACES: usize = 32;

/// One try at a claim: what it came to, or `None` when another approval of the same turn raced
/// it (weigh again).
pub(super) type Attempt = Option<Result<ClaimedRun, ResumeError>>;

/// A move asked of a waiting run: the move, by whom (none: the server's own), on the turn
/// whose digest the caller saw, and who carries it out.
#[derive(Clone, Copy)]
pub(super) struct Asked<'a> {
    pub(super) turn_move: TurnMove<'a>,
    pub(super) actor: Option<&'a Actor>,
    pub(super) digest: Option<&'a str>,
    pub(super) claiming: Claiming,
}

/// A move checked against its run, ready to count or claim.
pub(super) struct Checked {
    pub(super) run: RunRecord,
    pub(super) rules: Vec<RuleDraft>,
    pub(super) choices: Vec<Choice>,
    pub(super) taking: Taking,
}

/// What a won claim hands on to the claimed run.
pub(super) struct Taking {
    pub(super) state: SuspendedState,
    pub(super) configuration: RunConfiguration,
    pub(super) tool_loop: Arc<dyn ToolLoopService>,
    pub(super) decision: Decision,
    pub(super) approved_bases: BTreeMap<String, String>,
}

/// Who carries out a claimed decision, and for whom the claim is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Claiming {
    /// An operator's decision, queued for a worker of any instance.
    Queue,
    /// An operator's decision, carried out by the claimer at once.
    Here,
    /// The approval deadline's, queued.
    Expired,
}
