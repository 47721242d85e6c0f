//! A write transaction as data: a fenced statement, the run's new steps chained on the hash the
//! fence returned, and the statements that go with them (effect rows, rules, notifications) —
//! committed together or not at all.
//!
//! Written once, it is carried out two ways. On SQLite, whole, on the database's writer thread
//! ([`crate::sqlite`]): one trip there and back, where sqlx made a trip to its connection's
//! thread per statement — the context switches that took most of an approve cycle's time
//! (BENCHMARKS.md, issue #19). On Postgres, pipelined ([`crate::postgres`]): two round trips,
//! where sqlx made one per statement.

use std::sync::Arc;

use nrllm_core::run_store::StoreError;
use sqlx::any::AnyRow;
use sqlx::{Any, Row as _};

use crate::chain::{self, AuditKey, ChainRow};
use crate::error::backend;

/// A statement's parameter, with its type even when it is null (Postgres wants to know).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(Option<i64>),
    Text(Option<String>),
}

impl From<i64> for Value {
    fn from(value: i64) -> Value {
        Value::Int(Some(value))
    }
}

impl From<Option<i64>> for Value {
    fn from(value: Option<i64>) -> Value {
        Value::Int(value)
    }
}

impl From<String> for Value {
    fn from(value: String) -> Value {
        Value::Text(Some(value))
    }
}

impl From<&str> for Value {
    fn from(value: &str) -> Value {
        Value::Text(Some(value.to_owned()))
    }
}

impl From<&String> for Value {
    fn from(value: &String) -> Value {
        Value::Text(Some(value.clone()))
    }
}

impl From<&Option<String>> for Value {
    fn from(value: &Option<String>) -> Value {
        Value::Text(value.clone())
    }
}

impl From<Option<String>> for Value {
    fn from(value: Option<String>) -> Value {
        Value::Text(value)
    }
}

impl From<Option<&str>> for Value {
    fn from(value: Option<&str>) -> Value {
        Value::Text(value.map(str::to_owned))
    }
}

/// One SQL statement with its parameters, `$1`, `$2`, … in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub(crate) sql: String,
    pub(crate) args: Vec<Value>,
}

impl Statement {
    pub fn new(sql: impl Into<String>) -> Statement {
        Statement {
            sql: sql.into(),
            args: Vec::new(),
        }
    }

    /// The statement with its next parameter.
    pub fn bind(mut self, value: impl Into<Value>) -> Statement {
        self.args.push(value.into());
        self
    }

    /// Binds the parts of `usage` priced apart, in this order: cached input, cache writes,
    /// reasoning (each a column of `agent_run`).
    pub(crate) fn bind_usage_parts(self, usage: &nrllm_core::provider::Usage) -> Statement {
        let count = |tokens: u64| i64::try_from(tokens).unwrap_or(i64::MAX);
        self.bind(count(usage.cached_input_tokens))
            .bind(count(usage.cache_write_tokens))
            .bind(count(usage.reasoning_tokens))
    }

    /// As an sqlx query, its parameters bound.
    pub(crate) fn query(&self) -> sqlx::query::Query<'_, Any, sqlx::any::AnyArguments<'_>> {
        let mut query = sqlx::query(&self.sql);
        for value in &self.args {
            query = match value {
                Value::Int(v) => query.bind(*v),
                Value::Text(v) => query.bind(v.as_deref()),
            };
        }
        query
    }
}

/// Reading a column of a returned row by name, whatever read it.
pub trait Cells {
    /// An integer column (`None`: null).
    fn int(&self, column: &str) -> Result<Option<i64>, StoreError>;
    /// A text column (`None`: null).
    fn text(&self, column: &str) -> Result<Option<String>, StoreError>;

    /// An integer column that is never null.
    fn required_int(&self, column: &str) -> Result<i64, StoreError> {
        self.int(column)?
            .ok_or_else(|| StoreError::Corrupt(format!("column `{column}` is null")))
    }

    /// A text column that is never null.
    fn required_text(&self, column: &str) -> Result<String, StoreError> {
        self.text(column)?
            .ok_or_else(|| StoreError::Corrupt(format!("column `{column}` is null")))
    }
}

