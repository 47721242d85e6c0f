//! The queries of the run list and the inbox, built from their filters: only the conditions a
//! filter sets are in the query (so that each database plans what is asked, not a query that
//! must serve every filter), with keyset paging and the text search of each database.

use nrllm_core::run_store::{
    RunFilter, RunStatus, SearchWords, StoreError, WaitingFilter, WaitingOrder,
};
use sqlx::Row as _;

use crate::db::Backend;

use super::leases::pick_sql;
use super::queries::{indexed_by, AnyQuery, Sweep, RUN_COLUMNS};
use super::SqlRunStore;
use crate::error::backend;

/// A value a query binds.
enum Bound {
    Text(String),
    Int(i64),
}

/// A query's text and the values of its `$n` parameters, in order.
pub(super) struct Listing {
    pub(super) sql: String,
    binds: Vec<Bound>,
}

impl Listing {
    pub(super) fn query(&self) -> AnyQuery<'_> {
        self.query_as(&self.sql)
    }

    /// Another text (this one explained, say) with this query's values.
    pub(super) fn query_as<'q>(&'q self, sql: &'q str) -> AnyQuery<'q> {
        self.binds
            .iter()
            .fold(sqlx::query(sql), |query, bound| match bound {
                Bound::Text(text) => query.bind(text.as_str()),
                Bound::Int(n) => query.bind(*n),
            })
    }
}

/// The conditions of a `WHERE`, each with the values it binds.
#[derive(Default)]
struct Conditions {
    clauses: Vec<String>,
    binds: Vec<Bound>,
}

impl Conditions {
    /// The number of the next parameter.
    fn next(&self) -> usize {
        self.binds.len() + 1
    }

    /// Adds `clause` (given the number of its first parameter) binding `values`.
    fn add(&mut self, clause: impl FnOnce(usize) -> String, values: Vec<Bound>) {
        self.clauses.push(clause(self.next()));
        self.binds.extend(values);
    }

    fn text(&mut self, column: &str, value: Option<&str>) {
        if let Some(value) = value {
            self.add(
                |n| format!("{column} = ${n}"),
                vec![Bound::Text(value.to_owned())],
            );
        }
    }

    fn search(&mut self, backend: Backend, words: Option<&SearchWords>) {
        if let Some(words) = words {
            self.add(
                |n| search_clause(backend, n),
                vec![Bound::Text(search_text(backend, words))],
            );
        }
    }

    /// ` WHERE a AND b`, or nothing without conditions.
    fn where_clause(&self) -> String {
        match self.clauses.is_empty() {
            true => String::new(),
            false => format!(" WHERE {}", self.clauses.join(" AND ")),
        }
    }

    fn finish(mut self, head: String, order: &str, limit: u32) -> Listing {
        let n = self.next();
        self.binds.push(Bound::Int(i64::from(limit)));
        let clauses = self.where_clause();
        Listing {
            sql: format!("{head}{clauses} ORDER BY {order} LIMIT ${n}"),
            binds: self.binds,
        }
    }
}

/// The condition that a run's prompt or answer holds the words bound at `$n`.
fn search_clause(backend: Backend, n: usize) -> String {
    match backend {
        Backend::Sqlite => format!(
            "id IN (SELECT k.run_id FROM agent_run_search \
             JOIN agent_run_search_key k ON k.n = agent_run_search.rowid \
             WHERE agent_run_search MATCH ${n})"
        ),
        Backend::Postgres => format!(
            "id IN (SELECT run_id FROM agent_run_search \
             WHERE document @@ to_tsquery('simple', ${n}))"
        ),
    }
}

/// The words as the database's search reads them: each a word or a word's beginning, all of
/// them. The words are letters and digits only, so they carry no query syntax.
fn search_text(backend: Backend, words: &SearchWords) -> String {
    let each = words.words().iter();
    match backend {
        Backend::Sqlite => each
            .map(|word| format!("\"{word}\"*"))
            .collect::<Vec<_>>()
            .join(" AND "),
        Backend::Postgres => each
            .map(|word| format!("{word}:*"))
            .collect::<Vec<_>>()
            .join(" & "),
    }
}

