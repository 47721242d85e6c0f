use std::sync::atomic::Ordering;
use std::time::Duration;

use super::lock::locked;
use super::{SqliteSync, BUSY_TIMEOUT};
use crate::transition::scratch::{self, bump};
use crate::transition::{Cells, Row, Statement};
use std::sync::Arc;

#[tokio::test]
async fn transitions_queued_together_commit_together_and_fail_alone() {
    let test = crate::testing::sqlite().await;
    let db = &test.db;
    scratch::table(db, "batch_t", &["a", "b", "c", "d"]).await;
    let mut failing = bump("batch_t", "c", 1);
    failing
        .then
        .push(Statement::new("INSERT INTO batch_t (id, version) VALUES ($1, 0)").bind("a"));
    // While this test holds the process's write turn, the writer thread waits for it with
    // the first transition and the others queue behind: then it takes them all at once.
    let turn = db.write_turn().await;
    let writes: Vec<_> = [
        bump("batch_t", "a", 1),
        bump("batch_t", "b", 7),
        failing,
        bump("batch_t", "d", 1),
    ]
    .into_iter()
    .map(|transition| {
        let db = db.clone();
        tokio::spawn(async move { db.transact(transition).await })
    })
    .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(turn);
    let mut outcomes = Vec::new();
    for write in writes {
        outcomes.push(write.await.unwrap());
    }
    let version = |outcome: &Result<Option<Row>, _>| {
        outcome
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .map(|row| row.required_int("version").unwrap())
    };
    assert_eq!(version(&outcomes[0]), Some(2), "a committed");
    assert!(matches!(outcomes[1], Ok(None)), "b's fence matched nothing");
    assert!(outcomes[2].is_err(), "c failed");
    assert_eq!(version(&outcomes[3]), Some(2), "d committed");
    let mut stored = Vec::new();
    for id in ["a", "b", "c", "d"] {
        stored.push(scratch::version(db, "batch_t", id).await);
    }
    assert_eq!(
        stored,
        [2, 1, 1, 2],
        "c's bump went back with its failing statement, nothing else did"
    );
    let rows = db
        .query(&Statement::new("SELECT id FROM batch_t"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 4, "c's failing insert left nothing");
    test.cleanup().await;
}

/// At `FULL` the caller's thread commits only on a multi-threaded runtime, which can lend
/// its other tasks to another thread while the commit waits for the flush; on a one-thread
/// runtime the writer thread does (`block_in_place` would panic there).
#[test]
fn at_full_the_callers_thread_commits_only_on_a_multi_threaded_runtime() {
    for (multi_threaded, inline) in [(true, 3), (false, 0)] {
        let runtime = if multi_threaded {
            tokio::runtime::Builder::new_multi_thread()
        } else {
            tokio::runtime::Builder::new_current_thread()
        }
        .enable_all()
        .build()
        .unwrap();
        runtime.block_on(async {
            let test = crate::testing::sqlite_with(SqliteSync::Full).await;
            let db = &test.db;
            scratch::table(db, "full_t", &["a"]).await;
            let writer = db.sqlite_writer().unwrap();
            let before = writer.inline_commits.load(Ordering::Relaxed);
            for version in 1..=3 {
                let row = db.transact(bump("full_t", "a", version)).await.unwrap();
                assert!(row.is_some(), "bump {version} committed");
            }
            assert_eq!(scratch::version(db, "full_t", "a").await, 4);
            assert_eq!(
                writer.inline_commits.load(Ordering::Relaxed) - before,
                inline,
                "multi-threaded: {multi_threaded}"
            );
            test.cleanup().await;
        });
    }
}

/// A point read goes to the write connection, whose page cache is warm, when no writer of
/// the process is under way; while one is, to a read connection — without waiting for it.
#[tokio::test]
async fn point_reads_use_the_write_connection_only_while_no_writer_is_under_way() {
    let test = crate::testing::sqlite().await;
    let db = &test.db;
    scratch::table(db, "read_t", &["a"]).await;
    let writer = db.sqlite_writer().unwrap();
    let read = Statement::new("SELECT version FROM read_t WHERE id = $1").bind("a");
    let version = |rows: Vec<Row>| rows[0].required_int("version").unwrap();
    db.transact(bump("read_t", "a", 1)).await.unwrap();
    // At FULL on this one-thread runtime the writer thread committed, and it may still hold
    // the write turn for a moment after it answered.
    drop(db.write_turn().await);
    let before = writer.writer_reads.load(Ordering::Relaxed);
    assert_eq!(version(db.query(&read).await.unwrap()), 2);
    assert_eq!(
        writer.writer_reads.load(Ordering::Relaxed) - before,
        1,
        "read on the write connection"
    );
    let turn = db.write_turn().await;
    let rows = tokio::time::timeout(Duration::from_secs(2), db.query(&read))
        .await
        .expect("the read did not wait for the writer")
        .unwrap();
    assert_eq!(version(rows), 2);
    assert_eq!(
        writer.writer_reads.load(Ordering::Relaxed) - before,
        1,
        "read on a read connection while the write turn was taken"
    );
    drop(turn);
    test.cleanup().await;
}

/// Each run of a statement binds its values by their `$n` numbers and names its columns as
/// the first run did — read from the write connection, from a read connection, and after
/// more texts than a connection keeps have come and gone.
#[tokio::test]
async fn statements_bind_by_number_and_name_their_columns_on_every_run() {
    let test = crate::testing::sqlite().await;
    let db = &test.db;
    // `$2` appears first: SQLite numbers it parameter 1.
    let swapped = |n: i64| {
        Statement::new(format!("SELECT $2 AS second, $1 AS first, {n} AS n"))
            .bind(n)
            .bind(format!("text {n}"))
    };
    let check = |rows: Vec<Row>, n: i64| {
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].required_int("first").unwrap(), n);
        assert_eq!(
            rows[0].required_text("second").unwrap(),
            format!("text {n}")
        );
        assert_eq!(rows[0].required_int("n").unwrap(), n);
    };
    for _ in 0..2 {
        check(db.query(&swapped(7)).await.unwrap(), 7);
        let turn = db.write_turn().await;
        check(db.query(&swapped(7)).await.unwrap(), 7);
        drop(turn);
    }
    for n in 0..(super::PREPARED as i64 + 10) {
        check(db.query(&swapped(n)).await.unwrap(), n);
    }
    check(db.query(&swapped(7)).await.unwrap(), 7);
    // A value missing for a number the text uses is a clear error, not a wrong binding.
    let short = Statement::new("SELECT $2 AS second, $1 AS first").bind(1);
    let err = db.query(&short).await.unwrap_err().to_string();
    assert!(err.contains("no value for parameter $2"), "{err}");
    test.cleanup().await;
}

