//! An operator's decision on a suspended turn: approve all, deny all, or per call (approve,
//! approve with edited arguments, deny with a reason). A decision is checked against the pending
//! turn before anything happens: it must answer every pending call exactly once, and edited
//! arguments must fit the tool's schema.
//!
//! An approval form arrives as a [`Submission`]: the button pressed and everything the form held
//! (each call's argument text and reason, the reason for all). [`Submission::resolve`] turns it
//! into the [`Decision`] the form *showed*: changed argument text is an edit, a reason goes to the
//! call it was typed for, and a button that would drop typed text is refused unless the operator
//! acknowledged that.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::question::FormAnswer;
use crate::registry::Gate;
use crate::rules::{Condition, RuleDraft, RuleEffect, RuleError, RuleScope};
use crate::tool::ToolError;
use crate::transcript::ToolCall;

/// The longest reason an operator may give, in characters.
pub const MAX_REASON_CHARS: usize = 2000;

/// What happens to one pending call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "choice", rename_all = "snake_case")]
pub enum Choice {
    /// Run it as the model asked.
    Approve,
    /// Run it with these arguments instead.
    ApproveEdited { arguments: Value },
    /// Don't run it; the model reads the reason.
    Deny {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Don't run it; the model reads this result instead, as the call's answer (what happened,
    /// written by the operator).
    Respond { result: String },
    /// Don't run it; the model reads that it failed (for a call whose outcome is unknown after a
    /// restart, when the operator knows it did not take effect).
    Failed {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// Nobody decided before the approval deadline: not run; the model reads `text`. Never
    /// chosen by an operator (no form or JSON choice names it): the deadline sets it.
    Expired { text: String },
}

impl Choice {
    /// The tool runs with this choice.
    pub fn runs(&self) -> bool {
        matches!(self, Choice::Approve | Choice::ApproveEdited { .. })
    }
}

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
}

/// Why a decision was refused. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecisionError {
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
    #[error("the rule asked for with {tool} is not valid: {error}")]
    InvalidRule { tool: String, error: RuleError },
    /// An answer that does not fit its question (its choices or its schema).
    #[error("the answer does not fit the question: {field}: {message}")]
    InvalidAnswer { field: String, message: String },
    /// An answer alone came for a turn whose other calls wait for a decision too: the answer
    /// decides only its question, so the whole turn is decided in one decision.
    #[error("this turn also waits for a decision on {}: decide them with the answer in one decision (nrllm_tool_resume, per_call, the question's call carrying the answer)", .calls.join(", "))]
    UndecidedCalls { calls: Vec<String> },
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

/// The button an approval form was submitted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    ApproveAll,
    DenyAll,
    /// Each call as its own choice says.
    PerCall,
}

/// One call's part of a submitted form.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmittedCall {
    pub call_id: String,
    /// `approve`, `deny` or `edit` (the per-call choice; read with [`Action::PerCall`]).
    #[serde(default)]
    pub choice: Option<String>,
    /// The argument text as the form holds it (the model's arguments unless the operator edited
    /// them).
    #[serde(default)]
    pub arguments: Option<String>,
    /// The reason typed beside this call (with `failed`: what the operator knows).
    #[serde(default)]
    pub reason: Option<String>,
    /// With `respond`: the result the model reads instead of running the tool.
    #[serde(default)]
    pub result: Option<String>,
    /// "Always approve this tool …": an approval rule asked for with an approving choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remember: Option<Remember>,
    /// For a question of the turn, with the choice `answer`: the operator's answer.
    #[serde(default)]
    pub answer: FormAnswer,
}

/// An approval rule asked for from the approval panel, for the tool of the call it was asked
/// beside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remember {
    pub scope: RememberScope,
    /// `allow` goes with a call the decision runs; `deny` with one it denies.
    pub effect: RuleEffect,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// Where a rule asked for with a decision holds: the run being decided, or every run of its
/// configuration. Never another run's or configuration's: the decision says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RememberScope {
    Run,
    Configuration,
}

/// An approval form as submitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    pub action: Action,
    /// The reason typed for the whole turn.
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub calls: Vec<SubmittedCall>,
    /// The operator was told which typed text this button drops, and went on.
    #[serde(default)]
    pub acknowledge_discard: bool,
}

fn typed(text: &Option<String>) -> Option<&str> {
    text.as_deref().map(str::trim).filter(|t| !t.is_empty())
}

