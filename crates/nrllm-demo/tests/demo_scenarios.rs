//! The demo model, the built-in tools and the store together, as the playground runs them:
//! rename (approve), delete (deny with a reason), a two-call turn decided per call, and edited
//! arguments — on both backends.

use nrllm_core::authority::Actor;
use nrllm_store::testing as common;

use std::sync::Arc;

use common::backends;
use nrllm_core::run_service::{RunService, SingleLoop};
use nrllm_core::run_store::{
    LeaseStore, RunConfiguration, RunReader, RunRecord, RunStatus, RunStore,
};
use nrllm_core::{CallDecision, Choice, Decision, RunSettings, SuspendedState, ToolLoop};
use nrllm_demo::demo::DemoProvider;
use nrllm_demo::site::{PageStatus, SiteStore};
use nrllm_demo::tools::builtin_registry;
use nrllm_store::db::Database;
use nrllm_store::SqlRunStore;
use serde_json::json;

struct Playground {
    site: SiteStore,
    service: RunService,
}

async fn playground(db: &Database) -> Playground {
    let site = SiteStore::new(db.clone());
    site.seed_once().await.unwrap();
    let store: Arc<dyn RunStore> = Arc::new(SqlRunStore::new(db.clone()));
    let registry = Arc::new(builtin_registry(site.clone(), Arc::clone(&store)));
    let tool_loop = Arc::new(ToolLoop::new(Arc::new(DemoProvider::default()), registry));
    Playground {
        site,
        service: RunService::new(store, Arc::new(SingleLoop(tool_loop))),
    }
}

fn ask(prompt: &str) -> RunConfiguration {
    RunConfiguration {
        continues: None,
        approval_timeout_ms: None,
        provider: "demo".into(),
        model: "demo-1".into(),
        prompt: prompt.into(),
        system_prompt: Some("You maintain the Example Co. website.".into()),
        skills: Vec::new(),
        settings: RunSettings::default(),
    }
}

fn pending(run: &RunRecord) -> SuspendedState {
    SuspendedState::from_json(
        run.suspended_state
            .as_deref()
            .expect("a waiting run has state"),
    )
    .unwrap()
}

#[tokio::test]
async fn rename_a_page_with_approval() {
    for db in backends().await {
        let p = playground(&db.db).await;
        let run = p
            .service
            .start(ask("Rename the home page to \"Hello\""), "alice")
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::WaitingForApproval, "{}", db.name);
        let state = pending(&run);
        assert_eq!(state.pending.len(), 1);
        assert_eq!(state.pending[0].name, "update_page");
        assert_eq!(state.counters.tool_calls, 1, "it looked at the page first");
        assert_eq!(p.site.get_page("home").await.unwrap().title, "Welcome");

        let done = p
            .service
            .resume(run.id, &Decision::ApproveAll, &Actor::headless("bob"), None)
            .await
            .unwrap();
        assert_eq!(done.status, RunStatus::Completed, "{}", db.name);
        assert_eq!(p.site.get_page("home").await.unwrap().title, "Hello");
        let history = p.site.history("home", 5).await.unwrap();
        assert_eq!(history.len(), 1);
        assert_eq!(history[0].actor, "bob");
        assert_eq!(
            history[0].run_id.as_deref(),
            Some(run.id.to_string().as_str())
        );
        let answer = done.final_answer.unwrap();
        assert!(answer.contains("\"Welcome\" → \"Hello\""), "{answer}");
        assert!(done.counters.usage.total() > 0);
        db.cleanup().await;
    }
}

