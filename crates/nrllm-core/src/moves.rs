//! The ways a waiting turn is decided, as values: an approval form submitted (any of its
//! buttons), an answer to the turn's question, a decision a headless program made, the approval
//! deadline, a decision offered away from the app (a mailed link, a chat button), and a daily
//! spend cap with room again. [`TurnMove::decide`] is what each amounts to for the turn — the decision and
//! the rules asked for with it — and [`TurnMove::act`] is what the authority is asked before it
//! counts ([`crate::authority`]). The run service claims a run with one of these and nothing
//! else, so the conformance test (`tests/authority_conformance.rs`) can try every way.

use uuid::Uuid;

use crate::authority::Act;
use crate::decision::{CallDecision, Choice, Decision, DecisionError};
use crate::elicit::{Reply, ReplyAction};
use crate::offer::Offer;
use crate::question::FormAnswer;
use crate::rules::RuleDraft;
use crate::state::SuspendedState;
use crate::submit::{self, Submission};
pub use crate::turn_verdict::BulkVerdict;

/// Runs one bulk decision takes at most.
pub const MAX_BULK_RUNS: usize = 100;

/// A run picked for a bulk decision, with the digest of the turn its panel showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    pub id: Uuid,
    pub digest: String,
}

/// What the model reads for each call of a turn nobody decided in time.
pub const EXPIRED_TEXT: &str =
    "No operator decided on this call before the approval deadline, so it was not run.";

/// What the model reads for a question of the turn left unanswered while another was answered.
pub const OTHER_QUESTION_TEXT: &str =
    "(The operator answered another question of this turn and left this one unanswered.)";

/// One way a waiting turn is decided.
#[derive(Debug, Clone, Copy)]
pub enum TurnMove<'a> {
    /// An approval form (or a JSON client) as submitted: the button and everything it held.
    Submit(&'a Submission),
    /// An answer to the turn's question `call_id` (the first question when `None`).
    Answer {
        call_id: Option<&'a str>,
        answer: &'a FormAnswer,
    },
    /// A decision a headless program made.
    Decision(&'a Decision),
    /// A person's decision on a run waiting at its budget.
    Budget(&'a BudgetMove),
    /// A decision offered away from the app's pages (a mailed link, a chat button).
    Offer(&'a Offer),
    /// The approval deadline passed: nothing of the turn runs.
    Expire,
    /// The daily cap across runs that a run waits at has room again (an administrator raised it
    /// for the day, or a new UTC day began): the run goes on where it stopped.
    Allowance,
}

/// What a person does with a run waiting at its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetMove {
    /// Raise the limit that stopped it, and go on.
    Raise(Raise),
    /// Stop it there (`budget_exhausted`).
    Stop,
}

/// How the limit that stopped a run is raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raise {
    /// By this much (a limit that was not set counts from what was used).
    By(u64),
    /// To this value.
    To(u64),
}

impl BudgetMove {
    /// The decision this makes on `state`, which must wait at its budget.
    fn decision(&self, state: &SuspendedState) -> Result<Decision, DecisionError> {
        let stop = state.budget.ok_or(DecisionError::NoBudgetWait)?;
        let Self::Raise(raise) = self else {
            return Ok(Decision::StopAtBudget);
        };
        let limits = state.settings.limits;
        let value = match raise {
            Raise::By(amount) => limits
                .get(stop.limit)
                .unwrap_or(stop.used)
                .saturating_add(*amount),
            Raise::To(value) => *value,
        };
        Ok(Decision::RaiseBudget {
            limits: limits.with(stop.limit, Some(value)),
        })
    }
}

impl TurnMove<'_> {
    /// What the authority is asked before this move counts; `None` for the deadline's, which is
    /// the server's own.
    pub fn act(&self) -> Option<Act<'_>> {
        match self {
            TurnMove::Submit(_) | TurnMove::Decision(_) | TurnMove::Budget(_) => Some(Act::Decide),
            TurnMove::Offer(offer) => Some(Act::Offered {
                to: offer.recipient.as_deref(),
            }),
            TurnMove::Answer { .. } => Some(Act::Answer),
            TurnMove::Expire | TurnMove::Allowance => None,
        }
    }

    /// Whom the step names for a move the server makes itself (no person's).
    pub fn server_name(&self) -> &'static str {
        match self {
            TurnMove::Allowance => "daily allowance",
            _ => "deadline",
        }
    }

    /// The decision this move makes on `state`'s turn (of run `run`, configuration
    /// `configuration`) and the approval rules asked for with it, or why it does not fit.
    /// Nothing is checked against the tools here (the loop resolves the decision next).
    pub fn decide(
        &self,
        state: &SuspendedState,
        (run, configuration): (Uuid, &str),
    ) -> Result<(Decision, Vec<RuleDraft>), DecisionError> {
        match self {
            TurnMove::Submit(submission) => submit::resolve(
                submission,
                &state.pending,
                &state.questions,
                (run, configuration),
            ),
            TurnMove::Answer { call_id, answer } => {
                Ok((answer_decision(state, *call_id, answer)?, Vec::new()))
            }
            TurnMove::Decision(decision) => Ok(((*decision).clone(), Vec::new())),
            // The turn's own button for the same verdict, nothing more (no rule rides along).
            TurnMove::Offer(offer) => submit::resolve(
                &offer.submission(),
                &state.pending,
                &state.questions,
                (run, configuration),
            ),
            TurnMove::Budget(budget) => Ok((budget.decision(state)?, Vec::new())),
            // A run waiting at its budget that nobody raised in time stops there.
            TurnMove::Expire if state.budget.is_some() => Ok((Decision::StopAtBudget, Vec::new())),
            // A server's question nobody answered in time is cancelled; the call goes on.
            TurnMove::Expire if state.elicited.is_some() => Ok((
                Decision::Reply {
                    reply: Reply::without_content(ReplyAction::Cancel),
                },
                Vec::new(),
            )),
            TurnMove::Expire => Ok((every_call(state, |_| expired()), Vec::new())),
            TurnMove::Allowance => match state.budget {
                Some(stop) if stop.daily.is_some() => Ok((Decision::ContinueAtBudget, Vec::new())),
                Some(_) => Err(DecisionError::NoDailyCapWait),
                None => Err(DecisionError::NoBudgetWait),
            },
        }
    }
}

