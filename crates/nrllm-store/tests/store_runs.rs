//! The run store and the run service on both backends: transitions, the single-winner claim,
//! events, purge, atomicity and corrupted state.

use nrllm_core::authority::Actor;
use nrllm_store::testing as common;

use std::sync::Arc;

use common::backends;
use nrllm_core::clock::now_ms;
use nrllm_core::events::Event;
use nrllm_core::provider::{ChatResponse, ProviderError};
use nrllm_core::question::FormAnswer;
use nrllm_core::registry::ToolRegistry;
use nrllm_core::run_service::{LoopFactory, ResumeError, RunService, ServiceError, SingleLoop};
use nrllm_core::run_store::{
    Finish, LeaseStore, RuleStore, RunConfiguration, RunFilter, RunReader, RunRecord, RunStatus,
    RunStore, SequencedEvent, StoreError, TerminationReason, WaitingFilter,
};
use nrllm_core::state::{Counters, Kept};
use nrllm_core::testing::{call_turn, probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::{Decision, RunSettings, ToolLoop};
use nrllm_store::SqlRunStore;
use serde_json::json;

fn configuration(prompt: &str) -> RunConfiguration {
    RunConfiguration {
        continues: None,
        approval_timeout_ms: None,
        provider: "scripted".into(),
        model: "script".into(),
        prompt: prompt.into(),
        system_prompt: Some("Be careful.".into()),
        skills: Vec::new(),
        settings: RunSettings::default(),
    }
}

struct Setup {
    store: Arc<SqlRunStore>,
    service: RunService,
    provider: ScriptedProvider,
    probe: Probe,
}

fn setup(db: &nrllm_store::db::Database, responses: Vec<ChatResponse>) -> Setup {
    let store = Arc::new(SqlRunStore::new(db.clone()));
    let provider = ScriptedProvider::new(responses);
    let probe = Probe::default();
    let registry: Arc<ToolRegistry> = Arc::new(probe_registry(&probe));
    let tool_loop = Arc::new(ToolLoop::new(Arc::new(provider.clone()), registry));
    let loops: Arc<dyn LoopFactory> = Arc::new(SingleLoop(tool_loop));
    let service = RunService::new(store.clone(), loops);
    Setup {
        store,
        service,
        provider,
        probe,
    }
}

/// `usage` with the parts priced apart: cached input, cache writes, reasoning.
fn with_parts(
    usage: nrllm_core::provider::Usage,
    (cached, writes, reasoning): (u64, u64, u64),
) -> nrllm_core::provider::Usage {
    nrllm_core::provider::Usage {
        cached_input_tokens: cached,
        cache_write_tokens: writes,
        reasoning_tokens: reasoning,
        ..usage
    }
}

fn gated_then_answer() -> Vec<ChatResponse> {
    vec![
        call_turn(
            "c1",
            "write_note",
            json!({"text": "hi"}),
            with_parts(usage(100, 20), (60, 0, 5)),
        ),
        ChatResponse::text("Wrote it.", with_parts(usage(50, 5), (30, 10, 0))),
    ]
}

fn kinds(events: &[nrllm_core::run_store::StoredEvent]) -> Vec<String> {
    events.iter().map(|e| e.kind.clone()).collect()
}

/// `start` and `resume` hand a run's segment to the heap (with it inline their futures were some
/// 36 KB), so what their callers hold and move at each await stays small: moved whole, those
/// futures were copied several times a cycle (BENCHMARKS.md, issue #46).
#[tokio::test]
async fn the_futures_of_start_and_resume_stay_small() {
    const AT_MOST: usize = 8 * 1024;
    let db = nrllm_store::testing::sqlite().await;
    let s = setup(&db.db, gated_then_answer());
    let start = s.service.start(configuration("write hi"), "alice");
    let bytes = std::mem::size_of_val(&start);
    assert!(bytes <= AT_MOST, "start's future is {bytes} bytes");
    let run = start.await.unwrap();
    let (decision, actor) = (Decision::ApproveAll, Actor::headless("bob"));
    let resume = s.service.resume(run.id, &decision, &actor, None);
    let bytes = std::mem::size_of_val(&resume);
    assert!(bytes <= AT_MOST, "resume's future is {bytes} bytes");
    assert_eq!(resume.await.unwrap().status, RunStatus::Completed);
}

#[tokio::test]
async fn suspend_stores_the_state_and_resume_continues_the_sequence_and_finish_clears_it() {
    for db in backends().await {
        let s = setup(&db.db, gated_then_answer());
        let run = s
            .service
            .start(configuration("write hi"), "alice")
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::WaitingForApproval, "{}", db.name);
        assert!(run.suspended_state.is_some());
        assert!(!run.status.is_terminal());
        assert_eq!(run.counters.iterations, 1);
        // The parts priced apart are kept while it waits, and after.
        assert_eq!(run.counters.usage, with_parts(usage(100, 20), (60, 0, 5)));
        // What the suspend returned is the run as a read finds it.
        let read = s.store.get(run.id).await.unwrap().unwrap();
        assert_eq!(format!("{run:?}"), format!("{read:?}"), "{}", db.name);
        let first = s.store.events(run.id, 0).await.unwrap();
        assert_eq!(
            kinds(&first),
            ["assembled", "request", "llm", "approval_requested"],
            "{}",
            db.name
        );
        assert_eq!(
            first.iter().map(|e| e.sequence).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        assert!(s.probe.calls().is_empty());

        let done = s
            .service
            .resume(run.id, &Decision::ApproveAll, &Actor::headless("bob"), None)
            .await
            .unwrap();
        assert_eq!(done.status, RunStatus::Completed, "{}", db.name);
        assert_eq!(done.suspended_state, None);
        assert_eq!(done.termination_reason.as_deref(), Some("completed"));
        assert_eq!(done.final_answer.as_deref(), Some("Wrote it."));
        assert_eq!(done.counters.usage, with_parts(usage(150, 25), (90, 10, 5)));
        assert_eq!(done.counters.iterations, 2);
        assert_eq!(done.decided_by.as_deref(), Some("bob"));
        assert!(done.finished_at_ms.is_some());
        let all = s.store.events(run.id, 0).await.unwrap();
        let sequences: Vec<i64> = all.iter().map(|e| e.sequence).collect();
        assert_eq!(
            sequences,
            (1..=all.len() as i64).collect::<Vec<_>>(),
            "{}",
            db.name
        );
        assert_eq!(
            kinds(&all[4..]),
            ["approval_decided", "tool", "request", "llm"],
            "{}",
            db.name
        );
        assert_eq!(s.probe.count("write_note"), 1);
        db.cleanup().await;
    }
}

#[tokio::test]
async fn sixty_four_concurrent_claims_have_exactly_one_winner_and_one_execution() {
    for db in backends().await {
        let s = setup(&db.db, gated_then_answer());
        let run = s
            .service
            .start(configuration("write hi"), "alice")
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::WaitingForApproval);
        let registry = Arc::new(probe_registry(&s.probe));
        let mut tasks = Vec::new();
        for i in 0..64 {
            // Each claimer has its own pool, so each claim is on its own connection.
            let pool = db.open(1).await;
            let store = Arc::new(SqlRunStore::new(pool));
            let tool_loop = Arc::new(ToolLoop::new(
                Arc::new(s.provider.clone()),
                Arc::clone(&registry),
            ));
            let service = RunService::new(store, Arc::new(SingleLoop(tool_loop)));
            tasks.push(tokio::spawn(async move {
                service
                    .resume(
                        run.id,
                        &Decision::ApproveAll,
                        &Actor::headless(format!("operator-{i}")),
                        None,
                    )
                    .await
            }));
        }
        let mut winners = 0;
        let mut losers = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(record) => {
                    assert_eq!(record.status, RunStatus::Completed);
                    winners += 1;
                }
                Err(ResumeError::NotWaiting(winner)) => {
                    let text = ResumeError::NotWaiting(winner).to_string();
                    assert!(text.starts_with("already decided (approved) at "), "{text}");
                    losers += 1;
                }
                Err(other) => panic!("{}: unexpected {other:?}", db.name),
            }
        }
        assert_eq!((winners, losers), (1, 63), "{}", db.name);
        assert_eq!(
            s.probe.count("write_note"),
            1,
            "{}: the tool ran exactly once",
            db.name
        );
        assert_eq!(
            s.provider.requests().len(),
            2,
            "{}: losers never called the provider",
            db.name
        );
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_second_finish_is_refused() {
    for db in backends().await {
        let s = setup(&db.db, vec![ChatResponse::text("hello", usage(1, 1))]);
        let run = s
            .service
            .start(configuration("say hello"), "alice")
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::Completed);
        let finish = Finish {
            status: RunStatus::Failed,
            reason: TerminationReason::Interrupted,
            counters: Counters::default(),
            truncated: false,
            final_answer: None,
            error_summary: Some("late".into()),
            estimated_cost_micros: None,
        };
        let err = s
            .store
            .finish(run.id, run.version, &finish, &[], now_ms())
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::AlreadySettled {
                    status: RunStatus::Completed,
                    ..
                }
            ),
            "{}: {err:?}",
            db.name
        );
        let again = s.store.get(run.id).await.unwrap().unwrap();
        assert_eq!(again.status, RunStatus::Completed);
        assert_eq!(again.final_answer.as_deref(), Some("hello"));
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_completed_runs_events_come_back_in_order_with_payloads_intact() {
    for db in backends().await {
        let s = setup(
            &db.db,
            vec![
                call_turn(
                    "r1",
                    "read_note",
                    json!({"text": "ünïcødé ✓ <b>"}),
                    usage(3, 4),
                ),
                ChatResponse::text("read it", usage(5, 6)),
            ],
        );
        let run = s
            .service
            .start(configuration("read"), "alice")
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{}", db.name);
        let events = s.store.events(run.id, 0).await.unwrap();
        assert_eq!(
            kinds(&events),
            ["assembled", "request", "llm", "tool", "request", "llm"],
            "{}",
            db.name
        );
        let Some(Event::Tool {
            result,
            arguments,
            round,
            ..
        }) = events[3].event()
        else {
            panic!("{}: the tool event reads back", db.name)
        };
        assert_eq!(result, "note: ünïcødé ✓ <b>");
        assert_eq!(arguments, json!({"text": "ünïcødé ✓ <b>"}).to_string());
        assert_eq!(round, 1);
        assert_eq!(events[3].round, Some(1));
        let after = s.store.events(run.id, 4).await.unwrap();
        assert_eq!(after.iter().map(|e| e.sequence).collect::<Vec<_>>(), [5, 6]);
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_failed_run_keeps_its_partial_events() {
    for db in backends().await {
        let s = setup(
            &db.db,
            vec![call_turn(
                "r1",
                "read_note",
                json!({"text": "x"}),
                usage(3, 4),
            )],
        );
        s.provider.push_result(Err(ProviderError::transient(
            "the provider is overloaded (HTTP 503)",
        )));
        let run = s
            .service
            .start(configuration("read"), "alice")
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::Failed, "{}", db.name);
        assert_eq!(run.termination_reason.as_deref(), Some("provider_failed"));
        assert_eq!(
            run.error_summary.as_deref(),
            Some("the provider is overloaded (HTTP 503)")
        );
        assert_eq!(run.counters.usage, usage(3, 4));
        let events = s.store.events(run.id, 0).await.unwrap();
        assert_eq!(
            kinds(&events),
            [
                "assembled",
                "request",
                "llm",
                "tool",
                "request",
                "llm_failed"
            ],
            "{}",
            db.name
        );
        db.cleanup().await;
    }
}

#[tokio::test]
async fn purge_removes_runs_and_events_by_window() {
    for db in backends().await {
        let s = setup(
            &db.db,
            vec![
                ChatResponse::text("done", usage(1, 1)),
                call_turn("w", "write_note", json!({"text": "x"}), usage(1, 1)),
            ],
        );
        let finished = s.service.start(configuration("a"), "alice").await.unwrap();
        let waiting = s.service.start(configuration("b"), "alice").await.unwrap();
        assert_eq!(waiting.status, RunStatus::WaitingForApproval);
        let now = now_ms();
        // Windows that end before both runs: nothing goes.
        let report = s.store.purge(now - 60_000, now - 60_000, 10).await.unwrap();
        assert_eq!(report.runs, 0, "{}", db.name);
        // Terminal window covers now, waiting window does not: only the finished run goes.
        let report = s.store.purge(now + 1, now - 60_000, 1).await.unwrap();
        assert_eq!(report.runs, 1, "{}", db.name);
        assert_eq!(report.events, 3);
        assert!(s.store.get(finished.id).await.unwrap().is_none());
        assert!(s.store.events(finished.id, 0).await.unwrap().is_empty());
        assert!(s.store.get(waiting.id).await.unwrap().is_some());
        let report = s.store.purge(now + 1, now + 1, 1).await.unwrap();
        assert_eq!(report.runs, 1);
        assert!(s.store.get(waiting.id).await.unwrap().is_none());
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_transition_that_fails_midway_leaves_nothing_partial() {
    for db in backends().await {
        let s = setup(&db.db, gated_then_answer());
        let run = s
            .service
            .start(configuration("write"), "alice")
            .await
            .unwrap();
        let before: RunRecord = s.store.get(run.id).await.unwrap().unwrap();
        let before_events = s.store.events(run.id, 0).await.unwrap();
        // Sequence 1 is taken: the event insert fails after the status update in the same transaction.
        let clashing = vec![SequencedEvent {
            sequence: 1,
            event: Event::ApprovalDecided {
                through_token: None,
                round: None,
                decided_by: "x".into(),
                choices: vec![],
            },
            created_at_ms: now_ms(),
        }];
        let finish = Finish {
            status: RunStatus::Cancelled,
            reason: TerminationReason::Cancelled,
            counters: Counters::default(),
            truncated: false,
            final_answer: None,
            error_summary: None,
            estimated_cost_micros: None,
        };
        let err = s
            .store
            .finish(run.id, run.version, &finish, &clashing, now_ms())
            .await;
        assert!(
            matches!(err, Err(StoreError::Backend(_))),
            "{}: {err:?}",
            db.name
        );
        let after = s.store.get(run.id).await.unwrap().unwrap();
        assert_eq!(after, before, "{}: the run row is unchanged", db.name);
        assert_eq!(s.store.events(run.id, 0).await.unwrap(), before_events);
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_corrupted_state_fails_that_run_keeps_the_raw_state_and_spares_others() {
    for db in backends().await {
        let s = setup(
            &db.db,
            vec![
                call_turn("a", "write_note", json!({"text": "1"}), usage(1, 1)),
                call_turn("b", "write_note", json!({"text": "2"}), usage(1, 1)),
                ChatResponse::text("second done", usage(1, 1)),
            ],
        );
        let broken = s
            .service
            .start(configuration("one"), "alice")
            .await
            .unwrap();
        let healthy = s
            .service
            .start(configuration("two"), "alice")
            .await
            .unwrap();
        sqlx::query("UPDATE agent_run SET suspended_state = $1 WHERE id = $2")
            .bind("{\"schema_version\": 1, \"messages\": [tru")
            .bind(broken.id.to_string())
            .execute(db.db.pool())
            .await
            .unwrap();
        let err = s
            .service
            .resume(
                broken.id,
                &Decision::ApproveAll,
                &Actor::headless("bob"),
                None,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, ResumeError::StateCorrupted),
            "{}: {err:?}",
            db.name
        );
        let failed = s.store.get(broken.id).await.unwrap().unwrap();
        assert_eq!(failed.status, RunStatus::Failed);
        assert_eq!(
            failed.termination_reason.as_deref(),
            Some("state_corrupted")
        );
        assert_eq!(
            failed.suspended_state.as_deref(),
            Some("{\"schema_version\": 1, \"messages\": [tru")
        );
        assert!(
            !failed.error_summary.unwrap().contains("tru"),
            "no raw detail in the summary"
        );
        assert!(s.probe.calls().is_empty());

        let done = s
            .service
            .resume(
                healthy.id,
                &Decision::ApproveAll,
                &Actor::headless("bob"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(done.status, RunStatus::Completed, "{}", db.name);
        assert_eq!(s.probe.count("write_note"), 1);
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_provider_failure_after_approved_effects_says_so_and_retry_reruns_no_tool() {
    for db in backends().await {
        // The script ends after the gated turn: the model call after the tool fails.
        let s = setup(
            &db.db,
            vec![call_turn(
                "c1",
                "write_note",
                json!({"text": "a"}),
                usage(1, 1),
            )],
        );
        let run = s
            .service
            .start(configuration("write a"), "alice")
            .await
            .unwrap();
        let failed = s
            .service
            .resume(run.id, &Decision::ApproveAll, &Actor::headless("bob"), None)
            .await
            .unwrap();
        assert_eq!(failed.status, RunStatus::Failed, "{}", db.name);
        assert_eq!(
            failed.termination_reason.as_deref(),
            Some("provider_failed")
        );
        let summary = failed.error_summary.clone().unwrap();
        assert!(
            summary.contains("write_note") && summary.contains("effects happened"),
            "{summary}"
        );
        assert_eq!(s.probe.count("write_note"), 1);

        s.provider
            .push(ChatResponse::text("Done after the retry.", usage(1, 1)));
        let retried = s
            .service
            .retry(run.id, &Actor::headless("carol"))
            .await
            .unwrap();
        assert_ne!(retried.id, run.id);
        let done = s.service.drive(retried).await.unwrap();
        assert_eq!(done.status, RunStatus::Completed, "{}", db.name);
        assert_eq!(done.final_answer.as_deref(), Some("Done after the retry."));
        assert_eq!(s.probe.count("write_note"), 1, "no tool runs again");
        // The model is asked with the failed run's transcript, the tool's answer included.
        let asked = s.provider.requests().pop().unwrap();
        let text = serde_json::to_string(&asked.messages).unwrap();
        assert!(text.contains("wrote: a"), "{text}");
        let first = s.store.events(done.id, 0).await.unwrap();
        assert!(
            first
                .iter()
                .any(|e| e.kind == "recovered"
                    && e.payload.to_string().contains(&run.id.to_string())),
            "the new run names the run it continues"
        );
        // The failed run itself never changes; other runs cannot be retried.
        assert_eq!(
            s.store.get(run.id).await.unwrap().unwrap().version,
            failed.version
        );
        let err = s
            .service
            .retry(done.id, &Actor::headless("carol"))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("only a run whose model call failed"),
            "{err}"
        );
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_state_saved_by_a_newer_version_is_refused_and_left_waiting() {
    for db in backends().await {
        let s = setup(
            &db.db,
            vec![call_turn(
                "a",
                "write_note",
                json!({"text": "1"}),
                usage(1, 1),
            )],
        );
        let run = s
            .service
            .start(configuration("one"), "alice")
            .await
            .unwrap();
        let mut state: serde_json::Value =
            serde_json::from_str(run.suspended_state.as_deref().unwrap()).unwrap();
        state["schema_version"] = json!(99);
        sqlx::query("UPDATE agent_run SET suspended_state = $1 WHERE id = $2")
            .bind(state.to_string())
            .bind(run.id.to_string())
            .execute(db.db.pool())
            .await
            .unwrap();
        let err = s
            .service
            .resume(run.id, &Decision::ApproveAll, &Actor::headless("bob"), None)
            .await
            .unwrap_err();
        assert!(
            matches!(err, ResumeError::NewerVersion(99)),
            "{}: {err:?}",
            db.name
        );
        assert!(err.to_string().contains("saved by a newer version"));
        let after = s.store.get(run.id).await.unwrap().unwrap();
        assert_eq!(after.status, RunStatus::WaitingForApproval, "{}", db.name);
        assert_eq!(after.version, run.version, "nothing changed");
        assert_eq!(after.suspended_state, Some(state.to_string()));
        assert!(s.probe.calls().is_empty());
        db.cleanup().await;
    }
}

#[tokio::test]
async fn cancel_list_and_the_inbox_follow_the_status_rules() {
    for db in backends().await {
        let s = setup(
            &db.db,
            vec![
                call_turn("a", "write_note", json!({"text": "1"}), usage(1, 1)),
                call_turn("b", "write_note", json!({"text": "2"}), usage(1, 1)),
                ChatResponse::text("plain", usage(1, 1)),
            ],
        );
        let first = s
            .service
            .start(configuration("one"), "alice")
            .await
            .unwrap();
        let second = s
            .service
            .start(configuration("two"), "alice")
            .await
            .unwrap();
        let third = s
            .service
            .start(configuration("three"), "alice")
            .await
            .unwrap();
        assert_eq!(third.status, RunStatus::Completed);
        let inbox = |filter: WaitingFilter| {
            let store = Arc::clone(&s.store);
            async move {
                store
                    .waiting(&filter)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|r| r.id)
                    .collect::<Vec<_>>()
            }
        };
        let all = WaitingFilter {
            limit: 10,
            ..WaitingFilter::default()
        };
        assert_eq!(
            inbox(all.clone()).await,
            [first.id, second.id],
            "{}: oldest first",
            db.name
        );
        // Keyset paging: one at a time, each page after the last run seen.
        let page_one = s
            .store
            .waiting(&WaitingFilter {
                limit: 1,
                ..all.clone()
            })
            .await
            .unwrap();
        assert_eq!(page_one.len(), 1);
        let after = Some((page_one[0].updated_at_ms, page_one[0].id));
        assert_eq!(
            inbox(WaitingFilter {
                after,
                limit: 1,
                ..all.clone()
            })
            .await,
            [second.id],
            "{}",
            db.name
        );
        // Filters: by configuration, and by a tool of the pending turn.
        assert_eq!(
            inbox(WaitingFilter {
                tool: Some("write_note".into()),
                ..all.clone()
            })
            .await
            .len(),
            2,
            "{}",
            db.name
        );
        assert!(inbox(WaitingFilter {
            tool: Some("read_note".into()),
            ..all.clone()
        })
        .await
        .is_empty());
        assert!(inbox(WaitingFilter {
            provider: Some("no-such-configuration".into()),
            ..all.clone()
        })
        .await
        .is_empty());
        let provider = first.configuration.as_ref().unwrap().provider.clone();
        assert_eq!(
            inbox(WaitingFilter {
                provider: Some(provider),
                ..all.clone()
            })
            .await
            .len(),
            2
        );

        let cancelled = s
            .service
            .cancel(first.id, &Actor::headless("carol"), Some("not needed"))
            .await
            .unwrap();
        assert_eq!(cancelled.status, RunStatus::Cancelled);
        assert_eq!(cancelled.suspended_state, None);
        let again = s
            .service
            .cancel(third.id, &Actor::headless("carol"), None)
            .await
            .unwrap_err();
        assert!(matches!(
            again,
            ServiceError::Store(StoreError::InvalidTransition {
                status: RunStatus::Completed,
                ..
            })
        ));
        let err = s
            .service
            .resume(
                first.id,
                &Decision::ApproveAll,
                &Actor::headless("bob"),
                None,
            )
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("already decided (cancelled)"),
            "{err}"
        );

        let all: Vec<_> = s
            .store
            .list(&RunFilter {
                limit: 10,
                ..RunFilter::default()
            })
            .await
            .unwrap();
        assert_eq!(ids(&all), [third.id, second.id, first.id]);
        let waiting = s
            .store
            .list(&RunFilter {
                status: Some(RunStatus::WaitingForApproval),
                limit: 10,
                ..RunFilter::default()
            })
            .await
            .unwrap();
        assert_eq!(ids(&waiting), [second.id]);
        db.cleanup().await;
    }
}

#[tokio::test]
async fn recovery_goes_on_from_the_journal_and_never_reruns_an_unknown_effect() {
    for db in backends().await {
        let responses = vec![
            call_turn("c1", "write_note", json!({"text": "a"}), usage(1, 1)),
            call_turn("c2", "write_note", json!({"text": "b"}), usage(1, 1)),
            ChatResponse::text("Plain.", usage(1, 1)),
            ChatResponse::text("Asked again.", usage(1, 1)),
            ChatResponse::text("Noted by hand.", usage(1, 1)),
        ];
        let s = setup(&db.db, responses);
        // Claimed (running) but cut off before it went on: the decision and the dispatch of
        // `c1` are journaled, its result is not.
        let claimed = s
            .service
            .start(configuration("write a"), "alice")
            .await
            .unwrap();
        s.service
            .claim(
                claimed.id,
                &Decision::ApproveAll,
                &Actor::headless("bob"),
                None,
            )
            .await
            .unwrap();
        // A worker took the claimed decision, then the server stopped.
        s.store
            .take_run(claimed.id, now_ms())
            .await
            .unwrap()
            .unwrap();
        let waiting = s
            .service
            .start(configuration("write b"), "alice")
            .await
            .unwrap();
        let done = s
            .service
            .start(configuration("say"), "alice")
            .await
            .unwrap();
        // Created, taken by a worker, but cut off before its first model call.
        let fresh = s
            .service
            .create(configuration("never driven"), "alice")
            .await
            .unwrap();
        let fresh = s.store.take_run(fresh.id, now_ms()).await.unwrap().unwrap();
        assert_eq!(done.status, RunStatus::Completed);

        // A run cut off before any effect asks the model again.
        let fresh = s.service.recover(fresh.id).await.unwrap();
        assert_eq!(fresh.status, RunStatus::Completed, "{}", db.name);
        assert_eq!(fresh.final_answer.as_deref(), Some("Asked again."));
        let kinds = event_kinds(&s.store, fresh.id).await;
        assert!(kinds.contains(&"recovered".to_owned()), "{kinds:?}");

        // `write_note` is not idempotent by key: a dispatched call with no result is not run
        // again; the run waits with the call marked, and the decision stays on record.
        let recovered = s.service.recover(claimed.id).await.unwrap();
        assert_eq!(
            recovered.status,
            RunStatus::WaitingForApproval,
            "{}",
            db.name
        );
        assert_eq!(s.probe.count("write_note"), 0);
        let state =
            nrllm_core::SuspendedState::from_json(recovered.suspended_state.as_ref().unwrap())
                .unwrap();
        assert_eq!(state.unknown.len(), 1);
        assert_eq!(state.unknown[0].call_id, "c1");
        assert_eq!(state.unknown[0].effect_key, format!("{}/1/c1", claimed.id));
        assert_eq!(
            recovered.decided_by, None,
            "a new wait shows no old decision"
        );
        let kinds = event_kinds(&s.store, claimed.id).await;
        assert!(kinds.contains(&"approval_decided".to_owned()), "{kinds:?}");
        assert!(kinds.contains(&"outcome_unknown".to_owned()), "{kinds:?}");
        // Recovering twice changes nothing.
        let again = s.service.recover(claimed.id).await.unwrap();
        assert_eq!(again.version, recovered.version);

        // The operator records what happened; the model reads it and the tool never runs.
        let decision = Decision::PerCall {
            calls: vec![nrllm_core::decision::CallDecision {
                call_id: "c1".into(),
                choice: nrllm_core::decision::Choice::Respond {
                    result: "The note was written at 10:02.".into(),
                },
            }],
        };
        let ended = s
            .service
            .resume(claimed.id, &decision, &Actor::headless("carol"), None)
            .await
            .unwrap();
        assert_eq!(ended.status, RunStatus::Completed, "{}", db.name);
        assert_eq!(s.probe.count("write_note"), 0);
        let last = s.provider.requests().pop().unwrap();
        assert!(
            serde_json::to_string(&last.messages)
                .unwrap()
                .contains("The note was written at 10:02."),
            "the model reads the operator's result"
        );

        // Runs that were not running are left alone.
        for (id, status) in [
            (waiting.id, RunStatus::WaitingForApproval),
            (done.id, RunStatus::Completed),
        ] {
            let run = s.service.recover(id).await.unwrap();
            assert_eq!(run.status, status);
        }
        db.cleanup().await;
    }
}

async fn event_kinds(store: &Arc<SqlRunStore>, id: uuid::Uuid) -> Vec<String> {
    store
        .events(id, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

#[tokio::test]
async fn a_new_run_whose_configuration_cannot_be_read_ends_failed_not_running() {
    for db in backends().await {
        let s = setup(&db.db, vec![ChatResponse::text("never asked", usage(1, 1))]);
        let mut run = s
            .service
            .create(configuration("hello"), "alice")
            .await
            .unwrap();
        run.configuration = None;
        let err = s.service.drive(run.clone()).await.unwrap_err();
        assert_eq!(err.to_string(), "the run's configuration cannot be read");
        let stored = s.store.get(run.id).await.unwrap().unwrap();
        assert_eq!(stored.status, RunStatus::Failed, "{}", db.name);
        assert_eq!(
            stored.termination_reason.as_deref(),
            Some("state_corrupted")
        );
        assert!(stored
            .error_summary
            .unwrap()
            .contains("configuration could not be read"));
        assert!(s.provider.requests().is_empty());
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_lease_is_held_by_one_instance_and_a_lost_lease_writes_nothing() {
    for db in backends().await {
        let lease_ms = 1_000;
        let a = Arc::new(SqlRunStore::new(db.db.clone()).with_lease("instance-a", lease_ms));
        let b = Arc::new(SqlRunStore::new(db.db.clone()).with_lease("instance-b", lease_ms));
        let now = now_ms();
        let run = a
            .create(
                &nrllm_core::run_store::NewRun {
                    id: uuid::Uuid::now_v7(),
                    configuration: configuration("lease"),
                    requested_by: "alice".into(),
                    copied: Vec::new(),
                    trace: nrllm_core::trace::RunTrace::start(None),
                },
                now,
                true,
            )
            .await
            .unwrap();
        // Held and renewed by A: nobody reaps it, B cannot take it.
        assert!(
            held(a.renew_lease(run.id, now).await.unwrap()),
            "{}",
            db.name
        );
        assert!(!held(b.renew_lease(run.id, now).await.unwrap()));
        assert!(b.expired_leases(now + 10, 10).await.unwrap().is_empty());
        assert!(!b.take_lease(run.id, now + 10, false).await.unwrap());

        // A stops renewing: after the lease, exactly one of two reapers takes the run.
        let later = now + lease_ms + 1;
        assert_eq!(b.expired_leases(later, 10).await.unwrap(), [run.id]);
        let c = Arc::new(SqlRunStore::new(db.db.clone()).with_lease("instance-c", lease_ms));
        let (by_b, by_c) = tokio::join!(
            b.take_lease(run.id, later, false),
            c.take_lease(run.id, later, false)
        );
        assert!(
            by_b.unwrap() ^ by_c.unwrap(),
            "{}: one reaper wins",
            db.name
        );
        let (winner, loser) = if held(b.renew_lease(run.id, later).await.unwrap()) {
            (b.clone(), c.clone())
        } else {
            (c.clone(), b.clone())
        };
        assert_eq!(
            loser.renew_lease(run.id, later).await.unwrap(),
            nrllm_core::run_store::Renewal::Gone
        );

        // A wakes up and writes its segment: refused, and nothing is written.
        let state = empty_state();
        let events = vec![SequencedEvent {
            sequence: 1,
            event: Event::Recovered {
                resumes_at: "zombie".into(),
            },
            created_at_ms: later,
        }];
        let refused = a
            .suspend(run.id, run.version, Kept::new(&state), &events, later, None)
            .await;
        assert!(
            matches!(refused, Err(StoreError::LeaseLost { .. })),
            "{}: {refused:?}",
            db.name
        );
        let finish = Finish {
            status: RunStatus::Completed,
            reason: TerminationReason::Completed,
            counters: Counters::default(),
            truncated: false,
            final_answer: Some("zombie".into()),
            error_summary: None,
            estimated_cost_micros: None,
        };
        assert!(matches!(
            a.finish(run.id, run.version, &finish, &events, later).await,
            Err(StoreError::LeaseLost { .. })
        ));
        assert!(a.events(run.id, 0).await.unwrap().is_empty());
        assert_eq!(
            a.get(run.id).await.unwrap().unwrap().status,
            RunStatus::Running
        );

        // The takeover moved the run's version on (the lease's epoch: a tool of A fenced on
        // the old one writes nothing either).
        let taken = winner.get(run.id).await.unwrap().unwrap();
        assert_eq!(taken.version, run.version + 1, "{}", db.name);
        // The new owner's writes go through (the run comes back as it now is, as a read finds
        // it); a finished run holds no lease.
        let ended = winner
            .finish(run.id, taken.version, &finish, &events, later)
            .await
            .unwrap();
        assert_eq!(ended.status, RunStatus::Completed, "{}", db.name);
        assert_eq!(ended.final_answer.as_deref(), Some("zombie"));
        assert_eq!(ended.version, run.version + 2);
        assert_eq!(
            format!("{ended:?}"),
            format!("{:?}", winner.get(run.id).await.unwrap().unwrap()),
            "{}",
            db.name
        );
        assert!(!held(winner.renew_lease(run.id, later).await.unwrap()));
        assert!(winner
            .expired_leases(later + 10 * lease_ms, 10)
            .await
            .unwrap()
            .is_empty());
        // Forced (the only instance, at start) takes only running runs.
        assert!(!a.take_lease(run.id, later, true).await.unwrap());
        db.cleanup().await;
    }
}

#[tokio::test]
async fn purge_racing_a_claim_never_deletes_the_claimed_run() {
    for db in backends().await {
        let turns = (0..12)
            .map(|i| {
                call_turn(
                    &format!("c{i}"),
                    "write_note",
                    json!({"text": "x"}),
                    usage(1, 1),
                )
            })
            .collect();
        let s = setup(&db.db, turns);
        let (mut claimed, mut purged) = (0, 0);
        for _ in 0..12 {
            let run = s
                .service
                .start(configuration("race"), "alice")
                .await
                .unwrap();
            assert_eq!(run.status, RunStatus::WaitingForApproval);
            let purger = SqlRunStore::new(db.open(1).await);
            let claimer = RunService::new(
                Arc::new(SqlRunStore::new(db.open(1).await)),
                Arc::new(SingleLoop(Arc::new(ToolLoop::new(
                    Arc::new(s.provider.clone()),
                    Arc::new(probe_registry(&s.probe)),
                )))),
            );
            let far = now_ms() + 60_000;
            let bob = Actor::headless("bob");
            let (purge, claim) = tokio::join!(
                purger.purge(0, far, 10),
                claimer.claim(run.id, &Decision::ApproveAll, &bob, None)
            );
            let purge = purge.unwrap();
            let stored = s.store.get(run.id).await.unwrap();
            match claim {
                Ok(_) => {
                    claimed += 1;
                    let stored = stored.expect("a claimed run is never purged");
                    assert_eq!(stored.status, RunStatus::Queued, "{}", db.name);
                    assert_eq!(purge.runs, 0);
                }
                Err(err) => {
                    purged += 1;
                    assert!(stored.is_none(), "{}: {err:?}", db.name);
                    assert_eq!(purge.runs, 1);
                }
            }
        }
        eprintln!(
            "{}: {claimed} claimed first, {purged} purged first",
            db.name
        );
        db.cleanup().await;
    }
}

#[tokio::test]
#[ignore = "needs Postgres (TEST_DATABASE_URL); make test runs it"]
async fn on_postgres_every_commit_of_steps_is_announced_to_listeners() {
    let db = common::postgres_from_env().await;
    let mut heard = nrllm_store::notify::RunNotifications::connect(&db.url)
        .await
        .unwrap();
    let s = setup(&db.db, gated_then_answer());
    let run = s
        .service
        .start(configuration("hear"), "alice")
        .await
        .unwrap();
    let announced = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            if heard.next().await.unwrap()
                == nrllm_store::notify::Heard::Notice(nrllm_store::notify::Notice::Run(run.id))
            {
                return;
            }
        }
    })
    .await;
    assert!(announced.is_ok(), "the suspension's commit was announced");
    // A transaction that rolls back announces nothing: a refused write of the same run.
    let refused = s
        .store
        .suspend(
            run.id,
            run.version - 1,
            Kept::new(
                &nrllm_core::state::SuspendedState::from_json(
                    run.suspended_state.as_deref().unwrap(),
                )
                .unwrap(),
            ),
            &[],
            now_ms(),
            None,
        )
        .await;
    assert!(refused.is_err());
    // (Other tests share the database and its channel: only this run counts.)
    let silent = tokio::time::timeout(std::time::Duration::from_millis(500), async {
        loop {
            if heard.next().await.unwrap()
                == nrllm_store::notify::Heard::Notice(nrllm_store::notify::Notice::Run(run.id))
            {
                return;
            }
        }
    })
    .await;
    assert!(silent.is_err(), "a rolled-back write was announced");
    // A tool switched off is announced too, so every instance reads the settings again.
    let settings = nrllm_store::tool_settings::ToolSettingsStore::new(db.db.clone());
    settings
        .set_tool(&ToolRegistry::new(), "write_note", false)
        .await
        .unwrap();
    let told = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            if heard.next().await.unwrap()
                == nrllm_store::notify::Heard::Notice(nrllm_store::notify::Notice::ToolSettings)
            {
                return;
            }
        }
    })
    .await;
    assert!(told.is_ok(), "a tool setting's change was announced");
    db.cleanup().await;
}

#[tokio::test]
async fn an_overdue_turn_is_found_and_expires_once_and_the_model_reads_it() {
    for db in backends().await {
        let s = setup(&db.db, gated_then_answer());
        let mut patient = configuration("expire");
        patient.approval_timeout_ms = Some(1_000);
        let run = s.service.start(patient, "alice").await.unwrap();
        let deadline = run.approval_deadline_ms.expect("a deadline");
        assert!(s
            .store
            .expired_approvals(deadline - 1, 10)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(
            s.store.expired_approvals(deadline, 10).await.unwrap(),
            [run.id]
        );
        // Not due yet: nothing to expire (the test runs well within the second).
        assert!(matches!(
            s.service.claim_expired(run.id).await,
            Err(ResumeError::NotWaiting(_))
        ));
        tokio::time::sleep(std::time::Duration::from_millis(1_050)).await;
        // Too late for an operator; the deadline claims it, once.
        let late = s
            .service
            .resume(run.id, &Decision::ApproveAll, &Actor::headless("bob"), None)
            .await;
        assert!(
            matches!(late, Err(ResumeError::Expired(_))),
            "{}: {late:?}",
            db.name
        );
        let claimed = s.service.claim_expired(run.id).await.unwrap();
        assert!(matches!(
            s.service.claim_expired(run.id).await,
            Err(ResumeError::NotWaiting(_))
        ));
        let done = s.service.continue_claimed(claimed).await.unwrap();
        assert_eq!(
            done.termination_reason.as_deref(),
            Some("approval_expired"),
            "{}",
            db.name
        );
        assert_eq!(done.decision.as_deref(), Some("expired"));
        assert_eq!(s.probe.count("write_note"), 0, "the expired call never ran");
        let kinds = kinds(&s.store.events(run.id, 0).await.unwrap());
        assert!(kinds.contains(&"approval_expired".to_owned()), "{kinds:?}");
        let asked = s.provider.requests();
        let last = serde_json::to_string(&asked.last().unwrap().messages).unwrap();
        assert!(last.contains("before the approval deadline"), "{last}");
        let text = ResumeError::NotWaiting(Box::new(done)).to_string();
        assert!(text.starts_with("expired at "), "{text}");
        db.cleanup().await;
    }
}

/// A suspended state with nothing in it (for writes that are refused before it matters).
fn empty_state() -> nrllm_core::state::SuspendedState {
    nrllm_core::state::SuspendedState {
        schema_version: nrllm_core::state::STATE_SCHEMA_VERSION,
        messages: Vec::new(),
        pending: Vec::new(),
        gated: Vec::new(),
        counters: Counters::default(),
        settings: RunSettings::default(),
        recorded_messages: 0,
        answered: Vec::new(),
        unknown: Vec::new(),
        ruled: Vec::new(),
        questions: Vec::new(),
        budget: None,
        approvals_required: 1,
        elicited: None,
        waiting_since_ms: None,
    }
}

fn held(renewal: nrllm_core::run_store::Renewal) -> bool {
    matches!(renewal, nrllm_core::run_store::Renewal::Held(_))
}

/// The runs' ids, in order.
fn ids(runs: &[RunRecord]) -> Vec<uuid::Uuid> {
    runs.iter().map(|run| run.id).collect()
}

fn new_run(prompt: &str) -> nrllm_core::run_store::NewRun {
    nrllm_core::run_store::NewRun {
        id: uuid::Uuid::now_v7(),
        configuration: configuration(prompt),
        requested_by: "alice".into(),
        copied: Vec::new(),
        trace: nrllm_core::trace::RunTrace::start(None),
    }
}

#[tokio::test]
async fn queued_runs_are_taken_oldest_first_each_by_exactly_one_of_two_takers() {
    for db in backends().await {
        let one = SqlRunStore::new(db.db.clone()).with_lease("one", 30_000);
        let two = SqlRunStore::new(db.db.clone()).with_lease("two", 30_000);
        let mut ids = Vec::new();
        for n in 0..30 {
            let new = new_run("q");
            let run = one.create(&new, 1_000 + n, false).await.unwrap();
            // Its trace is stored as created, and read back.
            assert_eq!(run.trace.as_ref(), Some(&new.trace), "{}", db.name);
            let read = one.get(run.id).await.unwrap().unwrap();
            assert_eq!(read.trace, Some(new.trace));
            assert_eq!(
                (run.status, run.queued_at_ms, run.started_at_ms),
                (RunStatus::Queued, Some(1_000 + n), None)
            );
            ids.push(run.id);
        }
        assert_eq!(one.queue_position(ids[0]).await.unwrap(), Some(1));
        assert_eq!(two.queue_position(ids[29]).await.unwrap(), Some(30));

        // The oldest first.
        let first = one.take_queued(now_ms(), 1).await.unwrap();
        assert_eq!(
            first.iter().map(|r| r.id).collect::<Vec<_>>(),
            vec![ids[0]],
            "{}",
            db.name
        );
        assert_eq!(first[0].status, RunStatus::Running);
        assert_eq!(one.queue_position(ids[0]).await.unwrap(), None);
        assert_eq!(one.queue_position(ids[1]).await.unwrap(), Some(1));

        // Two takers at once, three at a time: every run taken, none twice.
        let take = |store: SqlRunStore, owner: &'static str| async move {
            let mut got = Vec::new();
            loop {
                let batch = store.take_queued(now_ms(), 3).await.unwrap();
                if batch.is_empty() {
                    return got;
                }
                for run in &batch {
                    assert_eq!(run.status, RunStatus::Running);
                    let held: Option<String> =
                        sqlx::query_scalar("SELECT lease_owner FROM agent_run WHERE id = $1")
                            .bind(run.id.to_string())
                            .fetch_one(store.database().pool())
                            .await
                            .unwrap();
                    assert_eq!(held.as_deref(), Some(owner));
                }
                got.extend(batch.into_iter().map(|run| run.id));
                tokio::task::yield_now().await;
            }
        };
        let (a, b) = tokio::join!(take(one.clone(), "one"), take(two.clone(), "two"));
        let mut all: Vec<_> = a.iter().chain(&b).copied().collect();
        all.sort();
        let mut expected = ids[1..].to_vec();
        expected.sort();
        assert_eq!(all, expected, "{}: {} + {}", db.name, a.len(), b.len());
        // A run taken is not taken again, by either.
        assert!(two.take_run(ids[5], now_ms()).await.unwrap().is_none());
        assert!(one.take_queued(now_ms(), 10).await.unwrap().is_empty());
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_claimed_decision_waits_queued_and_any_instance_carries_it_out_once() {
    for db in backends().await {
        let s = setup(&db.db, gated_then_answer());
        let run = s
            .service
            .start(configuration("write hi"), "alice")
            .await
            .unwrap();
        s.service
            .claim(run.id, &Decision::ApproveAll, &Actor::headless("bob"), None)
            .await
            .unwrap();
        let queued = s.store.get(run.id).await.unwrap().unwrap();
        assert_eq!(queued.status, RunStatus::Queued);
        assert_eq!(s.probe.count("write_note"), 0, "nothing ran at the claim");
        // Another instance's worker takes it and carries the decision out.
        let other = Arc::new(SqlRunStore::new(db.db.clone()).with_lease("other", 30_000));
        let registry: Arc<ToolRegistry> = Arc::new(probe_registry(&s.probe));
        let tool_loop = Arc::new(ToolLoop::new(Arc::new(s.provider.clone()), registry));
        let worker = RunService::new(other, Arc::new(SingleLoop(tool_loop)));
        let work = worker.take_next(4).await.unwrap();
        assert_eq!(work.len(), 1);
        assert!(
            s.service.take_next(4).await.unwrap().is_empty(),
            "taken once"
        );
        let done = worker.work(work.into_iter().next().unwrap()).await.unwrap();
        assert_eq!(done.status, RunStatus::Completed, "{}", db.name);
        assert_eq!(done.final_answer.as_deref(), Some("Wrote it."));
        assert_eq!(s.probe.count("write_note"), 1);
        db.cleanup().await;
    }
}

/// A run whose server asked inside a call instance "one" holds open: once answered (queued),
/// only "one" takes it while its hold lasts (and can take only such runs, for the slots its
/// held calls keep); the hold is renewed like a lease, lapses when not, and is released at a
/// lone instance's start.
#[tokio::test]
async fn a_run_waiting_on_a_call_held_open_is_taken_only_by_the_instance_that_holds_it() {
    for db in backends().await {
        let lease_ms = 1_000;
        let one = SqlRunStore::new(db.db.clone()).with_lease("one", lease_ms);
        let two = SqlRunStore::new(db.db.clone()).with_lease("two", lease_ms);
        let now = now_ms();
        // Suspends waiting for input, with or without the call held open, and is then answered:
        // queued (as the claim leaves it).
        let waiting = |held: bool| {
            let one = one.clone();
            async move {
                let run = one.create(&new_run("held"), now, true).await.unwrap();
                let mut asked = nrllm_core::elicit::asked(
                    "notes",
                    "k1",
                    "Name?",
                    &json!({"type": "object", "properties": {}}),
                    None,
                )
                .unwrap();
                asked.held_until_ms = held.then_some(now + 600_000);
                let mut state = empty_state();
                state.elicited = Some(nrllm_core::elicit::Elicited {
                    call_id: "c1".into(),
                    asked,
                    choices: Vec::new(),
                    effect_keys: Default::default(),
                    approved_bases: Default::default(),
                    notes: Default::default(),
                });
                let run = one
                    .suspend(run.id, run.version, Kept::new(&state), &[], now, None)
                    .await
                    .unwrap();
                assert_eq!(run.status, RunStatus::WaitingForInput);
                sqlx::query(
                    "UPDATE agent_run SET status = 'queued', queued_at_ms = $1 WHERE id = $2",
                )
                .bind(now)
                .bind(run.id.to_string())
                .execute(one.database().pool())
                .await
                .unwrap();
                run.id
            }
        };
        let held = waiting(true).await;
        let free = waiting(false).await;
        let hold = |id: uuid::Uuid| {
            let db = db.db.clone();
            async move {
                let row: (Option<String>, Option<i64>) =
                    sqlx::query_as("SELECT held_by, held_until_ms FROM agent_run WHERE id = $1")
                        .bind(id.to_string())
                        .fetch_one(db.pool())
                        .await
                        .unwrap();
                row
            }
        };
        assert_eq!(
            hold(held).await,
            (Some("one".into()), Some(now + lease_ms)),
            "{}",
            db.name
        );
        assert_eq!(hold(free).await, (None, None));

        // The other instance takes only the run nobody holds, even asked by id.
        let taken = two.take_queued(now, 10).await.unwrap();
        assert_eq!(ids(&taken), [free], "{}", db.name);
        assert!(two.take_run(held, now).await.unwrap().is_none());
        // Renewed by its holder, the hold outlasts the first lease.
        assert_eq!(one.renew_holds(now + 900).await.unwrap(), 1);
        assert_eq!(two.renew_holds(now + 900).await.unwrap(), 0);
        assert!(two
            .take_queued(now + lease_ms + 100, 10)
            .await
            .unwrap()
            .is_empty());
        // Not renewed, it lapses: anyone takes the run, and the hold ends with the take.
        let later = now + 900 + lease_ms + 1;
        let taken = two.take_queued(later, 10).await.unwrap();
        assert_eq!(ids(&taken), [held], "{}", db.name);
        assert_eq!(hold(held).await, (None, None));

        // Its holder takes such a run at once; a lone instance's start releases the holds of the
        // process before it.
        let mine = waiting(true).await;
        let anyones = waiting(false).await;
        assert!(two.take_held(now, 10).await.unwrap().is_empty());
        let taken = one.take_held(now, 10).await.unwrap();
        assert_eq!(ids(&taken), [mine], "{}", db.name);
        assert_eq!(hold(mine).await, (None, None));
        let taken = one.take_queued(now, 10).await.unwrap();
        assert_eq!(ids(&taken), [anyones]);
        let orphan = waiting(true).await;
        assert_eq!(one.release_holds().await.unwrap(), 0, "its own holds stay");
        assert_eq!(two.release_holds().await.unwrap(), 1);
        assert_eq!(hold(orphan).await, (None, None));
        assert_eq!(two.take_queued(now, 10).await.unwrap().len(), 1);
        db.cleanup().await;
    }
}

#[tokio::test]
async fn cancel_stops_a_running_run_and_names_the_approved_call_in_flight_as_outcome_unknown() {
    for db in backends().await {
        let s = setup(
            &db.db,
            vec![call_turn(
                "c1",
                "write_note",
                json!({"text": "hang"}),
                usage(10, 2),
            )],
        );
        let service = Arc::new(s.service);
        let run = service
            .start(configuration("write"), "alice")
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::WaitingForApproval);
        let claimed = service
            .claim(run.id, &Decision::ApproveAll, &Actor::headless("bob"), None)
            .await
            .unwrap();
        let driving = tokio::spawn({
            let service = Arc::clone(&service);
            async move { service.continue_claimed(claimed).await }
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while s.probe.count("write_note") == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the call never started"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        // Asked while the call is in flight: recorded, and the run stops at once here.
        let asked = service
            .cancel(run.id, &Actor::headless("olga"), Some("wrong note"))
            .await
            .unwrap();
        assert_eq!(asked.status, RunStatus::Running);
        assert_eq!(
            asked.cancel_requested.as_ref().map(|r| r.by.as_str()),
            Some("olga")
        );
        let done = tokio::time::timeout(std::time::Duration::from_secs(5), driving)
            .await
            .expect("the run stopped")
            .unwrap()
            .unwrap();
        assert_eq!(done.status, RunStatus::Cancelled, "{}", db.name);
        assert_eq!(done.termination_reason.as_deref(), Some("cancelled"));
        let events = s.store.events(run.id, 0).await.unwrap();
        match events.last().and_then(|e| e.event()) {
            Some(Event::Cancelled {
                by,
                reason,
                abandoned,
                unknown,
            }) => {
                assert_eq!(
                    (by.as_str(), reason.as_deref()),
                    ("olga", Some("wrong note"))
                );
                assert!(abandoned.is_some());
                assert_eq!(unknown.len(), 1, "{unknown:?}");
                assert_eq!(unknown[0].call_id, "c1");
                assert!(!unknown[0].effect_key.is_empty());
            }
            other => panic!("{}: last step {other:?}", db.name),
        }
        // Cancelled is final.
        assert!(matches!(
            service.cancel(run.id, &Actor::headless("olga"), None).await,
            Err(ServiceError::Store(StoreError::InvalidTransition { .. }))
        ));
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_cancel_asked_on_another_instance_reaches_the_driver_and_stops_a_suspend() {
    for db in backends().await {
        let driver = SqlRunStore::new(db.db.clone()).with_lease("driver", 30_000);
        let other = SqlRunStore::new(db.db.clone()).with_lease("other", 30_000);
        let run = driver.create(&new_run("x"), now_ms(), true).await.unwrap();
        assert_eq!(
            driver.renew_lease(run.id, now_ms()).await.unwrap(),
            nrllm_core::run_store::Renewal::Held(None)
        );
        let asked = other
            .cancel(run.id, "olga", Some("stop"), now_ms())
            .await
            .unwrap();
        assert_eq!(asked.status, RunStatus::Running);
        // The driver's heartbeat hears of it; the second request does not replace the first.
        other.cancel(run.id, "vic", None, now_ms()).await.unwrap();
        let request = nrllm_core::run_store::CancelRequest {
            by: "olga".into(),
            reason: Some("stop".into()),
        };
        assert_eq!(
            driver.renew_lease(run.id, now_ms()).await.unwrap(),
            nrllm_core::run_store::Renewal::Held(Some(request.clone()))
        );
        // A segment that would now suspend is refused with the request.
        let state = empty_state();
        let refused = driver
            .suspend(run.id, run.version, Kept::new(&state), &[], now_ms(), None)
            .await;
        assert!(
            matches!(&refused, Err(StoreError::CancelRequested { request: r, .. }) if *r == request),
            "{}: {refused:?}",
            db.name
        );
        assert_eq!(
            other.renew_lease(run.id, now_ms()).await.unwrap(),
            nrllm_core::run_store::Renewal::Gone,
            "not held by the other"
        );
        db.cleanup().await;
    }
}

/// A factory whose model cannot be reached (its key was removed, say).
struct Unreachable;

impl LoopFactory for Unreachable {
    fn tool_loop(
        &self,
        _configuration: &RunConfiguration,
    ) -> Result<Arc<dyn nrllm_core::ToolLoopService>, String> {
        Err("set the environment variable TEST_KEY to its API key".to_owned())
    }
}

#[tokio::test]
async fn a_queued_decision_whose_model_cannot_be_reached_fails_with_the_reason() {
    for db in backends().await {
        let s = setup(&db.db, gated_then_answer());
        let run = s
            .service
            .start(configuration("write hi"), "alice")
            .await
            .unwrap();
        s.service
            .claim(run.id, &Decision::ApproveAll, &Actor::headless("bob"), None)
            .await
            .unwrap();
        // The worker that takes it cannot build the run's loop.
        let worker = RunService::new(
            Arc::new(SqlRunStore::new(db.db.clone()).with_lease("other", 30_000)),
            Arc::new(Unreachable),
        );
        assert!(
            worker.take_next(4).await.unwrap().is_empty(),
            "no work to do"
        );
        let failed = s.store.get(run.id).await.unwrap().unwrap();
        assert_eq!(failed.status, RunStatus::Failed, "{}", db.name);
        assert_eq!(
            failed.termination_reason.as_deref(),
            Some("provider_failed")
        );
        assert_eq!(
            failed.error_summary.as_deref(),
            Some("set the environment variable TEST_KEY to its API key")
        );
        assert_eq!(s.probe.count("write_note"), 0, "nothing ran");
        db.cleanup().await;
    }
}

#[tokio::test]
async fn approval_rules_decide_later_calls_and_their_steps_name_the_rule() {
    use nrllm_core::rules::{Condition, MatchOp, RuleDraft, RuleEffect, RuleScope};
    use nrllm_core::submit::{Submission, SubmittedCall};
    for db in backends().await {
        let responses = vec![
            call_turn("c1", "write_note", json!({"text": "a"}), usage(1, 1)),
            call_turn("c2", "write_note", json!({"text": "b"}), usage(1, 1)),
            ChatResponse::text("Wrote both.", usage(1, 1)),
            call_turn(
                "d1",
                "write_note",
                json!({"text": "Forbidden"}),
                usage(1, 1),
            ),
            ChatResponse::text("It was refused.", usage(1, 1)),
        ];
        let s = setup(&db.db, responses);
        let run = s
            .service
            .start(configuration("write a then b"), "alice")
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::WaitingForApproval);
        // Approving the first call, the operator asks to always approve write_note here.
        let submission = Submission {
            decision: "approve_all".into(),
            calls: vec![SubmittedCall {
                call_id: "c1".into(),
                remember: Some("run".into()),
                ..SubmittedCall::default()
            }],
            ..Submission::default()
        };
        let claimed = s
            .service
            .claim_submission(run.id, &submission, &Actor::headless("bob"), None)
            .await
            .unwrap();
        // The rule is stored with the claim, as bob's.
        let rules = s.store.rules_for(run.id, "scripted").await.unwrap();
        assert_eq!(rules.len(), 1, "{}", db.name);
        assert_eq!(rules[0].created_by, "bob");
        let done = s.service.continue_claimed(claimed).await.unwrap();
        assert_eq!(done.status, RunStatus::Completed, "{}", db.name);
        assert_eq!(done.final_answer.as_deref(), Some("Wrote both."));
        assert_eq!(s.probe.count("write_note"), 2);
        let events = s.store.events(run.id, 0).await.unwrap();
        // The second call never waited: one approval request, two decisions.
        let count = |kind: &str| events.iter().filter(|e| e.kind == kind).count();
        assert_eq!(count("approval_requested"), 1, "{:?}", kinds(&events));
        assert_eq!(count("approval_decided"), 2, "{:?}", kinds(&events));
        let c2 = events
            .iter()
            .filter_map(|e| e.event())
            .find_map(|e| match e {
                Event::Tool {
                    call_id,
                    note,
                    executed,
                    ..
                } if call_id == "c2" => Some((note, executed)),
                _ => None,
            })
            .unwrap();
        let note = c2.0.unwrap_or_default();
        assert!(c2.1);
        assert!(
            note.starts_with(&format!("auto-approved by rule {}", rules[0].id))
                && note.contains("added by bob"),
            "{note}"
        );
        // It was journaled like an approved call: dispatched with its key, result recorded.
        let effects = s.store.effects(run.id).await.unwrap();
        let c2 = effects.iter().find(|e| e.call_id == "c2").unwrap();
        assert_eq!(c2.result.as_ref().unwrap().0, "wrote: b", "{}", db.name);

        // An administrator's rule refuses matching calls in the whole configuration.
        let deny = s
            .store
            .add_rule(
                &RuleDraft {
                    scope: RuleScope::Configuration("scripted".into()),
                    tool: "write_note".into(),
                    effect: RuleEffect::Deny,
                    conditions: vec![Condition {
                        argument: "text".into(),
                        op: MatchOp::Equals,
                        value: "forbidden".into(),
                    }],
                },
                "admin",
                now_ms(),
            )
            .await
            .unwrap();
        let refused = s
            .service
            .start(configuration("write the forbidden note"), "alice")
            .await
            .unwrap();
        assert_eq!(refused.status, RunStatus::Completed, "{}", db.name);
        assert_eq!(s.probe.count("write_note"), 2, "nothing more ran");
        let answer = s
            .provider
            .requests()
            .last()
            .unwrap()
            .messages
            .iter()
            .rev()
            .find_map(|m| match m {
                nrllm_core::transcript::Message::Tool { content, .. } => Some(content.clone()),
                _ => None,
            })
            .unwrap();
        assert!(
            answer.contains(&format!("refused by rule {}", deny.id)),
            "{answer}"
        );

        // Rules are listed newest first, read one by one, and removed.
        let listed = s.store.list_rules(10).await.unwrap();
        assert_eq!(
            listed.iter().map(|r| r.id).collect::<Vec<_>>(),
            [deny.id, rules[0].id]
        );
        assert_eq!(s.store.rule(deny.id).await.unwrap(), Some(deny.clone()));
        assert_eq!(
            s.store.remove_rule(deny.id).await.unwrap(),
            Some(deny.clone())
        );
        assert_eq!(s.store.rule(deny.id).await.unwrap(), None);
        assert_eq!(s.store.remove_rule(deny.id).await.unwrap(), None);
        // A run's rules go with the run.
        let purged = s
            .store
            .purge(now_ms() + 1, now_ms() + 1, 100)
            .await
            .unwrap();
        assert!(purged.runs >= 2);
        assert!(
            s.store.list_rules(10).await.unwrap().is_empty(),
            "{}",
            db.name
        );
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_fork_copies_the_steps_before_it_reruns_none_of_them_and_goes_its_own_way() {
    use nrllm_core::run_service::ForkError;
    for db in backends().await {
        let responses = vec![
            call_turn("c1", "write_note", json!({"text": "a"}), usage(1, 1)),
            ChatResponse::text("Wrote a.", usage(1, 1)),
            ChatResponse::text("Not written, as you said.", usage(1, 1)),
            call_turn("c9", "read_note", json!({"text": "b"}), usage(1, 1)),
            ChatResponse::text("Read b.", usage(1, 1)),
        ];
        let s = setup(&db.db, responses);
        let parent = s
            .service
            .start(configuration("write a"), "alice")
            .await
            .unwrap();
        let parent = s
            .service
            .resume(
                parent.id,
                &Decision::ApproveAll,
                &Actor::headless("bob"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(parent.final_answer.as_deref(), Some("Wrote a."));
        assert_eq!(s.probe.count("write_note"), 1);
        let steps = s.store.events(parent.id, 0).await.unwrap();
        let k = steps
            .iter()
            .find(|e| e.kind == "approval_requested")
            .unwrap()
            .sequence;

        // From the step where the turn waited: the same turn is decided again, differently.
        // The parent ran its call after that step, so the fork shows it as outcome unknown.
        let fork = s
            .service
            .fork(parent.id, k, None, &Actor::headless("carol"), true)
            .await
            .unwrap();
        let fork = s.service.drive(fork).await.unwrap();
        assert_eq!(fork.status, RunStatus::WaitingForApproval, "{}", db.name);
        let forked = s.store.events(fork.id, 0).await.unwrap();
        let same = |a: &nrllm_core::run_store::StoredEvent,
                    b: &nrllm_core::run_store::StoredEvent| {
            (a.sequence, &a.kind, &a.payload) == (b.sequence, &b.kind, &b.payload)
        };
        assert!(
            forked[..k as usize]
                .iter()
                .zip(&steps[..k as usize])
                .all(|(a, b)| same(a, b)),
            "{}: steps 1..{k} are the parent's",
            db.name
        );
        assert_eq!(
            kinds(&forked[k as usize..]),
            ["recovered", "outcome_unknown", "approval_requested"],
            "{}",
            db.name
        );
        assert_eq!(
            s.probe.count("write_note"),
            1,
            "nothing of the parent ran again"
        );
        let fork = s
            .service
            .resume(
                fork.id,
                &Decision::DenyAll {
                    reason: Some("not this time".into()),
                },
                &Actor::headless("dave"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(
            fork.final_answer.as_deref(),
            Some("Not written, as you said.")
        );
        assert_eq!(s.probe.count("write_note"), 1);
        // The parent lists what came of it; the fork names its parent.
        let children = s.store.children(parent.id, 10).await.unwrap();
        assert_eq!(ids(&children), [fork.id]);
        assert_eq!(
            fork.configuration.unwrap().continues.unwrap().parent,
            parent.id
        );

        // From the last step, with another prompt: the transcript goes on with it.
        let last = steps.last().unwrap().sequence;
        let again = s
            .service
            .fork(
                parent.id,
                last,
                Some("read b"),
                &Actor::headless("carol"),
                true,
            )
            .await
            .unwrap();
        let again = s.service.drive(again).await.unwrap();
        assert_eq!(
            again.final_answer.as_deref(),
            Some("Read b."),
            "{}",
            db.name
        );
        let sent = &s.provider.requests()[3].messages;
        assert!(
            matches!(sent.last(), Some(nrllm_core::transcript::Message::User { content }) if content == "read b")
        );
        assert!(sent.iter().any(|m| matches!(
            m,
            nrllm_core::transcript::Message::Assistant { content: Some(text), .. } if text == "Wrote a."
        )));
        assert_eq!(
            (s.probe.count("write_note"), s.probe.count("read_note")),
            (1, 1)
        );

        // Refusals say why.
        assert!(matches!(
            s.service
                .fork(parent.id, k, Some("x"), &Actor::headless("carol"), false)
                .await,
            Err(ForkError::PromptOnPendingTurn)
        ));
        assert!(matches!(
            s.service
                .fork(parent.id, 1, None, &Actor::headless("carol"), false)
                .await,
            Err(ForkError::BeforeFirstRequest)
        ));
        assert!(matches!(
            s.service
                .fork(parent.id, 999, None, &Actor::headless("carol"), false)
                .await,
            Err(ForkError::NoStep(999))
        ));
        db.cleanup().await;
    }
}

/// A fork taken between a decision and its results never runs a call of the parent again on its
/// own: a call an approval rule let through in the parent waits in the fork as outcome unknown,
/// with the parent's effect key, and an operator who runs it again runs it under that key.
#[tokio::test]
async fn a_fork_between_a_decision_and_its_results_never_repeats_the_parents_effect() {
    use nrllm_core::rules::{RuleDraft, RuleEffect, RuleScope};
    for db in backends().await {
        let responses = vec![
            call_turn("c1", "write_note", json!({"text": "a"}), usage(1, 1)),
            ChatResponse::text("Wrote a.", usage(1, 1)),
            ChatResponse::text("Wrote it in the fork too.", usage(1, 1)),
        ];
        let s = setup(&db.db, responses);
        // Every write_note of the configuration is allowed by a rule: the parent's turn is
        // decided without an operator and its call runs.
        s.store
            .add_rule(
                &RuleDraft {
                    scope: RuleScope::Configuration("scripted".into()),
                    tool: "write_note".into(),
                    effect: RuleEffect::Allow,
                    conditions: Vec::new(),
                },
                "admin",
                now_ms(),
            )
            .await
            .unwrap();
        let parent = s
            .service
            .start(configuration("write a"), "alice")
            .await
            .unwrap();
        assert_eq!(
            parent.final_answer.as_deref(),
            Some("Wrote a."),
            "{}",
            db.name
        );
        assert_eq!(s.probe.count("write_note"), 1);
        let steps = s.store.events(parent.id, 0).await.unwrap();
        let decided = steps
            .iter()
            .find(|e| e.kind == "approval_decided")
            .unwrap()
            .sequence;
        let parent_key = s.store.effects(parent.id).await.unwrap()[0]
            .effect_key
            .clone();

        // Forked at the automatic decision, before the call's result: the rule would let the
        // call through again, but the fork waits for an operator with the call marked.
        let fork = s
            .service
            .fork(parent.id, decided, None, &Actor::headless("carol"), true)
            .await
            .unwrap();
        let fork = s.service.drive(fork).await.unwrap();
        assert_eq!(fork.status, RunStatus::WaitingForApproval, "{}", db.name);
        assert_eq!(s.probe.count("write_note"), 1, "{}: not run again", db.name);
        let state = nrllm_core::SuspendedState::from_json(fork.suspended_state.as_deref().unwrap())
            .unwrap();
        assert_eq!(state.unknown.len(), 1);
        assert_eq!(state.unknown[0].effect_key, parent_key);
        let forked = s.store.events(fork.id, decided).await.unwrap();
        assert_eq!(
            kinds(&forked),
            ["recovered", "outcome_unknown", "approval_requested"],
            "{}",
            db.name
        );
        // An answer alone would not run it; an operator's decision runs it, under the parent's key.
        let done = s
            .service
            .resume(
                fork.id,
                &Decision::ApproveAll,
                &Actor::headless("dave"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(
            done.final_answer.as_deref(),
            Some("Wrote it in the fork too.")
        );
        let effects = s.store.effects(fork.id).await.unwrap();
        assert_eq!(effects.len(), 1);
        assert_eq!(effects[0].effect_key, parent_key, "{}", db.name);
        // The tool was given the parent's key both times: an idempotent tool applies it once.
        assert_eq!(
            s.probe.effect_keys(),
            [Some(parent_key.clone()), Some(parent_key)],
            "{}",
            db.name
        );
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_question_waits_for_input_and_one_of_sixteen_answers_wins() {
    use nrllm_core::decision::DecisionError;
    use nrllm_core::question::AskOperator;
    for db in backends().await {
        let provider = ScriptedProvider::new(vec![
            call_turn(
                "q1",
                "ask_operator",
                json!({"question": "Which note?", "choices": ["a", "b"]}),
                usage(1, 1),
            ),
            ChatResponse::text("You chose.", usage(1, 1)),
        ]);
        let probe = Probe::default();
        let mut registry = probe_registry(&probe);
        registry.register(AskOperator).unwrap();
        let registry = Arc::new(registry);
        let service_on = |pool: nrllm_store::db::Database| {
            let tool_loop = Arc::new(ToolLoop::new(
                Arc::new(provider.clone()),
                Arc::clone(&registry),
            ));
            RunService::new(
                Arc::new(SqlRunStore::new(pool)),
                Arc::new(SingleLoop(tool_loop)),
            )
        };
        let service = service_on(db.db.clone());
        let run = service
            .start(configuration("ask me"), "alice")
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::WaitingForInput, "{}", db.name);
        // An answer that is not one of the choices is refused; the run still waits.
        let refused = service
            .claim_answer(
                run.id,
                None,
                &FormAnswer::text("c"),
                &Actor::headless("bob"),
                None,
            )
            .await
            .err()
            .unwrap();
        assert!(
            matches!(refused, ResumeError::InvalidDecision(DecisionError::InvalidAnswer { ref field, .. }) if field == "answer"),
            "{refused:?}"
        );
        let mut tasks = Vec::new();
        for i in 0..16 {
            let service = service_on(db.open(1).await);
            tasks.push(tokio::spawn(async move {
                let answer = if i % 2 == 0 { "a" } else { "b" };
                service
                    .claim_answer(
                        run.id,
                        None,
                        &FormAnswer::text(answer),
                        &Actor::headless(format!("op-{i}")),
                        None,
                    )
                    .await
                    .map(|claimed| (claimed, answer))
            }));
        }
        let mut winners = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                Ok(won) => winners.push(won),
                Err(ResumeError::NotWaiting(_)) => {}
                Err(other) => panic!("{}: unexpected {other:?}", db.name),
            }
        }
        assert_eq!(winners.len(), 1, "{}: exactly one answer wins", db.name);
        let (claimed, answer) = winners.pop().unwrap();
        let done = service.continue_claimed(claimed).await.unwrap();
        assert_eq!(
            done.final_answer.as_deref(),
            Some("You chose."),
            "{}",
            db.name
        );
        // The model read the answer itself as the call's result; the tool never ran.
        let sent = &provider.requests()[1].messages;
        assert!(
            matches!(sent.last(), Some(nrllm_core::transcript::Message::Tool { content, .. }) if content == answer),
            "{sent:?}"
        );
        assert!(probe.calls().is_empty());
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_state_above_the_limit_is_refused_when_the_run_would_wait() {
    for db in backends().await {
        let big = "x".repeat(20_000);
        let mut s = setup(
            &db.db,
            vec![call_turn(
                "c1",
                "write_note",
                json!({ "text": big }),
                usage(1, 1),
            )],
        );
        s.service = RunService::new(
            s.store.clone(),
            Arc::new(SingleLoop(Arc::new(ToolLoop::new(
                Arc::new(s.provider.clone()),
                Arc::new(probe_registry(&s.probe)),
            )))),
        )
        .with_state_limit(16 * 1024);
        let run = s
            .service
            .start(configuration("write a long note"), "alice")
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::Failed, "{}", db.name);
        assert_eq!(run.termination_reason.as_deref(), Some("state_too_large"));
        let summary = run.error_summary.unwrap();
        assert!(
            summary.contains("KB, above the limit of 16 KB (setting max_state_bytes)"),
            "{summary}"
        );
        assert_eq!(run.suspended_state, None);
        assert!(s.probe.calls().is_empty(), "nothing of the turn ran");
        let steps = s.store.events(run.id, 0).await.unwrap();
        assert_eq!(steps.last().unwrap().kind, "ended", "{}", db.name);
        db.cleanup().await;
    }
}

#[tokio::test]
async fn the_overdue_sweeps_find_only_overdue_runs_through_their_indexes() {
    for db in backends().await {
        // Waiting runs without a deadline outnumber the one with a deadline.
        let turns =
            (0..31).map(|_| call_turn("c1", "write_note", json!({"text": "hi"}), usage(1, 1)));
        let s = setup(&db.db, turns.collect());
        for _ in 0..30 {
            s.service
                .start(configuration("no deadline"), "alice")
                .await
                .unwrap();
        }
        let mut patient = configuration("deadline");
        patient.approval_timeout_ms = Some(1_000);
        let run = s.service.start(patient, "alice").await.unwrap();
        let deadline = run.approval_deadline_ms.expect("a deadline");
        assert_eq!(
            s.store.expired_approvals(i64::MAX, 100).await.unwrap(),
            [run.id],
            "{}",
            db.name
        );
        // None of them is running: the lease sweep finds nothing.
        assert!(s
            .store
            .expired_leases(deadline, 100)
            .await
            .unwrap()
            .is_empty());

        // SQLite without statistics picks its own index unless told: the deadline sweep would
        // read every waiting run through the status index.
        if db.db.backend() == nrllm_store::db::Backend::Sqlite {
            let plans = s.store.query_plans().await.unwrap();
            let plan = |name: &str| {
                plans
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, lines)| lines.join(" / "))
                    .unwrap_or_else(|| panic!("no plan for {name}"))
            };
            let deadlines = plan("approval deadline sweep");
            assert!(
                deadlines.contains("USING INDEX agent_run_deadline")
                    && !deadlines.contains("TEMP B-TREE"),
                "{deadlines}"
            );
            let leases = plan("lease sweep");
            assert!(
                leases.contains("USING INDEX agent_run_status_created (status=?)"),
                "{leases}"
            );
            // The queue's order straight from its index: no sort of every queued run a take.
            let take = plan("queue take");
            assert!(
                take.contains("USING INDEX agent_run_queue") && !take.contains("TEMP B-TREE"),
                "{take}"
            );
        }
        db.cleanup().await;
    }
}
