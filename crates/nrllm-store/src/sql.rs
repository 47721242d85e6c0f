//! [`RunStore`] on SQLite and Postgres through one set of queries. Every transition is fenced by
//! the run's `version` and commits together with the events it produced, in one transaction: a
//! failure leaves neither. A transition is written as data ([`Transition`]) and carried out by
//! [`Database::transact`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use nrllm_core::events::Event;
use nrllm_core::rules::{ApprovalRule, RuleDraft, RuleEffect, RuleScope};
use nrllm_core::state::{Counters, Kept, SuspendedState};
use nrllm_core::store::{
    CancelRequest, Claim, ClaimRecord, EffectRecord, Finish, NewRun, PurgeReport, Renewal,
    RunFilter, RunRecord, RunStatus, RunStore, SequencedEvent, StoreError, StoredEvent,
    TerminationReason, WaitingFilter,
};
use nrllm_core::transcript::ToolOutcome;
use sqlx::{Any, AnyConnection, Row as _, Transaction};
use uuid::Uuid;

use crate::chain::{self, ChainRow, ChainVerdict, RunSeal};
use crate::db::{Backend, Database};
use crate::error::backend;
use crate::notify::Notice;
use crate::transition::{Cells, Row, Statement, Transition};

/// A write transaction and, on SQLite, this process's turn to write (held until it ends).
struct WriteTx {
    tx: Transaction<'static, Any>,
    _turn: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl WriteTx {
    async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }
}

impl std::ops::Deref for WriteTx {
    type Target = AnyConnection;
    fn deref(&self) -> &AnyConnection {
        &self.tx
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        &mut self.tx
    }
}

/// [`RunStore`] on an SQLite or Postgres database.
#[derive(Debug, Clone)]
pub struct SqlRunStore {
    db: Database,
    /// Durable writes made through this store (each transaction or single-statement write).
    commits: Arc<AtomicU64>,
    /// This instance, as the owner of the leases it takes.
    owner: Arc<str>,
    /// How long a lease lasts from its last renewal.
    lease_ms: i64,
}

/// Tries of a cancel whose run keeps moving between waiting and running under it.
const CANCEL_ATTEMPTS: usize = 3;

/// How long a lease lasts unless the store is told otherwise.
pub const DEFAULT_LEASE_MS: i64 = 30_000;

const RUN_COLUMNS: &str =
    "id, status, configuration, requested_by, iterations, tool_calls, truncated, \
    prompt_tokens, completion_tokens, estimated_cost_micros, termination_reason, error_summary, \
    final_answer, suspended_state, decided_by, decided_at_ms, decision, decision_record, version, \
    last_sequence, created_at_ms, updated_at_ms, started_at_ms, finished_at_ms, \
    approval_deadline_ms, queued_at_ms, approved_bases, cancel_by, cancel_reason";

impl SqlRunStore {
    /// A store on an open, migrated database.
    pub fn new(db: Database) -> SqlRunStore {
        SqlRunStore {
            db,
            commits: Arc::default(),
            owner: Arc::from(Uuid::new_v4().to_string()),
            lease_ms: DEFAULT_LEASE_MS,
        }
    }

    /// The same store, taking leases as `owner` (an instance id) for `lease_ms` at a time.
    pub fn with_lease(mut self, owner: &str, lease_ms: i64) -> SqlRunStore {
        self.owner = Arc::from(owner);
        self.lease_ms = lease_ms.max(1);
        self
    }

    /// The instance this store takes leases for.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// How many durable commits this store has made (for the benchmark's commits-per-cycle).
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    fn committed(&self) {
        self.commits.fetch_add(1, Ordering::Relaxed);
    }

    /// The database behind the store.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Verifies run `id`'s log against its chain under this database's audit key (`None`: no
    /// such run).
    pub async fn verify_log(&self, id: Uuid) -> Result<Option<ChainVerdict>, StoreError> {
        let since = self.audit_since().await?;
        self.verify_with(id, since).await
    }