/// The edit a call's submitted argument text amounts to: `None` when it says what the model
/// said (the same JSON value, or the same text), else the new arguments.
fn edit_of(call: &ToolCall, text: Option<&str>) -> Result<Option<Value>, DecisionError> {
    let Some(text) = text else {
        return Ok(None);
    };
    if text.trim() == call.arguments.trim() {
        return Ok(None);
    }
    let edited: Value = serde_json::from_str(text).map_err(|err| DecisionError::EditNotJson {
        call_id: call.id.clone(),
        tool: call.name.clone(),
        message: err.to_string(),
    })?;
    match call.parsed_arguments() {
        Ok(original) if original == edited => Ok(None),
        _ => Ok(Some(edited)),
    }
}

impl Submission {
    /// The decision this form showed for `pending`, whose calls `questions` ask the operator:
    /// see the module documentation. A question's call is answered with the choice `answer`
    /// (implied when an answer is typed and no choice is given), checked against the question.
    pub fn resolve(
        &self,
        pending: &[ToolCall],
        questions: &[String],
    ) -> Result<Decision, DecisionError> {
        let by_id = self.by_call(pending)?;
        let shared_reason = typed(&self.reason);
        let mut dropped: Vec<String> = Vec::new();
        let mut calls = Vec::with_capacity(pending.len());
        for call in pending {
            let submitted = by_id.get(call.id.as_str()).copied();
            let part = Part {
                call,
                submitted,
                question: questions.contains(&call.id),
                answer: submitted.map(|s| &s.answer).filter(|a| a.is_given()),
                own_reason: submitted.and_then(|s| typed(&s.reason)),
                edit: edit_of(call, submitted.and_then(|s| s.arguments.as_deref()))?,
            };
            let kind = self.kind_of(&part)?;
            part.dropped_by(kind, &mut dropped);
            let choice = part.choice(kind, shared_reason, &mut dropped)?;
            calls.push(CallDecision {
                call_id: call.id.clone(),
                choice,
            });
        }
        let any_denied = calls
            .iter()
            .any(|c| matches!(c.choice, Choice::Deny { .. }));
        if shared_reason.is_some() && !any_denied {
            dropped.push("the reason typed for the whole turn".to_owned());
        }
        if !dropped.is_empty() && !self.acknowledge_discard {
            let button = match self.action {
                Action::ApproveAll => "Approve all",
                Action::DenyAll => "Deny all",
                Action::PerCall => "these choices",
            };
            return Err(DecisionError::WouldDiscard(format!(
                "{button} would drop {}. Clear it, or choose per call, and decide again.",
                dropped.join(" and ")
            )));
        }
        Ok(Decision::PerCall { calls })
    }

    /// The submitted calls by id: each must be a pending call, and appear once.
    fn by_call(
        &self,
        pending: &[ToolCall],
    ) -> Result<BTreeMap<&str, &SubmittedCall>, DecisionError> {
        let pending_ids: BTreeSet<&str> = pending.iter().map(|c| c.id.as_str()).collect();
        let mut by_id: BTreeMap<&str, &SubmittedCall> = BTreeMap::new();
        for submitted in &self.calls {
            if !pending_ids.contains(submitted.call_id.as_str()) {
                return Err(DecisionError::UnknownCall {
                    call_id: submitted.call_id.clone(),
                });
            }
            if by_id.insert(&submitted.call_id, submitted).is_some() {
                return Err(DecisionError::DuplicateCall {
                    call_id: submitted.call_id.clone(),
                });
            }
        }
        Ok(by_id)
    }

    /// What the form chose for one call: `approve`, `deny`, `answer`, `respond` or `failed`.
    fn kind_of(&self, part: &Part<'_>) -> Result<&'static str, DecisionError> {
        let call = part.call;
        Ok(match self.action {
            Action::ApproveAll => "approve",
            Action::DenyAll => "deny",
            Action::PerCall => match part
                .submitted
                .and_then(|s| s.choice.as_deref())
                .map(str::trim)
            {
                Some("edit" | "approve") => "approve",
                Some("answer") if part.question => "answer",
                None | Some("") if part.question && part.answer.is_some() => "answer",
                Some("deny") => "deny",
                Some("respond") => "respond",
                Some("failed") => "failed",
                Some(other) => {
                    return Err(DecisionError::InvalidChoice {
                        call_id: call.id.clone(),
                        choice: other.to_owned(),
                    })
                }
                None => {
                    return Err(DecisionError::MissingCall {
                        call_id: call.id.clone(),
                        tool: call.name.clone(),
                    })
                }
            },
        })
    }
}

/// One pending call with what the form submitted for it.
struct Part<'a> {
    call: &'a ToolCall,
    submitted: Option<&'a SubmittedCall>,
    /// The call is a question of the turn.
    question: bool,
    answer: Option<&'a FormAnswer>,
    own_reason: Option<&'a str>,
    edit: Option<Value>,
}

