//! The run service: ties the loop to the store. It starts runs, drives them until they complete or
//! suspend, and resumes a waiting run with a decision — check the decision, claim the run (exactly
//! one claimer wins), resume the loop, persist. The web app and headless programs both use it.
//!
//! What is durable when (the journal):
//! - the claim commits the whole decision — its step, the choices on the run, and a `dispatched`
//!   record (with its effect key) for every approved call — before any call runs, and queues the
//!   run: a worker of any instance takes it ([`RunService::take_next`]) and carries it out;
//! - the rest of a segment's steps, and the results of its calls, commit with the segment's
//!   closing transition (suspend or finish), so a run's rows and its events never disagree;
//! - a run cut off anywhere is recovered from its last durable step ([`RunService::recover`]): a
//!   run that never suspended asks the model again (nothing happened that matters); one cut off
//!   after a claim answers its turn again — a call with a journaled result is not run, a call of a
//!   tool that is idempotent by key runs again with the same key, and any other dispatched call
//!   has an unknown outcome and waits for an operator.
//!
//! A [`RunListener`] sees each event at once, for live views.

mod allowance;
mod bulk;
mod cancel;
mod claim;
mod claimed;
mod count;
mod drive;
mod errors;
mod hooks;
mod lineage;
mod recover;
mod rules;
mod segment;
mod start;

use std::sync::Arc;

use uuid::Uuid;

use crate::authority::{authorize, Act, Actor, Lineage, Refusal, RunFacts};
use crate::clock::{Clock, SystemClock};
use crate::decision::{Choice, Decision};
use crate::interrupt::Interrupts;
use crate::lease::{LeaseGuard, LeaseWatch};
use crate::quorum::Tally;
use crate::run_store::{Dispatch, RunConfiguration, RunRecord, RunStatus, RunStore, StoreError};
use crate::spend::{SpendLedger, SpendWatch};
use crate::state::{Counters, SuspendedState};
use crate::tool_loop::{call_effect_key, LoopError};

pub use claimed::{verdict_of, ClaimedRun, PendingTurn, Work};
pub use errors::{
    already_decided_text, ForkError, RaiseCapError, ResumeError, RetryError, ServiceError,
};
pub use hooks::{FourEyes, Listeners, LoopFactory, RunListener, SingleLoop};

/// The failure of a run whose configuration cannot be driven now (`message` says why).
fn unavailable(message: String, counters: Counters) -> LoopError {
    LoopError::Provider {
        error: Box::new(crate::provider::ProviderError::permanent(message)),
        counters,
        transcript: Vec::new(),
        approved_ran: Vec::new(),
    }
}

/// The decision as a recorded list of choices, in call order.
fn recorded_decision(
    state: &SuspendedState,
    (decision, choices): (&Decision, &[Choice]),
) -> Decision {
    // A budget decision and a reply to a server's question decide no call of the turn anew.
    if decision.is_budget() || matches!(decision, Decision::Reply { .. }) {
        return decision.clone();
    }
    Decision::PerCall {
        calls: state
            .pending
            .iter()
            .zip(choices)
            .map(|(call, choice)| crate::decision::CallDecision {
                call_id: call.id.clone(),
                choice: choice.clone(),
            })
            .collect(),
    }
}

/// A dispatch record for each call of the turn that the decision runs and that has an effect
/// (and no journaled result yet), keyed so that it applies at most once.
fn dispatches(id: Uuid, state: &SuspendedState, choices: &[Choice]) -> Vec<Dispatch> {
    let round = state.counters.iterations;
    state
        .pending
        .iter()
        .zip(choices)
        .filter(|(call, choice)| {
            choice.runs()
                && state.gated.contains(&call.id)
                && !state.answered.iter().any(|a| a.call_id == call.id)
        })
        .map(|(call, choice)| Dispatch {
            round,
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: match choice {
                Choice::ApproveEdited { arguments } => arguments.to_string(),
                _ => call.arguments.clone(),
            },
            effect_key: call_effect_key(state, &id.to_string(), &call.id),
        })
        .collect()
}

