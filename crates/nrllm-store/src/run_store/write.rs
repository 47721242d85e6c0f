//! Writing a transition: the write transaction, the version and lease fence, the steps it
//! commits, and what a refused transition says.

use nrllm_core::events::Event;
use nrllm_core::quorum::Vote;
use nrllm_core::run_store::{
    CancelRequest, ClaimRecord, RunReader, RunRecord, RunStatus, SequencedEvent, StoreError,
};
use nrllm_core::state::SuspendedState;
use nrllm_core::transcript::ToolOutcome;
use sqlx::Row as _;
use uuid::Uuid;

use crate::chain::ChainRow;
use crate::db::Backend;
use crate::notify::Notice;
use crate::transition::{Cells, Row, Statement, Transition};

use super::rules::*;
use super::*;

impl SqlRunStore {
    pub(super) async fn status_of(&self, id: Uuid) -> Result<RunRecord, StoreError> {
        self.get(id).await?.ok_or(StoreError::NotFound(id))
    }

    /// Carries out `transition` ([`Database::transact`]), counting its commit.
    pub(super) async fn write(
        &self,
        mut transition: Transition,
    ) -> Result<Option<Row>, StoreError> {
        let notices = std::mem::take(&mut transition.notices);
        let row = self.db.transact(transition).await?;
        if row.is_some() {
            self.committed();
            self.db.announce(notices);
        }
        Ok(row)
    }

    /// Carries out a transition fenced on run `id` being at `version`: the fence's row, or why
    /// it matched none (then nothing was written).
    pub(super) async fn fenced(
        &self,
        transition: Transition,
        id: Uuid,
        version: i64,
    ) -> Result<Row, StoreError> {
        match self.write(transition).await? {
            Some(row) => Ok(row),
            None => Err(self.refusal(id, version).await),
        }
    }

    /// Has every instance hear of `notice` once `transition` commits ([`Database::announce`]).
    pub(super) fn announce(&self, transition: &mut Transition, notice: Notice) {
        transition.notices.push(notice);
    }

    /// A transition on run `id` fenced by `fence` that writes `events` as the run's next steps
    /// ([`SqlRunStore::add_steps`]).
    pub(super) fn transition(
        &self,
        fence: Statement,
        id: Uuid,
        events: &[SequencedEvent],
    ) -> Result<Transition, StoreError> {
        let mut transition = Transition::new(fence, id.to_string());
        self.add_steps(&mut transition, id, events)?;
        Ok(transition)
    }

    /// Adds `events` to `transition` as run `id`'s next steps: each approved call's result (a
    /// `tool` step answering a dispatched call) is journaled on its effect record too, and every
    /// instance hears of the commit, so that their live streams read the new steps.
    pub(super) fn add_steps(
        &self,
        transition: &mut Transition,
        id: Uuid,
        events: &[SequencedEvent],
    ) -> Result<(), StoreError> {
        let run = id.to_string();
        for event in events {
            if let Event::Tool {
                round,
                call_id,
                result,
                on_resume: true,
                executed: true,
                ..
            } = &event.event
            {
                let outcome = event.event.tool_outcome().unwrap_or_default();
                transition.then.push(
                    Statement::new(
                        "UPDATE agent_run_effect SET result = $1, outcome = $2, completed_at_ms = $3 \
                         WHERE run_id = $4 AND round = $5 AND call_id = $6 AND result IS NULL",
                    )
                    .bind(result.as_str())
                    .bind(outcome_name(outcome))
                    .bind(event.created_at_ms)
                    .bind(run.as_str())
                    .bind(i64::from(*round))
                    .bind(call_id.as_str()),
                );
            }
            transition.steps.push(ChainRow {
                sequence: event.sequence,
                kind: event.event.kind().to_owned(),
                round: event.event.round().map(i64::from),
                duration_ms: event
                    .event
                    .duration_ms()
                    .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX)),
                payload: serde_json::to_string(&event.event)
                    .map_err(|err| StoreError::Corrupt(err.to_string()))?,
                created_at_ms: event.created_at_ms,
                prev_hash: None,
                hash: None,
            });
        }
        self.announce(transition, Notice::Run(id));
        Ok(())
    }

    /// Where a run goes when it is created or claimed: `running` under this instance's lease
    /// from `now_ms` (driven here), or `queued` since `now_ms` for any instance's worker. Its
    /// status, lease owner, lease end and queue time.
    pub(super) fn placement(
        &self,
        drive_here: bool,
        now_ms: i64,
    ) -> (RunStatus, Option<&str>, i64, Option<i64>) {
        if drive_here {
            (
                RunStatus::Running,
                Some(&*self.owner),
                now_ms + self.lease_ms,
                None,
            )
        } else {
            (RunStatus::Queued, None, 0, Some(now_ms))
        }
    }

    /// Explains a fenced update that matched no row.
    pub(super) async fn refusal(&self, id: Uuid, expected: i64) -> StoreError {
        let running = sqlx::query(
            "SELECT lease_owner, cancel_by, cancel_reason FROM agent_run WHERE id = $1 AND status = $2",
        )
        .bind(id.to_string())
        .bind(RunStatus::Running.as_str())
        .fetch_optional(self.db.pool())
        .await
        .ok()
        .flatten();
        if let Some(row) = running {
            let owner: Option<String> = row.try_get("lease_owner").ok().flatten();
            if owner.is_some_and(|owner| *owner != *self.owner) {
                return StoreError::LeaseLost { id };
            }
            if let Ok(Some(request)) = cancel_request(&row) {
                return StoreError::CancelRequested { id, request };
            }
        }
        match self.status_of(id).await {
            Ok(run) if run.status.is_terminal() => StoreError::AlreadySettled {
                id,
                status: run.status,
            },
            Ok(_) => StoreError::Conflict { id, expected },
            Err(err) => err,
        }
    }
}