impl SqlRunStore {
    /// How the database answers the queries that grow with the number of runs: the inbox's and
    /// the runs page's first pages (and the run list searched), the two sweeps for overdue
    /// runs and the queue's take, as `EXPLAIN QUERY PLAN` (SQLite) or `EXPLAIN` (Postgres)
    /// prints them. For the benchmark of many waiting runs.
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
            limit: 50,
            ..RunFilter::default()
        };
        let searched = RunFilter {
            search: SearchWords::parse("run"),
            limit: 50,
            ..RunFilter::default()
        };
        let waiting = waiting_query(self.db.backend(), &inbox);
        let list = list_query(self.db.backend(), &runs);
        let search = list_query(self.db.backend(), &searched);
        let recent = recent_matches_query(self.db.backend(), &searched, 2_000)
            .expect("a search has a probe");
        let explained = |listing: &Listing| format!("{explain} {}", listing.sql);
        let (waiting_sql, list_sql, search_sql, recent_sql) = (
            explained(&waiting),
            explained(&list),
            explained(&search),
            explained(&recent),
        );
        let deadlines = format!("{explain} {}", Sweep::Deadlines.sql(self.db.backend()));
        let leases = format!("{explain} {}", Sweep::Leases.sql(self.db.backend()));
        let sweep = |sql| sqlx::query(sql).bind(0_i64).bind(50_i64);
        let take = format!("{explain} {}", pick_sql(&self.queued(false), false));
        let mut plans = Vec::new();
        for (name, query) in [
            ("inbox, first page", waiting.query_as(&waiting_sql)),
            ("runs list, first page", list.query_as(&list_sql)),
            (
                "runs list searched, among the newest 2,000",
                recent.query_as(&recent_sql),
            ),
            (
                "runs list searched, every match read",
                search.query_as(&search_sql),
            ),
            ("approval deadline sweep", sweep(&deadlines)),
            ("lease sweep", sweep(&leases)),
            (
                "queue take",
                sqlx::query(&take).bind("plans").bind(0_i64).bind(8_i64),
            ),
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
}

/// The inbox: waiting runs in the filter's order, after its cursor. The longest waiting first
/// reads a range of the waiting index (a row-value comparison), never a sort of every waiting
/// run; the deadline order sorts the waiting runs that match.
pub(super) fn waiting_query(backend: Backend, filter: &WaitingFilter) -> Listing {
    let key = match filter.order {
        WaitingOrder::Longest => "updated_at_ms",
        WaitingOrder::Deadline => "COALESCE(approval_deadline_ms, 9223372036854775807)",
    };
    // SQLite without statistics would pick the status index and sort every waiting run.
    let index = match filter.order {
        WaitingOrder::Longest => indexed_by(backend, "agent_run_waiting"),
        WaitingOrder::Deadline => String::new(),
    };
    let mut conditions = Conditions::default();
    conditions
        .clauses
        .push(RunStatus::sql_any("status", &RunStatus::WAITING));
    conditions.text("provider", filter.provider.as_deref());
    if let Some(tool) = &filter.tool {
        conditions.add(
            |n| format!("pending_tools LIKE ${n}"),
            vec![Bound::Text(format!("%,{tool},%"))],
        );
    }
    conditions.text("requested_by", filter.requested_by.as_deref());
    conditions.text("status", filter.kind.map(RunStatus::as_str));
    conditions.search(backend, filter.search.as_ref());
    if let Some((after, id)) = filter.after {
        conditions.add(
            |n| format!("({key}, id) > (${n}, ${})", n + 1),
            vec![Bound::Int(after), Bound::Text(id.to_string())],
        );
    }
    conditions.finish(
        format!("SELECT {RUN_COLUMNS} FROM agent_run {index}"),
        &format!("{key} ASC, id ASC"),
        filter.limit.clamp(1, 1000),
    )
}

