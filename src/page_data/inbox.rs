//! What the approvals inbox shows: one compact row per waiting turn (no previews: a row's panel
//! computes them when it opens), and what a bulk decision came to.

use serde::{Deserialize, Serialize};

use super::{RunStatus, RunView};

/// A page of the approvals inbox, oldest first; `next_after` continues it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalsPage {
    pub runs: Vec<RunView>,
    pub next_after: Option<String>,
    /// What the inbox can be filtered by.
    pub configurations: Vec<String>,
    pub tools: Vec<String>,
}

/// A call of a waiting turn, as its inbox row names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboxCall {
    pub tool: String,
    /// Its arguments on one line (`path=/a.md · text="hi"`), cut short; a question's text.
    pub summary: String,
}

/// A waiting turn in the inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboxRow {
    pub id: String,
    /// How it waits: `waiting_for_approval` or `waiting_for_input`.
    pub status: RunStatus,
    /// The run's prompt, cut short.
    pub prompt: String,
    pub configuration: String,
    pub requested_by: String,
    /// When it began waiting (`2026-11-30 06:41:29 UTC`).
    pub waiting_since: String,
    pub waiting_since_ms: i64,
    /// By when to decide (UTC), if the turn has a deadline.
    pub deadline: Option<String>,
    pub deadline_ms: Option<i64>,
    /// The calls that wait for a person (gated, outcome unknown, questions).
    pub calls: Vec<InboxCall>,
    /// The inbox link that opens this row's panel (keeping the inbox's filters).
    pub open_href: String,
    /// A turn that needs several approvals: "1 of 2 approvals: alice".
    #[serde(default)]
    pub approvals: Option<String>,
}

/// A page of the inbox as rows, with the one panel opened on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboxPage {
    pub rows: Vec<InboxRow>,
    /// The link to the next page, with the same filters.
    pub next_href: Option<String>,
    /// What the inbox can be filtered by.
    pub configurations: Vec<String>,
    pub tools: Vec<String>,
    /// The run whose panel is open (`open=`), with its previews and digest, if it waits.
    pub open: Option<RunView>,
    /// Where triage starts: the first turn in this inbox's order this person may decide.
    pub triage_href: Option<String>,
    /// What the inbox's panels say comes after a decision (`next?<the filters>`).
    pub then: String,
}

/// What a bulk decision did to one picked run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkResult {
    pub run_id: String,
    /// It was claimed: the decision is the run's now.
    pub decided: bool,
    /// "Approved." or why not (changed since you looked, expired, four-eyes, decided already).
    pub message: String,
}

/// What a bulk decision did, run by run, in the order picked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkOutcome {
    pub results: Vec<BulkResult>,
}