/// A commit on the caller's thread, which tries the file's lock without waiting, leaves the
/// write connection waiting for locks again — for the writer thread's transactions and the
/// point reads made on it.
#[tokio::test]
async fn a_commit_on_the_callers_thread_leaves_the_write_connection_waiting_for_locks() {
    let test = crate::testing::sqlite_with(SqliteSync::Normal).await;
    let db = &test.db;
    scratch::table(db, "timeout_t", &["a"]).await;
    let writer = db.sqlite_writer().unwrap();
    let before = writer.inline_commits.load(Ordering::Relaxed);
    db.transact(bump("timeout_t", "a", 1)).await.unwrap();
    assert_eq!(
        writer.inline_commits.load(Ordering::Relaxed) - before,
        1,
        "committed on the caller's thread"
    );
    let rows = writer
        .query_if_idle(&Statement::new("PRAGMA busy_timeout"))
        .expect("no writer under way")
        .unwrap();
    let waits = rows[0].values[0].clone();
    assert_eq!(
        waits,
        crate::transition::Value::Int(Some(BUSY_TIMEOUT.as_millis() as i64))
    );
    test.cleanup().await;
}

/// On this test's runtime — one thread — a caller that waited for the lock itself would
/// stop the timer below until SQLite gave up.
#[tokio::test]
async fn a_write_lock_held_elsewhere_is_waited_for_off_the_callers_thread() {
    for sync in [SqliteSync::Normal, SqliteSync::Full] {
        let test = crate::testing::sqlite_with(sync).await;
        let db = &test.db;
        scratch::table(db, "locked_t", &["a"]).await;
        // Another connection, as another process would, holds the file's write lock.
        let path = test.url.trim_start_matches("sqlite:");
        let other = rusqlite::Connection::open(path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let write = tokio::spawn({
            let db = db.clone();
            async move { db.transact(bump("locked_t", "a", 1)).await }
        });
        let asleep = std::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Well short of the 10 s SQLite would wait for the lock.
        assert!(
            asleep.elapsed() < Duration::from_secs(5),
            "{sync:?}: the runtime's thread was held while the write waited"
        );
        assert!(
            !write.is_finished(),
            "{sync:?}: the write waits for the lock"
        );
        other.execute_batch("COMMIT").unwrap();
        let row = write
            .await
            .unwrap()
            .unwrap_or_else(|err| panic!("{sync:?}: {err}"))
            .expect("the fence matched");
        assert_eq!(row.required_int("version").unwrap(), 2, "{sync:?}");
        test.cleanup().await;
    }
}

#[tokio::test]
async fn writes_through_the_pool_wait_for_the_process_write_turn() {
    let test = crate::testing::sqlite().await;
    let db = &test.db;
    scratch::table(db, "turn_t", &["a"]).await;
    let touch = |db: crate::db::Database| async move {
        let statement = sqlx::query("UPDATE turn_t SET touched = touched + 1 WHERE id = 'a'");
        db.write(statement).await.unwrap();
        let mut tx = db.begin_write().await.unwrap();
        sqlx::query("UPDATE turn_t SET touched = touched + 10 WHERE id = 'a'")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    };
    // Without the turn, each write is done in a millisecond: the file's lock is free.
    touch(db.clone()).await;
    let turn = db.write_turn().await;
    let waiting = tokio::spawn(touch(db.clone()));
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        !waiting.is_finished(),
        "a pool write went ahead of the turn's holder"
    );
    let touched = |db: crate::db::Database| async move {
        sqlx::query_scalar::<_, i64>("SELECT touched FROM turn_t WHERE id = 'a'")
            .fetch_one(db.pool())
            .await
            .unwrap()
    };
    assert_eq!(touched(db.clone()).await, 11);
    drop(turn);
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the pool writes went on when the turn came")
        .unwrap();
    assert_eq!(touched(db.clone()).await, 22);
    test.cleanup().await;
}

