//! What happens to one call of a waiting turn — the smallest part of a decision
//! ([`crate::decision`]), kept apart so that what a run waits in can hold a turn's choices.

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
