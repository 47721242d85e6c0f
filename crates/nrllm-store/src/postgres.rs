//! Postgres, reached through tokio-postgres for the hot path, which sends a transition's
//! statements without waiting for each answer (pipelining). Through sqlx every statement was a
//! round trip of its own — `BEGIN`, the fence, the steps, each statement after them, `COMMIT` —
//! and each round trip wakes the server's process and ours: at 64 clients much of the two cores'
//! time went to switching between them (BENCHMARKS.md, issue #19).
//!
//! - [`Pipeline::transact`]: `BEGIN` and the fence go together (one round trip: the steps chain
//!   on the hash the fence returns); then the steps, the statements after them and `COMMIT` go
//!   together (the second). A transition that is its fence alone is one statement in its own
//!   transaction: one round trip.
//! - Under load, group commit: while fewer than [`ALONE_BELOW`] transitions are under way in the
//!   process, a caller carries out its own on a connection of its own; past that, transitions
//!   queue for [`COMMITTERS`] tasks, each of which takes what queued and carries it out in one
//!   transaction — the fences together, then every transition's statements and one `COMMIT`
//!   together: two round trips and one commit for many. At 64 clients the server's processes
//!   spent most of the two cores on statements, round trips and commits made once per
//!   transition (BENCHMARKS.md, issue #19). If any of a batch's statements fails, nothing of it
//!   was committed and each of its transitions is carried out again alone, so that each hears
//!   its own outcome.
//! - [`Pipeline::query`]: the point reads of the hot path (a run by id, its rules).
//!
//! Statements are prepared once per connection, with their parameters' types (`BIGINT` or
//! `TEXT`, as sqlx sent them). Pages, scans and the rest stay on sqlx's pool.

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use futures::future::try_join_all;
use futures::FutureExt as _;
use nrllm_core::failpoint;
use nrllm_core::run_store::StoreError;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::NoTls;

use crate::transition::{Row, Statement, Transition, Value};

/// How long a caller waits for a connection of the pool (sqlx's pool waits as long).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

fn postgres(err: tokio_postgres::Error) -> StoreError {
    StoreError::Backend(Box::new(err))
}

fn pool_error(err: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Backend(Box::new(err))
}

/// Transitions under way in the process below which a caller carries out its own: up to that
/// they seldom wait for one another, and a trip through a committer would only add its hop.
const ALONE_BELOW: usize = 8;

/// Tasks that carry out queued transitions, each in batches on one connection of the pool.
const COMMITTERS: usize = 4;

/// Transitions one batch takes at most.
const MAX_BATCH: usize = 32;

/// Where a transition's outcome goes.
type Reply = oneshot::Sender<Result<Option<Row>, StoreError>>;

/// A transition queued for a committer, and where its outcome goes.
struct Job {
    transition: Transition,
    reply: Reply,
}

/// A pool of pipelining connections to one Postgres database, and the committers.
pub(crate) struct Pipeline {
    pool: Pool,
    /// Transitions waiting for a committer (the committers end when this is dropped).
    queue: mpsc::UnboundedSender<Job>,
    /// Transitions under way in this process, alone or queued.
    under_way: AtomicUsize,
    /// Transitions a committer took together with others, for the tests of that path.
    #[cfg(test)]
    batched: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("status", &self.pool.status())
            .finish()
    }
}

impl Pipeline {
    /// A pool of up to `size` connections to the database at `url` (made when first needed).
    pub(crate) fn new(
        url: &str,
        size: usize,
    ) -> Result<Pipeline, Box<dyn std::error::Error + Send + Sync>> {
        let config = tokio_postgres::Config::from_str(url)?;
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                // A connection that broke is found closed; anything else is reused as it is.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(ACQUIRE_TIMEOUT))
            .create_timeout(Some(ACQUIRE_TIMEOUT))
            .build()?;
        let (queue, queued) = mpsc::unbounded_channel();
        let queued = Arc::new(tokio::sync::Mutex::new(queued));
        #[cfg(test)]
        let batched = Arc::new(AtomicUsize::new(0));
        for _ in 0..COMMITTERS {
            tokio::spawn(committer(
                pool.clone(),
                Arc::clone(&queued),
                #[cfg(test)]
                Arc::clone(&batched),
            ));
        }
        Ok(Pipeline {
            pool,
            queue,
            under_way: AtomicUsize::new(0),
            #[cfg(test)]
            batched,
        })
    }

