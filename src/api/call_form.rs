//! An approval form as posted: one part per call, read into the submission the core resolves.

use serde::{Deserialize, Serialize};

/// One call's part of an approval form.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallForm {
    pub call_id: String,
    /// `approve`, `deny` or `edit`: read when the decision is `per_call`.
    #[serde(default)]
    pub choice: Option<String>,
    /// The arguments as the form holds them, as JSON text. Text that differs from the model's
    /// arguments is an edit: the call runs with it when it is approved.
    #[serde(default)]
    pub arguments: Option<String>,
    /// The reason the model reads if this call is denied (with `failed`: what the operator
    /// knows).
    #[serde(default)]
    pub reason: Option<String>,
    /// With `respond`: the result the model reads instead of running the tool.
    #[serde(default)]
    pub result: Option<String>,
    /// For a question of the turn (`ask_operator`), with the choice `answer`: the answer's text,
    /// or one of the question's choices …
    #[serde(default)]
    pub answer: Option<String>,
    /// … or, for a question with a form, each field's text by name.
    #[serde(default)]
    pub fields: Option<std::collections::BTreeMap<String, String>>,
    /// With an approving choice: `run` — always approve this tool for this run from now on;
    /// `configuration` — for every run of the run's configuration (administrators only). With a
    /// denying choice: `never_run`, `never_configuration` — never allow it there.
    #[serde(default)]
    pub remember: Option<String>,
    /// Only when this argument … (empty: whatever the arguments).
    #[serde(default)]
    pub rule_argument: Option<String>,
    /// … compares so (`equals`, `starts_with`, `ends_with`, `contains`) …
    #[serde(default)]
    pub rule_op: Option<String>,
    /// … with this value.
    #[serde(default)]
    pub rule_value: Option<String>,
}

#[cfg(feature = "ssr")]
mod read {
    use super::CallForm;
    use crate::api::checks::at_most;
    use crate::error::AppError;
    use crate::page_data::{MAX_EDIT_CHARS, MAX_REASON_CHARS};
    use nrllm_core::decision::{Action, Remember, RememberScope, Submission, SubmittedCall};
    use nrllm_core::question::FormAnswer;
    use nrllm_core::rules::{Condition, MatchOp, RuleEffect};

    /// The approval form (or JSON client) as submitted.
    pub fn submission(
        action: &str,
        reason: Option<String>,
        calls: Vec<CallForm>,
        acknowledge_discard: bool,
    ) -> Result<Submission, AppError> {
        let action = match action {
            "approve_all" => Action::ApproveAll,
            "deny_all" => Action::DenyAll,
            "per_call" => Action::PerCall,
            other => {
                return Err(AppError::invalid(
                    "decision",
                    format!("`{other}` is not approve_all, deny_all or per_call"),
                ))
            }
        };
        if action == Action::PerCall && calls.is_empty() {
            return Err(AppError::invalid(
                "calls",
                "say what to do with each pending call",
            ));
        }
        at_most("reason", reason.as_deref(), MAX_REASON_CHARS)?;
        for (i, call) in calls.iter().enumerate() {
            at_most(
                &format!("calls[{i}].arguments"),
                call.arguments.as_deref(),
                MAX_EDIT_CHARS,
            )?;
            at_most(
                &format!("calls[{i}].reason"),
                call.reason.as_deref(),
                MAX_REASON_CHARS,
            )?;
            at_most(
                &format!("calls[{i}].result"),
                call.result.as_deref(),
                MAX_EDIT_CHARS,
            )?;
        }
        Ok(Submission {
            action,
            reason,
            calls: calls
                .into_iter()
                .map(|call| SubmittedCall {
                    call_id: call.call_id,
                    choice: call.choice,
                    arguments: call.arguments,
                    reason: call.reason,
                    result: call.result,
                    remember: None,
                    answer: FormAnswer {
                        answer: call.answer,
                        fields: call.fields,
                    },
                })
                .collect(),
            acknowledge_discard,
        })
    }

