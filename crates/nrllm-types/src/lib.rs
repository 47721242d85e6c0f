//! The words a run is described in, each with exactly one string form (derived: `snake_case`),
//! shared by the run store, the SQL it writes and the pages. No page compares a status to a
//! string literal: it matches on [`RunStatus`]. Small and free of I/O, so the browser's wasm
//! bundle can use it too.

use serde::{Deserialize, Serialize};
use strum::{Display, EnumIter, EnumString, IntoStaticStr};

pub mod limits;
pub mod submission;

/// A run's status (DESIGN §3).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    Display,
    EnumString,
    EnumIter,
    IntoStaticStr,
)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    WaitingForApproval,
    WaitingForInput,
    /// Stopped at a limit of its budget, before the action that would cross it: a person
    /// raises the limit (the run goes on) or stops the run.
    WaitingForBudget,
    Completed,
    Failed,
    Cancelled,
}

impl RunStatus {
    /// The statuses a run never leaves.
    pub const TERMINAL: [RunStatus; 3] = [
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];
    /// The statuses of a run that waits for a person.
    pub const WAITING: [RunStatus; 3] = [
        RunStatus::WaitingForApproval,
        RunStatus::WaitingForInput,
        RunStatus::WaitingForBudget,
    ];
    /// The statuses a run can be cancelled from.
    pub const CANCELLABLE: [RunStatus; 4] = [
        RunStatus::Queued,
        RunStatus::WaitingForApproval,
        RunStatus::WaitingForInput,
        RunStatus::WaitingForBudget,
    ];

    /// The stored name (`waiting_for_approval`, …).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The status with this stored name.
    pub fn parse(text: &str) -> Option<RunStatus> {
        text.parse().ok()
    }

    /// Every status, in lifecycle order.
    pub fn all() -> impl Iterator<Item = RunStatus> {
        <RunStatus as strum::IntoEnumIterator>::iter()
    }

    /// Completed, failed and cancelled runs never change status again.
    pub fn is_terminal(self) -> bool {
        RunStatus::TERMINAL.contains(&self)
    }

    /// The run waits for a person (a decision or an answer).
    pub fn is_waiting(self) -> bool {
        RunStatus::WAITING.contains(&self)
    }

    /// The run is queued or running: its steps may still come.
    pub fn is_live(self) -> bool {
        matches!(self, RunStatus::Queued | RunStatus::Running)
    }

    /// `(status = 'a' OR status = 'b')`: whether `column` holds one of `statuses`, written out
    /// term by term. SQLite evaluates an `IN` list of three or more constants through a
    /// temporary B-tree that it builds afresh each time the list is evaluated — for a partial
    /// index's predicate, twice for every row a statement changes (the old row and the new) — so
    /// the partial indexes of waiting runs and the statements of a run's transitions use this
    /// form, and a query that reads through such an index repeats its predicate word for word
    /// (SQLite uses a partial index only for a query that has its predicate as one of its terms).
    pub fn sql_any(column: &str, statuses: &[RunStatus]) -> String {
        let terms: Vec<String> = statuses
            .iter()
            .map(|s| format!("{column} = '{}'", s.as_str()))
            .collect();
        format!("({})", terms.join(" OR "))
    }

    /// The words a page shows for it.
    pub fn label(self) -> &'static str {
        match self {
            RunStatus::Queued => "Queued",
            RunStatus::Running => "Running",
            RunStatus::WaitingForApproval => "Waiting for approval",
            RunStatus::WaitingForInput => "Waiting for input",
            RunStatus::WaitingForBudget => "Waiting for budget",
            RunStatus::Completed => "Completed",
            RunStatus::Failed => "Failed",
            RunStatus::Cancelled => "Cancelled",
        }
    }
}

/// Why a run ended.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    Display,
    EnumString,
    EnumIter,
    IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum TerminationReason {
    Completed,
    MaxIterations,
    BudgetExhausted,
    /// It waited at its budget and nobody raised it before the deadline.
    BudgetExpired,
    ApprovalDenied,
    ApprovalExpired,
    ProviderFailed,
    StateCorrupted,
    Cancelled,
    Interrupted,
    /// The state to keep while it waited was above the size limit.
    StateTooLarge,
}

impl TerminationReason {
    /// The stored name (`max_iterations`, …).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The reason with this stored name.
    pub fn parse(text: &str) -> Option<TerminationReason> {
        text.parse().ok()
    }
}

/// The operator's verdict on a suspension, as recorded on the run.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    Display,
    EnumString,
    EnumIter,
    IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Verdict {
    Approved,
    Denied,
    Mixed,
    /// Nobody decided before the approval deadline; no call of the turn ran.
    Expired,
}