    /// The rows `statement` returns.
    pub(crate) async fn query(&self, statement: &Statement) -> Result<Vec<Row>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let prepared = prepare(&client, statement).await?;
        let rows = client
            .query(&prepared, &params(&statement.args))
            .await
            .map_err(postgres)?;
        rows.iter().map(read_row).collect()
    }

    /// Carries out `transition` in one transaction: the row its fence returned, or `None` (then
    /// nothing was written). Alone while few transitions are under way — and always when a
    /// crash test waits at a point before a commit; otherwise through a committer, together
    /// with what queued meanwhile. A caller that gives up while its transition is still queued
    /// leaves it undone; once a committer took it, it is carried out whole (or not at all).
    pub(crate) async fn transact(&self, transition: Transition) -> Result<Option<Row>, StoreError> {
        let before = self.under_way.fetch_add(1, Ordering::Relaxed);
        let _under_way = UnderWay(&self.under_way);
        if before < ALONE_BELOW || failpoint::armed() {
            let client = self.pool.get().await.map_err(pool_error)?;
            return alone(client, transition).await;
        }
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Job { transition, reply })
            .map_err(|_| StoreError::Backend("the Postgres committers have stopped".into()))?;
        answer.await.map_err(|_| {
            StoreError::Backend("a Postgres committer stopped mid-transaction".into())
        })?
    }

    #[cfg(test)]
    pub(crate) fn batched(&self) -> usize {
        self.batched.load(Ordering::Relaxed)
    }
}

/// One transition under way, counted until it is dropped.
struct UnderWay<'a>(&'a AtomicUsize);

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A committer: takes what queued (up to [`MAX_BATCH`]) whenever something did, and carries
/// it out on a connection of `pool`. Ends when the queue's sender is dropped.
async fn committer(
    pool: Pool,
    queued: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Job>>>,
    #[cfg(test)] batched: Arc<AtomicUsize>,
) {
    loop {
        let mut jobs = Vec::new();
        {
            let mut queued = queued.lock().await;
            let Some(first) = queued.recv().await else {
                return;
            };
            jobs.push(first);
            while jobs.len() < MAX_BATCH {
                let Ok(job) = queued.try_recv() else { break };
                jobs.push(job);
            }
        }
        // Their callers gave up: nothing of theirs has been sent.
        jobs.retain(|job| !job.reply.is_closed());
        #[cfg(test)]
        if jobs.len() > 1 {
            batched.fetch_add(jobs.len(), Ordering::Relaxed);
        }
        together(&pool, jobs).await;
    }
}

/// Carries out `jobs` in one transaction; each hears its outcome once it committed. If the
/// batch fails before its `COMMIT` was sent — a statement failed, a fence's row could not be
/// read — nothing of it was written, and each is carried out again alone, hearing its own
/// outcome. If it failed otherwise — no connection for it, or its `COMMIT` failed, and then
/// whether it committed is unknown — each hears that. A run's second transition is carried
/// out alone after the batch: in it, its fence would not see the steps the first writes (its
/// chain head and numbers would be stale).
async fn together(pool: &Pool, mut jobs: Vec<Job>) {
    // One order of row locks for every batch: no two batches wait for each other in a circle
    // (a stable sort: transitions of one run keep the order they queued in).
    jobs.sort_by(|a, b| a.transition.run.cmp(&b.transition.run));
    let mut batched: Vec<Job> = Vec::with_capacity(jobs.len());
    let mut after = Vec::new();
    for job in jobs {
        match batched.last() {
            Some(last) if last.transition.run == job.transition.run => after.push(job),
            _ => batched.push(job),
        }
    }
    if batched.len() > 1 {
        let outcome = match pool.get().await {
            Ok(client) => batch(client, &batched).await,
            Err(err) => Batch::Failed(pool_error(err).to_string()),
        };
        match outcome {
            Batch::Done(rows) => {
                for (job, row) in batched.drain(..).zip(rows) {
                    let _ = job.reply.send(Ok(row));
                }
            }
            Batch::Undone(err) => {
                tracing::debug!(
                    error = %err,
                    transitions = batched.len(),
                    "a batch of transitions was rolled back; each goes alone"
                );
            }
            Batch::Failed(why) => {
                tracing::error!(
                    error = %why,
                    transitions = batched.len(),
                    "a batch of transitions failed"
                );
                for job in batched.drain(..) {
                    let _ = job.reply.send(Err(StoreError::Backend(why.clone().into())));
                }
            }
        }
    }
    for job in batched.into_iter().chain(after) {
        let outcome = match pool.get().await {
            Ok(client) => alone(client, job.transition).await,
            Err(err) => Err(pool_error(err)),
        };
        let _ = job.reply.send(outcome);
    }
}