/// The largest state a waiting run keeps unless the service is told otherwise: 8 MB of JSON.
pub const DEFAULT_MAX_STATE_BYTES: usize = 8 * 1024 * 1024;

pub use crate::moves::{BulkVerdict, Pick, EXPIRED_TEXT, MAX_BULK_RUNS};

/// What an operator reads on a run that could not go on after a restart.
pub const INTERRUPTED_SUMMARY: &str = "The server stopped while this run was running, and it \
could not go on from its last journaled step; see the steps for where it stopped.";

/// Starts, drives and resumes persisted runs.
pub struct RunService {
    store: Arc<dyn RunStore>,
    loops: Arc<dyn LoopFactory>,
    listener: Option<Arc<dyn RunListener>>,
    clock: Arc<dyn Clock>,
    /// Cancels for the segments this service drives now.
    interrupts: Interrupts,
    /// The largest state a run may keep while it waits, in bytes of its JSON.
    max_state_bytes: usize,
    /// Whether four-eyes holds for runs of a configuration (by name; `None`: unreadable).
    four_eyes: Arc<FourEyes>,
    /// The leases this instance holds, by its own clock (none: nobody else takes runs over).
    leases: Option<Arc<dyn LeaseWatch>>,
    /// Where each day's spend is counted, for the caps across runs (none: no cap holds).
    spend: Option<Arc<dyn SpendLedger>>,
}

/// What the authority weighs about a run besides its record ([`RunService::weigh`]).
struct Weighed {
    lineage: Lineage,
    four_eyes: bool,
}

impl Weighed {
    /// The facts the authority is given about `run`.
    fn facts<'a>(&'a self, run: &'a RunRecord) -> RunFacts<'a> {
        RunFacts {
            status: run.status,
            termination_reason: run.termination_reason.as_deref(),
            lineage: &self.lineage,
            four_eyes: self.four_eyes,
            approvals_required: run.approvals_required,
        }
    }
}

/// How far up a run's lineage four-eyes looks (forks of forks of …).
const MAX_LINEAGE: usize = 64;

/// When a turn suspended at `now_ms` must be decided by, under `configuration`'s timeout.
fn approval_deadline(configuration: &RunConfiguration, now_ms: i64) -> Option<i64> {
    configuration
        .approval_timeout_ms
        .map(|timeout| now_ms.saturating_add(i64::try_from(timeout).unwrap_or(i64::MAX)))
}

/// When the turn `state` suspended at `now_ms` must be decided by: the configuration's timeout,
/// or sooner, the time a server holds its call open for the question it asked
/// ([`crate::elicit::Asked::held_until_ms`]), when the question is answered `cancel`.
fn wait_deadline(
    configuration: &RunConfiguration,
    state: &SuspendedState,
    now_ms: i64,
) -> Option<i64> {
    let held = state
        .elicited
        .as_ref()
        .and_then(|wait| wait.asked.held_until_ms);
    match (approval_deadline(configuration, now_ms), held) {
        (Some(timeout), Some(held)) => Some(timeout.min(held)),
        (timeout, held) => timeout.or(held),
    }
}

/// The span a run's work runs in here: its log lines carry the run's id and, for a run that
/// has one, its trace id and root span id ([`crate::trace`]), whether or not traces are exported.
fn run_span(id: Uuid, trace: Option<&crate::trace::RunTrace>) -> tracing::Span {
    tracing::info_span!(
        "run",
        run_id = %id,
        trace_id = %trace.map_or("", |t| t.trace_id.as_str()),
        span_id = %trace.map_or("", |t| t.span_id.as_str()),
    )
}