impl Part<'_> {
    /// What the choice `kind` would drop of what was typed for this call.
    fn dropped_by(&self, kind: &str, dropped: &mut Vec<String>) {
        let name = &self.call.name;
        if kind != "approve" && self.edit.is_some() {
            dropped.push(format!("the edited arguments of {name}"));
        }
        if !matches!(kind, "respond" | "failed")
            && self.submitted.and_then(|s| typed(&s.result)).is_some()
        {
            dropped.push(format!("the result typed for {name}"));
        }
        if kind != "answer" && self.answer.is_some() {
            dropped.push(format!("the answer typed for {name}"));
        }
    }

    /// The call's choice for `kind` (a denial's reason its own, else the turn's).
    fn choice(
        self,
        kind: &str,
        shared_reason: Option<&str>,
        dropped: &mut Vec<String>,
    ) -> Result<Choice, DecisionError> {
        let call = self.call;
        let typed_result = self.submitted.and_then(|s| typed(&s.result));
        Ok(match kind {
            "answer" => {
                let answer = self.answer.ok_or_else(|| DecisionError::InvalidAnswer {
                    field: "answer".into(),
                    message: format!("write an answer to the question of {}", call.id),
                })?;
                Choice::Respond {
                    result: answer.result_for(call)?,
                }
            }
            "deny" => Choice::Deny {
                reason: self.own_reason.or(shared_reason).map(str::to_owned),
            },
            // A question's result is its answer, checked as one.
            "respond" if self.question => Choice::Respond {
                result: FormAnswer::text(typed_result.unwrap_or_default()).result_for(call)?,
            },
            "respond" => Choice::Respond {
                result: typed_result
                    .ok_or_else(|| DecisionError::NoResult {
                        call_id: call.id.clone(),
                        tool: call.name.clone(),
                    })?
                    .to_owned(),
            },
            "failed" => Choice::Failed {
                note: self.own_reason.map(str::to_owned),
            },
            _ => {
                if self.own_reason.is_some() {
                    dropped.push(format!("the reason typed for {}", call.name));
                }
                match self.edit {
                    Some(arguments) => Choice::ApproveEdited { arguments },
                    None => Choice::Approve,
                }
            }
        })
    }
}

