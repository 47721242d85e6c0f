//! The webhook outbox on both backends: every waiting turn gets one delivery, one instance at a
//! time holds it, attempts are fenced by the lease, a decided run's delivery is seen as such, and
//! purging a run takes its deliveries with it.

use nrllm_core::authority::Actor;
use std::sync::Arc;

use nrllm_core::clock::now_ms;
use nrllm_core::registry::ToolRegistry;
use nrllm_core::run_service::{LoopFactory, RunService, SingleLoop};
use nrllm_core::run_store::{RunConfiguration, RunStore};
use nrllm_core::testing::{call_turn, probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::{Decision, RunSettings, ToolLoop};
use nrllm_store::testing::backends;
use nrllm_store::webhooks::{Attempt, DeliveryState, WebhookStore};
use nrllm_store::SqlRunStore;
use serde_json::json;

fn configuration() -> RunConfiguration {
    RunConfiguration {
        continues: None,
        approval_timeout_ms: None,
        provider: "scripted".into(),
        model: "script".into(),
        prompt: "write".into(),
        system_prompt: None,
        skills: Vec::new(),
        settings: RunSettings::default(),
    }
}

#[tokio::test]
async fn each_waiting_turn_gets_one_delivery_held_by_one_sender_at_a_time() {
    for db in backends().await {
        let store = Arc::new(SqlRunStore::new(db.db.clone()));
        let provider = ScriptedProvider::new(vec![
            call_turn("c1", "write_note", json!({"text": "a"}), usage(1, 1)),
            call_turn("c2", "write_note", json!({"text": "b"}), usage(1, 1)),
            call_turn("c3", "write_note", json!({"text": "c"}), usage(1, 1)),
        ]);
        let probe = Probe::default();
        let registry: Arc<ToolRegistry> = Arc::new(probe_registry(&probe));
        let tool_loop = Arc::new(ToolLoop::new(Arc::new(provider), registry));
        let loops: Arc<dyn LoopFactory> = Arc::new(SingleLoop(tool_loop));
        let service = RunService::new(store.clone(), loops);
        let hooks = WebhookStore::new(db.db.clone());
        let now = now_ms();

        let first = service.start(configuration(), "alice").await.unwrap();
        let second = service.start(configuration(), "alice").await.unwrap();
        let waiting = hooks.unannounced(now - 60_000, 10).await.unwrap();
        assert_eq!(waiting.len(), 2, "{}", db.name);
        assert_eq!(waiting[0].run_id, first.id);
        assert_eq!(waiting[0].configuration, "scripted");
        // Runs that began waiting before the window are not announced.
        assert!(hooks
            .unannounced(now + 60_000, 10)
            .await
            .unwrap()
            .is_empty());

        // One delivery per turn, whoever adds it first; a skipped one is not looked at again.
        assert!(hooks
            .add(
                &waiting[0],
                "scripted",
                "{\"a\":1}",
                DeliveryState::Pending,
                now
            )
            .await
            .unwrap());
        assert!(!hooks
            .add(
                &waiting[0],
                "scripted",
                "{\"a\":2}",
                DeliveryState::Pending,
                now
            )
            .await
            .unwrap());
        assert!(hooks
            .add(&waiting[1], "scripted", "", DeliveryState::Skipped, now)
            .await
            .unwrap());
        assert!(hooks
            .unannounced(now - 60_000, 10)
            .await
            .unwrap()
            .is_empty());

        // Two senders: only one holds the due delivery.
        let (a, b) = tokio::join!(
            hooks.claim_due(now, now + 60_000, 10),
            hooks.claim_due(now, now + 60_001, 10)
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.len() + b.len(), 1, "{}: one holder", db.name);
        let claimed = a.into_iter().chain(b).next().unwrap();
        assert!(claimed.still_waiting);
        assert_eq!(claimed.delivery.body, "{\"a\":1}");
        assert!(hooks
            .claim_due(now, now + 60_000, 10)
            .await
            .unwrap()
            .is_empty());

        // A failed attempt is due again later, and its lease is given back.
        let failed = Attempt::Failed {
            status: Some(500),
            error: "HTTP 500".into(),
            retry_at_ms: Some(now + 1_000),
        };
        assert!(hooks.record(&claimed.delivery, &failed, now).await.unwrap());
        // A second write with the old lease is refused.
        assert!(!hooks.record(&claimed.delivery, &failed, now).await.unwrap());
        assert!(hooks
            .claim_due(now, now + 60_000, 10)
            .await
            .unwrap()
            .is_empty());
        let again = hooks
            .claim_due(now + 1_000, now + 61_000, 10)
            .await
            .unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].delivery.attempts, 1);
        assert_eq!(again[0].delivery.last_error.as_deref(), Some("HTTP 500"));

        // The run is decided meanwhile: the sender sees it no longer waits.
        hooks
            .record(&again[0].delivery, &failed, now + 1_000)
            .await
            .unwrap();
        service
            .resume(
                first.id,
                &Decision::ApproveAll,
                &Actor::headless("bob"),
                None,
            )
            .await
            .unwrap();
        let stale = hooks
            .claim_due(now + 2_000, now + 62_000, 10)
            .await
            .unwrap();
        assert_eq!(stale.len(), 1);
        assert!(!stale[0].still_waiting, "{}", db.name);
        hooks
            .record(&stale[0].delivery, &Attempt::Obsolete, now + 2_000)
            .await
            .unwrap();
        let listed = hooks.for_run(first.id).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].state, DeliveryState::Obsolete);
        assert_eq!(listed[0].attempts, 2);

        // The run waits again on a new turn: that turn is announced afresh.
        let next = hooks.unannounced(now - 60_000, 10).await.unwrap();
        assert_eq!(next.len(), 1, "{}", db.name);
        assert_eq!(next[0].run_id, first.id);
        assert!(next[0].run_version > waiting[0].run_version);

        // Purging a run takes its deliveries.
        let report = store.purge(now + 600_000, now + 600_000, 10).await.unwrap();
        assert_eq!(report.runs, 2);
        assert!(hooks.for_run(first.id).await.unwrap().is_empty());
        assert!(hooks.for_run(second.id).await.unwrap().is_empty());
        db.cleanup().await;
    }
}
