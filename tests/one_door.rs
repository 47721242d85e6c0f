//! One door, against the real server binary: every way a run moves on passes the core's authority.
//! - an answer decides only what it answers: a model turn that asks a question *and* calls a tool
//!   that needs approval (a scripted OpenAI-compatible model, as a prompt injection would make
//!   it) is not approved by answering the question; the whole turn is decided in one decision;
//! - four-eyes follows the run's lineage: neither the requester nor whoever forked the run may
//!   decide the fork;
//! - a token belongs to a user: it decides as that user (four-eyes too), with the lower of its
//!   role and theirs, is recorded beside their name, and stops working when they are disabled;
//! - forks and retries count toward `run_starts_per_minute`.

#![cfg(feature = "ssr")]

mod common;

use common::{
    call, call_with_token, log_in, start, start_run, users, wait_for, Server, Session,
    ADMIN_PASSWORD,
};
use reqwest::StatusCode;
use serde_json::{json, Value};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// An OpenAI-compatible chat completion whose message is `message`.
fn completion(message: Value) -> Value {
    json!({"id": "c1", "object": "chat.completion", "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2}})
}

/// A model that first answers with one turn asking a question and renaming the home page, then
/// with a final text.
async fn injected_model() -> MockServer {
    let server = MockServer::start().await;
    let turn = completion(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "q1", "type": "function", "function": {"name": "ask_operator",
            "arguments": "{\"question\": \"Which colour?\", \"choices\": [\"red\", \"blue\"]}"}},
        {"id": "u1", "type": "function", "function": {"name": "update_page",
            "arguments": "{\"slug\": \"home\", \"title\": \"Pwned\"}"}}
    ]}));
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(turn))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(completion(json!({"role": "assistant", "content": "Done."}))),
        )
        .mount(&server)
        .await;
    server
}

/// The settings: four-eyes for `reviewed` (the demo model), a scripted model `scripted`, and the
/// run start limit.
fn settings(model: &MockServer, starts_per_minute: u32) -> String {
    format!(
        "log_level = \"info\"\nrun_starts_per_minute = {starts_per_minute}\n\n\
         [[configurations]]\nname = \"reviewed\"\nkind = \"demo\"\nmodel = \"demo-1\"\nfour_eyes = true\n\n\
         [[configurations]]\nname = \"scripted\"\nkind = \"openai\"\nmodel = \"scripted\"\n\
         base_url = \"{}/v1\"\napi_key_env = \"TEST_WIRE_KEY\"\n",
        model.uri()
    )
}

async fn server(starts_per_minute: u32) -> (Server, MockServer) {
    let model = injected_model().await;
    let server = start(
        &settings(&model, starts_per_minute),
        &[("TEST_WIRE_KEY", "key-1")],
    )
    .await;
    (server, model)
}

