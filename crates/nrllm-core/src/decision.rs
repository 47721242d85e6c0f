//! An operator's decision on a suspended turn: approve all, deny all, or per call (approve,
//! approve with edited arguments, deny with a reason). A decision is checked against the pending
//! turn before anything happens: it must answer every pending call exactly once, and edited
//! arguments must fit the tool's schema.
//!
//! An approval form arrives as a [`nrllm_types::submission::Submission`]; [`crate::submit`]
//! reads it into the [`Decision`] the form *showed*.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::registry::Gate;
use crate::rules::{RuleEffect, RuleError};
use crate::state::{BudgetStop, Limits};
use crate::tool::ToolError;
use crate::transcript::ToolCall;

pub use nrllm_types::submission::{MAX_EDIT_CHARS, MAX_REASON_CHARS};

pub use crate::choice::Choice;

/// The choice for one call, by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallDecision {
    pub call_id: String,
    #[serde(flatten)]
    pub choice: Choice,
}

/// The operator's answer to a suspension.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    ApproveAll,
    DenyAll {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    PerCall {
        calls: Vec<CallDecision>,
    },
    /// For a run waiting at its budget: go on with these limits (the one that stopped it raised
    /// far enough for the next action).
    RaiseBudget {
        limits: Limits,
    },
    /// For a run waiting at its budget: stop it there (`budget_exhausted`).
    StopAtBudget,
    /// For a run waiting at a daily cap across runs that has room again (raised for the day,
    /// or a new day): go on with its own limits as they are. The server's own, never a
    /// person's ([`crate::moves::TurnMove::Allowance`]).
    ContinueAtBudget,
    /// For a run whose tool's server asked the operator ([`crate::elicit`]): this reply goes
    /// back to the server with the call, and the turn goes on as it was decided.
    Reply {
        reply: crate::elicit::Reply,
    },
}

impl Decision {
    /// A decision on a run waiting at its budget.
    pub fn is_budget(&self) -> bool {
        matches!(
            self,
            Decision::RaiseBudget { .. } | Decision::StopAtBudget | Decision::ContinueAtBudget
        )
    }

    /// Whether this decision fits a run whose wait is `budget` (a budget decision for a run
    /// waiting at its budget, a turn's decision for the others), and a raise lets the action
    /// it stopped before happen.
    pub fn fits_budget(&self, budget: Option<&BudgetStop>) -> Result<(), DecisionError> {
        match (self, budget) {
            (Decision::StopAtBudget, Some(_)) => Ok(()),
            (Decision::ContinueAtBudget, Some(stop)) if stop.daily.is_some() => Ok(()),
            (Decision::ContinueAtBudget, Some(_)) => Err(DecisionError::NoDailyCapWait),
            (Decision::RaiseBudget { .. }, Some(stop)) if stop.daily.is_some() => {
                Err(DecisionError::DailyCap)
            }
            (Decision::RaiseBudget { limits }, Some(stop)) => {
                let needed = stop.needed();
                match limits.get(stop.limit) {
                    Some(cap) if cap < needed => Err(DecisionError::RaiseTooSmall {
                        limit: stop.limit.label().to_owned(),
                        needed: stop.limit.show(needed),
                    }),
                    _ => Ok(()),
                }
            }
            (_, Some(_)) => Err(DecisionError::WaitsForBudget),
            (decision, None) if decision.is_budget() => Err(DecisionError::NoBudgetWait),
            (_, None) => Ok(()),
        }
    }

    /// Whether this decision fits a run that waits for the reply to a server's question
    /// (`elicited`): a reply for such a run, anything else for the others.
    pub fn fits_reply(
        &self,
        elicited: Option<&crate::elicit::Elicited>,
    ) -> Result<(), DecisionError> {
        match (self, elicited) {
            (Decision::Reply { .. }, Some(_)) => Ok(()),
            (_, Some(wait)) => Err(DecisionError::WaitsForReply {
                server: wait.asked.server.clone(),
            }),
            (Decision::Reply { .. }, None) => Err(DecisionError::NoQuestion),
            (_, None) => Ok(()),
        }
    }
}