    async fn verify_with(
        &self,
        id: Uuid,
        since: Option<i64>,
    ) -> Result<Option<ChainVerdict>, StoreError> {
        let run = id.to_string();
        let Some(seal) = sqlx::query(
            "SELECT audit_key_id, audit_head, last_sequence FROM agent_run WHERE id = $1",
        )
        .bind(&run)
        .fetch_optional(self.db.pool())
        .await
        .map_err(backend)?
        else {
            return Ok(None);
        };
        let seal = RunSeal {
            key_id: seal.try_get("audit_key_id").map_err(backend)?,
            head: seal.try_get("audit_head").map_err(backend)?,
            last_sequence: seal.try_get("last_sequence").map_err(backend)?,
            began_ms: id.get_timestamp().map(|ts| {
                let (secs, nanos) = ts.to_unix();
                i64::try_from(secs).unwrap_or(i64::MAX) * 1000 + i64::from(nanos / 1_000_000)
            }),
        };
        let rows = sqlx::query(
            "SELECT sequence, kind, round, duration_ms, payload, created_at_ms, prev_hash, hash \
             FROM agent_run_event WHERE run_id = $1 ORDER BY sequence",
        )
        .bind(&run)
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        let rows = rows
            .iter()
            .map(|row| {
                Ok(ChainRow {
                    sequence: row.try_get("sequence")?,
                    kind: row.try_get("kind")?,
                    round: row.try_get("round")?,
                    duration_ms: row.try_get("duration_ms")?,
                    payload: row.try_get("payload")?,
                    created_at_ms: row.try_get("created_at_ms")?,
                    prev_hash: row.try_get("prev_hash")?,
                    hash: row.try_get("hash")?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(backend)?;
        Ok(Some(chain::verify(
            self.db.audit_key(),
            since,
            &run,
            &rows,
            &seal,
        )))
    }

    /// Records that this database's audit key is in use from `now_ms` on, unless it already is
    /// (every instance calls this at start). A run that begins after it must be keyed.
    pub async fn anchor_audit_key(&self, now_ms: i64) -> Result<(), StoreError> {
        let key = self.db.audit_key();
        sqlx::query(
            "INSERT INTO audit_anchor (key_id, since_ms, mac) VALUES ($1, $2, $3) \
             ON CONFLICT (key_id) DO NOTHING",
        )
        .bind(key.id())
        .bind(now_ms)
        .bind(key.anchor_mac(now_ms))
        .execute(self.db.pool())
        .await
        .map_err(backend)?;
        Ok(())
    }

    /// Since when this database's audit key is in use, as its anchor says (`None`: no anchor,
    /// or one that does not hold under the key).
    pub async fn audit_since(&self) -> Result<Option<i64>, StoreError> {
        let key = self.db.audit_key();
        let anchor: Option<(i64, String)> =
            sqlx::query_as("SELECT since_ms, mac FROM audit_anchor WHERE key_id = $1")
                .bind(key.id())
                .fetch_optional(self.db.pool())
                .await
                .map_err(backend)?;
        Ok(anchor
            .filter(|(since, mac)| *mac == key.anchor_mac(*since))
            .map(|(since, _)| since))
    }

    /// Verifies every run's log, `page` runs at a time, calling `each` with every run's verdict
    /// (in creation order); how many runs were checked.
    pub async fn verify_all(
        &self,
        page: u32,
        mut each: impl FnMut(Uuid, &ChainVerdict),
    ) -> Result<usize, StoreError> {
        let since = self.audit_since().await?;
        let mut after = String::new();
        let mut checked = 0;
        loop {
            let ids: Vec<String> =
                sqlx::query_scalar("SELECT id FROM agent_run WHERE id > $1 ORDER BY id LIMIT $2")
                    .bind(&after)
                    .bind(i64::from(page.max(1)))
                    .fetch_all(self.db.pool())
                    .await
                    .map_err(backend)?;
            let Some(last) = ids.last().cloned() else {
                return Ok(checked);
            };
            for id in ids {
                let Ok(uuid) = Uuid::parse_str(&id) else {
                    continue;
                };
                if let Some(verdict) = self.verify_with(uuid, since).await? {
                    each(uuid, &verdict);
                    checked += 1;
                }
            }
            after = last;
        }
    }

    /// How the database answers the queries that grow with the number of runs: the inbox's and
    /// the runs page's first pages and the two sweeps for overdue runs, as `EXPLAIN QUERY PLAN`
    /// (SQLite) or `EXPLAIN` (Postgres) prints them. For the benchmark of many waiting runs.
    pub async fn query_plans(&self) -> Result<Vec<(&'static str, Vec<String>)>, StoreError> {
        let explain = match self.db.backend() {
            Backend::Sqlite => "EXPLAIN QUERY PLAN",
            Backend::Postgres => "EXPLAIN",
        };
        let inbox = WaitingFilter {
            limit: 51,
            ..WaitingFilter::default()
        };
        let runs = RunFilter {
            status: None,
            created_before_ms: None,
            limit: 50,
        };
        let waiting = format!("{explain} {}", waiting_sql(self.db.backend()));
        let list = format!("{explain} {}", list_sql());
        let deadlines = format!("{explain} {}", Sweep::Deadlines.sql(self.db.backend()));
        let leases = format!("{explain} {}", Sweep::Leases.sql(self.db.backend()));
        let sweep = |sql| sqlx::query(sql).bind(0_i64).bind(50_i64);
        let mut plans = Vec::new();
        for (name, query) in [
            (
                "inbox, first page",
                bind_waiting(sqlx::query(&waiting), &inbox),
            ),
            (
                "runs list, first page",
                bind_list(sqlx::query(&list), &runs),
            ),
            ("approval deadline sweep", sweep(&deadlines)),
            ("lease sweep", sweep(&leases)),
        ] {
            let rows = query.fetch_all(self.db.pool()).await.map_err(backend)?;
            let lines = rows
                .iter()
                .map(|row| match self.db.backend() {
                    // id, parent, notused, detail
                    Backend::Sqlite => row.try_get::<String, _>(3),
                    Backend::Postgres => row.try_get::<String, _>(0),
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(backend)?;
            plans.push((name, lines));
        }
        Ok(plans)
    }

    /// Starts a write transaction. On SQLite it takes the write lock at once (`BEGIN IMMEDIATE`),
    /// so concurrent writers wait their turn instead of failing when they upgrade a read.
    ///
    /// On SQLite the writers of this process first queue for their turn ([`Database::write_turn`]),
    /// in order, instead of polling for the file's lock in SQLite's sleeping busy handler.
    async fn write_tx(&self) -> Result<WriteTx, sqlx::Error> {
        let turn = self.db.write_turn().await;
        let tx = match self.db.backend() {
            Backend::Sqlite => self.db.pool().begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => self.db.pool().begin().await?,
        };
        Ok(WriteTx { tx, _turn: turn })
    }

    async fn status_of(&self, id: Uuid) -> Result<RunRecord, StoreError> {
        self.get(id).await?.ok_or(StoreError::NotFound(id))
    }

    /// Carries out `transition` ([`Database::transact`]), counting its commit.
    async fn write(&self, mut transition: Transition) -> Result<Option<Row>, StoreError> {
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
    async fn fenced(
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
    fn announce(&self, transition: &mut Transition, notice: Notice) {
        transition.notices.push(notice);
    }

    /// A transition on run `id` fenced by `fence` that writes `events` as the run's next steps
    /// ([`SqlRunStore::add_steps`]).
    fn transition(
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
    fn add_steps(
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

    /// The runs `sweep` finds overdue at `now_ms`, the longest overdue first.
    async fn overdue(
        &self,
        sweep: Sweep,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<Uuid>, StoreError> {
        let ids: Vec<String> = sqlx::query_scalar(&sweep.sql(self.db.backend()))
            .bind(now_ms)
            .bind(i64::from(limit))
            .fetch_all(self.db.pool())
            .await
            .map_err(backend)?;
        Ok(ids
            .iter()
            .filter_map(|id| Uuid::parse_str(id).ok())
            .collect())
    }

    /// The take-from-the-queue update ([`take_sql`]) with its first five parameters bound:
    /// running, this instance's lease from `now_ms`, from queued.
    fn bind_take<'q>(&'q self, sql: &'q str, now_ms: i64) -> AnyQuery<'q> {
        sqlx::query(sql)
            .bind(RunStatus::Running.as_str())
            .bind(&*self.owner)
            .bind(now_ms + self.lease_ms)
            .bind(now_ms)
            .bind(RunStatus::Queued.as_str())
    }

    /// Where a run goes when it is created or claimed: `running` under this instance's lease
    /// from `now_ms` (driven here), or `queued` since `now_ms` for any instance's worker. Its
    /// status, lease owner, lease end and queue time.
    fn placement(
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
    async fn refusal(&self, id: Uuid, expected: i64) -> StoreError {
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

/// The update that takes the queued runs matching `which` for this instance ($1–$5: see
/// [`SqlRunStore::bind_take`]), returning them.
fn take_sql(which: &str) -> String {
    format!(
        "UPDATE agent_run SET status = $1, lease_owner = $2, lease_until_ms = $3, \
         version = version + 1, updated_at_ms = $4, \
         started_at_ms = COALESCE(started_at_ms, $4), queued_at_ms = NULL \
         WHERE status = $5 AND {which} RETURNING {RUN_COLUMNS}"
    )
}

/// The cancel asked for a run, from a row with its `cancel_by` and `cancel_reason`.
fn cancel_request(row: &impl Cells) -> Result<Option<CancelRequest>, StoreError> {
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
fn claim_rows(id: Uuid, claim: &ClaimRecord, now_ms: i64) -> Vec<Statement> {
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

const RULE_COLUMNS: &str =
    "id, run_id, configuration, tool, effect, conditions, created_by, created_at_ms";

/// The insert of a rule drafted by `by`, returning its `id`.
fn rule_insert(draft: &RuleDraft, by: &str, now_ms: i64) -> Statement {
    let (run, configuration) = match &draft.scope {
        RuleScope::Run(run) => (Some(run.to_string()), None),
        RuleScope::Configuration(name) => (None, Some(name.clone())),
    };
    let conditions = serde_json::to_string(&draft.conditions).unwrap_or_else(|_| "[]".into());
    Statement::new(
        "INSERT INTO approval_rule (run_id, configuration, tool, effect, conditions, created_by, \
         created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    )
    .bind(run)
    .bind(configuration)
    .bind(draft.tool.as_str())
    .bind(draft.effect.as_str())
    .bind(conditions)
    .bind(by)
    .bind(now_ms)
}

fn rule_from_row(row: &impl Cells) -> Result<ApprovalRule, StoreError> {
    let text = |column: &str| row.text(column);
    let scope = match (text("run_id")?, text("configuration")?) {
        (Some(run), _) => RuleScope::Run(
            Uuid::parse_str(&run).map_err(|e| StoreError::Corrupt(format!("rule run id: {e}")))?,
        ),
        (None, Some(name)) => RuleScope::Configuration(name),
        (None, None) => return Err(StoreError::Corrupt("a rule without a scope".into())),
    };
    let effect = text("effect")?.unwrap_or_default();
    Ok(ApprovalRule {
        id: row.required_int("id")?,
        scope,
        tool: text("tool")?.unwrap_or_default(),
        effect: RuleEffect::parse(&effect)
            .ok_or_else(|| StoreError::Corrupt(format!("rule effect `{effect}`")))?,
        conditions: serde_json::from_str(&text("conditions")?.unwrap_or_default())
            .map_err(|e| StoreError::Corrupt(format!("rule conditions: {e}")))?,
        created_by: text("created_by")?.unwrap_or_default(),
        created_at_ms: row.required_int("created_at_ms")?,
    })
}

/// The MAC of a run's last step and the id of the key its log is chained by, as columns of a
/// statement on `agent_run` (a fenced update's `RETURNING`), so that a transition learns where
/// its steps chain on without a read of its own.
const CHAIN_HEAD: &str =
    "(SELECT hash FROM agent_run_event WHERE agent_run_event.run_id = agent_run.id \
     ORDER BY sequence DESC LIMIT 1) AS chain_head, audit_key_id AS chain_key";

fn outcome_name(outcome: ToolOutcome) -> &'static str {
    match outcome {
        ToolOutcome::Ok => "ok",
        ToolOutcome::Error => "error",
        ToolOutcome::Denied => "denied",
    }
}

fn outcome_from(name: &str) -> ToolOutcome {
    match name {
        "error" => ToolOutcome::Error,
        "denied" => ToolOutcome::Denied,
        _ => ToolOutcome::Ok,
    }
}

/// The `pending_tools` column of a suspended run: `,tool_a,tool_b,` (see the migration).
fn pending_tools(state: &SuspendedState) -> String {
    let mut text = String::from(",");
    for call in &state.pending {
        text.push_str(&call.name);
        text.push(',');
    }
    text
}

fn last_sequence(events: &[SequencedEvent]) -> Option<i64> {
    events.iter().map(|e| e.sequence).max()
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

type AnyQuery<'q> = sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>;

/// The runs page's query: newest first, optionally of one status, before a cursor.
fn list_sql() -> String {
    format!(
        "SELECT {RUN_COLUMNS} FROM agent_run \
         WHERE ($1 IS NULL OR status = $1) AND created_at_ms < $2 \
         ORDER BY created_at_ms DESC, id DESC LIMIT $3"
    )
}

fn bind_list<'q>(query: AnyQuery<'q>, filter: &'q RunFilter) -> AnyQuery<'q> {
    query
        .bind(filter.status.map(RunStatus::as_str))
        .bind(filter.created_before_ms.unwrap_or(i64::MAX))
        .bind(i64::from(filter.limit.clamp(1, 500)))
}

/// The clause that has SQLite read a query through `index` (SQLite keeps no statistics here, so
/// its planner guesses); nothing on Postgres, whose planner has them.
pub(crate) fn indexed_by(backend: Backend, index: &str) -> String {
    match backend {
        Backend::Sqlite => format!("INDEXED BY {index}"),
        Backend::Postgres => String::new(),
    }
}

/// A periodic look for overdue runs: running runs whose lease ran out, waiting runs whose
/// approval deadline passed.
#[derive(Debug, Clone, Copy)]
enum Sweep {
    Leases,
    Deadlines,
}

impl Sweep {
    /// Its query: ids of runs past their time at `$1`, the longest overdue first, `$2` of them.
    fn sql(self, backend: Backend) -> String {
        let (statuses, column, index): (&[RunStatus], _, _) = match self {
            // Running runs are the few being driven now.
            Sweep::Leases => (
                &[RunStatus::Running],
                "lease_until_ms",
                "agent_run_status_created",
            ),
            Sweep::Deadlines => (
                &RunStatus::WAITING,
                "approval_deadline_ms",
                "agent_run_deadline",
            ),
        };
        // SQLite without statistics would read the deadline sweep through the status index: every
        // waiting run, each sweep (~100 ms at 100k waiting runs).
        let index = indexed_by(backend, index);
        format!(
            "SELECT id FROM agent_run {index} WHERE status IN ({}) AND {column} <= $1 \
             ORDER BY {column} LIMIT $2",
            RunStatus::sql_list(statuses)
        )
    }
}

/// The inbox's query: waiting runs, oldest wait first, after a cursor (a row-value comparison,
/// so that the page is a range of the waiting index rather than a sort of every waiting run).
fn waiting_sql(backend: Backend) -> String {
    // SQLite without statistics would pick the status index and sort every waiting run.
    let index = indexed_by(backend, "agent_run_waiting");
    format!(
        "SELECT {RUN_COLUMNS} FROM agent_run {index} WHERE status IN ({}) \
         AND ($1 IS NULL OR provider = $1) AND ($2 IS NULL OR pending_tools LIKE $2) \
         AND (updated_at_ms, id) > ($3, $4) \
         ORDER BY updated_at_ms ASC, id ASC LIMIT $5",
        RunStatus::sql_list(&RunStatus::WAITING)
    )
}

fn bind_waiting<'q>(query: AnyQuery<'q>, filter: &'q WaitingFilter) -> AnyQuery<'q> {
    let (after_ms, after_id) = filter
        .after
        .map(|(ms, id)| (ms, id.to_string()))
        .unwrap_or((i64::MIN, String::new()));
    query
        .bind(filter.provider.as_deref())
        .bind(filter.tool.as_deref().map(|tool| format!("%,{tool},%")))
        .bind(after_ms)
        .bind(after_id)
        .bind(i64::from(filter.limit.clamp(1, 1000)))
}

fn read_run(row: &impl Cells) -> Result<RunRecord, StoreError> {
    let text = row.required_text("id")?;
    let id = Uuid::parse_str(&text)
        .map_err(|err| StoreError::Corrupt(format!("run id `{text}`: {err}")))?;
    let status_text = row.required_text("status")?;
    let status = RunStatus::parse(&status_text)
        .ok_or_else(|| StoreError::Corrupt(format!("run {id}: unknown status `{status_text}`")))?;
    let configuration = row.required_text("configuration")?;
    let get_u64 = |name: &str| -> Result<u64, StoreError> {
        Ok(u64::try_from(row.required_int(name)?).unwrap_or_default())
    };
    Ok(RunRecord {
        id,
        status,
        configuration: serde_json::from_str(&configuration).ok(),
        requested_by: row.required_text("requested_by")?,
        counters: Counters {
            iterations: u32::try_from(get_u64("iterations")?).unwrap_or(u32::MAX),
            tool_calls: u32::try_from(get_u64("tool_calls")?).unwrap_or(u32::MAX),
            usage: nrllm_core::provider::Usage {
                prompt_tokens: get_u64("prompt_tokens")?,
                completion_tokens: get_u64("completion_tokens")?,
            },
        },
        truncated: row.required_int("truncated")? != 0,
        estimated_cost_micros: row.int("estimated_cost_micros")?,
        termination_reason: row.text("termination_reason")?,
        error_summary: row.text("error_summary")?,
        final_answer: row.text("final_answer")?,
        suspended_state: row.text("suspended_state")?,
        decided_by: row.text("decided_by")?,
        decided_at_ms: row.int("decided_at_ms")?,
        decision: row.text("decision")?,
        decision_record: row.text("decision_record")?,
        version: row.required_int("version")?,
        last_sequence: row.required_int("last_sequence")?,
        created_at_ms: row.required_int("created_at_ms")?,
        updated_at_ms: row.required_int("updated_at_ms")?,
        started_at_ms: row.int("started_at_ms")?,
        finished_at_ms: row.int("finished_at_ms")?,
        approval_deadline_ms: row.int("approval_deadline_ms")?,
        queued_at_ms: row.int("queued_at_ms")?,
        approved_bases: row.text("approved_bases")?,
        cancel_requested: cancel_request(row)?,
    })
}

#[async_trait]
impl RunStore for SqlRunStore {
    async fn create(
        &self,
        run: &NewRun,
        now_ms: i64,
        drive_here: bool,
    ) -> Result<RunRecord, StoreError> {
        let configuration = serde_json::to_string(&run.configuration)
            .map_err(|err| StoreError::Corrupt(err.to_string()))?;
        let (status, owner, until, queued) = self.placement(drive_here, now_ms);
        let insert = Statement::new(format!(
            "INSERT INTO agent_run (id, status, configuration, requested_by, truncated, version, last_sequence, \
             created_at_ms, updated_at_ms, started_at_ms, provider, lease_owner, lease_until_ms, queued_at_ms, \
             parent_id) \
             VALUES ($1, $2, $3, $4, 0, 0, $12, $5, $5, $9, $6, $7, $8, $10, $11) \
             RETURNING {RUN_COLUMNS}"
        ))
        .bind(run.id.to_string())
        .bind(status.as_str())
        .bind(configuration)
        .bind(&run.requested_by)
        .bind(now_ms)
        .bind(&run.configuration.provider)
        .bind(owner)
        .bind(until)
        .bind(drive_here.then_some(now_ms))
        .bind(queued)
        .bind(
            run.configuration
                .continues
                .as_ref()
                .map(|c| c.parent.to_string()),
        )
        .bind(last_sequence(&run.copied).unwrap_or(0));
        let mut transition = Transition::new(insert, run.id.to_string());
        if !run.copied.is_empty() {
            self.add_steps(&mut transition, run.id, &run.copied)?;
        }
        if queued.is_some() {
            self.announce(&mut transition, Notice::Queued);
        }
        let row = self.write(transition).await?.ok_or_else(|| {
            StoreError::Corrupt(format!("the insert of run {} returned no row", run.id))
        })?;
        read_run(&row)
    }

    async fn take_queued(&self, now_ms: i64, limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // An idle queue is the common case: a read answers it without a write transaction.
        let any: Option<String> =
            sqlx::query_scalar("SELECT id FROM agent_run WHERE status = $1 LIMIT 1")
                .bind(RunStatus::Queued.as_str())
                .fetch_optional(self.db.pool())
                .await
                .map_err(backend)?;
        if any.is_none() {
            return Ok(Vec::new());
        }
        let mut tx = self.write_tx().await.map_err(backend)?;
        let rows = match self.db.backend() {
            // One statement; rows another instance is taking right now are skipped, not waited
            // for.
            Backend::Postgres => {
                // The pick is a CTE so that it runs once: as a plain `IN (…)` subquery the
                // planner may run it again for every row, and each run skips the rows just
                // taken — taking them all.
                let sql = format!(
                    "WITH next AS (SELECT id FROM agent_run WHERE status = $5 \
                     ORDER BY queued_at_ms, id LIMIT $6 FOR UPDATE SKIP LOCKED) {}",
                    take_sql("id IN (SELECT id FROM next)")
                );
                self.bind_take(&sql, now_ms)
                    .bind(i64::from(limit))
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(backend)?
            }
            // The immediate transaction lets one taker in at a time: pick, then take each (SQLite
            // would evaluate a LIMIT subquery again as the update goes).
            Backend::Sqlite => {
                let ids: Vec<String> = sqlx::query_scalar(
                    "SELECT id FROM agent_run WHERE status = $1 ORDER BY queued_at_ms, id LIMIT $2",
                )
                .bind(RunStatus::Queued.as_str())
                .bind(i64::from(limit))
                .fetch_all(&mut *tx)
                .await
                .map_err(backend)?;
                let sql = take_sql("id = $6");
                let mut rows = Vec::with_capacity(ids.len());
                for id in ids {
                    if let Some(row) = self
                        .bind_take(&sql, now_ms)
                        .bind(id)
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(backend)?
                    {
                        rows.push(row);
                    }
                }
                rows
            }
        };
        let runs = rows.iter().map(read_run).collect::<Result<Vec<_>, _>>()?;
        tx.commit().await.map_err(backend)?;
        if !runs.is_empty() {
            self.committed();
        }
        Ok(runs)
    }

    async fn take_run(&self, id: Uuid, now_ms: i64) -> Result<Option<RunRecord>, StoreError> {
        let row = self
            .bind_take(&take_sql("id = $6"), now_ms)
            .bind(id.to_string())
            .fetch_optional(self.db.pool())
            .await
            .map_err(backend)?;
        if row.is_some() {
            self.committed();
        }
        row.as_ref().map(read_run).transpose()
    }

    async fn queue_position(&self, id: Uuid) -> Result<Option<u64>, StoreError> {
        let ahead: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM agent_run q JOIN agent_run r ON r.id = $1 \
             WHERE r.status = $2 AND q.status = $2 AND (q.queued_at_ms < r.queued_at_ms \
             OR (q.queued_at_ms = r.queued_at_ms AND q.id <= r.id))",
        )
        .bind(id.to_string())
        .bind(RunStatus::Queued.as_str())
        .fetch_one(self.db.pool())
        .await
        .map_err(backend)?;
        Ok(u64::try_from(ahead).ok().filter(|n| *n > 0))
    }

    async fn suspend(
        &self,
        id: Uuid,
        version: i64,
        kept: Kept<'_>,
        events: &[SequencedEvent],
        now_ms: i64,
        deadline_ms: Option<i64>,
    ) -> Result<RunRecord, StoreError> {
        let state = kept.state;
        let fence = Statement::new(format!(
            "UPDATE agent_run SET status = $1, suspended_state = $2, iterations = $3, tool_calls = $4, \
             prompt_tokens = $5, completion_tokens = $6, total_tokens = $7, \
             last_sequence = CASE WHEN $8 > last_sequence THEN $8 ELSE last_sequence END, \
             version = version + 1, updated_at_ms = $9, pending_tools = $13, \
             decided_by = NULL, decided_at_ms = NULL, decision = NULL, decision_record = NULL, \
             lease_owner = NULL, lease_until_ms = 0, approval_deadline_ms = $15 \
             WHERE id = $10 AND status = $11 AND version = $12 AND lease_owner = $14 \
             AND cancel_by IS NULL RETURNING {RUN_COLUMNS}, {CHAIN_HEAD}",
        ))
        .bind(state.waiting_for().as_str())
        .bind(kept.json.into_owned())
        .bind(i64::from(state.counters.iterations))
        .bind(i64::from(state.counters.tool_calls))
        .bind(to_i64(state.counters.usage.prompt_tokens))
        .bind(to_i64(state.counters.usage.completion_tokens))
        .bind(to_i64(state.counters.usage.total()))
        .bind(last_sequence(events).unwrap_or(0))
        .bind(now_ms)
        .bind(id.to_string())
        .bind(RunStatus::Running.as_str())
        .bind(version)
        .bind(pending_tools(state))
        .bind(&*self.owner)
        .bind(deadline_ms);
        let mut transition = self.transition(fence, id, events)?;
        transition.before_commit = Some("during_suspend_commit");
        read_run(&self.fenced(transition, id, version).await?)
    }

    async fn claim_for_resume(
        &self,
        id: Uuid,
        version: i64,
        claim: &ClaimRecord,
        now_ms: i64,
        drive_here: bool,
    ) -> Result<Claim, StoreError> {
        let (status, owner, until, queued) = self.placement(drive_here, now_ms);
        // The compare-and-set: exactly one claimer's update matches the row.
        let fence = Statement::new(format!(
            "UPDATE agent_run SET status = $1, decided_by = $2, decided_at_ms = $3, decision = $4, \
             decision_record = $5, version = version + 1, updated_at_ms = $3, \
             last_sequence = CASE WHEN $6 > last_sequence THEN $6 ELSE last_sequence END, \
             lease_owner = $12, lease_until_ms = $13, queued_at_ms = $14, approved_bases = $10, \
             approval_deadline_ms = NULL \
             WHERE id = $7 AND status IN ($8, $11) AND version = $9 \
             RETURNING version, {CHAIN_HEAD}"
        ))
        .bind(status.as_str())
        .bind(&claim.decided_by)
        .bind(now_ms)
        .bind(claim.verdict.as_str())
        .bind(&claim.decision)
        .bind(last_sequence(&claim.events).unwrap_or(0))
        .bind(id.to_string())
        .bind(RunStatus::WaitingForApproval.as_str())
        .bind(version)
        .bind(&claim.approved_bases)
        .bind(RunStatus::WaitingForInput.as_str())
        .bind(owner)
        .bind(until)
        .bind(queued);
        let mut transition = self.transition(fence, id, &claim.events)?;
        if queued.is_some() {
            // The decision waits in the queue: every instance's worker looks.
            self.announce(&mut transition, Notice::Queued);
        }
        transition.then.extend(claim_rows(id, claim, now_ms));
        let Some(row) = self.write(transition).await? else {
            return Ok(Claim::Lost(Box::new(self.status_of(id).await?)));
        };
        Ok(Claim::Won {
            version: row.required_int("version")?,
        })
    }

    async fn decide_running(
        &self,
        id: Uuid,
        version: i64,
        kept: Kept<'_>,
        claim: &ClaimRecord,
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        let state = kept.state;
        let fence = Statement::new(format!(
            "UPDATE agent_run SET suspended_state = $1, iterations = $2, tool_calls = $3, \
             prompt_tokens = $4, completion_tokens = $5, total_tokens = $6, \
             last_sequence = CASE WHEN $7 > last_sequence THEN $7 ELSE last_sequence END, \
             version = version + 1, updated_at_ms = $8, pending_tools = $9, \
             decided_by = $10, decided_at_ms = $8, decision = $11, decision_record = $12, \
             approved_bases = $13 \
             WHERE id = $14 AND status = $15 AND version = $16 AND lease_owner = $17 \
             AND cancel_by IS NULL RETURNING {CHAIN_HEAD}"
        ))
        .bind(kept.json.into_owned())
        .bind(i64::from(state.counters.iterations))
        .bind(i64::from(state.counters.tool_calls))
        .bind(to_i64(state.counters.usage.prompt_tokens))
        .bind(to_i64(state.counters.usage.completion_tokens))
        .bind(to_i64(state.counters.usage.total()))
        .bind(last_sequence(&claim.events).unwrap_or(0))
        .bind(now_ms)
        .bind(pending_tools(state))
        .bind(&claim.decided_by)
        .bind(claim.verdict.as_str())
        .bind(&claim.decision)
        .bind(&claim.approved_bases)
        .bind(id.to_string())
        .bind(RunStatus::Running.as_str())
        .bind(version)
        .bind(&*self.owner);
        let mut transition = self.transition(fence, id, &claim.events)?;
        transition.then.extend(claim_rows(id, claim, now_ms));
        transition.before_commit = Some("during_automatic_decision_commit");
        self.fenced(transition, id, version).await?;
        Ok(version + 1)
    }

    async fn rules_for(
        &self,
        run: Uuid,
        configuration: &str,
    ) -> Result<Vec<ApprovalRule>, StoreError> {
        let rows = self
            .db
            .query(
                &Statement::new(format!(
                    "SELECT {RULE_COLUMNS} FROM approval_rule WHERE run_id = $1 \
                     OR configuration = $2 ORDER BY id"
                ))
                .bind(run.to_string())
                .bind(configuration),
            )
            .await?;
        rows.iter().map(rule_from_row).collect()
    }

    async fn list_rules(&self, limit: u32) -> Result<Vec<ApprovalRule>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {RULE_COLUMNS} FROM approval_rule ORDER BY id DESC LIMIT $1"
        ))
        .bind(i64::from(limit))
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter().map(rule_from_row).collect()
    }

    async fn add_rule(
        &self,
        draft: &RuleDraft,
        by: &str,
        now_ms: i64,
    ) -> Result<ApprovalRule, StoreError> {
        let mut tx = self.write_tx().await.map_err(backend)?;
        let id: i64 = rule_insert(draft, by, now_ms)
            .query()
            .fetch_one(&mut *tx)
            .await
            .and_then(|row| row.try_get("id"))
            .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        Ok(ApprovalRule {
            id,
            scope: draft.scope.clone(),
            tool: draft.tool.clone(),
            effect: draft.effect,
            conditions: draft.conditions.clone(),
            created_by: by.to_owned(),
            created_at_ms: now_ms,
        })
    }

    async fn children(&self, id: Uuid, limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM agent_run WHERE parent_id = $1 \
             ORDER BY created_at_ms, id LIMIT $2"
        ))
        .bind(id.to_string())
        .bind(i64::from(limit))
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter().map(read_run).collect()
    }

    async fn rule(&self, id: i64) -> Result<Option<ApprovalRule>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {RULE_COLUMNS} FROM approval_rule WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.db.pool())
        .await
        .map_err(backend)?;
        row.as_ref().map(rule_from_row).transpose()
    }

    async fn remove_rule(&self, id: i64) -> Result<Option<ApprovalRule>, StoreError> {
        let mut tx = self.write_tx().await.map_err(backend)?;
        let row = sqlx::query(&format!(
            "DELETE FROM approval_rule WHERE id = $1 RETURNING {RULE_COLUMNS}"
        ))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        row.as_ref().map(rule_from_row).transpose()
    }

    async fn finish(
        &self,
        id: Uuid,
        version: i64,
        finish: &Finish,
        events: &[SequencedEvent],
        now_ms: i64,
    ) -> Result<RunRecord, StoreError> {
        if !finish.status.is_terminal() {
            return Err(StoreError::InvalidTransition {
                id,
                status: finish.status,
                action: "a finishing status",
            });
        }
        let fence = Statement::new(format!(
            "UPDATE agent_run SET status = $1, termination_reason = $2, iterations = $3, tool_calls = $4, \
             prompt_tokens = $5, completion_tokens = $6, total_tokens = $7, truncated = $8, final_answer = $9, \
             error_summary = $10, estimated_cost_micros = $11, suspended_state = NULL, \
             decision_record = NULL, \
             last_sequence = CASE WHEN $12 > last_sequence THEN $12 ELSE last_sequence END, \
             version = version + 1, updated_at_ms = $13, finished_at_ms = $13, \
             lease_owner = NULL, lease_until_ms = 0 \
             WHERE id = $14 AND version = $15 AND status NOT IN ({}) \
             AND (status <> $16 OR lease_owner = $17) RETURNING {RUN_COLUMNS}, {CHAIN_HEAD}",
            RunStatus::sql_list(&RunStatus::TERMINAL)
        ))
        .bind(finish.status.as_str())
        .bind(finish.reason.as_str())
        .bind(i64::from(finish.counters.iterations))
        .bind(i64::from(finish.counters.tool_calls))
        .bind(to_i64(finish.counters.usage.prompt_tokens))
        .bind(to_i64(finish.counters.usage.completion_tokens))
        .bind(to_i64(finish.counters.usage.total()))
        .bind(i64::from(finish.truncated))
        .bind(finish.final_answer.as_deref())
        .bind(finish.error_summary.as_deref())
        .bind(finish.estimated_cost_micros)
        .bind(last_sequence(events).unwrap_or(0))
        .bind(now_ms)
        .bind(id.to_string())
        .bind(version)
        .bind(RunStatus::Running.as_str())
        .bind(&*self.owner);
        let mut transition = self.transition(fence, id, events)?;
        transition.before_commit = Some("during_finish_commit");
        read_run(&self.fenced(transition, id, version).await?)
    }

    async fn fail_corrupted(
        &self,
        id: Uuid,
        version: i64,
        summary: &str,
        event: &Event,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let fence = Statement::new(format!(
            "UPDATE agent_run SET status = $1, termination_reason = $2, error_summary = $3, \
             version = version + 1, updated_at_ms = $4, finished_at_ms = $4, \
             last_sequence = last_sequence + 1 \
             WHERE id = $5 AND version = $6 AND status NOT IN ({}) \
             RETURNING last_sequence, {CHAIN_HEAD}",
            RunStatus::sql_list(&RunStatus::TERMINAL)
        ))
        .bind(RunStatus::Failed.as_str())
        .bind(TerminationReason::StateCorrupted.as_str())
        .bind(summary)
        .bind(now_ms)
        .bind(id.to_string())
        .bind(version);
        let step = SequencedEvent {
            sequence: 0,
            event: event.clone(),
            created_at_ms: now_ms,
        };
        let mut transition = self.transition(fence, id, std::slice::from_ref(&step))?;
        transition.numbered_by_fence = true;
        self.fenced(transition, id, version).await?;
        Ok(())
    }

    async fn cancel(
        &self,
        id: Uuid,
        by: &str,
        reason: Option<&str>,
        now_ms: i64,
    ) -> Result<RunRecord, StoreError> {
        let step = SequencedEvent {
            sequence: 0,
            event: Event::Cancelled {
                by: by.to_owned(),
                reason: reason.map(str::to_owned),
                abandoned: None,
                unknown: Vec::new(),
            },
            created_at_ms: now_ms,
        };
        // A run that moves between the two steps below (running → waiting) is tried again while
        // it is in a status one of them takes.
        let mut attempts = 0;
        loop {
            let fence = Statement::new(format!(
                "UPDATE agent_run SET status = $1, termination_reason = $2, \
                 suspended_state = NULL, decided_by = $3, decided_at_ms = $4, \
                 decision = 'cancelled', decision_record = NULL, version = version + 1, \
                 updated_at_ms = $4, finished_at_ms = $4, last_sequence = last_sequence + 1 \
                 WHERE id = $5 AND status IN ({}) RETURNING {RUN_COLUMNS}, {CHAIN_HEAD}",
                RunStatus::sql_list(&RunStatus::CANCELLABLE)
            ))
            .bind(RunStatus::Cancelled.as_str())
            .bind(TerminationReason::Cancelled.as_str())
            .bind(by)
            .bind(now_ms)
            .bind(id.to_string());
            let mut transition = self.transition(fence, id, std::slice::from_ref(&step))?;
            transition.numbered_by_fence = true;
            if let Some(row) = self.write(transition).await? {
                return read_run(&row);
            }
            // Running: the request is recorded (the first one stands), and the instance driving
            // the run stops it at its next step.
            let request = Statement::new(format!(
                "UPDATE agent_run SET cancel_by = COALESCE(cancel_by, $1), \
                 cancel_reason = CASE WHEN cancel_by IS NULL THEN $2 ELSE cancel_reason END \
                 WHERE id = $3 AND status = $4 RETURNING {RUN_COLUMNS}"
            ))
            .bind(by)
            .bind(reason)
            .bind(id.to_string())
            .bind(RunStatus::Running.as_str());
            let mut transition = Transition::new(request, id.to_string());
            self.announce(&mut transition, Notice::Cancel(id));
            if let Some(row) = self.write(transition).await? {
                return read_run(&row);
            }
            let run = self.status_of(id).await?;
            attempts += 1;
            let movable =
                run.status == RunStatus::Running || RunStatus::CANCELLABLE.contains(&run.status);
            if !movable || attempts == CANCEL_ATTEMPTS {
                return Err(StoreError::InvalidTransition {
                    id,
                    status: run.status,
                    action: "cancelled",
                });
            }
        }
    }

    async fn effects(&self, id: Uuid) -> Result<Vec<EffectRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT round, call_id, tool, effect_key, dispatched_at_ms, result, outcome \
             FROM agent_run_effect WHERE run_id = $1 ORDER BY round, dispatched_at_ms",
        )
        .bind(id.to_string())
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter()
            .map(|row| {
                let result: Option<String> = row.try_get("result").map_err(backend)?;
                let outcome: Option<String> = row.try_get("outcome").map_err(backend)?;
                let round: i64 = row.try_get("round").map_err(backend)?;
                Ok(EffectRecord {
                    round: u32::try_from(round).unwrap_or_default(),
                    call_id: row.try_get("call_id").map_err(backend)?,
                    tool: row.try_get("tool").map_err(backend)?,
                    effect_key: row.try_get("effect_key").map_err(backend)?,
                    dispatched_at_ms: row.try_get("dispatched_at_ms").map_err(backend)?,
                    result: result.map(|r| (r, outcome_from(outcome.as_deref().unwrap_or("ok")))),
                })
            })
            .collect()
    }

    async fn get(&self, id: Uuid) -> Result<Option<RunRecord>, StoreError> {
        let rows = self
            .db
            .query(
                &Statement::new(format!("SELECT {RUN_COLUMNS} FROM agent_run WHERE id = $1"))
                    .bind(id.to_string()),
            )
            .await?;
        rows.first().map(read_run).transpose()
    }

    async fn list(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        let sql = list_sql();
        let rows = bind_list(sqlx::query(&sql), filter)
            .fetch_all(self.db.pool())
            .await
            .map_err(backend)?;
        rows.iter().map(read_run).collect()
    }

    async fn waiting(&self, filter: &WaitingFilter) -> Result<Vec<RunRecord>, StoreError> {
        let sql = waiting_sql(self.db.backend());
        let rows = bind_waiting(sqlx::query(&sql), filter)
            .fetch_all(self.db.pool())
            .await
            .map_err(backend)?;
        rows.iter().map(read_run).collect()
    }

    async fn events(&self, id: Uuid, after: i64) -> Result<Vec<StoredEvent>, StoreError> {
        self.events_page(id, after, u32::MAX).await
    }

    async fn events_page(
        &self,
        id: Uuid,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT sequence, kind, round, duration_ms, payload, created_at_ms FROM agent_run_event \
             WHERE run_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3",
        )
        .bind(id.to_string())
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(self.db.pool())
        .await.map_err(backend)?;
        rows.iter()
            .map(|row| {
                let payload: String = row.try_get("payload").map_err(backend)?;
                Ok(StoredEvent {
                    run_id: id,
                    sequence: row.try_get("sequence").map_err(backend)?,
                    kind: row.try_get("kind").map_err(backend)?,
                    round: row.try_get("round").map_err(backend)?,
                    duration_ms: row.try_get("duration_ms").map_err(backend)?,
                    payload: serde_json::from_str(&payload)
                        .map_err(|err| StoreError::Corrupt(format!("event payload: {err}")))?,
                    created_at_ms: row.try_get("created_at_ms").map_err(backend)?,
                })
            })
            .collect()
    }

    async fn purge(
        &self,
        terminal_before_ms: i64,
        waiting_before_ms: i64,
        chunk: u32,
    ) -> Result<PurgeReport, StoreError> {
        let mut report = PurgeReport::default();
        let chunk = i64::from(chunk.max(1));
        let mut after = String::new();
        loop {
            let mut tx = self.write_tx().await.map_err(backend)?;
            // Which runs are due: checked again on each row, under its lock, just below.
            let due = format!(
                "((status IN ({}) AND finished_at_ms < $1) OR (status IN ({}) AND updated_at_ms < $2))",
                RunStatus::sql_list(&RunStatus::TERMINAL),
                RunStatus::sql_list(&RunStatus::WAITING)
            );
            let ids: Vec<String> = sqlx::query_scalar(&format!(
                "SELECT id FROM agent_run WHERE {due} AND id > $3 ORDER BY id LIMIT $4"
            ))
            .bind(terminal_before_ms)
            .bind(waiting_before_ms)
            .bind(&after)
            .bind(chunk)
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?;
            let Some(last) = ids.last().cloned() else {
                return Ok(report);
            };
            after = last;
            // In id order, so that two purges lock rows in the same order and never deadlock.
            for id in &ids {
                // Locks the row and checks it is still due: a run claimed (or decided) since the
                // select is left alone, and a claim waiting on the lock finds it gone.
                let still_due = sqlx::query(&format!(
                    "UPDATE agent_run SET version = version WHERE id = $3 AND {due}"
                ))
                .bind(terminal_before_ms)
                .bind(waiting_before_ms)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
                if still_due.rows_affected() != 1 {
                    continue;
                }
                sqlx::query("DELETE FROM agent_run_effect WHERE run_id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                sqlx::query("DELETE FROM webhook_delivery WHERE run_id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                let events = sqlx::query("DELETE FROM agent_run_event WHERE run_id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                sqlx::query("DELETE FROM agent_run WHERE id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                report.events += events.rows_affected();
                report.runs += 1;
            }
            tx.commit().await.map_err(backend)?;
        }
    }

    async fn renew_lease(&self, id: Uuid, now_ms: i64) -> Result<Renewal, StoreError> {
        let renewed = sqlx::query(
            "UPDATE agent_run SET lease_until_ms = $1 \
             WHERE id = $2 AND status = $3 AND lease_owner = $4 RETURNING cancel_by, cancel_reason",
        )
        .bind(now_ms + self.lease_ms)
        .bind(id.to_string())
        .bind(RunStatus::Running.as_str())
        .bind(&*self.owner)
        .fetch_optional(self.db.pool())
        .await
        .map_err(backend)?;
        let Some(row) = renewed else {
            return Ok(Renewal::Gone);
        };
        Ok(Renewal::Held(cancel_request(&row)?))
    }

    async fn expired_approvals(&self, now_ms: i64, limit: u32) -> Result<Vec<Uuid>, StoreError> {
        self.overdue(Sweep::Deadlines, now_ms, limit).await
    }

    async fn expired_leases(&self, now_ms: i64, limit: u32) -> Result<Vec<Uuid>, StoreError> {
        self.overdue(Sweep::Leases, now_ms, limit).await
    }

    async fn take_lease(&self, id: Uuid, now_ms: i64, force: bool) -> Result<bool, StoreError> {
        // One statement: of two reapers, exactly one update matches the expired lease. The
        // version moves on: it is the lease's epoch, so the instance that held the run before
        // can no longer write, nor apply an effect its tools fence on the epoch.
        let taken = sqlx::query(
            "UPDATE agent_run SET lease_owner = $1, lease_until_ms = $2, version = version + 1 \
             WHERE id = $3 AND status = $4 AND (lease_until_ms <= $5 OR $6 = 1)",
        )
        .bind(&*self.owner)
        .bind(now_ms + self.lease_ms)
        .bind(id.to_string())
        .bind(RunStatus::Running.as_str())
        .bind(now_ms)
        .bind(i64::from(force))
        .execute(self.db.pool())
        .await
        .map_err(backend)?;
        if taken.rows_affected() == 1 {
            self.committed();
        }
        Ok(taken.rows_affected() == 1)
    }
}