impl Cells for AnyRow {
    fn int(&self, column: &str) -> Result<Option<i64>, StoreError> {
        self.try_get(column).map_err(backend)
    }

    fn text(&self, column: &str) -> Result<Option<String>, StoreError> {
        self.try_get(column).map_err(backend)
    }
}

/// A row a transition's fence returned, by column name. The rows of one statement share their
/// column names.
#[derive(Debug, Clone, Default)]
pub struct Row {
    columns: Arc<[String]>,
    /// One a column, in the columns' order.
    pub(crate) values: Vec<Value>,
    /// Where the search for the next column asked for starts: just after the last one found.
    /// Rows are read mostly in their columns' order, so most searches end at their first look.
    next: std::cell::Cell<usize>,
}

impl PartialEq for Row {
    fn eq(&self, other: &Row) -> bool {
        self.columns == other.columns && self.values == other.values
    }
}

impl Row {
    /// A row of `columns` holding `values`, one a column.
    pub(crate) fn new(columns: Arc<[String]>, values: Vec<Value>) -> Row {
        debug_assert_eq!(columns.len(), values.len());
        Row {
            columns,
            values,
            next: std::cell::Cell::new(0),
        }
    }

    /// A row from its cells, name and value.
    #[cfg(test)]
    pub(crate) fn of(cells: Vec<(String, Value)>) -> Row {
        let (columns, values): (Vec<String>, Vec<Value>) = cells.into_iter().unzip();
        Row::new(columns.into(), values)
    }

    /// A row sqlx's `Any` driver read, column by column (integers and booleans as numbers).
    pub(crate) fn from_any(row: &AnyRow) -> Result<Row, StoreError> {
        use sqlx::any::AnyTypeInfoKind as Kind;
        use sqlx::{Column as _, TypeInfo as _};
        let mut values = Vec::with_capacity(row.columns().len());
        for (i, column) in row.columns().iter().enumerate() {
            let value = match column.type_info().kind() {
                Kind::Null => Value::Text(None),
                Kind::Bool => Value::Int(
                    row.try_get::<Option<bool>, _>(i)
                        .map_err(backend)?
                        .map(i64::from),
                ),
                Kind::SmallInt | Kind::Integer | Kind::BigInt => {
                    Value::Int(row.try_get(i).map_err(backend)?)
                }
                Kind::Text => Value::Text(row.try_get(i).map_err(backend)?),
                _ => {
                    return Err(StoreError::Corrupt(format!(
                        "column `{}` has a type the store does not read ({})",
                        column.name(),
                        column.type_info().name()
                    )))
                }
            };
            values.push(value);
        }
        let columns = row.columns().iter().map(|c| c.name().to_owned()).collect();
        Ok(Row::new(columns, values))
    }

    /// Whether the row has `column` at all.
    fn has(&self, column: &str) -> bool {
        self.columns.iter().any(|name| name == column)
    }

    fn get(&self, column: &str) -> Result<&Value, StoreError> {
        let count = self.columns.len();
        let start = self.next.get();
        (start..count)
            .chain(0..start.min(count))
            .find(|&i| self.columns[i] == column)
            .and_then(|i| {
                self.next.set(i + 1);
                self.values.get(i)
            })
            .ok_or_else(|| StoreError::Corrupt(format!("no column `{column}` in the row")))
    }
}

impl Cells for Row {
    fn int(&self, column: &str) -> Result<Option<i64>, StoreError> {
        match self.get(column)? {
            Value::Int(value) => Ok(*value),
            Value::Text(None) => Ok(None),
            Value::Text(Some(_)) => Err(StoreError::Corrupt(format!(
                "column `{column}` holds text, not a number"
            ))),
        }
    }

    fn text(&self, column: &str) -> Result<Option<String>, StoreError> {
        match self.get(column)? {
            Value::Text(value) => Ok(value.clone()),
            Value::Int(None) => Ok(None),
            Value::Int(Some(_)) => Err(StoreError::Corrupt(format!(
                "column `{column}` holds a number, not text"
            ))),
        }
    }
}