/// Why a decision was refused. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecisionError {
    /// A field of the form is not one the form offers, or is too long.
    #[error("{field}: {message}")]
    InvalidField { field: String, message: String },
    #[error("the decision names call `{call_id}`, which is not in the pending turn")]
    UnknownCall { call_id: String },
    /// An answer came for a turn that asks nothing (another answer came first, and the run
    /// moved on to a turn of approvals).
    #[error("the run no longer waits for an answer: another answer came first")]
    NoQuestion,
    #[error("the decision does not say what to do with call `{call_id}` ({tool})")]
    MissingCall { call_id: String, tool: String },
    #[error("the decision names call `{call_id}` twice")]
    DuplicateCall { call_id: String },
    #[error("the choice `{choice}` for call `{call_id}` is not approve, deny, respond, failed or (for a question) answer")]
    InvalidChoice { call_id: String, choice: String },
    #[error("write the result the model should read for {tool} ({call_id})")]
    NoResult { call_id: String, tool: String },
    #[error("the edited arguments for `{tool}` are not valid: field `{field}`: {message}")]
    InvalidArguments {
        call_id: String,
        tool: String,
        field: String,
        message: String,
    },
    #[error("the reason is longer than {MAX_REASON_CHARS} characters")]
    ReasonTooLong,
    /// Arguments the operator edited are not JSON; nothing was decided.
    #[error("the edited arguments of {tool} ({call_id}) are not valid JSON: {message}")]
    EditNotJson {
        call_id: String,
        tool: String,
        message: String,
    },
    /// The button pressed would drop text the operator typed; nothing was decided. Submitting
    /// again with `acknowledge_discard` (the page asks first) decides anyway.
    #[error("nothing was decided: {0}")]
    WouldDiscard(String),
    /// "Always approve" was asked for beside a call the decision does not approve (or "never
    /// allow" beside one it does not deny).
    #[error("{}", rule_against_choice(.tool, *.effect))]
    RuleAgainstChoice {
        call_id: String,
        tool: String,
        effect: RuleEffect,
    },
    /// A rule was asked for with an approval that counts toward a turn needing several people's
    /// approvals: a rule would decide later turns by one person's say.
    #[error("this turn needs several people's approvals, so no approval rule can be added with an approval of it; approve without it, and add the rule on the rules page if it should hold")]
    RuleWithCount,
    #[error("the rule asked for with {tool} is not valid: {error}")]
    InvalidRule { tool: String, error: RuleError },
    /// An answer that does not fit its question (its choices or its schema).
    #[error("the answer does not fit the question: {field}: {message}")]
    InvalidAnswer { field: String, message: String },
    /// An answer alone came for a turn whose other calls wait for a decision too: the answer
    /// decides only its question, so the whole turn is decided in one decision.
    #[error("this turn also waits for a decision on {}: decide them with the answer in one decision (nrllm_tool_resume, per_call, the question's call carrying the answer)", .calls.join(", "))]
    UndecidedCalls { calls: Vec<String> },
    /// The run waits at its budget: raise the limit or stop the run.
    #[error("the run waits at its budget: raise the limit that stopped it, or stop the run")]
    WaitsForBudget,
    /// A budget decision came for a run that does not wait at its budget.
    #[error("the run does not wait at its budget")]
    NoBudgetWait,
    /// A raise came for a run waiting at a daily cap across runs, which no run's limit lifts.
    #[error("the run waits at a daily spend cap across runs: an administrator raises today's cap on the system page, or it goes on by itself when the next UTC day begins; it can also be stopped here")]
    DailyCap,
    /// The run waits at one of its own limits, not at a daily cap that could have room again.
    #[error("the run waits at one of its own limits, not at a daily spend cap")]
    NoDailyCapWait,
    /// The run waits for the reply to what a tool's server asked: only an answer (accept,
    /// decline or cancel) moves it on.
    #[error("the run waits for an answer to what the server {server} asked: answer it (accept, decline or cancel) with nrllm_input_answer")]
    WaitsForReply { server: String },
    /// Decline or cancel was asked for a question the model asked (`ask_operator`), which is
    /// only ever answered.
    #[error("only a question a tool's server asked can be declined or cancelled; answer this one")]
    NotDeclinable,
    /// The raised limit would stop the run again at once.
    #[error("the limit on {limit} must be raised to at least {needed} for the run to go on")]
    RaiseTooSmall { limit: String, needed: String },
}

impl From<crate::question::AnswerError> for DecisionError {
    fn from(err: crate::question::AnswerError) -> DecisionError {
        DecisionError::InvalidAnswer {
            field: err.field,
            message: err.message,
        }
    }
}

fn rule_against_choice(tool: &str, effect: RuleEffect) -> String {
    match effect {
        RuleEffect::Allow => format!(
            "“always approve {tool}” goes with approving that call; approve it, or leave the rule out"
        ),
        RuleEffect::Deny => format!(
            "“never allow {tool}” goes with denying that call; deny it, or leave the rule out"
        ),
    }
}