impl Submission {
    /// The approval rules the form asks for beside its calls, each for its call's tool and for
    /// run `run` or its configuration `configuration`, or why not: an allowing rule goes only
    /// with a call that `decision` (this form's, resolved) runs, a denying one only with a call
    /// it denies.
    pub fn rules(
        &self,
        pending: &[ToolCall],
        decision: &Decision,
        (run, configuration): (uuid::Uuid, &str),
    ) -> Result<Vec<RuleDraft>, DecisionError> {
        let mut drafts = Vec::new();
        for submitted in &self.calls {
            let Some(remember) = &submitted.remember else {
                continue;
            };
            let call = pending
                .iter()
                .find(|c| c.id == submitted.call_id)
                .ok_or_else(|| DecisionError::UnknownCall {
                    call_id: submitted.call_id.clone(),
                })?;
            let (runs, denied) = match decision {
                Decision::ApproveAll => (true, false),
                Decision::DenyAll { .. } => (false, true),
                Decision::PerCall { calls } => {
                    let choice = calls.iter().find(|c| c.call_id == call.id);
                    (
                        choice.is_some_and(|c| c.choice.runs()),
                        choice.is_some_and(|c| matches!(c.choice, Choice::Deny { .. })),
                    )
                }
            };
            let fits = match remember.effect {
                RuleEffect::Allow => runs,
                RuleEffect::Deny => denied,
            };
            if !fits {
                return Err(DecisionError::RuleAgainstChoice {
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    effect: remember.effect,
                });
            }
            let draft = RuleDraft {
                scope: match remember.scope {
                    RememberScope::Run => RuleScope::Run(run),
                    RememberScope::Configuration => RuleScope::Configuration(configuration.into()),
                },
                tool: call.name.clone(),
                effect: remember.effect,
                conditions: remember.conditions.clone(),
            };
            draft.check().map_err(|error| DecisionError::InvalidRule {
                tool: call.name.clone(),
                error,
            })?;
            drafts.push(draft);
        }
        Ok(drafts)
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

    fn turn() -> Vec<ToolCall> {
        vec![
            ToolCall::new("a", "update_page", &json!({"slug": "home", "title": "Hi"})),
            ToolCall::new("b", "send_message", &json!({"to": "x", "body": "y"})),
        ]
    }

    fn submitted(
        call_id: &str,
        choice: &str,
        arguments: Option<&str>,
        reason: &str,
    ) -> SubmittedCall {
        SubmittedCall {
            call_id: call_id.into(),
            choice: Some(choice.into()),
            arguments: arguments.map(str::to_owned),
            reason: Some(reason.into()),
            result: None,
            remember: None,
            answer: FormAnswer::default(),
        }
    }

    fn submission(action: Action, calls: Vec<SubmittedCall>) -> Submission {
        Submission {
            action,
            reason: None,
            calls,
            acknowledge_discard: false,
        }
    }

    fn choices(decision: Decision) -> Vec<Choice> {
        match decision {
            Decision::PerCall { calls } => calls.into_iter().map(|c| c.choice).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn changed_argument_text_is_an_edit_whichever_approving_button_is_pressed() {
        let pending = turn();
        // The form shows the arguments pretty-printed: the same value is no edit.
        let same = "{\n  \"body\": \"y\",\n  \"to\": \"x\"\n}";
        let edited = r#"{"slug": "home", "title": "Hello"}"#;
        for action in [Action::ApproveAll, Action::PerCall] {
            let decision = submission(
                action,
                vec![
                    submitted("a", "approve", Some(edited), ""),
                    submitted("b", "approve", Some(same), ""),
                ],
            )
            .resolve(&pending, &[])
            .unwrap();
            assert_eq!(
                choices(decision),
                [
                    Choice::ApproveEdited {
                        arguments: json!({"slug": "home", "title": "Hello"})
                    },
                    Choice::Approve
                ],
                "{action:?}"
            );
        }
        let not_json = submission(
            Action::ApproveAll,
            vec![submitted("a", "approve", Some("{oops"), "")],
        )
        .resolve(&pending, &[])
        .unwrap_err();
        assert!(
            matches!(&not_json, DecisionError::EditNotJson { call_id, tool, .. } if call_id == "a" && tool == "update_page"),
            "{not_json:?}"
        );
    }

    #[test]
    fn deny_all_gives_each_call_its_own_reason_or_the_shared_one() {
        let mut form = submission(
            Action::DenyAll,
            vec![
                submitted("a", "approve", None, "  not today "),
                submitted("b", "approve", None, ""),
            ],
        );
        form.reason = Some("ask first".into());
        assert_eq!(
            choices(form.resolve(&turn(), &[]).unwrap()),
            [
                Choice::Deny {
                    reason: Some("not today".into())
                },
                Choice::Deny {
                    reason: Some("ask first".into())
                }
            ]
        );
    }

    #[test]
    fn a_button_that_would_drop_typed_text_is_refused_until_acknowledged() {
        let pending = turn();
        let cases = [
            // A reason typed for a call that Approve all approves.
            (
                Action::ApproveAll,
                vec![submitted("a", "approve", None, "careful")],
                None,
                "the reason typed for update_page",
            ),
            // Edits of a call that is denied.
            (
                Action::DenyAll,
                vec![submitted("a", "approve", Some(r#"{"slug": "x"}"#), "")],
                None,
                "the edited arguments of update_page",
            ),
            // A shared reason when nothing is denied.
            (
                Action::PerCall,
                vec![
                    submitted("a", "approve", None, ""),
                    submitted("b", "approve", None, ""),
                ],
                Some("why"),
                "the reason typed for the whole turn",
            ),
        ];
        for (action, calls, reason, named) in cases {
            let mut form = submission(action, calls);
            form.reason = reason.map(str::to_owned);
            let err = form.resolve(&pending, &[]).unwrap_err();
            assert!(
                matches!(&err, DecisionError::WouldDiscard(text) if text.contains(named)),
                "{action:?}: {err}"
            );
            form.acknowledge_discard = true;
            assert!(form.resolve(&pending, &[]).is_ok(), "{action:?}");
        }
    }

    #[test]
    fn per_call_forms_must_answer_every_call_with_a_known_choice() {
        let pending = turn();
        let missing = submission(Action::PerCall, vec![submitted("a", "approve", None, "")])
            .resolve(&pending, &[])
            .unwrap_err();
        assert!(
            matches!(missing, DecisionError::MissingCall { ref call_id, .. } if call_id == "b")
        );
        let unknown = submission(Action::PerCall, vec![submitted("z", "approve", None, "")])
            .resolve(&pending, &[])
            .unwrap_err();
        assert!(matches!(unknown, DecisionError::UnknownCall { .. }));
        let bad = submission(
            Action::PerCall,
            vec![
                submitted("a", "maybe", None, ""),
                submitted("b", "deny", None, "no"),
            ],
        )
        .resolve(&pending, &[])
        .unwrap_err();
        assert!(
            matches!(bad, DecisionError::InvalidChoice { ref choice, .. } if choice == "maybe")
        );
        // Approve all needs no per-call part at all (a JSON client's plain approval).
        assert_eq!(
            choices(
                submission(Action::ApproveAll, vec![])
                    .resolve(&pending, &[])
                    .unwrap()
            ),
            [Choice::Approve, Choice::Approve]
        );
    }

    #[test]
    fn a_rule_asked_for_goes_with_a_choice_that_fits_it() {
        let pending = turn();
        let remember = |effect| {
            Some(Remember {
                scope: RememberScope::Configuration,
                effect,
                conditions: Vec::new(),
            })
        };
        let form = |action, choice: &str, effect| {
            let mut call = submitted("b", choice, None, "");
            call.reason = None;
            call.remember = remember(effect);
            let mut other = submitted("a", "approve", None, "");
            other.reason = None;
            submission(action, vec![other, call])
        };
        let rules = |form: Submission| {
            let decision = form.resolve(&pending, &[])?;
            form.rules(&pending, &decision, (uuid::Uuid::nil(), "demo"))
        };
        let allow = rules(form(Action::ApproveAll, "approve", RuleEffect::Allow)).unwrap();
        assert_eq!(allow.len(), 1);
        assert_eq!(
            (allow[0].tool.as_str(), allow[0].effect),
            ("send_message", RuleEffect::Allow)
        );
        let deny = rules(form(Action::PerCall, "deny", RuleEffect::Deny)).unwrap();
        assert_eq!(deny[0].effect, RuleEffect::Deny);
        for (action, choice, effect) in [
            (Action::DenyAll, "approve", RuleEffect::Allow),
            (Action::PerCall, "deny", RuleEffect::Allow),
            (Action::ApproveAll, "approve", RuleEffect::Deny),
        ] {
            let err = rules(form(action, choice, effect)).unwrap_err();
            assert!(
                matches!(&err, DecisionError::RuleAgainstChoice { tool, .. } if tool == "send_message"),
                "{action:?} {choice} {effect:?}: {err}"
            );
        }
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

    #[test]
    fn a_question_of_the_turn_is_answered_in_the_per_call_decision_and_only_there() {
        let pending = vec![
            ToolCall::new(
                "q",
                "ask_operator",
                &json!({"question": "Which?", "choices": ["a", "b"]}),
            ),
            ToolCall::new("u", "update_page", &json!({"slug": "home", "title": "Hi"})),
        ];
        let questions = vec!["q".to_owned()];
        let answered = |text: &str| SubmittedCall {
            call_id: "q".into(),
            answer: FormAnswer::text(text),
            ..SubmittedCall::default()
        };
        let deny_update = submitted("u", "deny", None, "not now");
        let form = submission(Action::PerCall, vec![answered("b"), deny_update.clone()]);
        assert_eq!(
            choices(form.resolve(&pending, &questions).unwrap()),
            vec![
                Choice::Respond { result: "b".into() },
                Choice::Deny {
                    reason: Some("not now".into())
                }
            ]
        );
        // The answer is checked against the question.
        let form = submission(Action::PerCall, vec![answered("c"), deny_update.clone()]);
        assert!(matches!(
            form.resolve(&pending, &questions),
            Err(DecisionError::InvalidAnswer { .. })
        ));
        // "answer" is a choice for questions only.
        let mut wrong = deny_update.clone();
        wrong.choice = Some("answer".into());
        let form = submission(Action::PerCall, vec![answered("a"), wrong]);
        assert!(matches!(
            form.resolve(&pending, &questions),
            Err(DecisionError::InvalidChoice { .. })
        ));
        // A button that drops a typed answer asks first.
        let form = submission(Action::ApproveAll, vec![answered("a")]);
        assert!(matches!(
            form.resolve(&pending, &questions),
            Err(DecisionError::WouldDiscard(text)) if text.contains("the answer typed for ask_operator")
        ));
    }
}