    /// The approval rule each call of a form asks for ("always approve …"), in form order: its
    /// scope — this run, or the run's configuration (whether the decider may add it is the
    /// claim's to check) — and condition.
    pub fn rule_scopes(calls: &[CallForm]) -> Result<Vec<Option<Remember>>, AppError> {
        let mut scopes = Vec::with_capacity(calls.len());
        for (i, call) in calls.iter().enumerate() {
            let remember = call.remember.as_deref().map(str::trim).unwrap_or_default();
            let (effect, scope) = match remember.strip_prefix("never_") {
                Some(scope) => (RuleEffect::Deny, scope),
                None => (RuleEffect::Allow, remember),
            };
            let scope = match scope {
                "" => None,
                "run" => Some(RememberScope::Run),
                "configuration" => Some(RememberScope::Configuration),
                _ => {
                    return Err(AppError::invalid(
                        &format!("calls[{i}].remember"),
                        "run, configuration, never_run or never_configuration",
                    ))
                }
            };
            let remember = match scope {
                Some(scope) => Some(Remember {
                    scope,
                    effect,
                    conditions: conditions(
                        call.rule_argument.clone(),
                        call.rule_op.clone(),
                        call.rule_value.clone(),
                        &format!("calls[{i}].rule_"),
                    )?,
                }),
                None => None,
            };
            scopes.push(remember);
        }
        Ok(scopes)
    }

    /// The condition a form asks for: none when `argument` is empty, else all three fields
    /// (named with `prefix`, e.g. `calls[0].rule_`).
    pub fn conditions(
        argument: Option<String>,
        op: Option<String>,
        value: Option<String>,
        prefix: &str,
    ) -> Result<Vec<Condition>, AppError> {
        let argument = argument.unwrap_or_default().trim().to_owned();
        if argument.is_empty() {
            return Ok(Vec::new());
        }
        let op = op.unwrap_or_default();
        let op = MatchOp::parse(op.trim()).ok_or_else(|| {
            AppError::invalid(
                &format!("{prefix}op"),
                "equals, starts_with, ends_with or contains",
            )
        })?;
        let value = value.unwrap_or_default();
        if value.is_empty() {
            return Err(AppError::invalid(
                &format!("{prefix}value"),
                format!("give the value {argument} is compared with"),
            ));
        }
        Ok(vec![Condition {
            argument,
            op,
            value,
        }])
    }
}

#[cfg(feature = "ssr")]
pub use read::{conditions, rule_scopes, submission};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_data::{MAX_EDIT_CHARS, MAX_REASON_CHARS};
    use nrllm_core::decision::Action;

    #[test]
    fn oversized_decision_texts_are_refused_naming_the_field() {
        let call = |arguments: String, reason: String| CallForm {
            call_id: "c1".into(),
            choice: None,
            arguments: Some(arguments),
            reason: Some(reason),
            result: None,
            ..CallForm::default()
        };
        let err = submission(
            "approve_all",
            None,
            vec![call("x".repeat(MAX_EDIT_CHARS + 1), String::new())],
            false,
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("calls[0].arguments"));
        let err = submission(
            "deny_all",
            None,
            vec![call("{}".into(), "r".repeat(MAX_REASON_CHARS + 1))],
            false,
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("calls[0].reason"));
        let err = submission(
            "deny_all",
            Some("r".repeat(MAX_REASON_CHARS + 1)),
            vec![],
            false,
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("reason"));
        // The app's limit is the runtime's.
        assert_eq!(MAX_REASON_CHARS, nrllm_core::decision::MAX_REASON_CHARS);
    }

    #[test]
    fn forms_name_a_bad_button_and_an_empty_per_call_decision() {
        let err = submission("maybe", None, vec![], false).unwrap_err();
        assert_eq!(err.field(), Some("decision"));
        let err = submission("per_call", None, vec![], false).unwrap_err();
        assert_eq!(err.field(), Some("calls"));
        let call = CallForm {
            call_id: "c1".into(),
            choice: Some("deny".into()),
            arguments: None,
            reason: Some("no".into()),
            ..CallForm::default()
        };
        let ok = submission("per_call", Some("all".into()), vec![call], true).unwrap();
        assert_eq!(ok.action, Action::PerCall);
        assert!(ok.acknowledge_discard);
        assert_eq!(ok.calls[0].reason.as_deref(), Some("no"));
    }
}
