//! The one authority over runs: whether a caller may decide, answer, fork, retry, cancel or add
//! (or remove) an approval rule for a run. Every such move of the run service
//! ([`crate::run_service::RunService`]) asks [`authorize`] first, with the run as it was read for the
//! move; the web layer only says who is asking ([`Actor`]) and keeps its request checks (host,
//! origin, CSRF, limits). A path that does not pass here cannot move a run.
//!
//! What it weighs, all passed in, nothing read here:
//! - the caller's role (a token's is the lower of its own and its user's, worked out where the
//!   token is looked up);
//! - four-eyes: when it holds for the run's configuration, nobody in the run's lineage — its own
//!   requester and those of every run it was forked or retried from, and so whoever forked or
//!   retried it — may decide it, answer it, or decide its calls in advance with a run rule; the
//!   same holds for a turn that needs several people's approvals ([`crate::quorum`]), whatever
//!   four-eyes says;
//! - the rule's scope: a configuration's rule is an administrator's;
//! - the run's state: only a waiting run is decided or answered, only a run whose model call
//!   failed is retried, a finished run is not cancelled.
//!
//! The digest (that a decision was made on the turn the operator saw) is checked by the claim,
//! beside this, since it needs the tools' previews.

use nrllm_types::Role;

use crate::rules::RuleScope;
use crate::run_store::{RunStatus, TerminationReason};

/// Who asks: a user, through their session or one of their API tokens, or the server itself
/// (the deadline, recovery, automatic decisions), which never passes here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The user's name: what the run records as who decided, and what four-eyes compares.
    pub name: String,
    /// The role the caller acts with (a token's: the lower of its own and its user's).
    pub role: Role,
    /// The API token the user acts through, if any (recorded beside their name).
    pub token: Option<String>,
}

impl Actor {
    /// A user acting with `role`.
    pub fn user(name: impl Into<String>, role: Role) -> Actor {
        Actor {
            name: name.into(),
            role,
            token: None,
        }
    }

    /// A user acting through their API token `token`, whose own role is `token_role`: the lower
    /// of the two roles holds.
    pub fn through_token(
        name: impl Into<String>,
        user_role: Role,
        token: impl Into<String>,
        token_role: Role,
    ) -> Actor {
        Actor {
            name: name.into(),
            role: user_role.min(token_role),
            token: Some(token.into()),
        }
    }

    /// A headless program that owns its store (examples, tests, benchmarks): it acts as an
    /// administrator under the name it gives; four-eyes still compares that name.
    pub fn headless(name: impl Into<String>) -> Actor {
        Actor::user(name, Role::Admin)
    }

    /// How the log and the steps name the caller ([`label`]).
    pub fn label(&self) -> String {
        label(&self.name, self.token.as_deref())
    }
}

/// How the log and the steps name user `name` acting through API token `token`, if any: `olga`,
/// or `olga (token ci)`.
pub fn label(name: &str, token: Option<&str>) -> String {
    match token {
        Some(token) => format!("{name} (token {token})"),
        None => name.to_owned(),
    }
}