/// One write transaction. The fence goes first: if it returns no row the transaction is rolled
/// back and nothing else runs (another writer moved the run on). Otherwise the run's steps are
/// chained on the `chain_head` column the fence returned (none: the run's first step) and
/// written with the run's new keyed head, then the other statements run, and all of it commits.
/// (On SQLite a fenced update of a run chains the steps and sets the head itself, as it updates
/// the row: see [`Transition::chained`].) A run is keyed from its first step on; one whose log
/// was begun in an older form (the fence's `chain_key` is empty, and steps came before) goes on
/// in that form.
#[derive(Debug, Clone)]
pub(crate) struct Transition {
    pub(crate) fence: Statement,
    /// The run the steps belong to (its id as stored).
    pub(crate) run: String,
    /// The steps, not yet chained (`prev_hash` and `hash` are filled in from the fence's row).
    pub(crate) steps: Vec<ChainRow>,
    /// The fence takes the steps' sequence numbers itself (`last_sequence = last_sequence + n`):
    /// they are numbered up to the `last_sequence` it returned.
    pub(crate) numbered_by_fence: bool,
    /// Written after the steps, in order.
    pub(crate) then: Vec<Statement>,
    /// Announced to the other instances once it committed (Postgres).
    pub(crate) notices: Vec<crate::notify::Notice>,
    /// The crash-test point reached just before the commit.
    pub(crate) before_commit: Option<&'static str>,
    /// The key the steps are chained by (the database's: set when it carries the transition out).
    pub(crate) audit: Option<AuditKey>,
    /// The fence chained the steps and moved the run's keyed head itself, as it updated the run
    /// (SQLite: [`crate::sqlite`]'s `nrllm_chain_head`): what follows only inserts them.
    pub(crate) chained: bool,
}

/// The MAC of the last step of the run a statement on `agent_run` is at (a subquery): what a
/// transition's steps chain on, read by its fence.
macro_rules! last_step_mac {
    () => {
        "(SELECT hash FROM agent_run_event WHERE agent_run_event.run_id = agent_run.id \
         ORDER BY sequence DESC LIMIT 1)"
    };
}
pub(crate) use last_step_mac;

/// What a fence that chains the steps itself returns for them (a column saying so): such a
/// fence's row never reaches [`Transition::follow`] unchained.
pub(crate) const CHAINED_IN_FENCE: &str = "1 AS chained_in_fence";

/// Event rows per `INSERT` (9 parameters each: under SQLite's and Postgres's limits).
const EVENT_ROWS_PER_INSERT: usize = 100;

impl Transition {
    /// A transition fenced by `fence`, on run `run`, with nothing else yet.
    pub(crate) fn new(fence: Statement, run: String) -> Transition {
        Transition {
            fence,
            run,
            steps: Vec::new(),
            numbered_by_fence: false,
            then: Vec::new(),
            notices: Vec::new(),
            before_commit: None,
            audit: None,
            chained: false,
        }
    }

    /// What follows the fence once it returned `row`: the steps chained on its `chain_head`
    /// (unless the fence chained them), in as few statements as the bind limits allow, the
    /// run's new keyed head, then the rest.
    pub(crate) fn follow(
        mut self,
        row: &Row,
    ) -> Result<(Vec<Statement>, Option<&'static str>), StoreError> {
        let mut statements = Vec::with_capacity(self.then.len() + 2);
        if !self.steps.is_empty() {
            let head = match self.chained {
                true => None,
                false => self.chain_on(row)?,
            };
            for chunk in self.steps.chunks(EVENT_ROWS_PER_INSERT) {
                statements.push(insert_steps(&self.run, chunk));
            }
            if let Some(Head { key_id, mac }) = head {
                statements.push(
                    Statement::new(
                        "UPDATE agent_run SET audit_key_id = COALESCE(audit_key_id, $1), \
                         audit_head = $2 WHERE id = $3",
                    )
                    .bind(key_id)
                    .bind(mac)
                    .bind(self.run.as_str()),
                );
            }
        }
        statements.extend(self.then);
        Ok((statements, self.before_commit))
    }

