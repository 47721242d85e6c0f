//! Turns decided without an operator (rules, the tools' own checks), and a decision's step.

use crate::decision::{Choice, Decision};
use crate::events::{CallChoice, Event};
use crate::state::SuspendedState;

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
pub(super) fn enforce_rules(state: &SuspendedState, mut choices: Vec<Choice>) -> Vec<Choice> {
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

/// The step of a decision on a run waiting at its budget (`decision` is a budget decision).
pub fn budget_decision_event(
    state: &SuspendedState,
    decision: &Decision,
    decided_by: &str,
    token: Option<&str>,
) -> Option<Event> {
    let stop = state.budget?;
    Some(Event::BudgetDecided {
        round: state.counters.iterations,
        decided_by: decided_by.to_owned(),
        through_token: token.map(str::to_owned),
        raised: match decision {
            Decision::RaiseBudget { limits } => Some(*limits),
            // Goes on with its own limits as they are.
            Decision::ContinueAtBudget => Some(state.settings.limits),
            _ => None,
        },
        stop,
    })
}

/// The step of `decision` on `state`'s wait: a budget decision's, or the turn's
/// ([`decision_event`], with `choices` the choices it made).
pub fn decided_event(
    state: &SuspendedState,
    (decision, choices): (&Decision, &[Choice]),
    decided_by: &str,
    token: Option<&str>,
) -> Event {
    if let (Some(wait), Decision::Reply { reply }) = (&state.elicited, decision) {
        return reply_event(state, wait, reply, (decided_by, token));
    }
    budget_decision_event(state, decision, decided_by, token)
        .unwrap_or_else(|| decision_event(state, choices, decided_by, token))
}

/// The step of a reply to what the server of `wait`'s call asked.
pub fn reply_event(
    state: &SuspendedState,
    wait: &crate::elicit::Elicited,
    reply: &crate::elicit::Reply,
    (decided_by, token): (&str, Option<&str>),
) -> Event {
    Event::InputReplied {
        round: state.counters.iterations,
        call_id: wait.call_id.clone(),
        tool: state
            .pending
            .iter()
            .find(|call| call.id == wait.call_id)
            .map(|call| call.name.clone())
            .unwrap_or_default(),
        server: wait.asked.server.clone(),
        decided_by: decided_by.to_owned(),
        through_token: token.map(str::to_owned),
        reply: reply.clone(),
        held: wait.asked.held_until_ms.is_some(),
    }
}

/// Each pending call of `state` with its choice, as a step records it.
pub fn call_choices(state: &SuspendedState, choices: &[Choice]) -> Vec<CallChoice> {
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
