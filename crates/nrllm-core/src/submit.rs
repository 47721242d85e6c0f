//! An approval form as submitted ([`Submission`], the one shape a decision has from the form to
//! here), read and resolved once into the [`Decision`] the form *showed* and the approval rules
//! asked for with it: changed argument text is an edit, a reason goes to the call it was typed
//! for, and a button that would drop typed text is refused unless the operator acknowledged that.
//! Every field is text from a web client: it is read here (the button, each call's choice and
//! rule), bounded, and refused naming the field when it is not one the form offers.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use uuid::Uuid;

pub use nrllm_types::submission::{Submission, SubmittedCall};

use crate::decision::{
    CallDecision, Choice, Decision, DecisionError, MAX_EDIT_CHARS, MAX_REASON_CHARS,
};
use crate::question::FormAnswer;
use crate::rules::{form_conditions, Condition, RuleDraft, RuleEffect, RuleError, RuleScope};
use crate::transcript::ToolCall;

/// The decision `submission` showed for `pending` (of run `run`, configuration
/// `configuration`), whose calls `questions` ask the operator, and the approval rules asked for
/// beside its calls. A question's call is answered with the choice `answer` (implied when an
/// answer is typed and no choice is given), checked against the question.
pub fn resolve(
    submission: &Submission,
    pending: &[ToolCall],
    questions: &[String],
    (run, configuration): (Uuid, &str),
) -> Result<(Decision, Vec<RuleDraft>), DecisionError> {
    let form = Form::read(submission)?;
    let decision = form.decide(pending, questions)?;
    let rules = form.rules(pending, &decision, (run, configuration))?;
    Ok((decision, rules))
}

/// The button an approval form was submitted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    ApproveAll,
    DenyAll,
    /// Each call as its own choice says.
    PerCall,
}

/// An approval rule asked for beside a call, for the call's tool.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Remember {
    /// This run (`false`: every run of its configuration).
    this_run: bool,
    /// `allow` goes with a call the decision runs; `deny` with one it denies.
    effect: RuleEffect,
    conditions: Vec<Condition>,
}

/// A submission read: its button known, its texts bounded, each call's rule parsed.
struct Form<'a> {
    action: Action,
    /// The reason typed for the whole turn.
    reason: Option<&'a str>,
    calls: Vec<Entry<'a>>,
    acknowledge_discard: bool,
}

/// One call's part of a form, read.
struct Entry<'a> {
    submitted: &'a SubmittedCall,
    answer: FormAnswer,
    remember: Option<Remember>,
}

fn invalid(field: &str, message: impl Into<String>) -> DecisionError {
    DecisionError::InvalidField {
        field: field.to_owned(),
        message: message.into(),
    }
}

/// Refuses `text` in `field` if it is longer than `max` characters.
fn at_most(field: &str, text: Option<&str>, max: usize) -> Result<(), DecisionError> {
    match text {
        Some(text) if text.chars().count() > max => {
            Err(invalid(field, format!("at most {max} characters")))
        }
        _ => Ok(()),
    }
}

fn typed(text: &Option<String>) -> Option<&str> {
    text.as_deref().map(str::trim).filter(|t| !t.is_empty())
}