/// Adds one to row `id`'s version in a lent transaction ([`crate::db::Database::begin_typed`]),
/// then commits — or, with `keep` false, rolls its part back.
async fn lent_bump(
    db: crate::db::Database,
    name: &'static str,
    id: &'static str,
    keep: bool,
) -> Result<(), nrllm_core::run_store::StoreError> {
    let mut tx = db.begin_typed().await?;
    let bump = Statement::new(format!(
        "UPDATE {name} SET version = version + 1 WHERE id = $1"
    ))
    .bind(id);
    tx.query(&bump).await?;
    match keep {
        true => tx.commit().await,
        false => tx.roll_back().await,
    }
}

/// Groups the write connection committed so far.
fn group_commits(db: &crate::db::Database) -> usize {
    locked(&db.sqlite_writer().unwrap().conn).group_commits
}

/// Spawns `write`, then lets it reach the queue for the write turn before the next is spawned
/// (the turn's queue is first come, first served).
async fn queued<T: Send + 'static>(
    write: impl std::future::Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    let handle = tokio::spawn(write);
    tokio::time::sleep(Duration::from_millis(30)).await;
    handle
}

/// Lent transactions that queued for the write turn share one commit — one flush at `FULL` —
/// where each committed alone before; one rolled back among them takes only its own part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lent_transactions_queued_together_share_one_commit_and_roll_back_alone() {
    for sync in [SqliteSync::Full, SqliteSync::Normal] {
        let test = crate::testing::sqlite_with(sync).await;
        let db = &test.db;
        scratch::table(db, "lent_t", &["a", "b", "c", "d"]).await;
        let turn = db.write_turn().await;
        let before = group_commits(db);
        let mut writes = Vec::new();
        for (id, keep) in [("a", true), ("b", true), ("c", false), ("d", true)] {
            writes.push(queued(lent_bump(db.clone(), "lent_t", id, keep)).await);
        }
        drop(turn);
        for write in writes {
            tokio::time::timeout(Duration::from_secs(5), write)
                .await
                .expect("every lent transaction ended")
                .unwrap()
                .unwrap_or_else(|err| panic!("{sync:?}: {err}"));
        }
        assert_eq!(
            group_commits(db) - before,
            1,
            "{sync:?}: one commit for all"
        );
        let mut stored = Vec::new();
        for id in ["a", "b", "c", "d"] {
            stored.push(scratch::version(db, "lent_t", id).await);
        }
        assert_eq!(stored, [2, 2, 1, 2], "{sync:?}: c's part alone went back");
        test.cleanup().await;
    }
}

