//! Daily spend caps across runs on both backends: the count is one atomic increment per
//! response, so 64 concurrent adds count exactly; a run that reaches its requester's cap waits
//! `waiting_for_budget`, nobody but an administrator raises the cap, and once it has room the
//! run goes on by itself (claimed once, by the allowance) and completes.

use std::sync::Arc;

use nrllm_core::authority::{Actor, Refusal};
use nrllm_core::events::Event;
use nrllm_core::provider::{ChatResponse, Prices};
use nrllm_core::run_service::{LoopFactory, RaiseCapError, RunService};
use nrllm_core::run_store::{RunConfiguration, RunReader, RunStatus};
use nrllm_core::spend::{utc_day, CapScope, SpendCaps, SpendKey, SpendLedger};
use nrllm_core::state::SuspendedState;
use nrllm_core::testing::{call_turn, probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::{RunSettings, ToolLoop, ToolLoopService};
use nrllm_store::testing::backends;
use nrllm_store::SqlRunStore;
use nrllm_types::Role;
use serde_json::json;

fn key(scope: CapScope, name: &str) -> SpendKey {
    SpendKey {
        scope,
        name: name.into(),
    }
}

#[tokio::test]
async fn sixty_four_concurrent_adds_count_exactly_and_raises_add_up() {
    for db in backends().await {
        let day = utc_day(nrllm_core::clock::now_ms());
        let keys = [key(CapScope::Configuration, "c"), key(CapScope::User, "u")];
        let mut tasks = Vec::new();
        for _ in 0..64 {
            // Each adder on its own connection, as many instances would.
            let store = SqlRunStore::new(db.open(1).await);
            let keys = keys.clone();
            tasks.push(tokio::spawn(
                async move { store.add_spend(day, &keys, 7).await },
            ));
        }
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        let store = SqlRunStore::new(db.db.clone());
        let counts = store.day_spend(day, &keys).await.unwrap();
        assert_eq!(
            counts.iter().map(|c| c.spent_micros).collect::<Vec<_>>(),
            [448, 448],
            "{}",
            db.name
        );
        // Another day, another key: nothing.
        let other = store.day_spend(day + 1, &keys[..1]).await.unwrap();
        assert_eq!(other[0].spent_micros, 0, "{}", db.name);
        let absent = store
            .day_spend(day, &[key(CapScope::User, "nobody")])
            .await
            .unwrap();
        assert_eq!(absent[0].spent_micros, 0, "{}", db.name);
        // Raises add up, and keep what was spent.
        store.raise_cap(day, &keys[1], 100, "ada").await.unwrap();
        let raised = store.raise_cap(day, &keys[1], 50, "ada").await.unwrap();
        assert_eq!(
            (raised.spent_micros, raised.raised_micros),
            (448, 150),
            "{}",
            db.name
        );
        let listed = store.spend_of_day(day, 10).await.unwrap();
        assert_eq!(
            listed
                .iter()
                .map(|(k, c)| (k.clone(), c.spent_micros, c.raised_micros))
                .collect::<Vec<_>>(),
            [(keys[0].clone(), 448, 0), (keys[1].clone(), 448, 150)],
            "{}",
            db.name
        );
        db.cleanup().await;
    }
}

/// One loop for every run, with prices and the caps.
struct Capped(Arc<dyn ToolLoopService>, SpendCaps);

impl LoopFactory for Capped {
    fn tool_loop(
        &self,
        _configuration: &RunConfiguration,
    ) -> Result<Arc<dyn ToolLoopService>, String> {
        Ok(Arc::clone(&self.0))
    }

    fn prices(&self, _configuration: &RunConfiguration) -> Prices {
        Prices {
            input: Some(1.0),
            output: Some(1.0),
            ..Prices::default()
        }
    }

    fn spend_caps(&self, _configuration: &RunConfiguration) -> SpendCaps {
        self.1
    }
}

fn configuration() -> RunConfiguration {
    RunConfiguration {
        continues: None,
        approval_timeout_ms: None,
        provider: "scripted".into(),
        model: "script".into(),
        prompt: "read the note, then answer".into(),
        system_prompt: None,
        skills: Vec::new(),
        settings: RunSettings::default(),
    }
}

#[tokio::test]
async fn a_run_at_its_users_daily_cap_waits_until_an_administrator_raises_it() {
    for db in backends().await {
        let provider = ScriptedProvider::new([
            // 12 micro-dollars at $1 a million each way: the user's 10 a day is reached.
            call_turn("c1", "read_note", json!({"text": "n"}), usage(10, 2)),
            ChatResponse::text("Read it.", usage(12, 3)),
        ]);
        let probe = Probe::default();
        let tool_loop = ToolLoop::new(Arc::new(provider.clone()), Arc::new(probe_registry(&probe)));
        let caps = SpendCaps {
            per_configuration: None,
            per_user: Some(10),
        };
        let store = Arc::new(SqlRunStore::new(db.db.clone()));
        let service = RunService::new(store.clone(), Arc::new(Capped(Arc::new(tool_loop), caps)))
            .with_spend_ledger(store.clone());
        let run = service.start(configuration(), "alice").await.unwrap();
        assert_eq!(run.status, RunStatus::WaitingForBudget, "{}", db.name);
        let state = SuspendedState::from_json(run.suspended_state.as_deref().unwrap()).unwrap();
        let stop = state.budget.unwrap();
        assert_eq!(
            stop.daily.map(|d| d.scope),
            Some(CapScope::User),
            "{}",
            db.name
        );
        assert_eq!((stop.used, stop.cap), (12, 10), "{}", db.name);
        assert_eq!(provider.requests().len(), 1);
        // No room yet: the allowance leaves it waiting.
        assert_eq!(service.continue_allowed().await.unwrap(), 0, "{}", db.name);
        let user = key(CapScope::User, "alice");
        // An approver may not raise a daily cap; an administrator may.
        let approver = Actor::user("olga", Role::Approver);
        let refused = service.raise_spend_cap(&approver, &user, 1_000).await;
        assert!(
            matches!(refused, Err(RaiseCapError::Refused(Refusal::Role { .. }))),
            "{}: {refused:?}",
            db.name
        );
        assert_eq!(
            run_status(&store, run.id).await,
            RunStatus::WaitingForBudget
        );
        let admin = Actor::user("ada", Role::Admin);
        let (count, went_on) = service.raise_spend_cap(&admin, &user, 1_000).await.unwrap();
        assert_eq!(
            (count.spent_micros, count.raised_micros, went_on),
            (12, 1_000, 1),
            "{}",
            db.name
        );
        // A second pass finds nothing more to let go on: the run was claimed once.
        assert_eq!(service.continue_allowed().await.unwrap(), 0, "{}", db.name);
        for work in service.take_next(10).await.unwrap() {
            service.work(work).await.unwrap();
        }
        let done = store.get(run.id).await.unwrap().unwrap();
        assert_eq!(done.status, RunStatus::Completed, "{}", db.name);
        assert_eq!(done.final_answer.as_deref(), Some("Read it."));
        assert_eq!(
            (provider.requests().len(), probe.count("read_note")),
            (2, 1)
        );
        let decided: Vec<_> = store
            .events(run.id, 0)
            .await
            .unwrap()
            .iter()
            .filter_map(|e| match e.event() {
                Some(Event::BudgetDecided { decided_by, .. }) => Some(decided_by),
                _ => None,
            })
            .collect();
        assert_eq!(decided, ["daily allowance"], "{}", db.name);
        let day = utc_day(nrllm_core::clock::now_ms());
        let spent = store.day_spend(day, &[user]).await.unwrap();
        assert_eq!(
            spent[0].spent_micros,
            12 + 15,
            "{}: both responses counted",
            db.name
        );
        db.cleanup().await;
    }
}

async fn run_status(store: &SqlRunStore, id: uuid::Uuid) -> RunStatus {
    store.get(id).await.unwrap().unwrap().status
}