/// The run list's conditions other than its search.
fn list_conditions(filter: &RunFilter) -> Conditions {
    let mut conditions = Conditions::default();
    conditions.text("status", filter.status.map(RunStatus::as_str));
    conditions.text("provider", filter.provider.as_deref());
    conditions.text("requested_by", filter.requested_by.as_deref());
    if let Some(from) = filter.created_from_ms {
        conditions.add(|n| format!("created_at_ms >= ${n}"), vec![Bound::Int(from)]);
    }
    if let Some(before) = filter.created_before_ms {
        conditions.add(
            |n| format!("created_at_ms < ${n}"),
            vec![Bound::Int(before)],
        );
    }
    if let Some((after, id)) = filter.after {
        conditions.add(
            |n| format!("(created_at_ms, id) < (${n}, ${})", n + 1),
            vec![Bound::Int(after), Bound::Text(id.to_string())],
        );
    }
    conditions
}

const LIST_ORDER: &str = "created_at_ms DESC, id DESC";

/// The run list: newest first, after its cursor; with a search, every run that matches (read
/// from the index, then sorted: quick when few match — see [`recent_matches_query`]).
pub(super) fn list_query(backend: Backend, filter: &RunFilter) -> Listing {
    let mut conditions = list_conditions(filter);
    conditions.search(backend, filter.search.as_ref());
    conditions.finish(
        format!("SELECT {RUN_COLUMNS} FROM agent_run"),
        LIST_ORDER,
        filter.limit.clamp(1, 500),
    )
}