/// The transitions the writer thread takes while a group is open commit in it, with the lent
/// parts waiting there: one commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_thread_commits_a_group_with_its_transitions() {
    let test = crate::testing::sqlite_with(SqliteSync::Full).await;
    let db = &test.db;
    scratch::table(db, "joined_t", &["a", "b"]).await;
    let turn = db.write_turn().await;
    let before = group_commits(db);
    let lent = queued(lent_bump(db.clone(), "joined_t", "a", true)).await;
    // The turn is taken: the transition goes to the writer thread, which queues behind.
    let transition = queued({
        let db = db.clone();
        async move { db.transact(bump("joined_t", "b", 1)).await }
    })
    .await;
    drop(turn);
    lent.await.unwrap().unwrap();
    let row = transition
        .await
        .unwrap()
        .unwrap()
        .expect("b's fence matched");
    assert_eq!(row.required_int("version").unwrap(), 2);
    assert_eq!(group_commits(db) - before, 1, "one commit for both");
    assert_eq!(scratch::version(db, "joined_t", "a").await, 2);
    test.cleanup().await;
}

/// While a lent part waits in an open group, nothing reads it as committed; a member whose task
/// is dropped while it waits does not leave the group open (it holds the file's write lock):
/// the writer thread commits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_whose_waiting_member_is_dropped_is_committed_by_the_writer_thread() {
    let test = crate::testing::sqlite_with(SqliteSync::Full).await;
    let db = &test.db;
    scratch::table(db, "dropped_t", &["a"]).await;
    let writer = db.sqlite_writer().unwrap();
    // The turn, taken without committing the group (as a write through the pool would).
    let turn = Arc::clone(&writer.turn).lock_owned().await;
    let member = queued(lent_bump(db.clone(), "dropped_t", "a", true)).await;
    let hold = queued(Arc::clone(&writer.turn).lock_owned()).await;
    drop(turn);
    // The member writes its part, gives the turn to `hold` and queues behind it.
    let held = tokio::time::timeout(Duration::from_secs(5), hold)
        .await
        .expect("the member gave up the turn")
        .unwrap();
    assert!(locked(&writer.conn).open.is_some(), "the group is open");
    assert_eq!(
        scratch::version(db, "dropped_t", "a").await,
        1,
        "the waiting part is not read as committed"
    );
    member.abort();
    assert!(member.await.unwrap_err().is_cancelled());
    drop(held);
    let path = test.url.trim_start_matches("sqlite:").to_owned();
    let committed = tokio::task::spawn_blocking(move || {
        let other = rusqlite::Connection::open(path).unwrap();
        other.busy_timeout(Duration::from_secs(5)).unwrap();
        // The file's write lock is free again.
        other.execute_batch("BEGIN IMMEDIATE; COMMIT").unwrap();
        other
            .query_row("SELECT version FROM dropped_t WHERE id = 'a'", [], |row| {
                row.get::<_, i64>(0)
            })
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(committed, 2, "the dropped member's part was committed");
    assert!(locked(&writer.conn).open.is_none());
    test.cleanup().await;
}

/// The opcodes SQLite's plan of `sql` opens a temporary B-tree with.
fn temporary_trees(conn: &rusqlite::Connection, sql: &str) -> usize {
    let mut plan = conn.prepare(&format!("EXPLAIN {sql}")).unwrap();
    let unbound = vec![rusqlite::types::Null; plan.parameter_count()];
    let opcodes: Vec<String> = plan
        .query_map(rusqlite::params_from_iter(unbound), |row| {
            row.get::<_, String>("opcode")
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(!opcodes.is_empty(), "no plan for {sql}");
    opcodes.iter().filter(|op| *op == "OpenEphemeral").count()
}

/// Every partial index of a run is kept without a temporary B-tree: SQLite builds one afresh for
/// each evaluation of an `IN` list of three or more constants, and a partial index's predicate is
/// evaluated for the old and the new row of every run a statement changes (migration 31). The
/// statements of a run's transitions do without one too, `RETURNING` aside (its rows wait in one).
#[tokio::test]
async fn a_run_moves_between_statuses_without_building_a_temporary_tree() {
    use nrllm_core::run_store::RunStatus;

    let test = crate::testing::sqlite().await;
    let path = test.url.strip_prefix("sqlite:").unwrap();
    let conn = rusqlite::Connection::open(path).unwrap();
    let moves = [
        "INSERT INTO agent_run (id, status, configuration, requested_by, created_at_ms, \
         updated_at_ms) VALUES ('r1', 'running', '{}', 'alice', 1, 1)"
            .to_owned(),
        "UPDATE agent_run SET status = 'waiting_for_budget', approval_deadline_ms = 5 \
         WHERE id = 'r1'"
            .to_owned(),
        format!(
            "UPDATE agent_run SET status = 'completed' WHERE id = 'r1' AND NOT {}",
            RunStatus::sql_any("status", &RunStatus::TERMINAL)
        ),
        format!(
            "UPDATE agent_run SET status = 'cancelled' WHERE id = 'r1' AND {}",
            RunStatus::sql_any("status", &RunStatus::CANCELLABLE)
        ),
    ];
    for sql in &moves {
        assert_eq!(temporary_trees(&conn, sql), 0, "{sql}");
    }
    // Statuses bound as parameters, written as terms: no tree either.
    let claim = "UPDATE agent_run SET status = $1 WHERE id = $2 \
                 AND (status = $3 OR status = $4 OR status = 'waiting_for_budget')";
    assert_eq!(temporary_trees(&conn, claim), 0);
    // The yardstick: the lists written as `IN` build one each, parameters or not.
    let listed = "UPDATE agent_run SET status = 'completed' WHERE id = 'r1' \
                  AND status NOT IN ('completed', 'failed', 'cancelled')";
    assert_eq!(temporary_trees(&conn, listed), 1);
    let bound = "UPDATE agent_run SET status = $1 WHERE id = $2 \
                 AND status IN ($3, $4, 'waiting_for_budget')";
    assert_eq!(temporary_trees(&conn, bound), 1);
}

/// An approve cycle through [`RunService`] on a fresh file at `NORMAL`: the file, its store,
/// the run, and the texts of the statements the write connection ran.
async fn an_approve_cycle() -> (
    crate::testing::TestDb,
    Arc<crate::SqlRunStore>,
    uuid::Uuid,
    Vec<String>,
) {
    use nrllm_core::authority::Actor;
    use nrllm_core::run_service::{RunService, SingleLoop};
    use nrllm_core::run_store::{RunConfiguration, RunStatus};
    use nrllm_core::testing::{call_turn, probe_registry, usage, Probe, ScriptedProvider};
    use nrllm_core::{Decision, ToolLoop};

    let test = crate::testing::sqlite_with(SqliteSync::Normal).await;
    let store = Arc::new(crate::SqlRunStore::new(test.db.clone()));
    let provider = ScriptedProvider::new(vec![
        call_turn(
            "c1",
            "write_note",
            serde_json::json!({"text": "hi"}),
            usage(100, 20),
        ),
        nrllm_core::provider::ChatResponse::text("Wrote it.", usage(50, 5)),
    ]);
    let probe = Probe::default();
    let tool_loop = ToolLoop::new(Arc::new(provider), Arc::new(probe_registry(&probe)));
    let service = RunService::new(store.clone(), Arc::new(SingleLoop(Arc::new(tool_loop))));
    // With a deadline: the waiting run enters the deadline index too.
    let configuration = RunConfiguration {
        approval_timeout_ms: Some(60_000),
        ..crate::testing::demo_configuration("write hi")
    };
    let run = service.start(configuration, "alice").await.unwrap();
    assert_eq!(run.status, RunStatus::WaitingForApproval);
    let (decision, actor) = (Decision::ApproveAll, Actor::headless("bob"));
    let done = service
        .resume(run.id, &decision, &actor, None)
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(probe.count("write_note"), 1);

    let writer = test.db.sqlite_writer().unwrap();
    let texts: Vec<String> = locked(&writer.conn)
        .shapes
        .texts()
        .map(str::to_owned)
        .collect();
    assert!(
        texts
            .iter()
            .any(|sql| sql.starts_with("UPDATE agent_run SET status")),
        "the cycle's transitions ran elsewhere: {texts:?}"
    );
    (test, store, run.id, texts)
}

/// The statements an approve cycle really runs on the write connection — its transitions and its
/// point reads, as the store writes them — build no temporary B-tree but `RETURNING`'s own.
#[tokio::test]
async fn an_approve_cycle_runs_no_statement_that_builds_a_temporary_tree() {
    let (test, _, _, texts) = an_approve_cycle().await;
    let path = test.url.strip_prefix("sqlite:").unwrap();
    let conn = rusqlite::Connection::open(path).unwrap();
    // The fences call the write connection's functions.
    super::chain::register(&conn, &super::chain::Slot::default()).unwrap();
    for sql in &texts {
        let allowed = usize::from(sql.contains("RETURNING"));
        assert!(temporary_trees(&conn, sql) <= allowed, "{sql}");
    }
}

/// A run's fences chain its steps and move its keyed head as they update it: no transition of
/// an approve cycle writes the head by an update of its own, and the run's log verifies under
/// the database's key, head included.
#[tokio::test]
async fn the_fences_of_an_approve_cycle_move_the_run_head_themselves() {
    let (test, store, id, texts) = an_approve_cycle().await;
    let heads: Vec<&String> = texts
        .iter()
        .filter(|sql| sql.contains("SET audit_key_id"))
        .collect();
    assert!(heads.is_empty(), "the head written apart: {heads:?}");
    assert_eq!(
        texts
            .iter()
            .filter(|sql| sql.contains("nrllm_chain_head("))
            .count(),
        3,
        "the suspend, the claim and the finish chain in their fences"
    );
    let verdict = store.verify_log(id).await.unwrap().unwrap();
    assert!(verdict.is_verified(), "{}", verdict.describe());
    let (key, head): (Option<String>, Option<String>) =
        sqlx::query_as("SELECT audit_key_id, audit_head FROM agent_run WHERE id = $1")
            .bind(id.to_string())
            .fetch_one(test.db.pool())
            .await
            .unwrap();
    assert_eq!(key.as_deref(), Some(test.db.audit_key().id()));
    assert!(head.is_some());
    test.cleanup().await;
}

/// The fence's functions chain the steps it carries and set the run's head in the update — and
/// a transition they cannot chain (no audit key for a run's first steps) fails whole, with the
/// store's own error, nothing written.
#[tokio::test]
async fn a_fence_that_cannot_chain_its_steps_writes_nothing() {
    use crate::chain::{AuditKey, ChainRow};
    use crate::transition::{Transition, CHAINED_IN_FENCE};
    use nrllm_core::run_store::StoreError;

    let test = crate::testing::sqlite_with(SqliteSync::Normal).await;
    sqlx::query(
        "INSERT INTO agent_run (id, status, configuration, requested_by, created_at_ms, \
         updated_at_ms) VALUES ('r1', 'running', '{}', 'alice', 1, 1)",
    )
    .execute(test.db.pool())
    .await
    .unwrap();
    let transition = |audit: Option<AuditKey>| {
        let fence = Statement::new(format!(
            "UPDATE agent_run SET version = version + 1 {}WHERE id = 'r1' RETURNING {}",
            super::CHAIN_SET,
            CHAINED_IN_FENCE
        ));
        let mut transition = Transition::new(fence, "r1".into());
        transition.steps = vec![ChainRow {
            sequence: 1,
            kind: "model".into(),
            round: Some(1),
            duration_ms: None,
            payload: "{}".into(),
            created_at_ms: 2,
            prev_hash: None,
            hash: None,
        }];
        transition.audit = audit;
        transition
    };
    let writer = test.db.sqlite_writer().unwrap();
    let read = || async {
        sqlx::query_as::<_, (i64, Option<String>, i64)>(
            "SELECT version, audit_head, (SELECT COUNT(*) FROM agent_run_event) \
             FROM agent_run WHERE id = 'r1'",
        )
        .fetch_one(test.db.pool())
        .await
        .unwrap()
    };

    // One transaction on the write connection, committed if the transition was written.
    let carry_out = |transition| {
        let mut conn = locked(&writer.conn);
        let super::Conn {
            db, shapes, chain, ..
        } = &mut *conn;
        let tx = super::Immediate::begin(db).unwrap();
        let written = super::write(&tx, shapes, chain, transition);
        if written.is_ok() {
            tx.commit().unwrap();
        }
        written
    };
    let failed = carry_out(transition(None));
    assert!(
        matches!(&failed, Err(StoreError::Corrupt(why)) if why.contains("without the audit key")),
        "{failed:?}"
    );
    assert_eq!(read().await, (0, None, 0), "nothing of it was written");

    let key = AuditKey::from_bytes(&[5; 32]);
    let row = carry_out(transition(Some(key.clone()))).unwrap();
    assert!(row.is_some());
    let mac = key.row_mac("r1", crate::chain::GENESIS, &transition(None).steps[0]);
    assert_eq!(
        read().await,
        (1, Some(key.head_mac("r1", 1, &mac)), 1),
        "the fence set the head over the step it chained"
    );
    test.cleanup().await;
}
