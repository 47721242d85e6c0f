//! M-of-N approvals: a turn whose calls need more than one person's approval runs only when
//! that many distinct people approved the same choices for it.
//!
//! - How many: a configuration's [`Quorum`] (one person by default, more for the whole
//!   configuration or for some tools); a turn needs the highest number among the calls that wait
//!   for a person ([`Quorum::for_turn`]), fixed when it begins to wait.
//! - What counts: each approval is a [`Vote`] for what would run — every call's choice and its
//!   arguments, its [`fingerprint`] (a denial's reason and a note on a failed call are words
//!   for the model, not what runs). A person's later vote replaces their earlier one; an edit, or
//!   another choice for any call, is a vote for something else, which the earlier votes do not
//!   count for.
//! - What does not wait for the count: a decision that only denies the calls waiting for a person
//!   ([`needs_quorum`]) decides the turn at once, as one person's "no" always did.
//! - Who counts is the authority's ([`crate::authority`]): the run's lineage never does, and a
//!   token counts as its user, once (votes are by name).
//!
//! The run service gathers the votes without moving the run (its version, and so the digest of
//! open pages, stays the same) and claims it with the vote that reaches the number, once.

use std::collections::BTreeMap;

use crate::decision::Choice;
use crate::state::SuspendedState;

/// The most approvals a turn can need.
pub const MAX_APPROVALS_REQUIRED: u32 = 10;

/// How many distinct people must approve a turn of a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quorum {
    /// For every tool that waits for a person.
    pub approvals: u32,
    /// For these tools instead, by name.
    pub tools: BTreeMap<String, u32>,
}

/// A stored turn's count when it says none (the serde default of the fields that keep one).
pub(crate) fn one() -> u32 {
    1
}

/// Whether a stored count is the default one (left out of the JSON).
pub(crate) fn is_one(n: &u32) -> bool {
    *n <= 1
}

impl Default for Quorum {
    fn default() -> Quorum {
        Quorum {
            approvals: 1,
            tools: BTreeMap::new(),
        }
    }
}

impl Quorum {
    /// How many approvals a call of `tool` needs (at least one).
    pub fn for_tool(&self, tool: &str) -> u32 {
        self.tools
            .get(tool)
            .copied()
            .unwrap_or(self.approvals)
            .clamp(1, MAX_APPROVALS_REQUIRED)
    }

    /// How many approvals `state`'s turn needs: the most any of its calls that wait for a person
    /// needs (one when none does).
    pub fn for_turn(&self, state: &SuspendedState) -> u32 {
        state
            .undecided()
            .iter()
            .map(|call| self.for_tool(&call.name))
            .max()
            .unwrap_or(1)
    }
}

/// Whether a decision with `choices` (one per pending call) on `state`'s turn waits for the
/// count: it does anything but deny each call that waits for a person. A denial decides at once.
pub fn needs_quorum(state: &SuspendedState, choices: &[Choice]) -> bool {
    let undecided = state.undecided();
    state
        .pending
        .iter()
        .zip(choices)
        .filter(|(call, _)| undecided.iter().any(|u| u.id == call.id))
        .any(|(_, choice)| !matches!(choice, Choice::Deny { .. }))
}

/// What a vote is for: the choice for each pending call, with edited arguments and the text a
/// call is answered with, without a denial's reason or a failure's note.
pub fn fingerprint(state: &SuspendedState, choices: &[Choice]) -> String {
    let parts: Vec<String> = state
        .pending
        .iter()
        .zip(choices)
        .map(|(call, choice)| {
            let what = match choice {
                Choice::Deny { .. } => Choice::Deny { reason: None },
                Choice::Failed { .. } => Choice::Failed { note: None },
                other => other.clone(),
            };
            format!(
                "{}={}",
                call.id,
                serde_json::to_string(&what).unwrap_or_default()
            )
        })
        .collect();
    crate::hash::short_hash(parts.iter().map(String::as_bytes), 16)
}

/// One person's approval of a waiting turn (of one version of the run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vote {
    /// Their name: one vote a person, however many tokens they have.
    pub approver: String,
    /// The API token they voted through, if any.
    pub token: Option<String>,
    /// What they approved ([`fingerprint`]).
    pub fingerprint: String,
    /// The choices, as the decision's record has them (JSON).
    pub decision: String,
    pub at_ms: i64,
}