/// Does `work` on run `id` in its span ([`run_span`]), and logs where the run stands after it;
/// a run that ended here exports its root span ([`crate::spans`]). Callers hand it their segment
/// boxed: a segment's state machine is tens of kilobytes, and every future that held it inline
/// (this one, the span's wrapper, `start`, `resume` and their callers) was copied whole at each
/// move: boxed, an approve cycle runs 7 % fewer instructions (BENCHMARKS.md, issue #46).
pub(crate) async fn in_run_span<E>(
    id: Uuid,
    trace: Option<&crate::trace::RunTrace>,
    work: impl std::future::Future<Output = Result<RunRecord, E>>,
) -> Result<RunRecord, E> {
    use tracing::Instrument;
    let logged = async move {
        let done = work.await;
        if let Ok(run) = &done {
            tracing::info!(status = %run.status, "a segment of the run ended here");
        }
        done
    };
    let done = logged.instrument(run_span(id, trace)).await;
    if let Ok(run) = &done {
        crate::spans::run_ended(run);
    }
    done
}

impl RunService {
    /// A service over `store`, building loops with `loops`.
    pub fn new(store: Arc<dyn RunStore>, loops: Arc<dyn LoopFactory>) -> RunService {
        RunService {
            store,
            loops,
            listener: None,
            clock: Arc::new(SystemClock),
            interrupts: Interrupts::default(),
            max_state_bytes: DEFAULT_MAX_STATE_BYTES,
            four_eyes: Arc::new(|_| false),
            leases: None,
            spend: None,
        }
    }

    /// Counts each day's spend in `ledger` and holds runs to their configuration's daily caps
    /// ([`LoopFactory::spend_caps`], [`crate::spend`]).
    pub fn with_spend_ledger(mut self, ledger: Arc<dyn SpendLedger>) -> RunService {
        self.spend = Some(ledger);
        self
    }

    /// What a run of `configuration` started by `requester` counts its spend in and checks it
    /// against (none without a ledger).
    fn spend_watch(&self, configuration: &RunConfiguration, requester: &str) -> Option<SpendWatch> {
        let ledger = self.spend.as_ref()?;
        Some(SpendWatch {
            caps: self.loops.spend_caps(configuration),
            configuration: configuration.provider.clone(),
            requester: requester.to_owned(),
            ledger: Arc::clone(ledger),
            clock: Arc::clone(&self.clock),
        })
    }

    /// Asks `leases` before each model request and tool call of a run driven here whether this
    /// instance still holds the run's lease; once it does not, the segment stops and writes
    /// nothing ([`crate::lease`]).
    pub fn with_lease_watch(mut self, leases: Arc<dyn LeaseWatch>) -> RunService {
        self.leases = Some(leases);
        self
    }

    fn lease_guard(&self, run: Uuid) -> Option<LeaseGuard> {
        self.leases.as_ref().map(|watch| LeaseGuard {
            run,
            watch: Arc::clone(watch),
        })
    }

    /// Four-eyes as the deployment sets it: `holds` says, for a configuration's name, whether
    /// nobody in a run's lineage may decide it (off for every run unless said).
    pub fn with_four_eyes(
        mut self,
        holds: impl Fn(Option<&str>) -> bool + Send + Sync + 'static,
    ) -> RunService {
        self.four_eyes = Arc::new(holds);
        self
    }

    /// Refuses to keep a waiting run's state above `bytes` (of its JSON): the run fails with
    /// `state_too_large` instead of suspending ([`DEFAULT_MAX_STATE_BYTES`] unless said).
    pub fn with_state_limit(mut self, bytes: usize) -> RunService {
        self.max_state_bytes = bytes;
        self
    }

