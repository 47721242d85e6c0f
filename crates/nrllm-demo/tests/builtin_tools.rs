//! Every built-in tool through the registry, as the loop calls it: a happy path and bad
//! arguments (which must come back naming the field), plus previews, history and the outbox.

use nrllm_store::testing as common;

use std::sync::Arc;

use nrllm_core::registry::ToolRegistry;
use nrllm_core::run_store::RunStore;
use nrllm_core::tool::{Effect, Preview, ToolContext, ToolError};
use nrllm_demo::site::{page_basis, PageStatus, SiteStore};
use nrllm_demo::tools::builtin_registry;
use nrllm_store::tool_settings::ToolSettingsStore;
use nrllm_store::SqlRunStore;
use serde_json::{json, Value};

struct Site {
    site: SiteStore,
    registry: ToolRegistry,
    db: common::TestDb,
}

async fn site() -> Site {
    let db = common::sqlite().await;
    let site = SiteStore::new(db.db.clone());
    assert!(site.seed_once().await.unwrap());
    let runs: Arc<dyn RunStore> = Arc::new(SqlRunStore::new(db.db.clone()));
    let registry = builtin_registry(site.clone(), runs);
    Site { site, registry, db }
}

fn ctx() -> ToolContext {
    ToolContext {
        run_id: "0193a000-0000-7000-8000-000000000001".into(),
        actor: "olga".into(),
        call_id: "call_1".into(),
        approved_basis: None,
        effect_key: None,
        lease_epoch: None,
        progress: None,
        reply: None,
    }
}

async fn call(s: &Site, tool: &str, args: Value) -> Result<String, ToolError> {
    s.registry
        .get(tool)
        .unwrap_or_else(|| panic!("{tool} is registered"))
        .execute(&args, &ctx())
        .await
}

fn invalid_field(result: Result<String, ToolError>) -> String {
    match result {
        Err(ToolError::InvalidArguments { field, .. }) => field,
        other => panic!("expected invalid arguments, got {other:?}"),
    }
}

#[tokio::test]
async fn there_are_eleven_read_only_tools_and_five_that_need_approval() {
    let s = site().await;
    let (gated, read_only): (Vec<_>, Vec<_>) = s
        .registry
        .specs()
        .into_iter()
        .partition(|spec| spec.requires_approval);
    let names = |specs: &[nrllm_core::tool::ToolSpec]| {
        specs.iter().map(|s| s.name.clone()).collect::<Vec<_>>()
    };
    assert_eq!(
        names(&gated),
        [
            "create_page",
            "delete_page",
            "publish_page",
            "send_message",
            "update_page"
        ]
    );
    assert_eq!(read_only.len(), 11, "{:?}", names(&read_only));
    assert!(names(&read_only).contains(&"ask_operator".to_owned()));
    for spec in s.registry.specs() {
        assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
        assert!(
            ["site", "system", "runs"].contains(&spec.group.as_str()),
            "{}",
            spec.name
        );
    }
    s.db.cleanup().await;
}

#[tokio::test]
async fn two_tools_decide_per_call_from_their_arguments() {
    use nrllm_core::registry::AllowList;
    use nrllm_core::registry::Pass;
    use nrllm_core::transcript::ToolCall;
    let s = site().await;
    let gate = s.registry.gate(&AllowList::All, false);
    let pass = |tool: &str, args: Value| gate.pass(&ToolCall::new("c", tool, &args), &[], 1);
    let message = |to: &str| json!({"to": to, "subject": "s", "body": "b"});
    let per_call: Vec<String> = s
        .registry
        .specs()
        .into_iter()
        .filter(|spec| spec.approval_per_call)
        .map(|spec| spec.name.clone())
        .collect();
    assert_eq!(per_call, ["create_page", "send_message"]);
    // Internal addresses go through (journaled as decided by the tool's check); others wait.
    for to in ["ops@internal.example", "Ops@INTERNAL.example"] {
        assert!(
            matches!(pass("send_message", message(to)), Pass::Auto { allow: true, ref note } if note.contains("send_message")),
            "{to}"
        );
    }
    for to in [
        "team@example.com",
        "ops@internal.example.evil",
        "a@internal.example, b@example.com",
        "@internal.example",
        "internal.example",
        "a@evil.com@internal.example",
        "ops\n@internal.example",
        "ops@internal.example\nBcc: x@evil.com",
        "\"ops\"@internal.example",
    ] {
        assert_eq!(pass("send_message", message(to)), Pass::Ask, "{to}");
    }
    let page = |slug: &str| json!({"slug": slug, "title": "T"});
    assert!(matches!(
        pass("create_page", page("scratch-notes")),
        Pass::Auto { allow: true, .. }
    ));
    assert_eq!(pass("create_page", page("faq")), Pass::Ask);
    // Arguments that do not fit the schema wait, whatever they say.
    assert_eq!(
        pass("send_message", json!({"to": "ops@internal.example"})),
        Pass::Ask
    );
    // Tools that always ask, and read-only ones, are not affected.
    assert_eq!(pass("update_page", page("scratch-notes")), Pass::Ask);
    assert_eq!(pass("list_pages", json!({})), Pass::Free);
    s.db.cleanup().await;
}