/// The cancel asked for a run, from a row with its `cancel_by` and `cancel_reason`.
pub(super) fn cancel_request(row: &impl Cells) -> Result<Option<CancelRequest>, StoreError> {
    match row.text("cancel_by")? {
        Some(by) => Ok(Some(CancelRequest {
            by,
            reason: row.text("cancel_reason")?,
        })),
        None => Ok(None),
    }
}

/// The rows a decision journals besides its step: a dispatch record for each call that runs,
/// and the rules the decider asked for.
pub(super) fn claim_rows(id: Uuid, claim: &ClaimRecord, now_ms: i64) -> Vec<Statement> {
    let mut rows = Vec::with_capacity(claim.dispatched.len() + claim.rules.len());
    for dispatch in &claim.dispatched {
        rows.push(
            Statement::new(
                "INSERT INTO agent_run_effect (run_id, round, call_id, tool, arguments, effect_key, \
                 dispatched_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (run_id, round, call_id) DO NOTHING",
            )
            .bind(id.to_string())
            .bind(i64::from(dispatch.round))
            .bind(dispatch.call_id.as_str())
            .bind(dispatch.tool.as_str())
            .bind(dispatch.arguments.as_str())
            .bind(dispatch.effect_key.as_str())
            .bind(now_ms),
        );
    }
    for rule in &claim.rules {
        rows.push(rule_insert(rule, &claim.decided_by, now_ms));
    }
    rows
}

/// Records `vote` as its approver's latest approval of run `id`'s turn at `version`.
pub(super) fn vote_upsert(id: Uuid, version: i64, vote: &Vote) -> Statement {
    Statement::new(
        "INSERT INTO turn_approval (run_id, run_version, approver, token, fingerprint, decision, \
         created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) \
         ON CONFLICT (run_id, run_version, approver) DO UPDATE SET token = excluded.token, \
         fingerprint = excluded.fingerprint, decision = excluded.decision, \
         created_at_ms = excluded.created_at_ms",
    )
    .bind(id.to_string())
    .bind(version)
    .bind(vote.approver.as_str())
    .bind(vote.token.as_deref())
    .bind(vote.fingerprint.as_str())
    .bind(vote.decision.as_str())
    .bind(vote.at_ms)
}

/// The MAC of a run's last step and the id of the key its log is chained by, as columns of a
/// statement on `agent_run` (a fenced update's `RETURNING`), so that a transition learns where
/// its steps chain on without a read of its own.
pub(super) const CHAIN_HEAD: &str = concat!(
    crate::transition::last_step_mac!(),
    " AS chain_head, audit_key_id AS chain_key"
);

/// How a fenced update of a run chains the transition's steps: what it sets after its other
/// columns (`set`, before its `WHERE`) and what it returns for them (`returning`, last).
pub(super) struct ChainSql {
    pub(super) set: &'static str,
    pub(super) returning: &'static str,
}

impl SqlRunStore {
    /// On SQLite the fence chains the steps and sets the run's keyed head itself
    /// ([`crate::sqlite::CHAIN_SET`]); on Postgres it returns the head the steps chain on
    /// ([`CHAIN_HEAD`]), and the head is written after them.
    pub(super) fn chain_sql(&self) -> ChainSql {
        match self.db.backend() {
            Backend::Sqlite => ChainSql {
                set: crate::sqlite::CHAIN_SET,
                returning: crate::transition::CHAINED_IN_FENCE,
            },
            Backend::Postgres => ChainSql {
                set: "",
                returning: CHAIN_HEAD,
            },
        }
    }
}

pub(super) fn outcome_name(outcome: ToolOutcome) -> &'static str {
    match outcome {
        ToolOutcome::Ok => "ok",
        ToolOutcome::Error => "error",
        ToolOutcome::Denied => "denied",
    }
}

pub(super) fn outcome_from(name: &str) -> ToolOutcome {
    match name {
        "error" => ToolOutcome::Error,
        "denied" => ToolOutcome::Denied,
        _ => ToolOutcome::Ok,
    }
}

/// The `pending_tools` column of a suspended run: `,tool_a,tool_b,` (see the migration).
pub(super) fn pending_tools(state: &SuspendedState) -> String {
    let mut text = String::from(",");
    for call in &state.pending {
        text.push_str(&call.name);
        text.push(',');
    }
    text
}

pub(super) fn last_sequence(events: &[SequencedEvent]) -> Option<i64> {
    events.iter().map(|e| e.sequence).max()
}

pub(super) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
