//! A verdict on a waiting run's whole turn, as one button of its form gives it: what a bulk
//! decision does to each picked run, and what a decision offered away from the pages decides
//! ([`crate::offer::Offer`]).

use crate::submit::Submission;

/// What a bulk decision does to each run's whole turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkVerdict {
    ApproveAll,
    DenyAll,
}

impl BulkVerdict {
    /// The button of a run's own form that decides the same.
    pub fn button(self) -> &'static str {
        match self {
            BulkVerdict::ApproveAll => "approve_all",
            BulkVerdict::DenyAll => "deny_all",
        }
    }

    /// What each picked run's claim is given: its own form's button, with `reason` when it
    /// denies (an approval carries none: there is nothing for the model to read).
    pub fn submission(self, reason: Option<&str>) -> Submission {
        Submission {
            decision: self.button().to_owned(),
            reason: match self {
                BulkVerdict::DenyAll => reason.map(str::to_owned),
                BulkVerdict::ApproveAll => None,
            },
            calls: Vec::new(),
            acknowledge_discard: false,
        }
    }

    pub fn parse(text: &str) -> Option<BulkVerdict> {
        match text {
            "approve_all" => Some(BulkVerdict::ApproveAll),
            "deny_all" => Some(BulkVerdict::DenyAll),
            _ => None,
        }
    }
}
