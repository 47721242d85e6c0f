//! The demo model, the built-in tools and the store together, as the playground runs them:
//! rename (approve), delete (deny with a reason), a two-call turn decided per call, and edited
//! arguments — on both backends.

use nrllm_store::testing as common;

use std::sync::Arc;

use common::backends;
use nrllm_core::service::{RunService, SingleLoop};
use nrllm_core::store::{RunConfiguration, RunRecord, RunStatus, RunStore};
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
            .resume(run.id, &Decision::ApproveAll, "bob", None)
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
            .resume(run.id, &decision, "bob", None)
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
            .resume(run.id, &decision, "bob", None)
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
                "bob",
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
                "bob",
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