/// What a batch came to.
enum Batch {
    /// Committed: each fence's row, in the batch's order.
    Done(Vec<Option<Row>>),
    /// Nothing of it was written.
    Undone(StoreError),
    /// No connection for it, or its `COMMIT` was sent and failed (say, the connection was
    /// lost): then it may have committed.
    Failed(String),
}

/// `jobs` in one transaction on `client`: `BEGIN` and every fence together, then every
/// statement that follows a fence that matched, and `COMMIT`, together.
async fn batch(client: Object, jobs: &[Job]) -> Batch {
    let fences = match try_join_all(
        jobs.iter()
            .map(|job| prepare(&client, &job.transition.fence)),
    )
    .await
    {
        Ok(fences) => fences,
        Err(err) => return Batch::Undone(err),
    };
    let fence_args: Vec<_> = jobs
        .iter()
        .map(|job| params(&job.transition.fence.args))
        .collect();
    let open = Open::new(client);
    let (begun, fenced) = tokio::join!(
        open.client().batch_execute("BEGIN"),
        try_join_all(
            fences
                .iter()
                .zip(&fence_args)
                .map(|(fence, args)| open.client().query(fence, args))
        )
    );
    let fenced = match begun.and(fenced) {
        Ok(fenced) => fenced,
        Err(err) => return undone(open, postgres(err)).await,
    };
    let mut rows = Vec::with_capacity(jobs.len());
    let mut statements = Vec::new();
    for (job, found) in jobs.iter().zip(&fenced) {
        let row = match found.first().map(read_row).transpose() {
            Ok(row) => row,
            Err(err) => return undone(open, err).await,
        };
        if let Some(row) = &row {
            match job.transition.clone().follow(row) {
                Ok((follow, _)) => statements.extend(follow),
                Err(err) => return undone(open, err).await,
            }
        }
        rows.push(row);
    }
    match write_and_commit(&open, &statements, None).await {
        Err(err) => undone(open, err).await,
        Ok((written, committed)) => {
            open.close();
            match (written, committed) {
                (Ok(()), Ok(())) => Batch::Done(rows),
                // A statement failed: the server answered the `COMMIT` by rolling back.
                (Err(err), Ok(())) => Batch::Undone(postgres(err)),
                (_, Err(err)) => Batch::Failed(err.to_string()),
            }
        }
    }
}

/// The batch on `open` rolled back: nothing of it was written, for the reason `err`.
async fn undone(open: Open, err: StoreError) -> Batch {
    // If the `ROLLBACK` cannot be sent, the connection is closed instead, and the server rolls
    // the transaction back.
    let _ = open.roll_back().await;
    Batch::Undone(err)
}

/// Carries out `transition` alone on `client`, in one transaction.
async fn alone(client: Object, transition: Transition) -> Result<Option<Row>, StoreError> {
    let fence = prepare(&client, &transition.fence).await?;
    let fence_args = params(&transition.fence.args);
    if transition.steps.is_empty()
        && transition.then.is_empty()
        && transition.before_commit.is_none()
    {
        // The fence alone: one statement is one transaction.
        let rows = client.query(&fence, &fence_args).await.map_err(postgres)?;
        return rows.first().map(read_row).transpose();
    }
    let open = Open::new(client);
    let (begun, fenced) = tokio::join!(
        open.client().batch_execute("BEGIN"),
        open.client().query(&fence, &fence_args)
    );
    let row = match (begun, fenced) {
        (Ok(()), Ok(rows)) => match rows.first().map(read_row).transpose() {
            Ok(Some(row)) => row,
            // Another writer moved the run on (or its row cannot be read): nothing written.
            other => return open.roll_back().await.and(other),
        },
        (Err(err), _) | (_, Err(err)) => {
            return open.roll_back().await.and(Err(postgres(err)));
        }
    };
    let (statements, point) = match transition.follow(&row) {
        Ok(follow) => follow,
        Err(err) => return open.roll_back().await.and(Err(err)),
    };
    match write_and_commit(&open, &statements, point).await {
        Err(err) => open.roll_back().await.and(Err(err)),
        Ok((written, committed)) => {
            open.close();
            written.and(committed).map_err(postgres)?;
            Ok(Some(row))
        }
    }
}