/// What the caller wants to do with a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act<'a> {
    /// Approve, deny, edit or answer the calls of its pending turn (any button of the panel).
    Decide,
    /// Answer the question its pending turn asks.
    Answer,
    /// Start a run that goes on from its journal at a step.
    Fork,
    /// Start a run that asks its failed model call again.
    Retry,
    /// Stop it.
    Cancel,
    /// Add or remove an approval rule of this scope (a run's rule names this run).
    Rule(&'a RuleScope),
    /// Decide its pending turn with an offer made away from the app's pages
    /// ([`crate::offer::Offer`]): as [`Act::Decide`], and an offer sent to one person (`to`) is
    /// that person's alone.
    Offered { to: Option<&'a str> },
    /// Raise a daily spend cap across runs for the day (about no one run: the runs waiting at
    /// it then go on by the allowance, [`crate::moves::TurnMove::Allowance`]).
    RaiseSpendCap,
}

impl Act<'_> {
    /// The least role that may do this.
    pub fn needs(self) -> Role {
        match self {
            Act::Decide | Act::Answer | Act::Offered { .. } | Act::Rule(RuleScope::Run(_)) => {
                Role::Approver
            }
            Act::Rule(RuleScope::Configuration(_)) | Act::RaiseSpendCap => Role::Admin,
            Act::Fork | Act::Retry | Act::Cancel => Role::Operator,
        }
    }

    /// Whether four-eyes keeps the run's lineage from doing this: deciding it, now or in
    /// advance with a rule for this run.
    pub fn under_four_eyes(self) -> bool {
        matches!(
            self,
            Act::Decide | Act::Answer | Act::Offered { .. } | Act::Rule(RuleScope::Run(_))
        )
    }

    /// What the act is called at the start of a refusal ("Deciding needs …").
    fn verb(self) -> &'static str {
        match self {
            Act::Decide | Act::Offered { .. } => "Deciding",
            Act::Answer => "Answering",
            Act::Fork => "Forking",
            Act::Retry => "Retrying",
            Act::Cancel => "Cancelling",
            Act::Rule(RuleScope::Run(_)) => "An approval rule for a run",
            Act::Rule(RuleScope::Configuration(_)) => "An approval rule for a whole configuration",
            Act::RaiseSpendCap => "Raising a daily spend cap",
        }
    }
}

/// What the authority needs to know of a run (read once, by the move that asks).
#[derive(Debug, Clone, Copy)]
pub struct RunFacts<'a> {
    pub status: RunStatus,
    /// Why it ended, if it did (a retry needs `provider_failed`).
    pub termination_reason: Option<&'a str>,
    /// Who started it and every run it goes on from, itself first ([`Lineage`]).
    pub lineage: &'a Lineage,
    /// Whether four-eyes holds for the run's configuration (the deployment's setting and the
    /// configuration's, worked out by the caller of the service).
    pub four_eyes: bool,
    /// How many distinct people must approve its waiting turn ([`crate::quorum`]; 1 when it
    /// does not wait): above one, the lineage is kept out as under four-eyes.
    pub approvals_required: u32,
}

/// The people behind a run: its requester, then the requesters of the run it was forked or
/// retried from, and so on up. A fork's or retry's requester is whoever forked or retried it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lineage {
    pub requesters: Vec<String>,
}

impl Lineage {
    /// Whether `name` started this run or one it goes on from.
    pub fn includes(&self, name: &str) -> bool {
        self.requesters.iter().any(|r| r == name)
    }
}

/// Why a caller may not do what they asked. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The caller's role is below what the act needs.
    #[error("{act} needs the {needed} role; {who} acts as {role}")]
    Role {
        act: &'static str,
        needed: Role,
        who: String,
        role: Role,
    },
    /// Four-eyes: the caller started the run, or a run it goes on from.
    #[error("{}", four_eyes_text(.who, *.own))]
    FourEyes {
        who: String,
        /// They started this very run (else one it goes on from, or they forked it).
        own: bool,
    },
    /// The turn needs several people's approvals, and the caller started the run (or one it
    /// goes on from): their decision never counts.
    #[error(
        "{who} started this run or one it goes on from, and this turn needs {required} approvals \
         from other people: {who}'s decision does not count."
    )]
    Quorum { who: String, required: u32 },
    /// An offer sent to one person, used by someone else: nothing is decided.
    #[error(
        "This link was sent to {sent_to}, and you are logged in as {who}: it decides nothing for \
         {who}. Log in as {sent_to} to use it, or decide on the run's page."
    )]
    NotRecipient { sent_to: String, who: String },
    /// The run is not in a state that allows the act.
    #[error("{0}")]
    State(StateRefusal),
}

fn four_eyes_text(who: &str, own: bool) -> String {
    match own {
        true => format!("Four-eyes: {who} started this run, so another approver must decide it."),
        false => format!(
            "Four-eyes: {who} started or forked a run this one goes on from, so another approver \
             must decide it."
        ),
    }
}

