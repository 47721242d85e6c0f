//! Why a move of a run was refused or failed, in words an operator can act on.

use uuid::Uuid;

use crate::authority::Refusal;
use crate::clock::format_utc;
use crate::decision::DecisionError;
use crate::quorum::Tally;
use crate::rules::RuleError;
use crate::run_store::{RunRecord, RunStatus, StoreError, Verdict};

/// Why a resume was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("run {0} not found")]
    NotFound(Uuid),
    /// The run is not waiting: someone decided first, or it ended.
    #[error("{}", already_decided_text(.0))]
    NotWaiting(Box<RunRecord>),
    /// The decision was made on a page that showed another pending turn.
    #[error("this decision was made on an outdated page: the run's pending calls have changed; reload and decide again")]
    Stale,
    /// The approval deadline passed before this decision came: the turn expires (it is ended
    /// as expired, and the model reads that nobody decided).
    #[error("expired at {0}: nobody decided in time, and no call of the turn runs")]
    Expired(String),
    /// A decision offered by mail or chat came after its offer ended: nothing was decided.
    #[error(
        "this link expired at {0} and decides nothing now; open the run to see where it stands"
    )]
    OfferExpired(String),
    /// The target of these calls changed after the operator saw its preview; nothing ran.
    #[error("what {} would change has changed since you looked, so nothing was run: check the new preview and decide again", .0.join(", "))]
    TargetChanged(Vec<String>),
    #[error(transparent)]
    InvalidDecision(#[from] DecisionError),
    /// The stored state could not be read; the run is now failed and the state kept for inspection.
    #[error("the run's saved state cannot be read; the run was marked failed")]
    StateCorrupted,
    /// The run was saved by a newer version of the server; this one leaves it waiting.
    #[error("this run was saved by a newer version of the server (state version {0}); it is left waiting for that version")]
    NewerVersion(u64),
    /// The run's configuration cannot be driven now (for example its provider has no API key).
    #[error("{0}")]
    Unavailable(String),
    /// The authority refused the caller ([`crate::authority`]).
    #[error(transparent)]
    Refused(Refusal),
    /// Not refused: the turn needs several people's approvals, and this one counts toward
    /// them ([`crate::quorum`]). Nothing ran; the run still waits, at the same digest.
    #[error("{}", counted_text(.0))]
    Counted(Box<Tally>),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// "Your approval counts: 1 of 2 approvals: alice. …"
fn counted_text(tally: &Tally) -> String {
    format!(
        "Your approval counts: {}. The turn runs once {} different people have approved the same \
         choices.",
        tally.describe(),
        tally.required
    )
}

/// "already decided (approved) at <time>" or why else the run is not waiting.
pub fn already_decided_text(run: &RunRecord) -> String {
    match (&run.decision, run.decided_at_ms) {
        (Some(decision), Some(at)) if decision == Verdict::Expired.as_str() => format!(
            "expired at {}: nobody decided in time, and no call of the turn ran",
            format_utc(at)
        ),
        (Some(decision), Some(at)) => format!(
            "already decided ({decision}) at {}{}",
            format_utc(at),
            run.decided_by
                .as_deref()
                .map(|who| format!(" by {who}"))
                .unwrap_or_default()
        ),
        _ => format!("the run is {}, not waiting for approval", run.status),
    }
}

/// Failure to start, drive, cancel or add a rule for a run.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    Configuration(String),
    /// There is no such run (or rule).
    #[error("{0}")]
    NotFound(String),
    /// The rule does not hold together (a field is named).
    #[error(transparent)]
    InvalidRule(RuleError),
    /// The authority refused the caller ([`crate::authority`]).
    #[error(transparent)]
    Refused(Refusal),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a fork was refused.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    #[error("run {0} not found")]
    NotFound(Uuid),
    #[error("the run has no step {0}")]
    NoStep(i64),
    #[error("there is nothing to go on from before the run's first request to the model; fork from a later step")]
    BeforeFirstRequest,
    #[error("at this step the model's calls still wait for their answers, so a new prompt cannot follow them; fork without a prompt (and decide the calls again), or from a later step")]
    PromptOnPendingTurn,
    #[error(transparent)]
    Service(#[from] ServiceError),
}

/// Why a retry was refused.
#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    #[error("run {0} not found")]
    NotFound(Uuid),
    #[error("only a run whose model call failed can be retried (this one is {0})")]
    NotRetryable(RunStatus),
    #[error("the run's journal has no model call to ask again")]
    NoJournal,
    #[error(transparent)]
    Service(#[from] ServiceError),
}

/// Why a daily cap was not raised.
#[derive(Debug, thiserror::Error)]
pub enum RaiseCapError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("no daily spend is counted here")]
    NoLedger,
    #[error(transparent)]
    Store(#[from] StoreError),
}