/// Sends `statements` on `open`'s transaction and, with them, `COMMIT` — held back until
/// `point` is reached when a crash test waits there. `Err`: nothing was committed and the
/// transaction is still open (a statement could not be prepared or sent: roll it back).
/// `Ok`: the transaction ended — how the statements went, and how the `COMMIT` did (after an
/// error the server meets, it skips the rest and answers the `COMMIT` by rolling back:
/// nothing is half-written).
async fn write_and_commit(
    open: &Open,
    statements: &[Statement],
    point: Option<&'static str>,
) -> Result<
    (
        Result<(), tokio_postgres::Error>,
        Result<(), tokio_postgres::Error>,
    ),
    StoreError,
> {
    let prepared = try_join_all(
        statements
            .iter()
            .map(|statement| prepare(open.client(), statement)),
    )
    .await?;
    let args: Vec<_> = statements.iter().map(|s| params(&s.args)).collect();
    let mut writes = std::pin::pin!(try_join_all(
        prepared
            .iter()
            .zip(&args)
            .map(|(statement, args)| open.client().execute(statement, args)),
    ));
    // The first poll sends every statement, unless one fails before it is sent (it could not
    // be encoded, the connection is gone): then no `COMMIT` may follow.
    if let Some(Err(err)) = writes.as_mut().now_or_never() {
        return Err(postgres(err));
    }
    match point.filter(|_| failpoint::armed()) {
        Some(point) => {
            writes.await.map_err(postgres)?;
            failpoint::reach(point);
            Ok((Ok(()), open.client().batch_execute("COMMIT").await))
        }
        None => {
            let (written, committed) = tokio::join!(writes, open.client().batch_execute("COMMIT"));
            Ok((written.map(drop), committed))
        }
    }
}

/// A connection with a transaction open on it. Dropped before it is closed (say, its caller's
/// future was dropped mid-transaction), the connection is not given back to the pool but closed,
/// so that the server rolls the transaction back and nobody else uses it half-done.
struct Open {
    client: Option<Object>,
}

impl Open {
    fn new(client: Object) -> Open {
        Open {
            client: Some(client),
        }
    }

    fn client(&self) -> &Object {
        self.client
            .as_ref()
            .expect("the connection is held until closed")
    }

    /// The transaction ended (committed or rolled back by the server): the connection goes
    /// back to the pool.
    fn close(mut self) {
        self.client.take();
    }

    /// Rolls the transaction back; the connection goes back to the pool once it did.
    async fn roll_back(self) -> Result<(), StoreError> {
        self.client()
            .batch_execute("ROLLBACK")
            .await
            .map_err(postgres)?;
        self.close();
        Ok(())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            drop(Object::take(client));
        }
    }
}

/// `statement` prepared on `client` (once per connection), its parameters typed as bound.
async fn prepare(
    client: &Object,
    statement: &Statement,
) -> Result<tokio_postgres::Statement, StoreError> {
    let types: Vec<Type> = statement
        .args
        .iter()
        .map(|value| match value {
            Value::Int(_) => Type::INT8,
            Value::Text(_) => Type::TEXT,
        })
        .collect();
    client
        .prepare_typed_cached(&statement.sql, &types)
        .await
        .map_err(postgres)
}

fn params(args: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    args.iter()
        .map(|value| match value {
            Value::Int(v) => v as &(dyn ToSql + Sync),
            Value::Text(v) => v as &(dyn ToSql + Sync),
        })
        .collect()
}