    /// Chains the steps on what the fence returned: the `chain_head` column (none: the run's
    /// first step comes now), the `chain_key` column and, where the fence numbers the steps,
    /// `last_sequence` (the run's last step after them).
    fn chain_on(&mut self, row: &Row) -> Result<Option<Head>, StoreError> {
        if row.has("chained_in_fence") {
            return Err(StoreError::Corrupt(
                "a fence that chains the steps itself did not".into(),
            ));
        }
        // A fence that creates the run returns no head: it has no steps before its own.
        let head = match row.has("chain_head") {
            true => row.text("chain_head")?,
            false => None,
        };
        let run_key = match row.has("chain_key") {
            true => row.text("chain_key")?,
            false => None,
        };
        let before = match self.numbered_by_fence {
            true => Some(row.required_int("last_sequence")? - self.steps.len() as i64),
            false => None,
        };
        self.chain(head, run_key.as_deref(), before)
    }

    /// Chains the steps, in place, on `head` (the run's last step's MAC or hash; `None`: it has
    /// none yet), numbering them first after `before` (the run's last step before them) where
    /// the fence takes their numbers. A run is keyed from its first step on: `run_key` is the
    /// key its log is chained by (`None`: none yet — then it is keyed now if these are its
    /// first steps, and goes on in the older, unkeyed form otherwise). The run's new keyed
    /// head, if its log is keyed.
    pub(crate) fn chain(
        &mut self,
        head: Option<String>,
        run_key: Option<&str>,
        before: Option<i64>,
    ) -> Result<Option<Head>, StoreError> {
        // The log is a chain per run: each row follows the last one written.
        let mut prev = head.unwrap_or_else(|| chain::GENESIS.to_owned());
        if let (true, Some(before)) = (self.numbered_by_fence, before) {
            for (i, step) in (1..).zip(self.steps.iter_mut()) {
                step.sequence = before + i;
            }
        }
        let key = match (
            &self.audit,
            run_key.is_some() || self.first_sequence(before) == 1,
        ) {
            (Some(key), true) => Some(key),
            (None, true) => {
                return Err(StoreError::Corrupt(
                    "a transition was carried out without the audit key".into(),
                ))
            }
            (_, false) => None,
        };
        for row in &mut self.steps {
            let hash = match key {
                Some(key) => key.row_mac(&self.run, &prev, row),
                None => chain::row_hash(&self.run, &prev, row),
            };
            row.prev_hash = Some(std::mem::replace(&mut prev, hash.clone()));
            row.hash = Some(hash);
        }
        let (Some(key), Some(last)) = (key, self.steps.last()) else {
            return Ok(None);
        };
        if run_key.is_some_and(|id| id != key.id()) {
            tracing::warn!(run = %self.run, "a run keyed by another audit key gets steps keyed by this instance's: its log will not verify under either");
        }
        Ok(Some(Head {
            key_id: key.id().to_owned(),
            mac: key.head_mac(&self.run, last.sequence, &prev),
        }))
    }

    /// The sequence number of the first step (1 if none), numbered after `before` where the
    /// fence takes the numbers.
    fn first_sequence(&self, before: Option<i64>) -> i64 {
        match (self.numbered_by_fence, before) {
            (true, Some(before)) => before + 1,
            _ => self.steps.first().map_or(1, |step| step.sequence),
        }
    }

    /// The key a run's log is chained by once these steps are written, if it had none: this
    /// database's, if they are its first steps (numbered after `before` where the fence takes
    /// the numbers).
    pub(crate) fn new_run_key(&self, before: Option<i64>) -> Option<&str> {
        match (self.steps.is_empty(), self.first_sequence(before)) {
            (false, 1) => self.audit.as_ref().map(AuditKey::id),
            _ => None,
        }
    }
}

/// A run's keyed head after a transition: the MAC of its last step and sequence number under
/// the key `key_id`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Head {
    pub(crate) key_id: String,
    pub(crate) mac: String,
}

/// One `INSERT` of `rows` (already chained) into run `run`'s log.
fn insert_steps(run: &str, rows: &[ChainRow]) -> Statement {
    let mut sql = String::from(
        "INSERT INTO agent_run_event (run_id, sequence, kind, round, duration_ms, payload, \
         created_at_ms, prev_hash, hash) VALUES ",
    );
    let mut args = Vec::with_capacity(rows.len() * 9);
    for (i, row) in rows.iter().enumerate() {
        let n = i * 9;
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for p in 1..=9 {
            if p > 1 {
                sql.push_str(", ");
            }
            sql.push('$');
            sql.push_str(&(n + p).to_string());
        }
        sql.push(')');
        args.extend([
            Value::from(run),
            Value::from(row.sequence),
            Value::from(row.kind.as_str()),
            Value::from(row.round),
            Value::from(row.duration_ms),
            Value::from(row.payload.clone()),
            Value::from(row.created_at_ms),
            Value::from(row.prev_hash.clone()),
            Value::from(row.hash.clone()),
        ]);
    }
    Statement { sql, args }
}

