//! A decision as an approval form (or a JSON client) submits it: the button pressed and
//! everything the form held, as text. This is the one shape a decision has on its way from the
//! form to the core: the server function's arguments deserialize into it, and the core reads and
//! resolves it once (`nrllm_core::submit`) into the choices it journals. Nothing here is trusted:
//! every field is read, bounded and checked there.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The longest reason an operator may type, in characters.
pub const MAX_REASON_CHARS: usize = 2000;
/// The longest edited-arguments text (or written result) an operator may send, in characters.
pub const MAX_EDIT_CHARS: usize = 100_000;

/// An approval form as submitted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    /// The button: `approve_all`, `deny_all`, or `per_call` (each call as its own choice says).
    pub decision: String,
    /// The reason typed for the whole turn.
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub calls: Vec<SubmittedCall>,
    /// The operator was told which typed text this button drops, and went on.
    #[serde(default)]
    pub acknowledge_discard: bool,
}

/// One call's part of an approval form.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmittedCall {
    pub call_id: String,
    /// `approve`, `deny`, `edit`, `respond`, `failed` or (for a question) `answer`: read when
    /// the decision is `per_call`.
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
    pub fields: Option<BTreeMap<String, String>>,
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

/// Whether a checkbox (or a hidden field a page sets) was ticked, from the text the form posts:
/// present, not empty and not `false`.
pub fn ticked(value: Option<&str>) -> bool {
    value.is_some_and(|value| !value.is_empty() && value != "false")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_client_may_leave_out_everything_but_the_button_and_the_call_ids() {
        let submission: Submission = serde_json::from_str(
            r#"{"decision": "per_call", "calls": [{"call_id": "c1", "choice": "deny"}]}"#,
        )
        .unwrap();
        assert_eq!(submission.decision, "per_call");
        assert!(!submission.acknowledge_discard);
        assert_eq!(submission.calls[0].choice.as_deref(), Some("deny"));
        assert_eq!(submission.calls[0].remember, None);
    }

    #[test]
    fn a_box_is_ticked_by_any_value_but_empty_and_false() {
        assert!(ticked(Some("1")) && ticked(Some("on")));
        assert!(!ticked(None) && !ticked(Some("")) && !ticked(Some("false")));
    }
}