#[tokio::test]
async fn deleting_a_page_denied_with_a_reason() {
    for db in backends().await {
        let p = playground(&db.db).await;
        let run = p
            .service
            .start(ask("Delete the changelog page"), "alice")
            .await
            .unwrap();
        assert_eq!(pending(&run).pending[0].name, "delete_page");
        let decision = Decision::DenyAll {
            reason: Some("we still link to it".into()),
        };
        let done = p
            .service
            .resume(run.id, &decision, &Actor::headless("bob"), None)
            .await
            .unwrap();
        assert_eq!(done.status, RunStatus::Completed, "{}", db.name);
        assert_eq!(done.termination_reason.as_deref(), Some("approval_denied"));
        assert!(
            p.site.get_page("changelog").await.is_ok(),
            "the page is still there"
        );
        let answer = done.final_answer.unwrap();
        assert!(answer.contains("we still link to it"), "{answer}");
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_two_call_turn_decided_per_call() {
    for db in backends().await {
        let p = playground(&db.db).await;
        let run = p
            .service
            .start(
                ask("Publish the careers page and tell team@example.com"),
                "alice",
            )
            .await
            .unwrap();
        let state = pending(&run);
        let names: Vec<&str> = state.pending.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["publish_page", "send_message"], "{}", db.name);
        let decision = Decision::PerCall {
            calls: vec![
                CallDecision {
                    call_id: state.pending[0].id.clone(),
                    choice: Choice::Approve,
                },
                CallDecision {
                    call_id: state.pending[1].id.clone(),
                    choice: Choice::Deny {
                        reason: Some("announce it on Monday".into()),
                    },
                },
            ],
        };
        let done = p
            .service
            .resume(run.id, &decision, &Actor::headless("bob"), None)
            .await
            .unwrap();
        assert_eq!(done.status, RunStatus::Completed);
        assert_eq!(done.decision.as_deref(), Some("mixed"));
        assert_eq!(
            p.site.get_page("careers").await.unwrap().status,
            PageStatus::Published
        );
        assert!(
            p.site.outbox(10).await.unwrap().is_empty(),
            "the denied message was never sent"
        );
        let answer = done.final_answer.unwrap();
        assert!(
            answer.contains("Published page `careers`") && answer.contains("announce it on Monday"),
            "{answer}"
        );
        db.cleanup().await;
    }
}

#[tokio::test]
async fn edited_arguments_change_what_is_written() {
    for db in backends().await {
        let p = playground(&db.db).await;
        let run = p
            .service
            .start(ask("Rename the about page to \"About\""), "alice")
            .await
            .unwrap();
        let call = &pending(&run).pending[0];
        let edit = |arguments| Decision::PerCall {
            calls: vec![CallDecision {
                call_id: call.id.clone(),
                choice: Choice::ApproveEdited { arguments },
            }],
        };
        let refused = p
            .service
            .resume(
                run.id,
                &edit(json!({"slug": "about", "title": 7})),
                &Actor::headless("bob"),
                None,
            )
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("field `title`"), "{refused}");
        let done = p
            .service
            .resume(
                run.id,
                &edit(json!({"slug": "about", "title": "Who we are"})),
                &Actor::headless("bob"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(done.status, RunStatus::Completed, "{}", db.name);
        assert_eq!(p.site.get_page("about").await.unwrap().title, "Who we are");
        assert!(done.final_answer.unwrap().contains("\"Who we are\""));
        db.cleanup().await;
    }
}

#[tokio::test]
async fn an_unknown_prompt_gets_the_list_of_things_the_demo_can_do() {
    let db = common::sqlite().await;
    let p = playground(&db.db).await;
    let done = p
        .service
        .start(ask("Write me a sonnet"), "alice")
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    let answer = done.final_answer.unwrap();
    for prompt in nrllm_demo::demo::DEMO_PROMPTS {
        assert!(answer.contains(prompt), "{answer}");
    }
}

/// A turn that renames a page and asks the operator a question waits for approval; the answer
/// alone is refused and renames nothing; one decision answers the question and approves the
/// rename.
#[tokio::test]
async fn a_rename_asked_beside_a_question_is_decided_whole() {
    use nrllm_core::decision::DecisionError;
    use nrllm_core::question::FormAnswer;
    use nrllm_core::run_service::ResumeError;
    use nrllm_core::submit::{Submission, SubmittedCall};
    for db in backends().await {
        let p = playground(&db.db).await;
        let run = p
            .service
            .start(
                ask("Rename the home page to \"Hello\" and ask me how to announce it"),
                "alice",
            )
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::WaitingForApproval, "{}", db.name);
        let state = pending(&run);
        let tools: Vec<&str> = state.pending.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(tools, ["ask_operator", "update_page"]);
        let bob = Actor::headless("bob");
        let refused = p
            .service
            .claim_answer(run.id, None, &FormAnswer::text("loudly"), &bob, None)
            .await;
        assert!(matches!(
            refused,
            Err(ResumeError::InvalidDecision(
                DecisionError::UndecidedCalls { .. }
            ))
        ));
        assert_eq!(p.site.get_page("home").await.unwrap().title, "Welcome");
        let submission = Submission {
            decision: "per_call".into(),
            calls: vec![
                SubmittedCall {
                    call_id: state.pending[0].id.clone(),
                    choice: Some("answer".into()),
                    answer: Some("loudly".into()),
                    ..SubmittedCall::default()
                },
                SubmittedCall {
                    call_id: state.pending[1].id.clone(),
                    choice: Some("approve".into()),
                    ..SubmittedCall::default()
                },
            ],
            ..Submission::default()
        };
        let claimed = p
            .service
            .claim_submission(run.id, &submission, &bob, None)
            .await
            .unwrap();
        let done = p.service.continue_claimed(claimed).await.unwrap();
        assert_eq!(done.status, RunStatus::Completed, "{}", db.name);
        let answer = done.final_answer.unwrap();
        assert!(
            answer.contains("You asked me to announce it loudly."),
            "{answer}"
        );
        assert_eq!(p.site.get_page("home").await.unwrap().title, "Hello");
        db.cleanup().await;
    }
}

/// A change the demo site applies for a run is refused, in its own transaction, when the run is
/// no longer at the version the applying instance holds it at (another instance took it over):
/// the lease's epoch reaches the tool, and nothing is written.
#[tokio::test]
async fn a_change_under_a_stale_lease_epoch_writes_nothing() {
    use nrllm_core::tool::ToolContext;
    for db in backends().await {
        let p = playground(&db.db).await;
        let run = p
            .service
            .start(ask("Rename the home page to \"Stale\""), "alice")
            .await
            .unwrap();
        let store = SqlRunStore::new(db.db.clone());
        let claimed = p
            .service
            .claim(run.id, &Decision::ApproveAll, &Actor::headless("bob"), None)
            .await
            .unwrap();
        drop(claimed);
        let taken = store
            .take_run(run.id, nrllm_core::clock::now_ms())
            .await
            .unwrap()
            .unwrap();
        let site = nrllm_demo::tools::builtin_registry(p.site.clone(), Arc::new(store.clone()));
        let update = site.get("update_page").unwrap();
        let args = json!({"slug": "home", "title": "Stale"});
        let at = |epoch: i64| ToolContext {
            run_id: run.id.to_string(),
            actor: "bob".into(),
            call_id: "c1".into(),
            lease_epoch: Some(epoch),
            ..ToolContext::default()
        };
        // Another instance took the run over: its version moved on.
        assert!(store
            .take_lease(run.id, nrllm_core::clock::now_ms(), true)
            .await
            .unwrap());
        let refused = update.execute(&args, &at(taken.version)).await.unwrap_err();
        assert!(
            refused.model_text().contains("no longer drives the run"),
            "{}: {}",
            db.name,
            refused.model_text()
        );
        assert_eq!(p.site.get_page("home").await.unwrap().title, "Welcome");
        // At the run's version now, the change goes through.
        let now = store.get(run.id).await.unwrap().unwrap().version;
        update.execute(&args, &at(now)).await.unwrap();
        assert_eq!(p.site.get_page("home").await.unwrap().title, "Stale");
        db.cleanup().await;
    }
}