impl<'a> Form<'a> {
    fn read(submission: &'a Submission) -> Result<Form<'a>, DecisionError> {
        let action = match submission.decision.trim() {
            "approve_all" => Action::ApproveAll,
            "deny_all" => Action::DenyAll,
            "per_call" => Action::PerCall,
            other => {
                return Err(invalid(
                    "decision",
                    format!("`{other}` is not approve_all, deny_all or per_call"),
                ))
            }
        };
        if action == Action::PerCall && submission.calls.is_empty() {
            return Err(invalid("calls", "say what to do with each pending call"));
        }
        at_most("reason", submission.reason.as_deref(), MAX_REASON_CHARS)?;
        let calls = submission
            .calls
            .iter()
            .enumerate()
            .map(|(i, call)| Entry::read(i, call))
            .collect::<Result<_, _>>()?;
        Ok(Form {
            action,
            reason: typed(&submission.reason),
            calls,
            acknowledge_discard: submission.acknowledge_discard,
        })
    }
}

impl<'a> Entry<'a> {
    fn read(i: usize, call: &'a SubmittedCall) -> Result<Entry<'a>, DecisionError> {
        let field = |name: &str| format!("calls[{i}].{name}");
        at_most(
            &field("arguments"),
            call.arguments.as_deref(),
            MAX_EDIT_CHARS,
        )?;
        at_most(&field("reason"), call.reason.as_deref(), MAX_REASON_CHARS)?;
        at_most(&field("result"), call.result.as_deref(), MAX_EDIT_CHARS)?;
        let remember = call.remember.as_deref().map(str::trim).unwrap_or_default();
        let (effect, scope) = match remember.strip_prefix("never_") {
            Some(scope) => (RuleEffect::Deny, scope),
            None => (RuleEffect::Allow, remember),
        };
        let this_run = match scope {
            "" => None,
            "run" => Some(true),
            "configuration" => Some(false),
            _ => {
                return Err(invalid(
                    &field("remember"),
                    "run, configuration, never_run or never_configuration",
                ))
            }
        };
        let remember = match this_run {
            None => None,
            Some(this_run) => Some(Remember {
                this_run,
                effect,
                conditions: form_conditions(
                    call.rule_argument.as_deref(),
                    call.rule_op.as_deref(),
                    call.rule_value.as_deref(),
                    &field("rule_"),
                )
                .map_err(|RuleError::Invalid { field, message }| invalid(&field, message))?,
            }),
        };
        Ok(Entry {
            submitted: call,
            answer: FormAnswer {
                answer: call.answer.clone(),
                fields: call.fields.clone(),
                action: None,
            },
            remember,
        })
    }
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

impl Form<'_> {
    /// The decision this form showed for `pending` (see [`resolve`]).
    fn decide(
        &self,
        pending: &[ToolCall],
        questions: &[String],
    ) -> Result<Decision, DecisionError> {
        let by_id = self.by_call(pending)?;
        let shared_reason = self.reason;
        let mut dropped: Vec<String> = Vec::new();
        let mut calls = Vec::with_capacity(pending.len());
        for call in pending {
            let submitted = by_id.get(call.id.as_str()).copied();
            let part = Part {
                call,
                submitted,
                question: questions.contains(&call.id),
                answer: submitted.map(|s| &s.answer).filter(|a| a.is_given()),
                own_reason: submitted.and_then(|s| typed(&s.submitted.reason)),
                edit: edit_of(
                    call,
                    submitted.and_then(|s| s.submitted.arguments.as_deref()),
                )?,
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
    fn by_call(&self, pending: &[ToolCall]) -> Result<BTreeMap<&str, &Entry<'_>>, DecisionError> {
        let pending_ids: BTreeSet<&str> = pending.iter().map(|c| c.id.as_str()).collect();
        let mut by_id: BTreeMap<&str, &Entry<'_>> = BTreeMap::new();
        for entry in &self.calls {
            let submitted = entry.submitted;
            if !pending_ids.contains(submitted.call_id.as_str()) {
                return Err(DecisionError::UnknownCall {
                    call_id: submitted.call_id.clone(),
                });
            }
            if by_id.insert(&submitted.call_id, entry).is_some() {
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
                .and_then(|s| s.submitted.choice.as_deref())
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
    submitted: Option<&'a Entry<'a>>,
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
            && self
                .submitted
                .and_then(|s| typed(&s.submitted.result))
                .is_some()
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
        let typed_result = self.submitted.and_then(|s| typed(&s.submitted.result));
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

impl Form<'_> {
    /// The approval rules the form asks for beside its calls, each for its call's tool and for
    /// run `run` or its configuration `configuration`, or why not: an allowing rule goes only
    /// with a call that `decision` (this form's, resolved) runs, a denying one only with a call
    /// it denies.
    fn rules(
        &self,
        pending: &[ToolCall],
        decision: &Decision,
        (run, configuration): (Uuid, &str),
    ) -> Result<Vec<RuleDraft>, DecisionError> {
        let mut drafts = Vec::new();
        for entry in &self.calls {
            let Some(remember) = &entry.remember else {
                continue;
            };
            let call_id = &entry.submitted.call_id;
            let call = pending.iter().find(|c| &c.id == call_id).ok_or_else(|| {
                DecisionError::UnknownCall {
                    call_id: call_id.clone(),
                }
            })?;
            let (runs, denied) = match decision {
                Decision::ApproveAll => (true, false),
                Decision::DenyAll { .. } => (false, true),
                // A form never makes these: no call is decided by them.
                Decision::RaiseBudget { .. }
                | Decision::StopAtBudget
                | Decision::ContinueAtBudget
                | Decision::Reply { .. } => (false, false),
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
                scope: if remember.this_run {
                    RuleScope::Run(run)
                } else {
                    RuleScope::Configuration(configuration.into())
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
            ..SubmittedCall::default()
        }
    }

    fn submission(action: &str, calls: Vec<SubmittedCall>) -> Submission {
        Submission {
            decision: action.to_owned(),
            calls,
            ..Submission::default()
        }
    }

    /// The decision alone, as `super::resolve` reads it.
    trait Decide {
        fn resolve(
            &self,
            pending: &[ToolCall],
            questions: &[String],
        ) -> Result<Decision, DecisionError>;
    }

    impl Decide for Submission {
        fn resolve(
            &self,
            pending: &[ToolCall],
            questions: &[String],
        ) -> Result<Decision, DecisionError> {
            super::resolve(self, pending, questions, (Uuid::nil(), "demo"))
                .map(|(decision, _)| decision)
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
        for action in ["approve_all", "per_call"] {
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
                "{action}"
            );
        }
        let not_json = submission(
            "approve_all",
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
            "deny_all",
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
                "approve_all",
                vec![submitted("a", "approve", None, "careful")],
                None,
                "the reason typed for update_page",
            ),
            // Edits of a call that is denied.
            (
                "deny_all",
                vec![submitted("a", "approve", Some(r#"{"slug": "x"}"#), "")],
                None,
                "the edited arguments of update_page",
            ),
            // A shared reason when nothing is denied.
            (
                "per_call",
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
                "{action}: {err}"
            );
            form.acknowledge_discard = true;
            assert!(form.resolve(&pending, &[]).is_ok(), "{action}");
        }
    }

    #[test]
    fn per_call_forms_must_answer_every_call_with_a_known_choice() {
        let pending = turn();
        let missing = submission("per_call", vec![submitted("a", "approve", None, "")])
            .resolve(&pending, &[])
            .unwrap_err();
        assert!(
            matches!(missing, DecisionError::MissingCall { ref call_id, .. } if call_id == "b")
        );
        let unknown = submission("per_call", vec![submitted("z", "approve", None, "")])
            .resolve(&pending, &[])
            .unwrap_err();
        assert!(matches!(unknown, DecisionError::UnknownCall { .. }));
        let bad = submission(
            "per_call",
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
                submission("approve_all", vec![])
                    .resolve(&pending, &[])
                    .unwrap()
            ),
            [Choice::Approve, Choice::Approve]
        );
    }

    #[test]
    fn a_rule_asked_for_goes_with_a_choice_that_fits_it() {
        let pending = turn();
        let remember = |effect| match effect {
            RuleEffect::Allow => Some("configuration".to_owned()),
            RuleEffect::Deny => Some("never_configuration".to_owned()),
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
            super::resolve(&form, &pending, &[], (Uuid::nil(), "demo")).map(|(_, rules)| rules)
        };
        let allow = rules(form("approve_all", "approve", RuleEffect::Allow)).unwrap();
        assert_eq!(allow.len(), 1);
        assert_eq!(
            (allow[0].tool.as_str(), allow[0].effect),
            ("send_message", RuleEffect::Allow)
        );
        let deny = rules(form("per_call", "deny", RuleEffect::Deny)).unwrap();
        assert_eq!(deny[0].effect, RuleEffect::Deny);
        for (action, choice, effect) in [
            ("deny_all", "approve", RuleEffect::Allow),
            ("per_call", "deny", RuleEffect::Allow),
            ("approve_all", "approve", RuleEffect::Deny),
        ] {
            let err = rules(form(action, choice, effect)).unwrap_err();
            assert!(
                matches!(&err, DecisionError::RuleAgainstChoice { tool, .. } if tool == "send_message"),
                "{action} {choice} {effect:?}: {err}"
            );
        }
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
            answer: Some(text.to_owned()),
            ..SubmittedCall::default()
        };
        let deny_update = submitted("u", "deny", None, "not now");
        let form = submission("per_call", vec![answered("b"), deny_update.clone()]);
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
        let form = submission("per_call", vec![answered("c"), deny_update.clone()]);
        assert!(matches!(
            form.resolve(&pending, &questions),
            Err(DecisionError::InvalidAnswer { .. })
        ));
        // "answer" is a choice for questions only.
        let mut wrong = deny_update.clone();
        wrong.choice = Some("answer".into());
        let form = submission("per_call", vec![answered("a"), wrong]);
        assert!(matches!(
            form.resolve(&pending, &questions),
            Err(DecisionError::InvalidChoice { .. })
        ));
        // A button that drops a typed answer asks first.
        let form = submission("approve_all", vec![answered("a")]);
        assert!(matches!(
            form.resolve(&pending, &questions),
            Err(DecisionError::WouldDiscard(text)) if text.contains("the answer typed for ask_operator")
        ));
    }

    fn field_of(err: DecisionError) -> String {
        match err {
            DecisionError::InvalidField { field, .. } => field,
            other => panic!("not a field's error: {other:?}"),
        }
    }

    #[test]
    fn oversized_texts_are_refused_naming_the_field() {
        let pending = turn();
        let long = |max: usize| Some("x".repeat(max + 1));
        let mut form = submission("deny_all", vec![submitted("a", "deny", None, "")]);
        form.reason = long(MAX_REASON_CHARS);
        assert_eq!(field_of(form.resolve(&pending, &[]).unwrap_err()), "reason");
        type Set = fn(&mut SubmittedCall, Option<String>);
        let cases: [(Set, usize, &str); 3] = [
            (|c, t| c.arguments = t, MAX_EDIT_CHARS, "calls[0].arguments"),
            (|c, t| c.reason = t, MAX_REASON_CHARS, "calls[0].reason"),
            (|c, t| c.result = t, MAX_EDIT_CHARS, "calls[0].result"),
        ];
        for (set, max, field) in cases {
            let mut call = submitted("a", "deny", None, "");
            set(&mut call, long(max));
            let form = submission("deny_all", vec![call]);
            assert_eq!(field_of(form.resolve(&pending, &[]).unwrap_err()), field);
        }
    }

    #[test]
    fn a_field_the_form_does_not_offer_is_refused_naming_it() {
        let pending = turn();
        let refused = |form: Submission| field_of(form.resolve(&pending, &[]).unwrap_err());
        assert_eq!(refused(submission("maybe", vec![])), "decision");
        assert_eq!(refused(submission("per_call", vec![])), "calls");
        let ruled = |remember: &str, op: &str, value: &str| {
            let mut call = submitted("b", "approve", None, "");
            call.remember = Some(remember.to_owned());
            call.rule_argument = Some("to".to_owned());
            call.rule_op = Some(op.to_owned());
            call.rule_value = Some(value.to_owned());
            submission(
                "approve_all",
                vec![submitted("a", "approve", None, ""), call],
            )
        };
        assert_eq!(
            refused(ruled("forever", "equals", "x")),
            "calls[1].remember"
        );
        assert_eq!(refused(ruled("run", "like", "x")), "calls[1].rule_op");
        assert_eq!(refused(ruled("run", "equals", "")), "calls[1].rule_value");
        // Read well, the same form asks for a rule for this run with its condition.
        let (_, rules) = super::resolve(
            &ruled("run", "ends_with", "@example.com"),
            &pending,
            &[],
            (Uuid::nil(), "demo"),
        )
        .unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].scope, RuleScope::Run(Uuid::nil()));
        assert_eq!(rules[0].conditions[0].value, "@example.com");
    }
}