    /// Reads the time from `clock` (the system clock unless a test says otherwise).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> RunService {
        self.clock = clock;
        self
    }

    /// Also tells `listener` about every event and status change.
    pub fn with_listener(mut self, listener: Arc<dyn RunListener>) -> RunService {
        self.listener = Some(listener);
        self
    }

    /// The store behind the service.
    pub fn store(&self) -> &Arc<dyn RunStore> {
        &self.store
    }

    /// Who started `run` and every run it goes on from (forks and retries, up to
    /// [`MAX_LINEAGE`] runs up; a purged ancestor ends the walk).
    pub async fn lineage(&self, run: &RunRecord) -> Result<Lineage, StoreError> {
        let parent_of = |run: &RunRecord| {
            run.configuration
                .as_ref()
                .and_then(|c| c.continues.as_ref())
                .map(|c| c.parent)
        };
        let mut lineage = Lineage {
            requesters: vec![run.requested_by.clone()],
        };
        let mut parent = parent_of(run);
        for _ in 0..MAX_LINEAGE {
            let Some(id) = parent else { break };
            let Some(up) = self.store.get(id).await? else {
                break;
            };
            if !lineage.includes(&up.requested_by) {
                lineage.requesters.push(up.requested_by.clone());
            }
            parent = parent_of(&up);
        }
        Ok(lineage)
    }

    /// The authority's answer ([`crate::authority::authorize`]) for `actor` doing `act` to
    /// `run` as the caller read it, with the run's lineage and four-eyes filled in. Pages ask
    /// it to say why someone cannot decide; every move of a run below asks it before it acts.
    pub async fn may(
        &self,
        actor: &Actor,
        act: Act<'_>,
        run: &RunRecord,
    ) -> Result<Result<(), Refusal>, StoreError> {
        let weighed = self.weigh(run, act).await?;
        Ok(authorize(actor, act, Some(&weighed.facts(run))))
    }

    /// [`RunService::may`] for each of `actors` doing `act` to `run`, with what the authority
    /// weighs about the run read once (whom to notify of a waiting run, say).
    pub async fn may_each(
        &self,
        actors: &[Actor],
        act: Act<'_>,
        run: &RunRecord,
    ) -> Result<Vec<Result<(), Refusal>>, StoreError> {
        let weighed = self.weigh(run, act).await?;
        let facts = weighed.facts(run);
        Ok(actors
            .iter()
            .map(|actor| authorize(actor, act, Some(&facts)))
            .collect())
    }

    /// Where the progress of run `id`'s calls goes: its listener, if it has one.
    fn progress_hook(&self, id: Uuid) -> Option<crate::tool::ProgressHook> {
        let listener = Arc::clone(self.listener.as_ref()?);
        Some(crate::tool::ProgressHook::new(
            move |call_id, tool, progress| {
                listener.progress(id, (call_id, tool), progress);
            },
        ))
    }

    /// Where the approvals of `run`'s waiting turn stand, if it needs several people's
    /// ([`crate::quorum`]); `None` for a turn one person decides.
    pub async fn tally(&self, run: &RunRecord) -> Result<Option<Tally>, StoreError> {
        if run.approvals_required <= 1 || !RunStatus::WAITING.contains(&run.status) {
            return Ok(None);
        }
        Ok(Some(Tally {
            required: run.approvals_required,
            votes: self.store.approvals(run.id, run.version).await?,
        }))
    }

    /// What the authority weighs about `run` for `act`, read once: four-eyes for its
    /// configuration, and its lineage where four-eyes bears on the act (most runs have no
    /// parent anyway, and the approve cycle reads nothing more).
    async fn weigh(&self, run: &RunRecord, act: Act<'_>) -> Result<Weighed, StoreError> {
        let four_eyes = (self.four_eyes)(run.configuration.as_ref().map(|c| c.provider.as_str()));
        // A turn that needs several approvals keeps the lineage out as four-eyes does.
        let lineage = match (four_eyes || run.approvals_required > 1) && act.under_four_eyes() {
            true => self.lineage(run).await?,
            false => Lineage {
                requesters: vec![run.requested_by.clone()],
            },
        };
        Ok(Weighed { lineage, four_eyes })
    }

    fn notify_status(&self, id: Uuid, status: RunStatus) {
        if let Some(listener) = &self.listener {
            listener.status(id, status);
        }
    }
}