/// Where a waiting turn's approvals stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    /// How many distinct people must approve the same choices.
    pub required: u32,
    /// Each person's latest vote, in the order they came.
    pub votes: Vec<Vote>,
}

impl Tally {
    /// The tally with `vote` in it: it replaces its approver's earlier vote and comes last.
    pub fn with(mut self, vote: Vote) -> Tally {
        self.votes.retain(|v| v.approver != vote.approver);
        self.votes.push(vote);
        self
    }

    /// The votes for `fingerprint`, in the order they came.
    pub fn for_choices<'a>(&'a self, fingerprint: &'a str) -> impl Iterator<Item = &'a Vote> {
        self.votes
            .iter()
            .filter(move |v| v.fingerprint == fingerprint)
    }

    /// Whether enough people approved `fingerprint`.
    pub fn reached(&self, fingerprint: &str) -> bool {
        self.for_choices(fingerprint).count() >= self.required as usize
    }

    /// The votes for what the latest vote approved (none: no vote yet): the count that stands.
    pub fn leading(&self) -> Vec<&Vote> {
        match self.votes.last() {
            Some(last) => self.for_choices(&last.fingerprint).collect(),
            None => Vec::new(),
        }
    }

    /// The people who approved something else than the leading choices: their votes do not
    /// count for them.
    pub fn elsewhere(&self) -> Vec<&Vote> {
        let leading = self.votes.last().map(|v| v.fingerprint.as_str());
        self.votes
            .iter()
            .filter(|v| Some(v.fingerprint.as_str()) != leading)
            .collect()
    }

    /// "1 of 2 approvals: alice" (the leading count), or "0 of 2 approvals".
    pub fn describe(&self) -> String {
        let leading = self.leading();
        let names: Vec<&str> = leading.iter().map(|v| v.approver.as_str()).collect();
        let mut text = format!("{} of {} approvals", names.len(), self.required);
        if !names.is_empty() {
            text.push_str(": ");
            text.push_str(&names.join(", "));
        }
        let elsewhere = self.elsewhere();
        if !elsewhere.is_empty() {
            let others: Vec<&str> = elsewhere.iter().map(|v| v.approver.as_str()).collect();
            text.push_str(&format!(
                " ({} approved other choices, which do not count for these)",
                others.join(", ")
            ));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(approver: &str, fingerprint: &str) -> Vote {
        Vote {
            approver: approver.into(),
            token: None,
            fingerprint: fingerprint.into(),
            decision: String::new(),
            at_ms: 0,
        }
    }

    #[test]
    fn a_tool_can_need_more_or_fewer_than_its_configuration() {
        let quorum = Quorum {
            approvals: 2,
            tools: [("delete_page".to_owned(), 3), ("read".to_owned(), 1)].into(),
        };
        assert_eq!(quorum.for_tool("delete_page"), 3);
        assert_eq!(quorum.for_tool("read"), 1);
        assert_eq!(quorum.for_tool("write"), 2);
        assert_eq!(Quorum::default().for_tool("write"), 1);
        let huge = Quorum {
            approvals: 1_000,
            tools: BTreeMap::new(),
        };
        assert_eq!(huge.for_tool("x"), MAX_APPROVALS_REQUIRED);
    }

    #[test]
    fn a_later_vote_replaces_the_earlier_one_and_only_equal_choices_count() {
        let tally = Tally {
            required: 2,
            votes: Vec::new(),
        };
        assert_eq!(tally.describe(), "0 of 2 approvals");
        let tally = tally.with(vote("alice", "a"));
        assert!(!tally.reached("a"));
        assert_eq!(tally.describe(), "1 of 2 approvals: alice");
        // Bob approves an edit: a count of its own, alice's does not count for it.
        let tally = tally.with(vote("bob", "b"));
        assert!(!tally.reached("a") && !tally.reached("b"));
        assert_eq!(
            tally.describe(),
            "1 of 2 approvals: bob (alice approved other choices, which do not count for these)"
        );
        // Alice approves the edit too: it is reached.
        let tally = tally.with(vote("alice", "b"));
        assert!(tally.reached("b"));
        assert_eq!(tally.votes.len(), 2, "one vote a person");
        assert_eq!(tally.describe(), "2 of 2 approvals: bob, alice");
    }
}
