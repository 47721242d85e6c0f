//! The bulk decision on both backends (the authority's conformance case for it, with a real
//! store): each picked run is claimed on its own with the digest its panel showed, through the
//! same authority as its own form; one run's refusal leaves the others as they are, and every
//! approved call runs exactly once.

use std::sync::Arc;

use nrllm_core::authority::Actor;
use nrllm_core::decision::Decision;
use nrllm_core::provider::ChatResponse;
use nrllm_core::run_service::{BulkVerdict, Pick, ResumeError, RunService, SingleLoop};
use nrllm_core::run_store::{RunReader, RunStatus};
use nrllm_core::testing::{call_turn, probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::ToolLoop;
use nrllm_store::testing::{backends, demo_configuration};
use nrllm_store::SqlRunStore;
use nrllm_types::Role;
use serde_json::json;

#[tokio::test]
async fn a_bulk_approval_claims_each_run_alone_and_refuses_only_the_runs_it_may_not_decide() {
    for db in backends().await {
        let turn = |text: &str| call_turn(text, "write_note", json!({"text": text}), usage(1, 1));
        let provider = ScriptedProvider::new(vec![
            turn("a"),
            turn("b"),
            turn("c"),
            turn("d"),
            turn("e"),
            ChatResponse::text("done", usage(1, 1)),
            ChatResponse::text("done", usage(1, 1)),
            ChatResponse::text("done", usage(1, 1)),
        ]);
        let probe = Probe::default();
        let tool_loop = ToolLoop::new(Arc::new(provider), Arc::new(probe_registry(&probe)));
        let store = Arc::new(SqlRunStore::new(db.db.clone()));
        let service = RunService::new(store.clone(), Arc::new(SingleLoop(Arc::new(tool_loop))))
            .with_four_eyes(|_| true);
        let mut runs = Vec::new();
        for who in ["alice", "alice", "bob", "alice", "alice"] {
            let run = service
                .start(demo_configuration("write"), who)
                .await
                .unwrap();
            assert_eq!(run.status, RunStatus::WaitingForApproval);
            runs.push(run);
        }
        let mut picks = Vec::new();
        for run in &runs {
            let pending = service.pending(run).await.unwrap();
            picks.push(Pick {
                id: run.id,
                digest: pending.digest,
            });
        }
        // The fourth changed since bob looked (his page showed another turn); the fifth was
        // decided by carol meanwhile; the first is picked twice.
        picks[3].digest = "0".repeat(64);
        service
            .resume(
                runs[4].id,
                &Decision::ApproveAll,
                &Actor::user("carol", Role::Approver),
                None,
            )
            .await
            .unwrap();
        picks.push(picks[0].clone());
        let bob = Actor::user("bob", Role::Approver);
        let outcomes = service
            .claim_each(&picks, BulkVerdict::ApproveAll, Some("ignored"), &bob)
            .await;
        let name = db.name;
        assert_eq!(outcomes.len(), 5, "{name}: one outcome a run");
        assert!(
            outcomes[0].1.is_ok() && outcomes[1].1.is_ok(),
            "{name}: {outcomes:?}"
        );
        assert!(
            matches!(outcomes[2].1, Err(ResumeError::Refused(_))),
            "{name}: four-eyes: {:?}",
            outcomes[2].1
        );
        assert!(matches!(outcomes[3].1, Err(ResumeError::Stale)), "{name}");
        let decided = outcomes[4].1.as_ref().unwrap_err().to_string();
        assert!(decided.contains("already decided"), "{name}: {decided}");
        // The refused runs still wait (but carol's), untouched.
        for (index, status) in [
            (2, RunStatus::WaitingForApproval),
            (3, RunStatus::WaitingForApproval),
        ] {
            let run = store.get(runs[index].id).await.unwrap().unwrap();
            assert_eq!(run.status, status, "{name}");
            assert_eq!(run.version, runs[index].version, "{name}");
        }
        // The two claimed runs are queued; a worker carries them out, each call once.
        let work = service.take_next(10).await.unwrap();
        assert_eq!(work.len(), 2, "{name}");
        for work in work {
            let done = service.work(work).await.unwrap();
            assert_eq!(done.status, RunStatus::Completed, "{name}");
            assert_eq!(done.decided_by.as_deref(), Some("bob"));
        }
        // a and b by bob, e by carol: c and d never ran.
        let written: Vec<String> = probe
            .calls()
            .iter()
            .map(|(_, args)| args["text"].as_str().unwrap_or_default().to_owned())
            .collect();
        let mut sorted = written.clone();
        sorted.sort();
        assert_eq!(sorted, ["a", "b", "e"], "{name}");
        db.cleanup().await;
    }
}
