//! The run list's and the inbox's filters, orders and text search, on both backends: the same
//! words find the same runs on SQLite (FTS5) and Postgres (full-text search); runs that existed
//! before the search index are indexed by its migration; a purged run leaves the index.

use std::sync::Arc;

use nrllm_core::clock::now_ms;
use nrllm_core::question::AskOperator;
use nrllm_core::run_service::{RunService, SingleLoop};
use nrllm_core::run_store::{
    Finish, NewRun, RunFilter, RunReader, RunStatus, RunStore, SearchWords, TerminationReason,
    WaitingFilter, WaitingOrder,
};
use nrllm_core::testing::{call_turn, probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::ToolLoop;
use nrllm_store::testing::{backends, demo_configuration};
use nrllm_store::SqlRunStore;
use serde_json::json;
use sqlx::Executor;
use uuid::Uuid;

/// A finished run asked `prompt` that answered `answer`, created at `at_ms`.
async fn finished(store: &SqlRunStore, prompt: &str, answer: &str, who: &str, at_ms: i64) -> Uuid {
    let run = NewRun {
        id: Uuid::now_v7(),
        configuration: demo_configuration(prompt),
        requested_by: who.into(),
        copied: Vec::new(),
        trace: nrllm_core::trace::RunTrace::start(None),
    };
    let created = store.create(&run, at_ms, true).await.unwrap();
    let finish = Finish {
        status: RunStatus::Completed,
        reason: TerminationReason::Completed,
        counters: Default::default(),
        truncated: false,
        final_answer: Some(answer.into()),
        error_summary: None,
        estimated_cost_micros: None,
    };
    store
        .finish(run.id, created.version, &finish, &[], at_ms)
        .await
        .unwrap();
    run.id
}

async fn listed(store: &SqlRunStore, filter: RunFilter) -> Vec<Uuid> {
    let filter = RunFilter {
        limit: 50,
        ..filter
    };
    let runs = store.list(&filter).await.unwrap();
    runs.iter().map(|r| r.id).collect()
}

/// What a search for `text` finds once the queued runs are indexed.
async fn searched(store: &SqlRunStore, text: &str) -> Vec<Uuid> {
    while store.index_queued(2).await.unwrap() > 0 {}
    assert_eq!(store.search_queue_len().await.unwrap(), 0);
    let search = SearchWords::parse(text);
    assert!(search.is_some(), "`{text}` has words");
    listed(
        store,
        RunFilter {
            search,
            ..RunFilter::default()
        },
    )
    .await
}

#[tokio::test]
async fn search_finds_words_and_word_beginnings_in_prompts_and_answers_case_ignored() {
    for db in backends().await {
        let store = SqlRunStore::new(db.db.clone());
        let t = now_ms();
        let deploy = finished(
            &store,
            "Deploy the Payments service",
            "Deployed.",
            "alice",
            t,
        )
        .await;
        let cafe = finished(&store, "deploy the CAFÉ menu", "Menu is up", "bob", t + 1).await;
        let rollback = finished(
            &store,
            "Rollback payments-v2",
            "Rolled back; \"ok\"",
            "alice",
            t + 2,
        )
        .await;
        let name = db.name;
        assert_eq!(searched(&store, "deploy").await, [cafe, deploy], "{name}");
        assert_eq!(
            searched(&store, "PAY").await,
            [rollback, deploy],
            "{name}: a prefix"
        );
        assert_eq!(
            searched(&store, "deploy pay").await,
            [deploy],
            "{name}: every word"
        );
        assert_eq!(
            searched(&store, "café").await,
            [cafe],
            "{name}: case, beyond ASCII"
        );
        assert_eq!(
            searched(&store, "v2").await,
            [rollback],
            "{name}: `-` separates"
        );
        assert_eq!(
            searched(&store, "rolled ok").await,
            [rollback],
            "{name}: the answer"
        );
        assert!(
            searched(&store, "ayments").await.is_empty(),
            "{name}: not inside a word"
        );
        assert!(
            searched(&store, "\"menu\" OR deploy*").await.is_empty(),
            "{name}: no syntax"
        );
        // A run only queues itself; it is found once the indexer passed.
        let late = finished(&store, "a late prompt", "a late answer", "bob", t + 3).await;
        assert_eq!(store.search_queue_len().await.unwrap(), 1, "{name}");
        assert_eq!(searched(&store, "late answer").await, [late], "{name}");
        db.cleanup().await;
    }
}

#[tokio::test]
async fn the_run_list_filters_by_status_configuration_requester_and_time_and_pages_by_key() {
    for db in backends().await {
        let store = SqlRunStore::new(db.db.clone());
        let t = now_ms();
        // Two runs created in the same millisecond: the key (time, id) still pages past both.
        let a = finished(&store, "one", "x", "alice", t).await;
        let b = finished(&store, "two", "x", "bob", t).await;
        let c = finished(&store, "three", "x", "alice", t + 10).await;
        let name = db.name;
        let mut same_time = vec![a, b];
        same_time.sort();
        same_time.reverse();
        let everything = listed(&store, RunFilter::default()).await;
        assert_eq!(everything, [vec![c], same_time.clone()].concat(), "{name}");
        let by = |who: &str| RunFilter {
            requested_by: Some(who.into()),
            ..RunFilter::default()
        };
        assert_eq!(listed(&store, by("alice")).await, [c, a], "{name}");
        assert!(listed(&store, by("carol")).await.is_empty());
        let demo = RunFilter {
            provider: Some("demo".into()),
            status: Some(RunStatus::Completed),
            ..RunFilter::default()
        };
        assert_eq!(listed(&store, demo).await.len(), 3, "{name}");
        let other = RunFilter {
            provider: Some("other".into()),
            ..RunFilter::default()
        };
        assert!(listed(&store, other).await.is_empty());
        let window = RunFilter {
            created_from_ms: Some(t + 1),
            created_before_ms: Some(t + 11),
            ..RunFilter::default()
        };
        assert_eq!(listed(&store, window).await, [c], "{name}");
        // Pages of one: each after the last seen.
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = store
                .list(&RunFilter {
                    after,
                    limit: 1,
                    ..RunFilter::default()
                })
                .await
                .unwrap();
            let Some(last) = page.last() else { break };
            seen.push(last.id);
            after = Some((last.created_at_ms, last.id));
        }
        assert_eq!(
            seen, everything,
            "{name}: paging by key loses and repeats nothing"
        );
        db.cleanup().await;
    }
}