/// The refusal result the model reads for a denied call.
pub fn refusal_text(reason: Option<&str>) -> String {
    match reason.map(str::trim).filter(|reason| !reason.is_empty()) {
        Some(reason) => format!("denied by the operator: {reason}"),
        None => "denied by the operator (no reason given)".to_owned(),
    }
}

impl Decision {
    /// Pairs every pending call with its choice, in call order, or says why the decision does not
    /// fit the turn. Edited arguments of offered tools are validated against their schema.
    pub fn resolve(&self, pending: &[ToolCall], gate: &Gate) -> Result<Vec<Choice>, DecisionError> {
        let check_reason = |reason: &Option<String>| match reason {
            Some(reason) if reason.chars().count() > MAX_REASON_CHARS => {
                Err(DecisionError::ReasonTooLong)
            }
            _ => Ok(()),
        };
        let choices = match self {
            // No call is decided: the run goes on (or stops) where its budget stopped it.
            // The turn was decided already: it goes on as it was once the server has the reply
            // (the waiting state keeps its choices).
            Decision::RaiseBudget { .. }
            | Decision::StopAtBudget
            | Decision::ContinueAtBudget
            | Decision::Reply { .. } => Vec::new(),
            Decision::ApproveAll => vec![Choice::Approve; pending.len()],
            Decision::DenyAll { reason } => {
                check_reason(reason)?;
                vec![
                    Choice::Deny {
                        reason: reason.clone()
                    };
                    pending.len()
                ]
            }
            Decision::PerCall { calls } => {
                let pending_ids: BTreeSet<&str> = pending.iter().map(|c| c.id.as_str()).collect();
                let mut by_id: BTreeMap<&str, &Choice> = BTreeMap::new();
                for decision in calls {
                    if !pending_ids.contains(decision.call_id.as_str()) {
                        return Err(DecisionError::UnknownCall {
                            call_id: decision.call_id.clone(),
                        });
                    }
                    if by_id.insert(&decision.call_id, &decision.choice).is_some() {
                        return Err(DecisionError::DuplicateCall {
                            call_id: decision.call_id.clone(),
                        });
                    }
                }
                pending
                    .iter()
                    .map(|call| {
                        let choice = by_id.get(call.id.as_str()).ok_or_else(|| {
                            DecisionError::MissingCall {
                                call_id: call.id.clone(),
                                tool: call.name.clone(),
                            }
                        })?;
                        if let Choice::Deny { reason } = choice {
                            check_reason(reason)?;
                        }
                        Ok::<_, DecisionError>((*choice).clone())
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
        };
        for (call, choice) in pending.iter().zip(&choices) {
            let Choice::ApproveEdited { arguments } = choice else {
                continue;
            };
            // A tool no longer offered is refused at resume whatever the arguments say.
            let Some(tool) = gate.tool(&call.name) else {
                continue;
            };
            if let Err(err) = tool.check_arguments(arguments) {
                let (field, message) = match err {
                    ToolError::InvalidArguments { field, message } => (field, message),
                    other => ("arguments".to_owned(), other.to_string()),
                };
                return Err(DecisionError::InvalidArguments {
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    field,
                    message,
                });
            }
        }
        Ok(choices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decisions_have_a_readable_json_form() {
        let decision = Decision::PerCall {
            calls: vec![
                CallDecision {
                    call_id: "a".into(),
                    choice: Choice::ApproveEdited {
                        arguments: json!({"slug": "x"}),
                    },
                },
                CallDecision {
                    call_id: "b".into(),
                    choice: Choice::Deny {
                        reason: Some("no".into()),
                    },
                },
            ],
        };
        let value = serde_json::to_value(&decision).unwrap();
        assert_eq!(
            value,
            json!({"decision": "per_call", "calls": [
                {"call_id": "a", "choice": "approve_edited", "arguments": {"slug": "x"}},
                {"call_id": "b", "choice": "deny", "reason": "no"}]})
        );
        assert_eq!(serde_json::from_value::<Decision>(value).unwrap(), decision);
    }

    #[test]
    fn the_refusal_text_carries_the_reason() {
        assert_eq!(
            refusal_text(Some(" too risky ")),
            "denied by the operator: too risky"
        );
        assert_eq!(
            refusal_text(Some("  ")),
            "denied by the operator (no reason given)"
        );
        assert_eq!(
            refusal_text(None),
            "denied by the operator (no reason given)"
        );
    }
}
