//! A write transaction of typed statements for a part of the program outside the run store
//! (`Database::begin_typed`): it commits whole or not at all on both backends, and on SQLite,
//! where it runs on the write connection, it holds the process's write turn and never holds the
//! runtime's thread while another process holds the file's write lock.

use std::time::{Duration, Instant};

use nrllm_store::db::{Backend, Database};
use nrllm_store::testing::{backends, sqlite};
use nrllm_store::{Cells, Statement};

async fn table(db: &Database, name: &str) {
    sqlx::query(&format!("DROP TABLE IF EXISTS {name}"))
        .execute(db.pool())
        .await
        .unwrap();
    sqlx::query(&format!(
        "CREATE TABLE {name} (id TEXT PRIMARY KEY, n BIGINT NOT NULL, note TEXT)"
    ))
    .execute(db.pool())
    .await
    .unwrap();
    sqlx::query(&format!("INSERT INTO {name} (id, n) VALUES ('a', 1)"))
        .execute(db.pool())
        .await
        .unwrap();
}

async fn n(db: &Database, name: &str) -> i64 {
    let rows = db
        .query(&Statement::new(format!("SELECT n FROM {name} WHERE id = $1")).bind("a"))
        .await
        .unwrap();
    rows[0].required_int("n").unwrap()
}

fn add(name: &str, by: i64) -> Statement {
    Statement::new(format!(
        "UPDATE {name} SET n = n + $1, note = $2 WHERE id = 'a' RETURNING n, note"
    ))
    .bind(by)
    .bind(None::<String>)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_transaction_commits_whole_or_not_at_all() {
    for test in backends().await {
        let db = &test.db;
        table(db, "direct_t").await;

        // Committed: both writes, and what they returned read inside the transaction.
        let mut tx = db.begin_typed().await.unwrap();
        let row = tx.query_one(&add("direct_t", 1)).await.unwrap().unwrap();
        assert_eq!(row.required_int("n").unwrap(), 2, "{}", test.name);
        assert_eq!(row.text("note").unwrap(), None, "{}", test.name);
        let row = tx.query_one(&add("direct_t", 10)).await.unwrap().unwrap();
        assert_eq!(row.required_int("n").unwrap(), 12, "{}", test.name);
        tx.commit().await.unwrap();
        assert_eq!(n(db, "direct_t").await, 12, "{}", test.name);

        // Rolled back, and dropped half-way: nothing of either.
        let mut tx = db.begin_typed().await.unwrap();
        tx.query(&add("direct_t", 100)).await.unwrap();
        tx.roll_back().await.unwrap();
        let mut tx = db.begin_typed().await.unwrap();
        tx.query(&add("direct_t", 1000)).await.unwrap();
        drop(tx);
        assert_eq!(n(db, "direct_t").await, 12, "{}", test.name);

        // A failing statement leaves the transaction's earlier write uncommitted once dropped.
        let mut tx = db.begin_typed().await.unwrap();
        tx.query(&add("direct_t", 5)).await.unwrap();
        let duplicate = Statement::new("INSERT INTO direct_t (id, n) VALUES ($1, $2)")
            .bind("a")
            .bind(0);
        assert!(tx.query(&duplicate).await.is_err(), "{}", test.name);
        drop(tx);
        assert_eq!(n(db, "direct_t").await, 12, "{}", test.name);

        // The connections are sound after all that: many more transactions, each committed.
        for _ in 0..20 {
            let mut tx = db.begin_typed().await.unwrap();
            tx.query(&add("direct_t", 1)).await.unwrap();
            tx.commit().await.unwrap();
        }
        assert_eq!(n(db, "direct_t").await, 32, "{}", test.name);
        // Postgres: the transaction sees its own rows locked against another's.
        if db.backend() == Backend::Postgres {
            let mut first = db.begin_typed().await.unwrap();
            first.query(&add("direct_t", 1)).await.unwrap();
            let second = tokio::spawn({
                let db = db.clone();
                async move {
                    let mut tx = db.begin_typed().await.unwrap();
                    let row = tx.query_one(&add("direct_t", 1)).await.unwrap().unwrap();
                    tx.commit().await.unwrap();
                    row.required_int("n").unwrap()
                }
            });
            tokio::time::sleep(Duration::from_millis(150)).await;
            assert!(
                !second.is_finished(),
                "the row stays locked until the commit"
            );
            first.commit().await.unwrap();
            assert_eq!(second.await.unwrap(), 34);
        }
        test.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_a_typed_transaction_holds_the_write_turn() {
    let test = sqlite().await;
    let db = &test.db;
    table(db, "turn_d").await;
    let mut tx = db.begin_typed().await.unwrap();
    tx.query(&add("turn_d", 1)).await.unwrap();
    // A write through the pool waits for the turn; a point read reads the last commit.
    let pool_write = tokio::spawn({
        let db = db.clone();
        async move {
            db.write(sqlx::query("UPDATE turn_d SET n = n * 10 WHERE id = 'a'"))
                .await
                .unwrap();
        }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        !pool_write.is_finished(),
        "a pool write went ahead of the turn"
    );
    assert_eq!(n(db, "turn_d").await, 1);
    tx.commit().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), pool_write)
        .await
        .expect("the pool write went on once the transaction committed")
        .unwrap();
    assert_eq!(n(db, "turn_d").await, 20);
    test.cleanup().await;
}

/// On this test's runtime — one thread — a transaction that waited for the file's lock in
/// SQLite's busy handler would stop the timer below until SQLite gave up.
#[tokio::test]
async fn on_sqlite_a_write_lock_held_elsewhere_is_waited_for_without_holding_the_thread() {
    let test = sqlite().await;
    let db = &test.db;
    table(db, "locked_d").await;
    let other = rusqlite::Connection::open(test.url.trim_start_matches("sqlite:")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let write = tokio::spawn({
        let db = db.clone();
        async move {
            let mut tx = db.begin_typed().await?;
            tx.query(&add("locked_d", 1)).await?;
            tx.commit().await
        }
    });
    let asleep = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        asleep.elapsed() < Duration::from_secs(5),
        "the runtime's thread was held while the transaction waited"
    );
    assert!(!write.is_finished(), "the transaction waits for the lock");
    other.execute_batch("COMMIT").unwrap();
    write.await.unwrap().unwrap();
    assert_eq!(n(db, "locked_d").await, 2);
    test.cleanup().await;
}
