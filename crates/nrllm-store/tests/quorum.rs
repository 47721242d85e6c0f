//! M-of-N approvals through the run service on both backends (the authority's conformance cases
//! that need a store): approvals gather without moving the run — its version and the digest of
//! open pages stay, each is journaled as it comes — and the one that completes the count claims
//! the run once, however many race; a denial decides at once; an expired or cancelled turn runs
//! nothing, whatever it gathered.

use std::sync::Arc;

use nrllm_core::authority::{Actor, Refusal};
use nrllm_core::decision::Decision;
use nrllm_core::provider::ChatResponse;
use nrllm_core::quorum::Quorum;
use nrllm_core::run_service::{LoopFactory, ResumeError, RunService};
use nrllm_core::run_store::{RunConfiguration, RunReader, RunStatus};
use nrllm_core::submit::{Submission, SubmittedCall};
use nrllm_core::testing::{call_turn, probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::{ToolLoop, ToolLoopService};
use nrllm_store::testing::{backends, demo_configuration};
use nrllm_store::SqlRunStore;
use nrllm_types::Role;
use serde_json::json;

/// Every run uses one loop, and `write_note` needs two approvals.
struct NeedsTwo(Arc<dyn ToolLoopService>);

impl LoopFactory for NeedsTwo {
    fn tool_loop(&self, _: &RunConfiguration) -> Result<Arc<dyn ToolLoopService>, String> {
        Ok(Arc::clone(&self.0))
    }

    fn quorum(&self, _: &RunConfiguration) -> Quorum {
        Quorum {
            approvals: 1,
            tools: [("write_note".to_owned(), 2)].into(),
        }
    }
}

/// A service whose runs wait on one `write_note` call (`runs` of them), then finish.
fn service(store: Arc<SqlRunStore>, runs: usize) -> (RunService, Probe) {
    let mut script = Vec::new();
    for n in 0..runs {
        script.push(call_turn(
            &format!("c{n}"),
            "write_note",
            json!({"text": "as asked"}),
            usage(1, 1),
        ));
    }
    script.extend((0..runs).map(|_| ChatResponse::text("done", usage(1, 1))));
    let probe = Probe::default();
    let tool_loop = ToolLoop::new(
        Arc::new(ScriptedProvider::new(script)),
        Arc::new(probe_registry(&probe)),
    );
    (
        RunService::new(store, Arc::new(NeedsTwo(Arc::new(tool_loop)))),
        probe,
    )
}

fn approve_all() -> Submission {
    Submission {
        decision: "approve_all".into(),
        reason: None,
        calls: Vec::new(),
        acknowledge_discard: false,
    }
}

fn edit(call_id: &str) -> Submission {
    Submission {
        decision: "per_call".into(),
        reason: None,
        calls: vec![SubmittedCall {
            call_id: call_id.into(),
            choice: Some("edit".into()),
            arguments: Some(r#"{"text": "edited"}"#.into()),
            ..SubmittedCall::default()
        }],
        acknowledge_discard: false,
    }
}

fn approver(name: &str) -> Actor {
    Actor::user(name, Role::Approver)
}

#[tokio::test]
async fn approvals_gather_without_moving_the_run_and_the_count_claims_it_once() {
    for db in backends().await {
        let name = db.name;
        let store = Arc::new(SqlRunStore::new(db.db.clone()));
        let (service, probe) = service(store.clone(), 1);
        let run = service
            .start(demo_configuration("write"), "alice")
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::WaitingForApproval, "{name}");
        assert_eq!(run.approvals_required, 2);
        let digest = service.pending(&run).await.unwrap().digest;
        let call = service.pending(&run).await.unwrap().state.pending[0]
            .id
            .clone();

        // Bob's approval counts, and nothing moves: same version, same digest, a step.
        let counted = service
            .claim_submission(run.id, &approve_all(), &approver("bob"), Some(&digest))
            .await
            .err()
            .unwrap();
        let ResumeError::Counted(tally) = &counted else {
            panic!("{name}: {counted}");
        };
        assert_eq!(tally.describe(), "1 of 2 approvals: bob");
        assert!(counted.to_string().starts_with("Your approval counts"));
        let waiting = store.get(run.id).await.unwrap().unwrap();
        assert_eq!(waiting.status, RunStatus::WaitingForApproval);
        assert_eq!(waiting.version, run.version, "{name}: the run did not move");
        assert_eq!(service.pending(&waiting).await.unwrap().digest, digest);
        let steps = store.events(run.id, 0).await.unwrap();
        let last = steps.last().unwrap();
        assert_eq!(last.kind, "approval_counted", "{name}");
        assert_eq!(last.payload["by"], "bob");
        assert_eq!(last.payload["count"], 1);

        // Bob again through a token: still one vote. The requester never counts.
        let bob_token = Actor::through_token("bob", Role::Approver, "ci", Role::Approver);
        let again = service
            .claim_submission(run.id, &approve_all(), &bob_token, Some(&digest))
            .await
            .err()
            .unwrap();
        assert!(
            matches!(&again, ResumeError::Counted(t) if t.describe() == "1 of 2 approvals: bob"),
            "{name}: {again}"
        );
        assert_eq!(
            store.events(run.id, 0).await.unwrap().len(),
            steps.len(),
            "{name}: a second press of the same is not journaled again"
        );
        // No rule rides on an approval that counts toward several.
        let mut with_rule = edit(&call);
        with_rule.calls[0].choice = Some("approve".into());
        with_rule.calls[0].arguments = None;
        with_rule.calls[0].remember = Some("run".into());
        let refused = service
            .claim_submission(run.id, &with_rule, &approver("carol"), Some(&digest))
            .await
            .err()
            .unwrap();
        assert!(
            matches!(
                refused,
                ResumeError::InvalidDecision(nrllm_core::decision::DecisionError::RuleWithCount)
            ),
            "{name}: {refused}"
        );
        let requester = service
            .claim_submission(
                run.id,
                &approve_all(),
                &Actor::user("alice", Role::Admin),
                Some(&digest),
            )
            .await
            .err()
            .unwrap();
        assert!(
            matches!(requester, ResumeError::Refused(Refusal::Quorum { .. })),
            "{name}: {requester}"
        );

        // Carol approves an edit: a count of its own, which bob's approval is not part of.
        let edited = service
            .claim_submission(run.id, &edit(&call), &approver("carol"), Some(&digest))
            .await
            .err()
            .unwrap();
        assert!(
            edited.to_string().contains(
                "1 of 2 approvals: carol (bob approved other choices, which do not count for \
                 these)"
            ),
            "{name}: {edited}"
        );
        assert_eq!(store.approvals(run.id, run.version).await.unwrap().len(), 2);

        // Dave approves the edit too: the count is reached, the run is claimed and runs the
        // call once, as edited.
        let done = service
            .resume(
                run.id,
                &Decision::PerCall {
                    calls: vec![nrllm_core::CallDecision {
                        call_id: call.clone(),
                        choice: nrllm_core::Choice::ApproveEdited {
                            arguments: json!({"text": "edited"}),
                        },
                    }],
                },
                &approver("dave"),
                Some(&digest),
            )
            .await
            .unwrap();
        assert_eq!(done.status, RunStatus::Completed, "{name}");
        assert_eq!(done.decided_by.as_deref(), Some("carol, dave"));
        assert_eq!(probe.count("write_note"), 1);
        assert_eq!(probe.calls()[0].1["text"], "edited");
        // One more approval is one too many: the turn was decided.
        let late = service
            .claim_submission(run.id, &approve_all(), &approver("erin"), Some(&digest))
            .await
            .err()
            .unwrap();
        assert!(
            late.to_string().contains("already decided"),
            "{name}: {late}"
        );
        assert_eq!(probe.count("write_note"), 1);
    }
}

#[tokio::test]
async fn sixty_four_racing_approvals_run_the_call_once() {
    for db in backends().await {
        let name = db.name;
        let store = Arc::new(SqlRunStore::new(db.db.clone()));
        let (service, probe) = service(store.clone(), 1);
        let service = Arc::new(service);
        let run = service
            .start(demo_configuration("write"), "alice")
            .await
            .unwrap();
        let digest = service.pending(&run).await.unwrap().digest;
        let racers = (0..64).map(|n| {
            let service = Arc::clone(&service);
            let digest = digest.clone();
            tokio::spawn(async move {
                service
                    .resume(
                        run.id,
                        &Decision::ApproveAll,
                        &approver(&format!("approver{n}")),
                        Some(&digest),
                    )
                    .await
            })
        });
        let outcomes: Vec<_> = futures::future::join_all(racers)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let won = outcomes.iter().filter(|o| o.is_ok()).count();
        let counted = outcomes
            .iter()
            .filter(|o| matches!(o, Err(ResumeError::Counted(_))))
            .count();
        let late = outcomes
            .iter()
            .filter(|o| matches!(o, Err(e) if e.to_string().contains("already decided")))
            .count();
        assert_eq!(won, 1, "{name}: one claim");
        assert_eq!(won + counted + late, 64, "{name}: {outcomes:?}");
        assert_eq!(
            counted, 1,
            "{name}: the claim came with the second approval"
        );
        assert_eq!(probe.count("write_note"), 1, "{name}");
        assert_eq!(store.effects(run.id).await.unwrap().len(), 1);
        let decided = store.get(run.id).await.unwrap().unwrap();
        assert_eq!(
            decided.decided_by.as_deref().map(|d| d.split(", ").count()),
            Some(2),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_denial_decides_at_once_and_an_expired_or_cancelled_turn_runs_nothing() {
    for db in backends().await {
        let name = db.name;
        let store = Arc::new(SqlRunStore::new(db.db.clone()));
        let (service, probe) = service(store.clone(), 3);
        let mut configuration = demo_configuration("write");
        let denied = service.start(configuration.clone(), "alice").await.unwrap();
        let cancelled = service.start(configuration.clone(), "alice").await.unwrap();
        configuration.approval_timeout_ms = Some(400);
        let expiring = service.start(configuration, "alice").await.unwrap();
        for run in [&denied, &cancelled, &expiring] {
            let counted = service
                .claim(run.id, &Decision::ApproveAll, &approver("bob"), None)
                .await
                .err()
                .unwrap();
            assert!(
                matches!(counted, ResumeError::Counted(_)),
                "{name}: {counted}"
            );
        }

        // One person's denial decides the turn, whatever approvals it gathered.
        service
            .claim(
                denied.id,
                &Decision::DenyAll {
                    reason: Some("no".into()),
                },
                &approver("carol"),
                None,
            )
            .await
            .unwrap();
        let decided = store.get(denied.id).await.unwrap().unwrap();
        assert_eq!(decided.decided_by.as_deref(), Some("carol"), "{name}");
        assert_eq!(decided.decision.as_deref(), Some("denied"));
        service
            .cancel(cancelled.id, &Actor::user("alice", Role::Operator), None)
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let late = service
            .claim(expiring.id, &Decision::ApproveAll, &approver("carol"), None)
            .await
            .err()
            .unwrap();
        assert!(matches!(late, ResumeError::Expired(_)), "{name}: {late}");
        service.claim_expired(expiring.id).await.unwrap();
        let expired = store.get(expiring.id).await.unwrap().unwrap();
        assert_eq!(expired.decision.as_deref(), Some("expired"), "{name}");
        assert!(
            store.effects(expiring.id).await.unwrap().is_empty(),
            "{name}: nothing dispatched"
        );
        assert!(store.effects(denied.id).await.unwrap().is_empty());
        assert_eq!(
            store.get(cancelled.id).await.unwrap().unwrap().status,
            RunStatus::Cancelled
        );
        assert_eq!(probe.count("write_note"), 0, "{name}");
    }
}