/// The search among the list's newest `window` runs (its other filters applied): quick when many
/// runs match, where [`list_query`] would read and sort every match. If it fills the page, that
/// page is the list's (every run outside the window is older); if not, few runs match and
/// [`list_query`] is quick. On SQLite the index is read only over the window's span of index
/// rows (FTS5 seeks a rowid range; probed run by run it would decode a common word's whole
/// list for each run); on Postgres each run of the window is looked up. `None` without a search.
pub(super) fn recent_matches_query(
    backend: Backend,
    filter: &RunFilter,
    window: u32,
) -> Option<Listing> {
    let words = filter.search.as_ref()?;
    let mut conditions = list_conditions(filter);
    let clauses = conditions.where_clause();
    let window_at = conditions.next();
    conditions.binds.push(Bound::Int(i64::from(window)));
    let words_at = conditions.next();
    conditions
        .binds
        .push(Bound::Text(search_text(backend, words)));
    let newest = format!(
        "WITH w AS (SELECT id FROM agent_run{clauses} ORDER BY {LIST_ORDER} LIMIT ${window_at})"
    );
    let head = match backend {
        Backend::Sqlite => format!(
            "{newest}, span AS (SELECT MIN(n) AS lo, MAX(n) AS hi FROM agent_run_search_key \
             WHERE run_id IN (SELECT id FROM w)) \
             SELECT {RUN_COLUMNS} FROM agent_run WHERE id IN (SELECT id FROM w) AND id IN \
             (SELECT k.run_id FROM agent_run_search \
             JOIN agent_run_search_key k ON k.n = agent_run_search.rowid \
             WHERE agent_run_search MATCH ${words_at} \
             AND agent_run_search.rowid >= (SELECT lo FROM span) \
             AND agent_run_search.rowid <= (SELECT hi FROM span))"
        ),
        Backend::Postgres => format!(
            "{newest} SELECT {RUN_COLUMNS} FROM agent_run WHERE id IN (SELECT w.id FROM w \
             WHERE EXISTS (SELECT 1 FROM agent_run_search s WHERE s.run_id = w.id \
             AND s.document @@ to_tsquery('simple', ${words_at})))"
        ),
    };
    let probed = Conditions {
        clauses: Vec::new(),
        binds: conditions.binds,
    };
    Some(probed.finish(head, LIST_ORDER, filter.limit.clamp(1, 500)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_conditions_a_filter_sets_are_in_the_query_numbered_in_order() {
        let plain = list_query(
            Backend::Postgres,
            &RunFilter {
                limit: 10,
                ..RunFilter::default()
            },
        );
        assert!(plain
            .sql
            .ends_with("FROM agent_run ORDER BY created_at_ms DESC, id DESC LIMIT $1"));
        let filtered = list_query(
            Backend::Sqlite,
            &RunFilter {
                status: Some(RunStatus::Completed),
                search: SearchWords::parse("Deploy pro"),
                after: Some((5, uuid::Uuid::nil())),
                limit: 10,
                ..RunFilter::default()
            },
        );
        assert!(
            filtered
                .sql
                .contains("status = $1 AND (created_at_ms, id) < ($2, $3) AND id IN ("),
            "{}",
            filtered.sql
        );
        assert!(filtered.sql.contains("MATCH $4) ORDER BY"));
        assert!(filtered.sql.ends_with("LIMIT $5"));
        assert_eq!(filtered.binds.len(), 5);
    }

    #[test]
    fn search_words_become_prefix_terms_that_must_all_match() {
        let words = SearchWords::parse("Deploy \"pro\"* OR").unwrap();
        assert_eq!(
            search_text(Backend::Sqlite, &words),
            "\"deploy\"* AND \"pro\"* AND \"or\"*"
        );
        assert_eq!(
            search_text(Backend::Postgres, &words),
            "deploy:* & pro:* & or:*"
        );
    }

    #[tokio::test]
    async fn probing_the_newest_runs_finds_the_same_first_page_as_reading_every_match() {
        use nrllm_core::run_store::{NewRun, RunReader, RunStore};
        for db in crate::testing::backends().await {
            let store = SqlRunStore::new(db.db.clone());
            let t = nrllm_core::clock::now_ms();
            for n in 0..30 {
                let word = if n % 10 == 0 { "rare" } else { "common" };
                let run = NewRun {
                    id: uuid::Uuid::now_v7(),
                    configuration: crate::testing::demo_configuration(&format!("a {word} run")),
                    requested_by: "alice".into(),
                    copied: Vec::new(),
                    trace: nrllm_core::trace::RunTrace::start(None),
                };
                store.create(&run, t + n, true).await.unwrap();
            }
            while store.index_queued(100).await.unwrap() > 0 {}
            let rows = |listing: Listing| {
                let pool = db.db.pool().clone();
                async move {
                    let rows = listing.query().fetch_all(&pool).await.unwrap();
                    rows.iter()
                        .map(|row| super::super::queries::read_run(row).unwrap().id)
                        .collect::<Vec<_>>()
                }
            };
            let common = RunFilter {
                search: SearchWords::parse("comm"),
                limit: 5,
                ..RunFilter::default()
            };
            let backend = db.db.backend();
            let probed = rows(recent_matches_query(backend, &common, 10).unwrap()).await;
            assert_eq!(probed.len(), 5, "{}", db.name);
            assert_eq!(
                probed,
                rows(list_query(backend, &common)).await,
                "{}",
                db.name
            );
            // Three rare runs, none among the newest ten but one: the probe finds too few.
            let rare = RunFilter {
                search: SearchWords::parse("rare"),
                ..common.clone()
            };
            let probed = rows(recent_matches_query(backend, &rare, 10).unwrap()).await;
            assert_eq!(probed.len(), 1, "{}", db.name);
            assert_eq!(
                rows(list_query(backend, &rare)).await.len(),
                3,
                "{}",
                db.name
            );
            assert_eq!(store.list(&rare).await.unwrap().len(), 3, "{}", db.name);
            db.cleanup().await;
        }
    }
}