/// Why the run's state does not allow the act.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StateRefusal {
    /// Deciding or answering a run that does not wait (the claim says by whom it was decided).
    #[error("The run is {0}, not waiting for a decision")]
    NotWaiting(RunStatus),
    /// Retrying a run whose model call did not fail.
    #[error("Only a run whose model call failed can be retried (this one is {0})")]
    NotRetryable(RunStatus),
    /// Cancelling a run that ended.
    #[error("The run is {0} already; a finished run never changes again")]
    Finished(RunStatus),
}

/// Whether `actor` may do `act` to the run `run` describes (none for an act about no run: a
/// configuration's rule): the one check every move of a run passes (see the module).
pub fn authorize(actor: &Actor, act: Act<'_>, run: Option<&RunFacts<'_>>) -> Result<(), Refusal> {
    let needed = act.needs();
    if !actor.role.allows(needed) {
        return Err(Refusal::Role {
            act: act.verb(),
            needed,
            who: actor.name.clone(),
            role: actor.role,
        });
    }
    if let Act::Offered { to: Some(sent_to) } = act {
        if sent_to != actor.name {
            return Err(Refusal::NotRecipient {
                sent_to: sent_to.to_owned(),
                who: actor.name.clone(),
            });
        }
    }
    let Some(run) = run else {
        return Ok(());
    };
    if act.under_four_eyes() && run.lineage.includes(&actor.name) {
        if run.four_eyes {
            return Err(Refusal::FourEyes {
                who: actor.name.clone(),
                own: run.lineage.requesters.first() == Some(&actor.name),
            });
        }
        if run.approvals_required > 1 {
            return Err(Refusal::Quorum {
                who: actor.name.clone(),
                required: run.approvals_required,
            });
        }
    }
    let state = match act {
        Act::Decide | Act::Answer | Act::Offered { .. }
            if !RunStatus::WAITING.contains(&run.status) =>
        {
            Some(StateRefusal::NotWaiting(run.status))
        }
        Act::Retry
            if run.termination_reason != Some(TerminationReason::ProviderFailed.as_str()) =>
        {
            Some(StateRefusal::NotRetryable(run.status))
        }
        Act::Cancel if run.status.is_terminal() => Some(StateRefusal::Finished(run.status)),
        _ => None,
    };
    match state {
        Some(refusal) => Err(Refusal::State(refusal)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn facts(lineage: &Lineage, four_eyes: bool) -> RunFacts<'_> {
        RunFacts {
            status: RunStatus::WaitingForApproval,
            termination_reason: None,
            lineage,
            four_eyes,
            approvals_required: 1,
        }
    }

    #[test]
    fn a_token_acts_with_the_lower_role_and_is_named_beside_its_user() {
        let actor = Actor::through_token("olga", Role::Operator, "ci", Role::Admin);
        assert_eq!(actor.role, Role::Operator);
        assert_eq!(actor.label(), "olga (token ci)");
        let lineage = Lineage {
            requesters: vec!["someone".into()],
        };
        let err = authorize(&actor, Act::Decide, Some(&facts(&lineage, false))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Deciding needs the approver role; olga acts as operator"
        );
    }

    #[test]
    fn four_eyes_names_whose_run_it_was() {
        let lineage = Lineage {
            requesters: vec!["forker".into(), "olga".into()],
        };
        let own = authorize(
            &Actor::user("forker", Role::Approver),
            Act::Decide,
            Some(&facts(&lineage, true)),
        );
        assert!(own
            .unwrap_err()
            .to_string()
            .contains("forker started this run"));
        let parent = authorize(
            &Actor::user("olga", Role::Admin),
            Act::Rule(&RuleScope::Run(Uuid::nil())),
            Some(&facts(&lineage, true)),
        );
        assert!(parent
            .unwrap_err()
            .to_string()
            .contains("a run this one goes on from"));
        // A configuration's rule is not four-eyes' business, and the lineage may fork.
        let admin = Actor::user("olga", Role::Admin);
        let scope = RuleScope::Configuration("demo".into());
        assert!(authorize(&admin, Act::Rule(&scope), None).is_ok());
        assert!(authorize(
            &Actor::user("olga", Role::Approver),
            Act::Rule(&scope),
            None
        )
        .is_err());
        assert!(authorize(&admin, Act::Fork, Some(&facts(&lineage, true))).is_ok());
    }
}
