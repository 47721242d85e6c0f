//! The daily spend caps across runs a run can wait at ([`crate::spend`]): whose cap, for which
//! UTC day. Kept apart so a run's state can name one without the ledger.

use serde::{Deserialize, Serialize};

use crate::clock::show_day;

/// Whose spend a cap counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapScope {
    /// The runs of one configuration.
    Configuration,
    /// The runs one user requested.
    User,
}

impl CapScope {
    pub fn as_str(self) -> &'static str {
        match self {
            CapScope::Configuration => "configuration",
            CapScope::User => "user",
        }
    }

    pub fn parse(text: &str) -> Option<CapScope> {
        match text {
            "configuration" => Some(CapScope::Configuration),
            "user" => Some(CapScope::User),
            _ => None,
        }
    }
}

/// The daily cap a run waits at: whose, and for which UTC day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DailyCap {
    pub scope: CapScope,
    /// The UTC day, counted from the Unix epoch ([`crate::clock::utc_day`]).
    pub day: i64,
}

impl DailyCap {
    /// "the configuration's daily spend cap for 2026-12-04".
    pub fn describe(&self) -> String {
        format!(
            "the {}'s daily spend cap for {}",
            self.scope.as_str(),
            show_day(self.day)
        )
    }
}
