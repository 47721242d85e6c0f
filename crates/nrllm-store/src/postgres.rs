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
//! - [`Pipeline::query`]: the point reads of the hot path (a run by id, its rules).
//!
//! Statements are prepared once per connection, with their parameters' types (`BIGINT` or
//! `TEXT`, as sqlx sent them). Pages, scans and the rest stay on sqlx's pool.

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use futures::future::try_join_all;
use futures::FutureExt as _;
use nrllm_core::failpoint;
use nrllm_core::store::StoreError;
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

/// A pool of pipelining connections to one Postgres database.
pub(crate) struct Pipeline {
    pool: Pool,
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
        Ok(Pipeline { pool })
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
    /// nothing was written).
    pub(crate) async fn transact(&self, transition: Transition) -> Result<Option<Row>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
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
        let prepared = match try_join_all(
            statements
                .iter()
                .map(|statement| prepare(open.client(), statement)),
        )
        .await
        {
            Ok(prepared) => prepared,
            Err(err) => return open.roll_back().await.and(Err(err)),
        };
        let args: Vec<_> = statements.iter().map(|s| params(&s.args)).collect();
        // `Err`: the transaction is still open (roll it back); `Ok`: it ended, and how.
        let ended = {
            let mut writes = std::pin::pin!(try_join_all(
                prepared
                    .iter()
                    .zip(&args)
                    .map(|(statement, args)| open.client().execute(statement, args)),
            ));
            // The first poll sends every statement, unless one fails before it is sent (it
            // could not be encoded, the connection is gone): then no `COMMIT` may follow.
            let sent = writes.as_mut().now_or_never();
            // A crash test that stops the process before the commit needs the commit held back
            // until the point is reached; otherwise it goes with the writes.
            match (sent, point.filter(|_| failpoint::armed())) {
                (Some(Err(err)), _) => Err(err),
                (_, Some(point)) => match writes.await {
                    Err(err) => Err(err),
                    Ok(_) => {
                        failpoint::reach(point);
                        Ok(open.client().batch_execute("COMMIT").await)
                    }
                },
                // An error the server meets makes it skip the rest of the transaction and
                // answer the `COMMIT` by rolling it back: nothing is half-written.
                (_, None) => {
                    let (written, committed) =
                        tokio::join!(writes, open.client().batch_execute("COMMIT"));
                    Ok(written.and(committed))
                }
            }
        };
        match ended {
            Err(err) => open.roll_back().await.and(Err(postgres(err))),
            Ok(closed) => {
                open.close();
                closed.map_err(postgres)?;
                Ok(Some(row))
            }
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
    let mut cells = Vec::with_capacity(row.len());
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
        cells.push((column.name().to_owned(), value));
    }
    Ok(Row { cells })
}

#[cfg(test)]
mod tests {
    use crate::transition::scratch;
    use crate::transition::{Statement, Transition};

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
    async fn a_transition_dropped_mid_transaction_never_commits_through_the_next_user() {
        let Some(test) = crate::testing::postgres_from_env().await else {
            return;
        };
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
}
