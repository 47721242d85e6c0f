//! Operator power tools against the real server binary with the demo model: per-call gating
//! (`send_message` to the internal domain goes through, to anyone else it waits; a turn mixing
//! both waits whole), approval rules (added while approving, as a JSON client and as a form post
//! without JavaScript; a later call they match runs without waiting, and its step names the rule;
//! a denying rule refuses; rules are listed and removed, and who may do what), and answering a
//! pending call instead of running it (the model reads the answer, the outbox is unchanged).

#![cfg(feature = "ssr")]

mod common;

use common::{call, form, html, log_in, start, start_run, wait_for, Server, ADMIN_PASSWORD};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Messages in the demo site's outbox.
async fn outbox(server: &Server) -> i64 {
    let db = nrllm_store::db::Database::connect(&server.db)
        .await
        .unwrap();
    let row: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM site_outbox")
        .fetch_one(db.pool())
        .await
        .unwrap();
    row.0
}

fn titles(view: &Value) -> Vec<String> {
    view["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["title"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn message(to: &str) -> Value {
    json!({ "prompt": format!("Send a message to {to} saying the site is live") })
}

#[tokio::test]
async fn per_call_gating_rules_and_answers_instead_of_runs() {
    let server = start("", &[]).await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;

    // Per-call gating: the internal address goes straight to the outbox, journaled as decided
    // by the tool's own check; anyone else's waits.
    let before = outbox(&server).await;
    let internal = start_run(&server, &admin, message("ops@internal.example")).await;
    let view = wait_for(&server, &admin, &internal, "completed").await;
    assert_eq!(outbox(&server).await, before + 1);
    assert!(
        titles(&view)
            .iter()
            .any(|t| t.contains("no approval needed")),
        "{:?}",
        titles(&view)
    );
    let external = start_run(&server, &admin, message("team@example.com")).await;
    let view = wait_for(&server, &admin, &external, "waiting_for_approval").await;
    assert_eq!(view["pending"][0]["gated"], true);
    assert_eq!(outbox(&server).await, before + 1);

    // A turn that mixes both waits whole: the internal message is held with it, unsent.
    let mixed = start_run(
        &server,
        &admin,
        json!({ "prompt": "Publish the careers page and tell ops@internal.example" }),
    )
    .await;
    let view = wait_for(&server, &admin, &mixed, "waiting_for_approval").await;
    let pending = view["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 2, "{view}");
    assert_eq!(pending[1]["tool"], "send_message");
    assert!(pending[1]["ruled"][1]
        .as_str()
        .unwrap()
        .contains("no approval needed"));
    assert_eq!(outbox(&server).await, before + 1, "nothing of the turn ran");
    let (status, _) = call(
        &server,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": mixed, "decision": "approve_all" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    wait_for(&server, &admin, &mixed, "completed").await;
    assert_eq!(outbox(&server).await, before + 2);

    // Answer instead of run: the model reads the operator's answer; nothing is sent.
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": external, "decision": "per_call", "calls": [
            { "call_id": view_call_id(&server, &admin, &external).await, "choice": "respond",
              "result": "I phoned the team <b>myself</b>." }
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let view = wait_for(&server, &admin, &external, "completed").await;
    assert_eq!(outbox(&server).await, before + 2, "the outbox is unchanged");
    let answered = titles(&view);
    assert!(
        answered
            .iter()
            .any(|t| t.contains("answered by the operator")),
        "{answered:?}"
    );
    assert!(
        view["summary"]["final_answer"]
            .as_str()
            .unwrap()
            .contains("I phoned the team <b>myself</b>."),
        "{view}"
    );

    // A rule asked for while approving (JSON): later matching calls run without waiting.
    let first = start_run(&server, &admin, message("team@example.com")).await;
    wait_for(&server, &admin, &first, "waiting_for_approval").await;
    let call_id = view_call_id(&server, &admin, &first).await;
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": first, "decision": "approve_all", "calls": [
            { "call_id": call_id, "remember": "configuration", "rule_argument": "to",
              "rule_op": "ends_with", "rule_value": "@example.com" }
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    wait_for(&server, &admin, &first, "completed").await;
    let second = start_run(&server, &admin, message("sales@example.com")).await;
    let view = wait_for(&server, &admin, &second, "completed").await;
    let (_, rules) = call(&server, &admin, "nrllm_rules_list", json!({})).await;
    let rule = rules["rules"][0].clone();
    assert_eq!(rule["created_by"], "admin");
    let note = format!("auto-approved by rule {}", rule["id"]);
    assert!(
        titles(&view).iter().any(|t| t.contains(&note)),
        "{note}: {:?}",
        titles(&view)
    );
    // A call the condition does not match still waits.
    let other = start_run(&server, &admin, message("someone@elsewhere.org")).await;
    wait_for(&server, &admin, &other, "waiting_for_approval").await;
    // "Never allow" goes with a denial, not with an approval.
    let other_call = view_call_id(&server, &admin, &other).await;
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": other, "decision": "approve_all", "calls": [
            { "call_id": other_call, "remember": "never_run" }
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body.to_string().contains("never allow send_message"),
        "{body}"
    );
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": other, "decision": "deny_all", "calls": [
            { "call_id": other_call, "remember": "never_run" }
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let view = wait_for(&server, &admin, &other, "completed").await;
    assert_eq!(view["rules"].as_array().unwrap().len(), 2, "{view}");
    assert!(view["rules"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["effect"] == "deny" && r["run_id"] == other.as_str()));

    // A denying rule: the model reads a refusal, nothing is sent.
    let sent = outbox(&server).await;
    let (status, id) = call(
        &server,
        &admin,
        "nrllm_rule_add",
        json!({ "scope": "configuration", "configuration": "demo", "tool": "send_message",
                "effect": "deny", "argument": "to", "op": "contains", "value": "sales" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{id}");
    let refused = start_run(&server, &admin, message("sales@example.com")).await;
    let view = wait_for(&server, &admin, &refused, "completed").await;
    assert_eq!(outbox(&server).await, sent);
    assert!(
        titles(&view)
            .iter()
            .any(|t| t.contains(&format!("refused by rule {id}"))),
        "{:?}",
        titles(&view)
    );

    // Bad rules are refused naming the field; operators cannot add configuration rules.
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_rule_add",
        json!({ "scope": "configuration", "configuration": "demo", "tool": "nope",
                "effect": "deny" }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = call(
        &server,
        &admin,
        "nrllm_rule_add",
        json!({ "scope": "configuration", "configuration": "demo", "tool": "send_message",
                "effect": "allow", "argument": "to", "op": "like", "value": "x" }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // The rules page lists them (as text), and a form post without JavaScript removes one.
    let page = html(&server, &admin.cookies, "/rules").await;
    assert!(page.contains("data-testid=\"rule\""), "{page}");
    assert!(page.contains("never allow send_message when to contains “sales”"));
    let response = form(
        &server,
        &admin.cookies,
        "nrllm_rule_remove",
        &[("id", &id.to_string()), ("csrf", &admin.csrf)],
        &[],
    )
    .await;
    assert!(response.status().is_redirection(), "{}", response.status());
    let (_, rules) = call(&server, &admin, "nrllm_rules_list", json!({})).await;
    assert_eq!(rules["rules"].as_array().unwrap().len(), 2, "{rules}");
    let (status, _) = call(
        &server,
        &admin,
        "nrllm_rule_remove",
        json!({ "id": id.to_string() }),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// The id of a waiting run's first pending call.
async fn view_call_id(server: &Server, session: &common::Session, run: &str) -> String {
    let (_, view) = call(server, session, "nrllm_run_get", json!({ "run_id": run })).await;
    view["pending"][0]["call_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_fork_copies_the_steps_and_decides_the_turn_again() {
    let server = start("", &[]).await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    let parent = start_run(&server, &admin, message("team@example.com")).await;
    wait_for(&server, &admin, &parent, "waiting_for_approval").await;
    let (status, _) = call(
        &server,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": parent, "decision": "approve_all" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let done = wait_for(&server, &admin, &parent, "completed").await;
    let sent = outbox(&server).await;
    let steps = done["steps"].as_array().unwrap().clone();
    let waited = steps
        .iter()
        .find(|s| s["kind"] == "approval_requested")
        .unwrap()["sequence"]
        .as_i64()
        .unwrap();

    // A form post without JavaScript forks at the step where the turn waited.
    let response = form(
        &server,
        &admin.cookies,
        "nrllm_run_fork",
        &[
            ("run_id", &parent),
            ("step", &waited.to_string()),
            ("prompt", ""),
            ("csrf", &admin.csrf),
        ],
        &[],
    )
    .await;
    assert!(response.status().is_redirection(), "{}", response.status());
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let fork = location.trim_start_matches("/runs/").to_owned();
    let view = wait_for(&server, &admin, &fork, "waiting_for_approval").await;
    let copied = &view["steps"].as_array().unwrap()[..waited as usize];
    assert_eq!(
        copied,
        &steps[..waited as usize],
        "the steps up to the fork are the parent's"
    );
    assert_eq!(view["summary"]["parent"][0], parent.as_str());
    assert_eq!(
        outbox(&server).await,
        sent,
        "nothing of the parent ran again"
    );
    let (_, parent_view) = call(
        &server,
        &admin,
        "nrllm_run_get",
        json!({ "run_id": parent }),
    )
    .await;
    assert_eq!(parent_view["children"][0]["id"], fork.as_str());
    let page = html(&server, &admin.cookies, &format!("/runs/{parent}")).await;
    assert!(page.contains("data-testid=\"child\""), "{page}");

    // This time the turn is denied: the fork goes its own way.
    let (status, _) = call(
        &server,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": fork, "decision": "deny_all", "reason": "not today" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let view = wait_for(&server, &admin, &fork, "completed").await;
    assert!(view["summary"]["final_answer"]
        .as_str()
        .unwrap()
        .contains("not today"));
    assert_eq!(outbox(&server).await, sent);

    // From the last step, with another prompt (JSON).
    let last = steps.last().unwrap()["sequence"].as_i64().unwrap();
    let (status, again) = call(
        &server,
        &admin,
        "nrllm_run_fork",
        json!({ "run_id": parent, "step": last.to_string(), "prompt": "What time is it?" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    let view = wait_for(&server, &admin, again.as_str().unwrap(), "completed").await;
    assert!(view["summary"]["final_answer"]
        .as_str()
        .unwrap()
        .starts_with("It is"));

    // Refusals name the field.
    for (step, prompt, field) in [
        ("x", "", "step"),
        ("999", "", "step"),
        (&*waited.to_string(), "another prompt", "prompt"),
    ] {
        let (status, body) = call(
            &server,
            &admin,
            "nrllm_run_fork",
            json!({ "run_id": parent, "step": step, "prompt": prompt }),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.to_string().contains(field), "{body}");
    }
}

#[tokio::test]
async fn a_run_asks_the_operator_and_one_answer_wins() {
    let server = start("", &[]).await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;

    // Choices: the page shows them as buttons; sixteen answers at once, one wins.
    let run = start_run(
        &server,
        &admin,
        json!({ "prompt": "Publish a page — ask me which one" }),
    )
    .await;
    let view = wait_for(&server, &admin, &run, "waiting_for_input").await;
    let question = &view["pending"][0]["question"];
    assert_eq!(question["text"], "Which page should I publish?");
    let choices: Vec<String> = question["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect();
    assert!(choices.contains(&"careers".to_owned()), "{choices:?}");
    let page = html(&server, &admin.cookies, &format!("/runs/{run}")).await;
    assert!(page.contains("data-testid=\"question-panel\""), "{page}");
    assert!(page.contains("value=\"careers\""));
    let (_, inbox) = call(&server, &admin, "nrllm_approvals_list", json!({})).await;
    assert!(inbox.to_string().contains(&run), "the inbox lists it");
    let answers = (0..16).map(|_| {
        let (server, admin, run) = (&server, &admin, run.clone());
        async move {
            call(
                server,
                admin,
                "nrllm_input_answer",
                json!({ "run_id": run, "answer": "careers" }),
            )
            .await
            .0
        }
    });
    let statuses = futures::future::join_all(answers).await;
    let won = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let lost = statuses
        .iter()
        .filter(|s| **s == StatusCode::CONFLICT)
        .count();
    assert_eq!((won, lost), (1, 15), "{statuses:?}");
    // The answer goes to the model, which asks to publish that page.
    let view = wait_for(&server, &admin, &run, "waiting_for_approval").await;
    assert_eq!(view["pending"][0]["tool"], "publish_page");
    assert!(view["pending"][0]["arguments"]
        .as_str()
        .unwrap()
        .contains("careers"));

    // A schema form: an answer that does not fit is refused naming the field.
    let run = start_run(
        &server,
        &admin,
        json!({ "prompt": "Create a page — ask me for its details" }),
    )
    .await;
    let view = wait_for(&server, &admin, &run, "waiting_for_input").await;
    let fields = view["pending"][0]["question"]["fields"].as_array().unwrap();
    assert_eq!(fields.len(), 2, "{view}");
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_input_answer",
        json!({ "run_id": run, "fields": { "slug": "Bad Slug", "title": "Asked" } }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("slug"), "{body}");
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_input_answer",
        json!({ "run_id": run, "fields": { "slug": "", "title": "Asked" } }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // Without JavaScript: a plain form post of the fields.
    let response = form(
        &server,
        &admin.cookies,
        "nrllm_input_answer",
        &[
            ("run_id", &run),
            ("fields[slug]", "asked-page"),
            ("fields[title]", "Asked"),
            ("csrf", &admin.csrf),
        ],
        &[],
    )
    .await;
    assert!(response.status().is_redirection(), "{}", response.status());
    let view = wait_for(&server, &admin, &run, "waiting_for_approval").await;
    assert_eq!(view["pending"][0]["tool"], "create_page");
    assert!(view["pending"][0]["arguments"]
        .as_str()
        .unwrap()
        .contains("asked-page"));
}