/// A table of a test's own — `id`, `version` (1 to start), `touched` — so that tests of how
/// transitions are carried out do not depend on the run schema.
#[cfg(test)]
pub(crate) mod scratch {
    use super::{Cells, Statement, Transition};
    use crate::db::Database;

    /// Makes table `name` with a row at version 1 for each of `ids`.
    pub(crate) async fn table(db: &Database, name: &str, ids: &[&str]) {
        sqlx::query(&format!(
            "CREATE TABLE {name} (id TEXT PRIMARY KEY, version BIGINT NOT NULL, \
             touched BIGINT NOT NULL DEFAULT 0)"
        ))
        .execute(db.pool())
        .await
        .unwrap();
        for id in ids {
            sqlx::query(&format!("INSERT INTO {name} (id, version) VALUES ($1, 1)"))
                .bind(*id)
                .execute(db.pool())
                .await
                .unwrap();
        }
    }

    /// Row `id`'s version.
    pub(crate) async fn version(db: &Database, name: &str, id: &str) -> i64 {
        let rows = db
            .query(&Statement::new(format!("SELECT version FROM {name} WHERE id = $1")).bind(id))
            .await
            .unwrap();
        rows[0].required_int("version").unwrap()
    }

    /// Bumps row `id` from version `expected`, returning its `version` and `id` (its parameters
    /// written out of order: they are bound by number).
    pub(crate) fn bump(name: &str, id: &str, expected: i64) -> Transition {
        let fence = Statement::new(format!(
            "UPDATE {name} SET version = version + 1 WHERE id = $2 AND version = $1 \
             RETURNING version, id"
        ))
        .bind(expected)
        .bind(id);
        Transition::new(fence, id.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(sequence: i64) -> ChainRow {
        ChainRow {
            sequence,
            kind: "model".into(),
            round: Some(1),
            duration_ms: None,
            payload: format!("{{\"n\":{sequence}}}"),
            created_at_ms: 1_000 + sequence,
            prev_hash: None,
            hash: None,
        }
    }

    fn keyed(run: &str) -> Transition {
        let mut transition = Transition::new(Statement::new("UPDATE x"), run.into());
        transition.audit = Some(AuditKey::from_bytes(&[3; 32]));
        transition
    }

    #[test]
    fn steps_chain_on_the_head_the_fence_returned_and_move_the_keyed_head() {
        let key = AuditKey::from_bytes(&[3; 32]);
        let mut transition = keyed("run-1");
        transition.steps = vec![step(1), step(2)];
        transition.then = vec![Statement::new("SELECT 1")];
        let row = Row::of(vec![("chain_head".into(), Value::from("abc"))]);
        let (statements, _) = transition.follow(&row).unwrap();
        assert_eq!(
            statements.len(),
            3,
            "one insert for both steps, the run's head, then the rest"
        );
        let args = &statements[0].args;
        assert_eq!(args.len(), 18);
        // The first step follows the head; the second follows the first.
        assert_eq!(args[7], Value::from("abc"));
        let first_mac = key.row_mac("run-1", "abc", &step(1));
        assert_eq!(args[8], Value::from(first_mac.clone()));
        assert_eq!(args[16], Value::from(first_mac.clone()));
        let second_mac = key.row_mac("run-1", &first_mac, &step(2));
        assert_eq!(args[17], Value::from(second_mac.clone()));
        assert!(statements[0]
            .sql
            .contains("($10, $11, $12, $13, $14, $15, $16, $17, $18)"));
        assert!(statements[1].sql.contains("audit_head"));
        assert_eq!(
            statements[1].args,
            vec![
                Value::from(key.id()),
                Value::from(key.head_mac("run-1", 2, &second_mac)),
                Value::from("run-1")
            ]
        );
        assert_eq!(statements[2].sql, "SELECT 1");
    }

    #[test]
    fn a_run_begun_in_the_older_form_goes_on_in_it_and_a_keyed_one_stays_keyed() {
        let key = AuditKey::from_bytes(&[3; 32]);
        let older = Row::of(vec![
            ("chain_head".into(), Value::from("abc")),
            ("chain_key".into(), Value::Text(None)),
        ]);
        let mut transition = keyed("run-5");
        transition.steps = vec![step(4)];
        let (statements, _) = transition.clone().follow(&older).unwrap();
        assert_eq!(statements.len(), 1, "no keyed head for an older run");
        assert_eq!(
            statements[0].args[8],
            Value::from(chain::row_hash("run-5", "abc", &step(4)))
        );
        let ours = Row::of(vec![
            ("chain_head".into(), Value::from("abc")),
            ("chain_key".into(), Value::from(key.id())),
        ]);
        let (statements, _) = transition.follow(&ours).unwrap();
        assert_eq!(
            statements[0].args[8],
            Value::from(key.row_mac("run-5", "abc", &step(4)))
        );
        assert!(statements[1].sql.contains("audit_head"));

        let mut unkeyed = Transition::new(Statement::new("UPDATE x"), "run-6".into());
        unkeyed.steps = vec![step(1)];
        assert!(
            unkeyed.follow(&Row::default()).is_err(),
            "a new run is never chained without the key"
        );
    }

    #[test]
    fn a_run_without_steps_chains_on_genesis() {
        let mut transition = keyed("run-2");
        transition.steps = vec![step(1)];
        // A null head (no step yet), and a fence without the column at all (a new run).
        for row in [
            Row::of(vec![("chain_head".into(), Value::Text(None))]),
            Row::default(),
        ] {
            let (statements, _) = transition.clone().follow(&row).unwrap();
            assert_eq!(statements[0].args[7], Value::from(chain::GENESIS));
        }
    }

    #[test]
    fn a_fence_that_takes_the_numbers_numbers_the_steps() {
        let mut transition = keyed("run-4");
        transition.steps = vec![step(0), step(0)];
        transition.numbered_by_fence = true;
        let row = Row::of(vec![
            ("last_sequence".into(), Value::from(7)),
            ("chain_head".into(), Value::Text(None)),
            ("chain_key".into(), Value::from("k")),
        ]);
        let (statements, _) = transition.follow(&row).unwrap();
        assert_eq!(statements[0].args[1], Value::from(6));
        assert_eq!(statements[0].args[10], Value::from(7));
    }

    #[test]
    fn a_run_is_keyed_by_the_database_from_its_first_steps_on() {
        let key = AuditKey::from_bytes(&[3; 32]);
        let mut transition = keyed("run-7");
        assert_eq!(transition.new_run_key(None), None, "no steps, no key");
        transition.steps = vec![step(1)];
        assert_eq!(transition.new_run_key(None), Some(key.id()));
        transition.steps = vec![step(3)];
        assert_eq!(
            transition.new_run_key(None),
            None,
            "an older run's later steps"
        );
        // Numbered by the fence: the first step follows the run's last.
        transition.numbered_by_fence = true;
        assert_eq!(transition.new_run_key(Some(0)), Some(key.id()));
        assert_eq!(transition.new_run_key(Some(4)), None);
    }

    #[test]
    fn a_chain_in_the_fence_and_after_it_come_to_the_same_rows_and_head() {
        let key = AuditKey::from_bytes(&[3; 32]);
        let mut transition = keyed("run-8");
        transition.steps = vec![step(0), step(0)];
        transition.numbered_by_fence = true;
        // After the fence: it returned the run's last step after these (7).
        let row = Row::of(vec![
            ("last_sequence".into(), Value::from(7)),
            ("chain_head".into(), Value::from("abc")),
            ("chain_key".into(), Value::from(key.id())),
        ]);
        let (after, _) = transition.clone().follow(&row).unwrap();
        // In the fence: it read the run's last step before them (5).
        let head = transition
            .chain(Some("abc".into()), Some(key.id()), Some(5))
            .unwrap()
            .unwrap();
        transition.chained = true;
        let fenced = Row::of(vec![("chained_in_fence".into(), Value::from(1))]);
        let (within, _) = transition.clone().follow(&fenced).unwrap();
        assert_eq!(within.len(), 1, "the steps only: the fence set the head");
        assert_eq!(within[0], after[0]);
        assert_eq!(
            after[1].args[1],
            Value::from(head.mac),
            "the same head either way"
        );
        // A fence that was to chain them and did not is not taken for a run without steps.
        transition.chained = false;
        assert!(transition.follow(&fenced).is_err());
    }

    #[test]
    fn a_long_segment_is_split_under_the_bind_limits() {
        let mut transition = keyed("run-3");
        transition.steps = (1..=250).map(step).collect();
        let (statements, _) = transition.follow(&Row::default()).unwrap();
        let sizes: Vec<usize> = statements[..3].iter().map(|s| s.args.len() / 9).collect();
        assert_eq!(sizes, vec![100, 100, 50]);
    }

    #[test]
    fn columns_are_found_in_any_order_the_row_is_read_in() {
        let row = Row::of(
            (0..5)
                .map(|i| (format!("c{i}"), Value::from(i * 10)))
                .collect(),
        );
        let read = |order: &[i64]| {
            order
                .iter()
                .map(|i| row.required_int(&format!("c{i}")).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(read(&[0, 1, 2, 3, 4]), [0, 10, 20, 30, 40]);
        assert_eq!(read(&[4, 3, 2, 1, 0]), [40, 30, 20, 10, 0]);
        assert_eq!(read(&[2, 2, 4, 0, 4, 1]), [20, 20, 40, 0, 40, 10]);
        assert!(row.int("c5").is_err());
        assert_eq!(read(&[3]), [30], "a miss leaves the row readable");
    }

    #[test]
    fn a_cell_of_the_wrong_kind_is_a_clear_error() {
        let row = Row::of(vec![
            ("version".into(), Value::from(3)),
            ("name".into(), Value::from("x")),
            ("nothing".into(), Value::Text(None)),
        ]);
        assert_eq!(row.required_int("version").unwrap(), 3);
        assert_eq!(row.int("nothing").unwrap(), None);
        assert!(row.int("name").unwrap_err().to_string().contains("`name`"));
        assert!(row
            .text("missing")
            .unwrap_err()
            .to_string()
            .contains("`missing`"));
    }

    #[tokio::test]
    async fn a_transition_commits_whole_is_refused_whole_or_rolls_back_whole() {
        let mut backends = crate::testing::backends().await;
        backends.push(crate::testing::sqlite_with(crate::db::SqliteSync::Normal).await);
        for test in backends {
            let db = &test.db;
            scratch::table(db, "scratch_t", &["a"]).await;
            let bump = |expected| scratch::bump("scratch_t", "a", expected);
            let version = || scratch::version(db, "scratch_t", "a");
            // The fence matches: its row comes back (numbered parameters bound by number).
            let row = db
                .transact(bump(1))
                .await
                .unwrap()
                .expect("the fence matched");
            assert_eq!(row.required_int("version").unwrap(), 2, "{}", test.name);
            assert_eq!(row.required_text("id").unwrap(), "a");
            // A stale fence matches nothing, and what follows it never runs.
            let mut stale = bump(1);
            stale.then.push(
                Statement::new("INSERT INTO scratch_t (id, version) VALUES ($1, 0)").bind("b"),
            );
            assert_eq!(db.transact(stale).await.unwrap(), None, "{}", test.name);
            // A statement that fails after the fence takes the fence's write back with it.
            let mut failing = bump(2);
            failing.then.push(
                Statement::new("INSERT INTO scratch_t (id, version) VALUES ($1, 0)").bind("a"),
            );
            assert!(db.transact(failing).await.is_err(), "{}", test.name);
            assert_eq!(version().await, 2, "{}: rolled back", test.name);
            let rows = db
                .query(&Statement::new("SELECT id FROM scratch_t ORDER BY id"))
                .await
                .unwrap();
            assert_eq!(rows.len(), 1, "{}: nothing else was written", test.name);
            // The writer is still there for the next transition.
            assert!(db.transact(bump(2)).await.unwrap().is_some());
            assert_eq!(version().await, 3, "{}", test.name);
            test.cleanup().await;
        }
    }
}