impl Verdict {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What a user (or an API token) may do. Each role may do everything the roles before it may.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    Display,
    EnumString,
    EnumIter,
    IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Role {
    /// Reads runs.
    Viewer,
    /// Also starts and cancels runs.
    Operator,
    /// Also decides (approves, denies).
    Approver,
    /// Also manages users, tool settings and API tokens.
    Admin,
}

impl Role {
    /// Every role, from the least to the most rights.
    pub const ALL: [Role; 4] = [Role::Viewer, Role::Operator, Role::Approver, Role::Admin];

    /// The stored name (`viewer`, …).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The role with this stored name.
    pub fn parse(text: &str) -> Option<Role> {
        text.parse().ok()
    }

    /// This role may do what `needed` may.
    pub fn allows(self, needed: Role) -> bool {
        self >= needed
    }

    /// What this role adds, for the admin page.
    pub fn describe(self) -> &'static str {
        match self {
            Role::Viewer => "reads runs",
            Role::Operator => "also starts and cancels runs",
            Role::Approver => "also approves and denies",
            Role::Admin => "also manages users, tool settings and API tokens",
        }
    }
}

/// Longest tool or argument name an approval rule names, in characters.
pub const RULE_NAME_CHARS: usize = 100;
/// Longest value an approval rule's condition compares with, in characters.
pub const RULE_VALUE_CHARS: usize = 500;

/// The longest answer to an operator's question, in characters (the server checks it; the
/// browser's answer box stops there too).
pub const MAX_ANSWER_CHARS: usize = 20_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_any_writes_one_equality_a_status_joined_by_or() {
        assert_eq!(
            RunStatus::sql_any("status", &RunStatus::WAITING),
            "(status = 'waiting_for_approval' OR status = 'waiting_for_input' \
             OR status = 'waiting_for_budget')"
        );
        assert_eq!(
            RunStatus::sql_any("r.status", &[RunStatus::Queued]),
            "(r.status = 'queued')"
        );
    }

    #[test]
    fn the_string_form_is_the_serde_form_and_round_trips() {
        for status in RunStatus::all() {
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(json, format!("\"{}\"", status.as_str()));
            assert_eq!(RunStatus::parse(status.as_str()), Some(status));
            assert_eq!(status.to_string(), status.as_str());
        }
        assert_eq!(
            RunStatus::WaitingForApproval.as_str(),
            "waiting_for_approval"
        );
        assert_eq!(RunStatus::parse("waiting"), None);
        for reason in <TerminationReason as strum::IntoEnumIterator>::iter() {
            assert_eq!(TerminationReason::parse(reason.as_str()), Some(reason));
            assert_eq!(
                serde_json::to_string(&reason).unwrap(),
                format!("\"{}\"", reason.as_str())
            );
        }
        assert_eq!(TerminationReason::MaxIterations.as_str(), "max_iterations");
        assert_eq!(Verdict::Mixed.as_str(), "mixed");
    }

    #[test]
    fn each_role_allows_what_the_roles_before_it_allow() {
        use strum::IntoEnumIterator;
        let roles: Vec<Role> = Role::iter().collect();
        for (i, role) in roles.iter().enumerate() {
            for (j, needed) in roles.iter().enumerate() {
                assert_eq!(role.allows(*needed), i >= j, "{role} needs {needed}");
            }
            assert_eq!(Role::parse(role.as_str()), Some(*role));
        }
        assert_eq!(Role::parse("root"), None);
    }
}

/// An MCP server's connection, as the system page shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Display, IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum McpState {
    Connecting,
    Connected,
    Failed,
}

impl McpState {
    /// `connecting`, `connected` or `failed`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One of an MCP server's tools, as the system page lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpToolStatus {
    /// The registry name (`<server>__<tool>`), or the name on the server when it did not join.
    pub name: String,
    /// Its calls wait for an operator.
    pub waits: bool,
    /// A call a crash cut off is sent again with the same effect key (`idempotentHint`).
    pub rerun_after_crash: bool,
    /// Why it did not join the registry.
    pub refused: Option<String>,
    /// Its server's hints became looser after it joined (it now says it changes nothing): its
    /// calls still wait, as before, until an administrator accepts the change; this says so.
    #[serde(default)]
    pub held: Option<String>,
}

/// One argument of a call, as its tool's schema describes it: the approval panel's view of a
/// call whose tool offers no preview. The texts are the tool's and the model's, bounded; pages
/// show them as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArgumentField {
    pub name: String,
    /// The schema's description of the field.
    pub description: Option<String>,
    /// The schema's type (`string`, `integer`, …), if it gives one.
    pub kind: Option<String>,
    pub required: bool,
    /// The value the model sent, as JSON text; `None` when it sent none.
    pub value: Option<String>,
    /// The model sent a field the schema does not have.
    pub unexpected: bool,
}
