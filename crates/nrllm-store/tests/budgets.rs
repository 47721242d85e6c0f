//! A run waiting at its budget on both backends: it is kept as a waiting run (status, state,
//! the inbox), and the decision on it races like an approval — of 64 concurrent raises exactly
//! one wins, and the run goes on once; a stop ends it `budget_exhausted`.

use std::sync::Arc;

use nrllm_core::authority::Actor;
use nrllm_core::events::Event;
use nrllm_core::moves::{BudgetMove, Raise};
use nrllm_core::provider::ChatResponse;
use nrllm_core::run_service::{ResumeError, RunService, SingleLoop};
use nrllm_core::run_store::{
    RunConfiguration, RunReader, RunStatus, TerminationReason, WaitingFilter,
};
use nrllm_core::state::{LimitKind, Limits, SuspendedState};
use nrllm_core::testing::{call_turn, probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::{RunSettings, ToolLoop};
use nrllm_store::testing::backends;
use nrllm_store::SqlRunStore;
use serde_json::json;

/// A run that may make one model request: it reads a note, then waits before asking again.
fn configuration() -> RunConfiguration {
    RunConfiguration {
        continues: None,
        approval_timeout_ms: None,
        provider: "scripted".into(),
        model: "script".into(),
        prompt: "read the note, then answer".into(),
        system_prompt: None,
        skills: Vec::new(),
        settings: RunSettings {
            limits: Limits::default().with(LimitKind::Requests, Some(1)),
            ..RunSettings::default()
        },
    }
}

fn responses() -> Vec<ChatResponse> {
    vec![
        call_turn("c1", "read_note", json!({"text": "n"}), usage(10, 2)),
        ChatResponse::text("Read it.", usage(12, 3)),
    ]
}

fn service(store: Arc<SqlRunStore>, provider: &ScriptedProvider, probe: &Probe) -> RunService {
    let tool_loop = ToolLoop::new(Arc::new(provider.clone()), Arc::new(probe_registry(probe)));
    RunService::new(store, Arc::new(SingleLoop(Arc::new(tool_loop))))
}

#[tokio::test]
async fn sixty_four_concurrent_raises_have_one_winner_and_the_run_goes_on_once() {
    for db in backends().await {
        let (provider, probe) = (ScriptedProvider::new(responses()), Probe::default());
        let store = Arc::new(SqlRunStore::new(db.db.clone()));
        let run = service(Arc::clone(&store), &provider, &probe)
            .start(configuration(), "alice")
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::WaitingForBudget, "{}", db.name);
        let state = SuspendedState::from_json(run.suspended_state.as_deref().unwrap()).unwrap();
        assert_eq!(
            state.budget.map(|b| (b.limit, b.used)),
            Some((LimitKind::Requests, 1))
        );
        assert_eq!(
            (provider.requests().len(), probe.count("read_note")),
            (1, 1)
        );
        // It is in the inbox, and its kind of waiting finds it.
        let filter = WaitingFilter {
            kind: Some(RunStatus::WaitingForBudget),
            limit: 10,
            ..WaitingFilter::default()
        };
        let waiting = store.waiting(&filter).await.unwrap();
        assert_eq!(
            waiting.iter().map(|w| w.id).collect::<Vec<_>>(),
            [run.id],
            "{}",
            db.name
        );

        let mut tasks = Vec::new();
        for i in 0..64 {
            // Each claimer on its own connection.
            let store = Arc::new(SqlRunStore::new(db.open(1).await));
            let service = service(store, &provider, &probe);
            tasks.push(tokio::spawn(async move {
                let actor = Actor::headless(format!("operator-{i}"));
                let raise = BudgetMove::Raise(Raise::By(1));
                match service.claim_budget(run.id, &raise, &actor, None).await {
                    Ok(claimed) => Ok(service.continue_claimed(claimed).await.unwrap()),
                    Err(err) => Err(err),
                }
            }));
        }
        let (mut winners, mut losers) = (0, 0);
        for task in tasks {
            match task.await.unwrap() {
                Ok(done) => {
                    assert_eq!(done.status, RunStatus::Completed, "{}", db.name);
                    assert_eq!(done.final_answer.as_deref(), Some("Read it."));
                    winners += 1;
                }
                Err(ResumeError::NotWaiting(_)) => losers += 1,
                Err(other) => panic!("{}: unexpected {other:?}", db.name),
            }
        }
        assert_eq!((winners, losers), (1, 63), "{}", db.name);
        assert_eq!(provider.requests().len(), 2, "{}: asked once more", db.name);
        assert_eq!(
            probe.count("read_note"),
            1,
            "{}: nothing ran again",
            db.name
        );
        let events = store.events(run.id, 0).await.unwrap();
        let decided: Vec<_> = events
            .iter()
            .filter_map(|e| match e.event() {
                Some(Event::BudgetDecided { raised, .. }) => Some(raised),
                _ => None,
            })
            .collect();
        assert_eq!(decided.len(), 1, "{}: one decision journaled", db.name);
        assert_eq!(decided[0].and_then(|l| l.requests), Some(2));
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_stop_ends_the_run_budget_exhausted_with_nothing_more_asked() {
    for db in backends().await {
        let (provider, probe) = (ScriptedProvider::new(responses()), Probe::default());
        let store = Arc::new(SqlRunStore::new(db.db.clone()));
        let service = service(Arc::clone(&store), &provider, &probe);
        let run = service.start(configuration(), "alice").await.unwrap();
        let claimed = service
            .claim_budget(run.id, &BudgetMove::Stop, &Actor::headless("olga"), None)
            .await
            .unwrap();
        let done = service.continue_claimed(claimed).await.unwrap();
        assert_eq!(done.status, RunStatus::Completed, "{}", db.name);
        assert_eq!(
            done.termination_reason.as_deref(),
            Some(TerminationReason::BudgetExhausted.as_str())
        );
        assert_eq!(done.final_answer, None);
        let summary = done.error_summary.unwrap_or_default();
        assert!(summary.contains("model requests: 1 used of 1"), "{summary}");
        assert_eq!(provider.requests().len(), 1, "{}", db.name);
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_fork_after_a_raise_starts_with_the_parents_limits_and_its_own_spend() {
    for db in backends().await {
        // The parent's two responses, then the fork's own: it asks again from the fork point.
        let mut script = responses();
        script.extend(responses());
        let (provider, probe) = (ScriptedProvider::new(script), Probe::default());
        let store = Arc::new(SqlRunStore::new(db.db.clone()));
        let service = service(Arc::clone(&store), &provider, &probe);
        let parent = service.start(configuration(), "alice").await.unwrap();
        let claimed = service
            .claim_budget(
                parent.id,
                &BudgetMove::Raise(Raise::To(5)),
                &Actor::headless("olga"),
                None,
            )
            .await
            .unwrap();
        let parent = service.continue_claimed(claimed).await.unwrap();
        assert_eq!(parent.status, RunStatus::Completed, "{}", db.name);
        assert_eq!(parent.counters.iterations, 2);
        // Forked at its first request's step (before the answer): the raise was the parent's decision,
        // not its configuration, so the fork has the limits the parent started with (one
        // request) and counts from nothing: it waits after its own first request.
        let at = store
            .events(parent.id, 0)
            .await
            .unwrap()
            .iter()
            .find(|e| e.kind == "request")
            .unwrap()
            .sequence;
        let fork = service
            .fork(parent.id, at, None, &Actor::headless("carol"), true)
            .await
            .unwrap();
        let fork_limits = fork.configuration.as_ref().map(|c| c.settings.limits);
        assert_eq!(
            fork_limits,
            Some(Limits::default().with(LimitKind::Requests, Some(1))),
            "{}",
            db.name
        );
        let fork = service.drive(fork).await.unwrap();
        assert_eq!(fork.status, RunStatus::WaitingForBudget, "{}", db.name);
        assert_eq!(fork.counters.iterations, 1, "{}: its own requests", db.name);
        let state = SuspendedState::from_json(fork.suspended_state.as_deref().unwrap()).unwrap();
        assert_eq!(
            state.budget.map(|b| (b.limit, b.used, b.cap)),
            Some((LimitKind::Requests, 1, 1)),
            "{}",
            db.name
        );
        assert_eq!(provider.requests().len(), 3, "{}", db.name);
        db.cleanup().await;
    }
}