#[tokio::test]
async fn read_only_tools_answer_and_name_bad_fields() {
    let s = site().await;
    let pages: Value =
        serde_json::from_str(&call(&s, "list_pages", json!({})).await.unwrap()).unwrap();
    assert_eq!(pages["pages"].as_array().unwrap().len(), 6);
    let drafts: Value = serde_json::from_str(
        &call(&s, "list_pages", json!({"status": "draft"}))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(drafts["pages"].as_array().unwrap().len(), 2);
    assert_eq!(
        invalid_field(call(&s, "list_pages", json!({"status": "secret"})).await),
        "status"
    );

    let home: Value =
        serde_json::from_str(&call(&s, "get_page", json!({"slug": "home"})).await.unwrap())
            .unwrap();
    assert_eq!(home["title"], "Welcome");
    assert_eq!(
        invalid_field(call(&s, "get_page", json!({"slug": "Not A Slug"})).await),
        "slug"
    );
    assert_eq!(invalid_field(call(&s, "get_page", json!({})).await), "slug");
    assert_eq!(
        invalid_field(call(&s, "get_page", json!({"slug": "home", "extra": 1})).await),
        "extra"
    );
    let missing = call(&s, "get_page", json!({"slug": "nope"}))
        .await
        .unwrap_err();
    assert_eq!(missing.model_text(), "Error: no page with slug `nope`");

    let hits: Value = serde_json::from_str(
        &call(&s, "search_pages", json!({"query": "Rust engineer"}))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(hits["matches"][0]["slug"], "careers");
    assert_eq!(
        invalid_field(call(&s, "search_pages", json!({"query": ""})).await),
        "query"
    );
    assert_eq!(
        invalid_field(call(&s, "search_pages", json!({"query": "x", "limit": 0})).await),
        "limit"
    );

    let history: Value = serde_json::from_str(
        &call(&s, "page_history", json!({"slug": "home"}))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(history["changes"], json!([]));
    assert_eq!(
        invalid_field(call(&s, "page_history", json!({"slug": 3})).await),
        "slug"
    );

    let stats: Value =
        serde_json::from_str(&call(&s, "site_stats", json!({})).await.unwrap()).unwrap();
    assert_eq!(
        (stats["pages"].as_i64(), stats["published"].as_i64()),
        (Some(6), Some(4))
    );
    assert_eq!(
        invalid_field(call(&s, "site_stats", json!({"x": 1})).await),
        "x"
    );

    let outbox: Value =
        serde_json::from_str(&call(&s, "list_outbox", json!({})).await.unwrap()).unwrap();
    assert_eq!(outbox["messages"], json!([]));
    assert_eq!(
        invalid_field(call(&s, "list_outbox", json!({"limit": "ten"})).await),
        "limit"
    );

    let now = call(&s, "current_time", json!({})).await.unwrap();
    assert!(now.ends_with(" UTC") && now.len() == 23, "{now}");

    assert_eq!(
        call(&s, "calculate", json!({"expression": "(12 * 7) / 3"}))
            .await
            .unwrap(),
        "(12 * 7) / 3 = 28"
    );
    assert_eq!(
        call(&s, "calculate", json!({"expression": "2^10"}))
            .await
            .unwrap(),
        "2^10 = 1024"
    );
    assert_eq!(
        invalid_field(call(&s, "calculate", json!({"expression": "2 +* 3"})).await),
        "expression"
    );
    assert_eq!(
        invalid_field(
            call(
                &s,
                "calculate",
                json!({"expression": "std::process::exit(1)"})
            )
            .await
        ),
        "expression"
    );

    let runs: Value =
        serde_json::from_str(&call(&s, "list_runs", json!({})).await.unwrap()).unwrap();
    assert_eq!(runs["runs"], json!([]));
    assert_eq!(
        invalid_field(call(&s, "list_runs", json!({"status": "sleeping"})).await),
        "status"
    );
    let unknown = call(
        &s,
        "get_run_summary",
        json!({"run_id": "0193a000-0000-7000-8000-0000000000ff"}),
    )
    .await;
    assert!(
        matches!(unknown, Err(ToolError::Refused(ref m)) if m.starts_with("no run with id")),
        "{unknown:?}"
    );
    assert_eq!(
        invalid_field(call(&s, "get_run_summary", json!({"run_id": "short"})).await),
        "run_id"
    );
    s.db.cleanup().await;
}

#[tokio::test]
async fn side_effecting_tools_write_with_history_and_preview_first() {
    let s = site().await;
    let update = s.registry.get("update_page").unwrap();
    let preview = update
        .preview(&json!({"slug": "home", "title": "Hello"}), &ctx())
        .await
        .unwrap();
    let home = s.site.get_page("home").await.unwrap();
    assert_eq!(
        preview,
        Some(
            Preview::change(
                "page home",
                "title: Welcome\nstatus: published\n\nWelcome to the Example Co. website. We make tools for careful teams.",
                "title: Hello\nstatus: published\n\nWelcome to the Example Co. website. We make tools for careful teams.",
            )
            .with_basis(page_basis("home", Some(&home)))
        )
    );
    assert_eq!(
        s.site.get_page("home").await.unwrap().title,
        "Welcome",
        "a preview changes nothing"
    );
    let result = call(&s, "update_page", json!({"slug": "home", "title": "Hello"}))
        .await
        .unwrap();
    assert_eq!(
        result,
        "Updated page `home`: title \"Welcome\" → \"Hello\"."
    );
    let history = s.site.history("home", 10).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].actor, "olga");
    assert_eq!(
        history[0].run_id.as_deref(),
        Some("0193a000-0000-7000-8000-000000000001")
    );
    assert_eq!(history[0].before.as_ref().unwrap().title, "Welcome");
    assert_eq!(history[0].after.as_ref().unwrap().title, "Hello");
    assert_eq!(
        invalid_field(call(&s, "update_page", json!({"slug": "home"})).await),
        "title"
    );
    assert_eq!(
        invalid_field(call(&s, "update_page", json!({"slug": "home", "title": ""})).await),
        "title"
    );

    assert_eq!(
        call(
            &s,
            "create_page",
            json!({"slug": "faq", "title": "Questions", "body": "Ask."})
        )
        .await
        .unwrap(),
        "Created draft page `faq` titled \"Questions\"."
    );
    let again = call(&s, "create_page", json!({"slug": "faq", "title": "Again"}))
        .await
        .unwrap_err();
    assert_eq!(
        again.model_text(),
        "Error: a page with slug `faq` already exists"
    );
    assert_eq!(
        invalid_field(call(&s, "create_page", json!({"slug": "faq"})).await),
        "title"
    );

    assert_eq!(
        call(&s, "publish_page", json!({"slug": "faq"}))
            .await
            .unwrap(),
        "Published page `faq` (\"Questions\")."
    );
    assert_eq!(
        s.site.get_page("faq").await.unwrap().status,
        PageStatus::Published
    );
    assert_eq!(
        invalid_field(call(&s, "publish_page", json!({"slug": ""})).await),
        "slug"
    );

    let delete_preview = s
        .registry
        .get("delete_page")
        .unwrap()
        .preview(&json!({"slug": "faq"}), &ctx())
        .await
        .unwrap();
    assert!(
        matches!(&delete_preview, Some(Preview { effect: Effect::Change { after, .. }, .. }) if after.is_empty())
    );
    assert_eq!(
        call(&s, "delete_page", json!({"slug": "faq"}))
            .await
            .unwrap(),
        "Deleted page `faq` (\"Questions\")."
    );
    assert!(s.site.get_page("faq").await.is_err());
    assert_eq!(
        s.site.history("faq", 10).await.unwrap().len(),
        3,
        "create, publish, delete are all recorded"
    );
    assert_eq!(
        invalid_field(call(&s, "delete_page", json!({})).await),
        "slug"
    );

    let send = s.registry.get("send_message").unwrap();
    let preview = send
        .preview(
            &json!({"to": "team", "subject": "Hi", "body": "Live!"}),
            &ctx(),
        )
        .await
        .unwrap();
    let preview = preview.unwrap();
    assert_eq!(
        preview.effect,
        Effect::Text {
            text: "To: team\nSubject: Hi\n\nLive!".into()
        }
    );
    assert!(preview.basis.unwrap().starts_with("message:"));
    let sent = call(
        &s,
        "send_message",
        json!({"to": "team", "subject": "Hi", "body": "Live!"}),
    )
    .await
    .unwrap();
    assert!(
        sent.starts_with("Message #1 to team queued in the outbox"),
        "{sent}"
    );
    assert_eq!(s.site.outbox(10).await.unwrap()[0].body, "Live!");
    assert_eq!(
        invalid_field(call(&s, "send_message", json!({"to": "team", "subject": "Hi"})).await),
        "body"
    );
    s.db.cleanup().await;
}

#[tokio::test]
async fn seeding_happens_once_and_tool_settings_persist() {
    let s = site().await;
    s.site
        .delete_page("home", &Default::default(), |_| String::new())
        .await
        .unwrap();
    assert!(
        !s.site.seed_once().await.unwrap(),
        "a second start seeds nothing"
    );
    assert!(
        s.site.get_page("home").await.is_err(),
        "deleted pages stay deleted"
    );

    let settings = ToolSettingsStore::new(s.db.db.clone());
    settings
        .set_tool(&s.registry, "delete_page", false)
        .await
        .unwrap();
    settings
        .set_group(&s.registry, "runs", false)
        .await
        .unwrap();
    let runs: Arc<dyn RunStore> = Arc::new(SqlRunStore::new(s.db.db.clone()));
    let fresh = builtin_registry(s.site.clone(), runs);
    assert!(fresh.is_enabled("delete_page") && fresh.is_enabled("list_runs"));
    settings.load_into(&fresh).await.unwrap();
    assert!(!fresh.is_enabled("delete_page"));
    assert!(!fresh.is_enabled("list_runs") && !fresh.is_enabled("get_run_summary"));
    assert!(fresh.is_enabled("update_page"));
    settings.set_group(&fresh, "runs", true).await.unwrap();
    assert!(fresh.is_enabled("list_runs"));
    s.db.cleanup().await;
}

#[tokio::test]
async fn a_write_approved_against_a_page_that_changed_since_is_refused_and_writes_nothing() {
    let s = site().await;
    let update = s.registry.get("update_page").unwrap();
    let args = json!({"slug": "about", "title": "About Example Co."});
    let seen = update.preview(&args, &ctx()).await.unwrap().unwrap();
    let basis = seen.basis.clone().unwrap();
    assert!(basis.starts_with("page:about@"), "{basis}");
    // Someone else changes the page after the operator looked.
    call(
        &s,
        "update_page",
        json!({"slug": "about", "body": "Changed meanwhile."}),
    )
    .await
    .unwrap();
    let changes_before = s.site.history("about", 10).await.unwrap().len();
    let approved = ToolContext {
        approved_basis: Some(basis.clone()),
        ..ctx()
    };
    let refused = update.execute(&args, &approved).await.unwrap_err();
    assert_eq!(
        refused.model_text(),
        "Error: the page `about` changed after the operator approved this change; nothing was written"
    );
    assert_eq!(s.site.get_page("about").await.unwrap().title, "About us");
    assert_eq!(
        s.site.history("about", 10).await.unwrap().len(),
        changes_before
    );
    // Against the page as it is now, the same change goes through.
    let fresh = update.preview(&args, &ctx()).await.unwrap().unwrap();
    assert_ne!(fresh.basis, seen.basis);
    let now = ToolContext {
        approved_basis: fresh.basis,
        ..ctx()
    };
    update.execute(&args, &now).await.unwrap();
    assert_eq!(
        s.site.get_page("about").await.unwrap().title,
        "About Example Co."
    );
    s.db.cleanup().await;
}

#[tokio::test]
async fn the_sites_writes_take_the_process_write_turn() {
    let s = site().await;
    // Another writer of this process holds the turn (as the run store's writer does while it
    // commits): the tool's effect queues behind it instead of in SQLite's busy handler.
    let holder = s.db.db.begin_write().await.unwrap();
    let message = json!({"to": "team", "subject": "Hi", "body": "Queued"});
    let send = {
        let tool = s.registry.get("send_message").unwrap();
        tokio::spawn(async move { tool.execute(&message, &ctx()).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    assert!(!send.is_finished(), "the effect did not wait for the turn");
    assert!(s.site.outbox(10).await.unwrap().is_empty());
    holder.commit().await.unwrap();
    let sent = tokio::time::timeout(std::time::Duration::from_secs(5), send)
        .await
        .expect("the effect went on when the turn came")
        .unwrap()
        .unwrap();
    assert!(sent.starts_with("Message #1 to team"), "{sent}");
    assert_eq!(s.site.outbox(10).await.unwrap()[0].body, "Queued");
    s.db.cleanup().await;
}