#[tokio::test]
async fn the_inbox_filters_by_requester_kind_and_prompt_and_sorts_by_deadline() {
    for db in backends().await {
        let provider = ScriptedProvider::new(vec![
            call_turn("a", "write_note", json!({"text": "1"}), usage(1, 1)),
            call_turn("b", "write_note", json!({"text": "2"}), usage(1, 1)),
            call_turn(
                "q",
                "ask_operator",
                json!({"question": "Which?"}),
                usage(1, 1),
            ),
        ]);
        let probe = Probe::default();
        let mut registry = probe_registry(&probe);
        registry.register(AskOperator).unwrap();
        let tool_loop = ToolLoop::new(Arc::new(provider), Arc::new(registry));
        let store = Arc::new(SqlRunStore::new(db.db.clone()));
        let service = RunService::new(store.clone(), Arc::new(SingleLoop(Arc::new(tool_loop))));
        let with_deadline = |prompt: &str, ms: Option<u64>| {
            let mut configuration = demo_configuration(prompt);
            configuration.approval_timeout_ms = ms;
            configuration
        };
        let none = service
            .start(with_deadline("write the release notes", None), "alice")
            .await
            .unwrap();
        let late = service
            .start(with_deadline("write the invoice", Some(3_600_000)), "bob")
            .await
            .unwrap();
        let soon = service
            .start(
                with_deadline("ask about the invoice", Some(60_000)),
                "alice",
            )
            .await
            .unwrap();
        assert_eq!(soon.status, RunStatus::WaitingForInput);
        let name = db.name;
        let inbox = |filter: WaitingFilter| {
            let store = Arc::clone(&store);
            async move {
                let filter = WaitingFilter {
                    limit: 10,
                    ..filter
                };
                let runs = store.waiting(&filter).await.unwrap();
                runs.iter().map(|r| r.id).collect::<Vec<_>>()
            }
        };
        while store.index_queued(100).await.unwrap() > 0 {}
        assert_eq!(
            inbox(WaitingFilter::default()).await,
            [none.id, late.id, soon.id],
            "{name}"
        );
        let by_deadline = WaitingFilter {
            order: WaitingOrder::Deadline,
            ..WaitingFilter::default()
        };
        assert_eq!(
            inbox(by_deadline.clone()).await,
            [soon.id, late.id, none.id],
            "{name}"
        );
        // Paging in the deadline order goes on from the key of the last run seen.
        let first = store
            .waiting(&WaitingFilter {
                limit: 2,
                ..by_deadline.clone()
            })
            .await
            .unwrap();
        let last = first.last().unwrap();
        let key = WaitingFilter::key(
            WaitingOrder::Deadline,
            last.updated_at_ms,
            last.approval_deadline_ms,
        );
        let rest = WaitingFilter {
            after: Some((key, last.id)),
            ..by_deadline
        };
        assert_eq!(
            inbox(rest).await,
            [none.id],
            "{name}: runs without a deadline last"
        );
        let alice = WaitingFilter {
            requested_by: Some("alice".into()),
            ..WaitingFilter::default()
        };
        assert_eq!(inbox(alice).await, [none.id, soon.id], "{name}");
        let questions = WaitingFilter {
            kind: Some(RunStatus::WaitingForInput),
            ..WaitingFilter::default()
        };
        assert_eq!(inbox(questions).await, [soon.id], "{name}");
        let invoice = WaitingFilter {
            search: SearchWords::parse("Invoice"),
            ..WaitingFilter::default()
        };
        assert_eq!(inbox(invoice).await, [late.id, soon.id], "{name}");
        let both = WaitingFilter {
            search: SearchWords::parse("invoice"),
            kind: Some(RunStatus::WaitingForApproval),
            requested_by: Some("bob".into()),
            ..WaitingFilter::default()
        };
        assert_eq!(inbox(both).await, [late.id], "{name}");
        db.cleanup().await;
    }
}