fn expired() -> Choice {
    Choice::Expired {
        text: EXPIRED_TEXT.to_owned(),
    }
}

/// The same kind of choice for every pending call, from `choose`.
fn every_call(state: &SuspendedState, choose: impl Fn(&str) -> Choice) -> Decision {
    Decision::PerCall {
        calls: state
            .pending
            .iter()
            .map(|call| CallDecision {
                call_id: call.id.clone(),
                choice: choose(&call.id),
            })
            .collect(),
    }
}

/// An answer decides only what it answers: the question's result, any other question left
/// unanswered, and the calls the gate lets through (read-only, or decided by a rule or their
/// tool's check) go ahead as they would have. A turn with a call that waits for an operator's
/// decision ([`SuspendedState::undecided`]) is refused, naming those calls.
fn answer_decision(
    state: &SuspendedState,
    call_id: Option<&str>,
    answer: &FormAnswer,
) -> Result<Decision, DecisionError> {
    if let Some(wait) = &state.elicited {
        if call_id.is_some_and(|id| id != wait.call_id) {
            return Err(DecisionError::UnknownCall {
                call_id: call_id.unwrap_or_default().to_owned(),
            });
        }
        let reply = wait.reply(answer.action.unwrap_or_default(), answer)?;
        return Ok(Decision::Reply { reply });
    }
    if answer.action.is_some_and(|a| a != ReplyAction::Accept) {
        return Err(DecisionError::NotDeclinable);
    }
    if state.questions.is_empty() {
        return Err(DecisionError::NoQuestion);
    }
    let asked = state
        .question(call_id)
        .ok_or_else(|| DecisionError::UnknownCall {
            call_id: call_id.unwrap_or("(a question)").to_owned(),
        })?;
    let undecided = state.undecided();
    if !undecided.is_empty() {
        return Err(DecisionError::UndecidedCalls {
            calls: undecided
                .iter()
                .map(|call| format!("{} ({})", call.name, call.id))
                .collect(),
        });
    }
    let result = answer.result_for(asked)?;
    Ok(every_call(state, |id| match id {
        id if id == asked.id => Choice::Respond {
            result: result.clone(),
        },
        id if state.questions.iter().any(|q| q == id) => Choice::Respond {
            result: OTHER_QUESTION_TEXT.to_owned(),
        },
        // Not undecided (above): the gate lets it through.
        _ => Choice::Approve,
    }))
}