/// A returned row, column by column.
fn read_row(row: &tokio_postgres::Row) -> Result<Row, StoreError> {
    let mut values = Vec::with_capacity(row.len());
    for (i, column) in row.columns().iter().enumerate() {
        let value = match *column.type_() {
            Type::INT8 => Value::Int(row.try_get(i).map_err(postgres)?),
            Type::INT4 => Value::Int(
                row.try_get::<_, Option<i32>>(i)
                    .map_err(postgres)?
                    .map(i64::from),
            ),
            Type::INT2 => Value::Int(
                row.try_get::<_, Option<i16>>(i)
                    .map_err(postgres)?
                    .map(i64::from),
            ),
            Type::BOOL => Value::Int(
                row.try_get::<_, Option<bool>>(i)
                    .map_err(postgres)?
                    .map(i64::from),
            ),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
                Value::Text(row.try_get(i).map_err(postgres)?)
            }
            ref other => {
                return Err(StoreError::Corrupt(format!(
                    "column `{}` has a type the store does not read ({other})",
                    column.name()
                )))
            }
        };
        values.push(value);
    }
    let columns = row.columns().iter().map(|c| c.name().to_owned()).collect();
    Ok(Row::new(columns, values))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{ALONE_BELOW, COMMITTERS};
    use crate::transition::scratch;
    use crate::transition::{Cells, Statement, Transition};
    use nrllm_core::run_store::StoreError;

    /// Bumps row `id` from `expected`; the fence takes `sleep` seconds.
    fn bump(id: &str, expected: i64, sleep: &str) -> Transition {
        let fence = Statement::new(format!(
            "UPDATE pipeline_t SET version = version + 1 WHERE id = $1 AND version = $2 \
             RETURNING version, (SELECT pg_sleep({sleep})) IS NULL AS slept"
        ))
        .bind(id)
        .bind(expected);
        let mut transition = Transition::new(fence, id.to_owned());
        // Something after the fence, so that the transition is a transaction of statements.
        transition.then.push(
            Statement::new("UPDATE pipeline_t SET touched = touched + 1 WHERE id = $1").bind(id),
        );
        transition
    }

    #[tokio::test]
    #[ignore = "needs Postgres (TEST_DATABASE_URL); make test runs it"]
    async fn a_transition_dropped_mid_transaction_never_commits_through_the_next_user() {
        let test = crate::testing::postgres_from_env().await;
        let db = test.open(1).await;
        scratch::table(&db, "pipeline_t", &["a", "b"]).await;
        // Its caller gives up while the fence runs: `BEGIN` and the fence were sent, no
        // `COMMIT` yet.
        let dropped = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            db.transact(bump("a", 1, "1")),
        )
        .await;
        assert!(dropped.is_err(), "the transition was still under way");
        // The pool's connections are used again, many times over.
        for expected in 1..=6 {
            let row = db.transact(bump("b", expected, "0")).await.unwrap();
            assert!(row.is_some(), "b's bump {expected}");
        }
        // Long after the fence's sleep: the dropped transition's write never committed, by
        // itself or inside another's transaction.
        tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
        assert_eq!(scratch::version(&db, "pipeline_t", "a").await, 1);
        assert_eq!(scratch::version(&db, "pipeline_t", "b").await, 7);
        drop(db);
        test.cleanup().await;
    }

    /// Starts slow transitions (their fences take 0.6 s) on rows `{round}slow0`, … of
    /// `pipeline_t`: the first [`ALONE_BELOW`] go alone, then one for each committer, one at a
    /// time so that each committer takes one — after which transitions queue until the first
    /// of those ends.
    async fn occupy_the_committers(
        db: &crate::db::Database,
        round: &str,
    ) -> Vec<tokio::task::JoinHandle<Result<Option<crate::transition::Row>, StoreError>>> {
        let slow = |i: usize| {
            let db = db.clone();
            let transition = bump(&format!("{round}slow{i}"), 1, "0.6");
            tokio::spawn(async move { db.transact(transition).await })
        };
        let mut writes: Vec<_> = (0..ALONE_BELOW).map(slow).collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        for i in ALONE_BELOW..ALONE_BELOW + COMMITTERS {
            writes.push(slow(i));
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        writes
    }

    /// Once enough transitions are under way, the rest queue for the committers, which carry
    /// out what queued together in one transaction. In the first round, among ten that queued,
    /// a stale fence matches nothing and one whose statement fails rolls the batch back: each
    /// of the ten is carried out again alone and hears its own outcome; a caller that gave up
    /// while its transition was queued leaves it undone. In the second, a run's second
    /// transition in the queue sees what its first wrote after its fence.
    #[tokio::test]
    #[ignore = "needs Postgres (TEST_DATABASE_URL); make test runs it"]
    async fn transitions_queued_under_load_commit_together_and_fail_alone() {
        let test = crate::testing::postgres_from_env().await;
        let db = test.open(16).await;
        let mut ids: Vec<String> = ["a", "b"]
            .iter()
            .flat_map(|round| (0..ALONE_BELOW + COMMITTERS).map(move |i| format!("{round}slow{i}")))
            .collect();
        ids.extend((0..10).map(|i| format!("q{i}")));
        ids.extend(["gave_up", "r0", "r1", "r2"].map(String::from));
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        scratch::table(&db, "pipeline_t", &ids).await;
        let spawn = |transition: Transition| {
            let db = db.clone();
            tokio::spawn(async move { db.transact(transition).await })
        };

        let slow = occupy_the_committers(&db, "a").await;
        let gave_up = tokio::time::timeout(
            Duration::from_millis(100),
            db.transact(scratch::bump("pipeline_t", "gave_up", 1)),
        )
        .await;
        assert!(gave_up.is_err(), "the queued transition was still waiting");
        let queued: Vec<String> = (0..10).map(|i| format!("q{i}")).collect();
        let mut failing = scratch::bump("pipeline_t", "q3", 1);
        failing
            .then
            .push(Statement::new("INSERT INTO pipeline_t (id, version) VALUES ($1, 0)").bind("q0"));
        let writes: Vec<_> = queued
            .iter()
            .map(|id| match id.as_str() {
                "q3" => failing.clone(),
                "q6" => scratch::bump("pipeline_t", "q6", 7),
                id => scratch::bump("pipeline_t", id, 1),
            })
            .map(spawn)
            .collect();
        for write in slow {
            assert!(
                write.await.unwrap().unwrap().is_some(),
                "a slow fence committed"
            );
        }
        for (id, write) in queued.iter().zip(writes) {
            let outcome = write.await.unwrap();
            match id.as_str() {
                "q3" => assert!(outcome.is_err(), "q3's failing statement: {outcome:?}"),
                "q6" => assert!(
                    matches!(outcome, Ok(None)),
                    "q6's fence was stale: {outcome:?}"
                ),
                id => {
                    let row = outcome.unwrap().expect("committed");
                    assert_eq!(row.required_int("version").unwrap(), 2, "{id}");
                    assert_eq!(row.required_text("id").unwrap(), id);
                }
            }
            let expected = if id == "q3" || id == "q6" { 1 } else { 2 };
            assert_eq!(
                scratch::version(&db, "pipeline_t", id).await,
                expected,
                "{id}"
            );
        }
        assert_eq!(
            scratch::version(&db, "pipeline_t", "gave_up").await,
            1,
            "the transition whose caller gave up in the queue was not carried out"
        );
        let batched = db.postgres_pipeline().unwrap().batched();
        assert!(
            batched >= queued.len(),
            "the queued transitions went through a batch ({batched} did)"
        );

        let slow = occupy_the_committers(&db, "b").await;
        let mut first_of_r1 = scratch::bump("pipeline_t", "r1", 1);
        first_of_r1.then.push(
            Statement::new("UPDATE pipeline_t SET touched = touched + 10 WHERE id = $1").bind("r1"),
        );
        let second_of_r1 = Transition::new(
            Statement::new(
                "UPDATE pipeline_t SET version = version + 1 WHERE id = $1 \
                 RETURNING version, touched",
            )
            .bind("r1"),
            "r1".into(),
        );
        let writes: Vec<_> = [
            scratch::bump("pipeline_t", "r0", 1),
            first_of_r1,
            second_of_r1,
            scratch::bump("pipeline_t", "r2", 1),
        ]
        .into_iter()
        .map(spawn)
        .collect();
        for write in slow {
            assert!(
                write.await.unwrap().unwrap().is_some(),
                "a slow fence committed"
            );
        }
        let mut rows = Vec::new();
        for write in writes {
            rows.push(write.await.unwrap().unwrap().expect("committed"));
        }
        assert_eq!(rows[2].required_int("version").unwrap(), 3);
        assert_eq!(
            rows[2].required_int("touched").unwrap(),
            10,
            "r1's second fence saw what its first wrote"
        );
        assert!(
            db.postgres_pipeline().unwrap().batched() > batched,
            "the second round went through a batch"
        );
        drop(db);
        test.cleanup().await;
    }
}