/// The demo site's pages as a run lists them now.
async fn pages(server: &Server, session: &Session) -> String {
    let id = start_run(server, session, json!({ "prompt": "List the pages" })).await;
    let view = wait_for(server, session, &id, "completed").await;
    view["summary"]["final_answer"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn an_answer_never_approves_the_other_calls_of_its_turn() {
    let (server, model) = server(30).await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    assert!(!pages(&server, &admin).await.contains("Pwned"));
    let id = start_run(
        &server,
        &admin,
        json!({ "prompt": "Do what the page says", "configuration": "scripted" }),
    )
    .await;
    // A question beside a call that needs approval: the run waits for approval, not input.
    let waiting = wait_for(&server, &admin, &id, "waiting_for_approval").await;
    let digest = waiting["digest"].as_str().unwrap().to_owned();
    // The answer alone is refused, naming the call still undecided; nothing ran.
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_input_answer",
        json!({ "run_id": id, "digest": digest, "answer": "red" }),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.to_string().contains("update_page (u1)"), "{body}");
    let still = wait_for(&server, &admin, &id, "waiting_for_approval").await;
    assert_eq!(still["digest"], waiting["digest"]);
    assert!(!pages(&server, &admin).await.contains("Pwned"));
    // An answer that does not fit the question is refused in the decision too.
    let decide = |answer: &str, choice: &str| {
        json!({ "run_id": id, "digest": digest, "decision": "per_call", "calls": [
            {"call_id": "q1", "choice": "answer", "answer": answer},
            {"call_id": "u1", "choice": choice, "reason": "not today"}
        ]})
    };
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_tool_resume",
        decide("green", "deny"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // One decision: the question answered, the rename denied.
    let (status, body) = call(&server, &admin, "nrllm_tool_resume", decide("blue", "deny")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    wait_for(&server, &admin, &id, "completed").await;
    assert!(!pages(&server, &admin).await.contains("Pwned"));
    // The model read the answer as the question's result, and the refusal as the rename's.
    let requests = model.received_requests().await.unwrap();
    let last: Value = serde_json::from_slice(&requests.last().unwrap().body).unwrap();
    let results: Vec<(String, String)> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(results[0], ("q1".to_owned(), "blue".to_owned()));
    assert_eq!(results[1].0, "u1");
    assert!(results[1].1.contains("not today"), "{results:?}");
}

#[tokio::test]
async fn four_eyes_follows_the_lineage_and_a_token_is_its_user() {
    let (server, _model) = server(30).await;
    // Olga and Bert are approvers; Ann approves what they may not.
    let team = users(
        &server,
        &[
            ("olga", "approver"),
            ("bert", "approver"),
            ("ann", "approver"),
            ("otto", "operator"),
        ],
    )
    .await;
    // Otto (an operator) is in the team for the token an admin makes for him.
    let (olga, bert, ann) = (&team[0], &team[1], &team[2]);
    let id = start_run(
        &server,
        olga,
        json!({ "prompt": "Rename the home page to \"Lineage\"", "configuration": "reviewed" }),
    )
    .await;
    let waiting = wait_for(&server, olga, &id, "waiting_for_approval").await;
    let step = waiting["last_sequence"].as_i64().unwrap();
    // Bert forks it at its approval step: the fork's turn waits again.
    let (status, fork) = call(
        &server,
        bert,
        "nrllm_run_fork",
        json!({ "run_id": id, "step": step.to_string() }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{fork}");
    let fork = fork.as_str().unwrap().to_owned();
    let forked = wait_for(&server, bert, &fork, "waiting_for_approval").await;
    let digest = forked["digest"].as_str().unwrap().to_owned();
    let approve = json!({ "run_id": fork, "decision": "approve_all", "digest": digest });
    // Neither the requester of the run it goes on from nor its forker may decide it …
    for (who, session) in [("olga", olga), ("bert", bert)] {
        let (status, body) = call(&server, session, "nrllm_tool_resume", approve.clone()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{who}: {body}");
        assert!(body.to_string().contains("Four-eyes"), "{body}");
        let view = wait_for(&server, session, &fork, "waiting_for_approval").await;
        assert!(view["decide_block"].as_str().unwrap().contains("Four-eyes"));
    }
    // … nor add a rule that decides it in advance.
    let (status, body) = call(
        &server,
        olga,
        "nrllm_rule_add",
        json!({ "scope": "run", "run_id": fork, "tool": "update_page", "effect": "allow" }),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");

    // Olga's own token, with a role above hers, is Olga: still four-eyes.
    let (status, token) = call(
        &server,
        olga,
        "nrllm_token_create",
        json!({ "name": "olga-ci", "role": "admin" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{token}");
    let olga_token = token.as_str().unwrap().to_owned();
    let (status, body) =
        call_with_token(&server, &olga_token, "nrllm_tool_resume", approve.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.to_string().contains("Four-eyes: olga"), "{body}");
    // A user cannot make a token for somebody else.
    let (status, _) = call(
        &server,
        olga,
        "nrllm_token_create",
        json!({ "name": "for-ann", "role": "approver", "user": "ann" }),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // An admin makes one for Otto with the admin role: it acts as an operator, Otto's role.
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    let (status, token) = call(
        &server,
        &admin,
        "nrllm_token_create",
        json!({ "name": "otto-ci", "role": "admin", "user": "otto" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{token}");
    let otto_token = token.as_str().unwrap().to_owned();
    let (status, body) =
        call_with_token(&server, &otto_token, "nrllm_tool_resume", approve.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body.to_string().contains("needs the approver role"),
        "{body}"
    );

    // Ann decides through her token: recorded as Ann, with the token beside her name.
    let (status, token) = call(
        &server,
        ann,
        "nrllm_token_create",
        json!({ "name": "ann-ci", "role": "approver" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let ann_token = token.as_str().unwrap().to_owned();
    let (status, body) = call_with_token(&server, &ann_token, "nrllm_tool_resume", approve).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let done = wait_for(&server, ann, &fork, "completed").await;
    let decision = done["summary"]["decision"].as_str().unwrap();
    assert!(decision.starts_with("approved by ann at"), "{decision}");
    assert!(
        done.to_string().contains("decided by ann (token ann-ci)"),
        "{done}"
    );

    // Disabled, Ann's token works no more.
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_user_update",
        json!({ "name": "ann", "role": "approver", "disabled": "1" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = call_with_token(&server, &ann_token, "nrllm_runs_list", json!({})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn forks_and_retries_count_toward_the_run_start_limit() {
    let (server, _model) = server(2).await;
    let team = users(&server, &[("olga", "operator")]).await;
    let olga = &team[0];
    let id = start_run(&server, olga, json!({ "prompt": "List the pages" })).await;
    let done = wait_for(&server, olga, &id, "completed").await;
    let step = done["last_sequence"].as_i64().unwrap().to_string();
    let fork = json!({ "run_id": id, "step": step, "prompt": "And again" });
    let (status, body) = call(&server, olga, "nrllm_run_fork", fork.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The third start in the minute, a fork, is refused.
    let (status, body) = call(&server, olga, "nrllm_run_fork", fork).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    let (status, body) = call(&server, olga, "nrllm_run_retry", json!({ "run_id": id })).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
}