/// What the search index holds, row by row, on this database.
async fn index_rows(db: &nrllm_store::db::Database) -> i64 {
    let table = match db.backend() {
        nrllm_store::db::Backend::Sqlite => "agent_run_search_key",
        nrllm_store::db::Backend::Postgres => "agent_run_search",
    };
    sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
        .fetch_one(db.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_purged_run_leaves_the_index_and_the_migration_indexes_runs_made_before_it() {
    for db in backends().await {
        let store = SqlRunStore::new(db.db.clone());
        let old = now_ms() - 10 * 86_400_000;
        let gone = finished(&store, "purge me please", "ok", "alice", old).await;
        let kept = finished(&store, "keep me please", "ok", "alice", now_ms()).await;
        let name = db.name;
        assert_eq!(searched(&store, "please").await, [kept, gone], "{name}");
        // Purged before the indexer passed: it leaves the queue too.
        finished(&store, "never indexed", "ok", "alice", old).await;
        assert_eq!(store.search_queue_len().await.unwrap(), 1, "{name}");
        let report = store.purge(now_ms() - 86_400_000, 0, 100).await.unwrap();
        assert_eq!(report.runs, 2, "{name}");
        assert_eq!(store.search_queue_len().await.unwrap(), 0, "{name}");
        assert_eq!(searched(&store, "please").await, [kept], "{name}");
        assert_eq!(
            index_rows(&db.db).await,
            1,
            "{name}: nothing of the purged run is left"
        );

        // As before the migration: no index. Opening the database again migrates and indexes.
        let undo = match db.db.backend() {
            nrllm_store::db::Backend::Sqlite => {
                "DROP TRIGGER agent_run_search_insert; DROP TRIGGER agent_run_search_answer; \
                 DROP TRIGGER agent_run_search_delete; DROP TABLE agent_run_search; \
                 DROP TABLE agent_run_search_key; DROP TABLE agent_run_search_queue;"
            }
            nrllm_store::db::Backend::Postgres => {
                "DROP TABLE agent_run_search; DROP TABLE agent_run_search_queue; \
                 DROP FUNCTION agent_run_search_enqueue CASCADE; \
                 DROP FUNCTION agent_run_search_document;"
            }
        };
        db.db.pool().execute(undo).await.unwrap();
        db.db
            .pool()
            .execute("DELETE FROM _sqlx_migrations WHERE version = 20261204000022")
            .await
            .unwrap();
        let again = SqlRunStore::new(db.open(2).await);
        assert_eq!(searched(&again, "keep").await, [kept], "{name}");
        assert_eq!(searched(&again, "ok").await, [kept], "{name}: answers too");
        db.cleanup().await;
    }
}
