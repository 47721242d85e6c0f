//! MCP tools in the real server binary, against the demo notebook server it starts over stdio
//! (`nrllm-playground mcp-demo`): a run cancelled while its approved MCP call is in flight tells
//! the server to cancel the call, and a server that cannot start is shown failed, with its
//! reason, while the rest of the program works; without any, the system page says so. A
//! server's question waits across a restart; one asked inside an open call is answered in it,
//! also when the reply is given through another instance (Postgres), and keeps its run's slot;
//! a tool dropped while a run waits is refused when the turn is decided.

#![cfg(feature = "ssr")]

mod common;

use std::time::{Duration, Instant};

use common::{call, html, log_in, start, start_run, wait_for, wait_until, ADMIN_PASSWORD};
use nrllm_mcp::demo::Notebook;
use serde_json::json;

#[tokio::test]
async fn cancelling_a_run_cancels_its_mcp_call_on_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.json");
    let settings = format!(
        "[[mcp_servers]]\nname = \"notes\"\ncommand = \"@self\"\n\
         args = [\"mcp-demo\", \"--data\", \"{}\"]\n\
         env = {{ NRLLM_MCP_DEMO_FAULT = \"hang-during-write\" }}\n\
         [[mcp_servers]]\nname = \"broken\"\ncommand = \"/nonexistent/mcp-server\"\n",
        notes.display()
    );
    let server = start(&settings, &[]).await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;

    // The server that cannot start is failed, with the reason; the other one works.
    let page = html(&server, &admin.cookies, "/system").await;
    assert!(
        page.contains("data-name=\"broken\" data-state=\"failed\""),
        "{page}"
    );
    assert!(
        page.contains("failed: cannot start `/nonexistent/mcp-server`"),
        "{page}"
    );
    assert!(
        page.contains("data-name=\"notes\" data-state=\"connected\""),
        "{page}"
    );

    let run = start_run(
        &server,
        &admin,
        json!({ "prompt": "Write the note todo saying \"Buy milk\"" }),
    )
    .await;
    let view = wait_for(&server, &admin, &run, "waiting_for_approval").await;
    assert_eq!(view["pending"][0]["tool"], "notes__write_note");
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": run, "decision": "approve_all" }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The approved call is in flight (the server holds it until it is cancelled).
    wait_until(&server, &admin, &run, "dispatched its call", |view| {
        view["summary"]["status"] == "running"
            && view["steps"].to_string().contains("notes__write_note")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_run_cancel",
        json!({ "run_id": run, "reason": "wrong note" }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let view = wait_for(&server, &admin, &run, "cancelled").await;
    assert!(
        view.to_string()
            .contains("the approved calls in flight were abandoned"),
        "the cancelled call is named as one whose outcome is unknown: {view}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let book = Notebook::load(&notes).unwrap();
        if book.cancelled.len() == 1 {
            assert_eq!(book.writes, 0, "{book:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server hears the cancel: {book:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn a_server_without_mcp_servers_says_so_on_the_system_page() {
    let server = start("", &[]).await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    let page = html(&server, &admin.cookies, "/system").await;
    assert!(page.contains("No MCP server is configured."), "{page}");
    assert!(!page.contains("system-mcp-server"), "{page}");
}

/// The demo notebook server asks for a new note's name while the approved call runs (MCP
/// 2026-07-28: "input required"): the run waits for input with the server named and its form;
/// a reply that does not fit and any decision but a reply are refused with nothing sent; the
/// wait outlives a kill -9 of the whole server; the reply from the restarted one goes back to
/// the server with the call, which writes once. A declined question writes nothing.
#[tokio::test]
async fn a_servers_question_waits_across_a_restart_and_the_reply_goes_back_with_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.json");
    let settings = format!(
        "[[mcp_servers]]\nname = \"notes\"\ncommand = \"@self\"\n\
         args = [\"mcp-demo\", \"--data\", \"{}\"]\n",
        notes.display()
    );
    let first = start(&settings, &[]).await;
    let admin = log_in(&first, "admin", ADMIN_PASSWORD).await;
    let run = start_run(
        &first,
        &admin,
        json!({ "prompt": "Write a note saying buy <b>milk</b>" }),
    )
    .await;
    let view = wait_for(&first, &admin, &run, "waiting_for_approval").await;
    assert_eq!(
        view["pending"][0]["arguments"]
            .as_str()
            .map(|a| a.contains("\"name\"")),
        Some(false)
    );
    let (status, body) = call(
        &first,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": run, "decision": "approve_all" }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let view = wait_for(&first, &admin, &run, "waiting_for_input").await;
    let question = &view["pending"][0]["question"];
    assert_eq!(question["asked_by"]["server"], "notes", "{view}");
    assert_eq!(question["asked_by"]["tool"], "notes__write_note");
    assert_eq!(question["text"], "What should the new note be called?");
    assert_eq!(question["fields"][0]["name"], "name");
    assert_eq!(question["fields"][0]["required"], true);
    assert!(
        view["steps"]
            .to_string()
            .contains("notes asks, during notes__write_note"),
        "{view}"
    );

    // Nothing that does not fit goes to the server.
    let (status, body) = call(
        &first,
        &admin,
        "nrllm_input_answer",
        json!({ "run_id": run, "fields": {"name": ""} }),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("name"), "{body}");
    let (status, body) = call(
        &first,
        &admin,
        "nrllm_input_answer",
        json!({ "run_id": run, "action": "maybe" }),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = call(
        &first,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": run, "decision": "approve_all" }),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.to_string().contains("server notes asked"), "{body}");
    assert_eq!(Notebook::load(&notes).unwrap().writes, 0);

    // The whole server dies; the wait is in the database.
    first.signal("KILL");
    let second = start(&settings, &[("NRLLM_DATABASE_URL", first.db.as_str())]).await;
    let admin = log_in(&second, "admin", ADMIN_PASSWORD).await;
    let view = wait_for(&second, &admin, &run, "waiting_for_input").await;
    assert_eq!(
        view["pending"][0]["question"]["asked_by"]["server"],
        "notes"
    );
    let view = name_note(&second, &admin, &run, "milk").await;
    let book = Notebook::load(&notes).unwrap();
    assert_eq!(
        book.notes.get("milk").map(String::as_str),
        Some("buy <b>milk</b>")
    );
    assert_eq!(book.writes, 1, "{book:?}");
    let steps = view["steps"].to_string();
    assert!(steps.contains("question accepted"), "{steps}");
    assert!(view.to_string().contains("Wrote note milk"), "{view}");

    // Declined: the server writes nothing, and the model reads that.
    let declined = start_run(
        &second,
        &admin,
        json!({ "prompt": "Write a note saying never" }),
    )
    .await;
    wait_for(&second, &admin, &declined, "waiting_for_approval").await;
    let (status, _) = call(
        &second,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": declined, "decision": "approve_all" }),
    )
    .await;
    assert_eq!(status, 200);
    wait_for(&second, &admin, &declined, "waiting_for_input").await;
    let (status, body) = call(
        &second,
        &admin,
        "nrllm_input_answer",
        json!({ "run_id": declined, "action": "decline" }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let view = wait_for(&second, &admin, &declined, "completed").await;
    assert!(
        view.to_string()
            .contains("the operator declined to name it"),
        "{view}"
    );
    assert_eq!(Notebook::load(&notes).unwrap().writes, 1);
}

/// Starts a run that writes an unnamed note and approves it: the demo server, speaking only the
/// versions before MCP 2026-07-28, asks for the name inside the open call, which is held while
/// the run waits for input.
async fn held_question(
    server: &common::Server,
    admin: &common::Session,
    prompt: &str,
) -> (String, serde_json::Value) {
    let run = start_run(server, admin, json!({ "prompt": prompt })).await;
    wait_for(server, admin, &run, "waiting_for_approval").await;
    let (status, body) = call(
        server,
        admin,
        "nrllm_tool_resume",
        json!({ "run_id": run, "decision": "approve_all" }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let view = wait_for(server, admin, &run, "waiting_for_input").await;
    (run, view)
}

/// Names the note that run `run` waits for (the server's question) `name`, through `server`;
/// the run as it completed.
async fn name_note(
    server: &common::Server,
    admin: &common::Session,
    run: &str,
    name: &str,
) -> serde_json::Value {
    let (status, body) = call(
        server,
        admin,
        "nrllm_input_answer",
        json!({ "run_id": run, "fields": {"name": name} }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    wait_for(server, admin, run, "completed").await
}

/// Settings with the demo notebook server on `notes`, speaking only the versions before MCP
/// 2026-07-28 (so it asks inside its open call).
fn older_notes(notes: &std::path::Path) -> String {
    format!(
        "[[mcp_servers]]\nname = \"notes\"\ncommand = \"@self\"\n\
         args = [\"mcp-demo\", \"--data\", \"{}\", \"--protocol\", \"2025-11-25\"]\n",
        notes.display()
    )
}

/// A server before MCP 2026-07-28 asks inside its open call: the call is held while the run
/// waits for input (the question says so, and the run's deadline is the held call's); the reply
/// goes to the server in that call, which writes once. Across a kill -9 the held call is gone:
/// the reply is not sent and the step says the call's outcome is unknown. Nobody answering in
/// time cancels the question at the deadline, and the call goes on.
#[tokio::test]
async fn a_question_asked_inside_an_open_call_is_answered_in_it_while_it_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.json");
    let settings = older_notes(&notes);
    let first = start(&settings, &[]).await;
    let admin = log_in(&first, "admin", ADMIN_PASSWORD).await;
    let before = nrllm_core::clock::now_ms();
    let (run, view) = held_question(&first, &admin, "Write a note saying buy <b>milk</b>").await;
    let question = &view["pending"][0]["question"];
    assert_eq!(question["asked_by"]["server"], "notes", "{view}");
    assert_eq!(question["asked_by"]["held"], true, "{view}");
    assert_eq!(question["text"], "What should the new note be called?");
    assert!(
        view["steps"]
            .to_string()
            .contains("waiting for input, the call held open"),
        "{view}"
    );
    let page = html(&first, &admin.cookies, "/system").await;
    assert!(
        page.contains("1 call(s) held open for an operator"),
        "{page}"
    );
    // The tools' gates are kept for the next start (a hint loosened meanwhile is caught).
    let db = nrllm_store::db::Database::connect(&first.db).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let waits: Option<i64> =
            sqlx::query_scalar("SELECT waits FROM mcp_tool_gate WHERE tool = 'notes__write_note'")
                .fetch_optional(db.pool())
                .await
                .unwrap();
        if waits == Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "the gates are kept: {waits:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Held for the default 10 minutes: the run's deadline, well before the day-long approval one.
    let deadline = view["summary"]["deadline_at"][0]
        .as_i64()
        .expect("a deadline");
    assert!(
        (before + 590_000..before + 700_000).contains(&deadline),
        "{deadline} {before}"
    );
    let view = name_note(&first, &admin, &run, "milk").await;
    assert!(view.to_string().contains("Wrote note milk"), "{view}");
    assert_eq!(Notebook::load(&notes).unwrap().writes, 1);

    // The whole server dies while a call is held: the reply finds no call to go to.
    let (lost, _) = held_question(&first, &admin, "Write a note saying lost").await;
    first.signal("KILL");
    let second = start(
        &settings,
        &[
            ("NRLLM_DATABASE_URL", first.db.as_str()),
            ("NRLLM_MCP_ELICITATION_TIMEOUT_SECS", "2"),
            ("NRLLM_LEASE_SECS", "3"),
        ],
    )
    .await;
    let admin = log_in(&second, "admin", ADMIN_PASSWORD).await;
    wait_for(&second, &admin, &lost, "waiting_for_input").await;
    let view = name_note(&second, &admin, &lost, "lost").await;
    let steps = view["steps"].to_string();
    assert!(
        steps.contains("the reply goes to the call held open"),
        "{steps}"
    );
    assert!(
        view["summary"]["final_answer"]
            .to_string()
            .contains("no longer held open"),
        "{view}"
    );
    assert_eq!(Notebook::load(&notes).unwrap().writes, 1);

    // Nobody answers within the 2 s: the server hears `cancel` and writes nothing.
    let (late, _) = held_question(&second, &admin, "Write a note saying late").await;
    let view = wait_for(&second, &admin, &late, "completed").await;
    assert!(
        view.to_string()
            .contains("the operator cancelled the question"),
        "{view}"
    );
    assert_eq!(Notebook::load(&notes).unwrap().writes, 1);
}

/// Two instances on one Postgres database, each with its own demo notebook server of a version
/// before MCP 2026-07-28: the reply to a question asked inside a call one instance holds open,
/// given through the other instance, reaches that call (the run is queued for the instance that
/// holds it). Once that instance is killed, its hold lapses within the lease and the other goes
/// on with the run: the call's outcome is unknown, and nothing is written twice.
#[tokio::test]
async fn a_reply_given_through_another_instance_reaches_the_call_held_open_there() {
    let pg = nrllm_store::testing::postgres_from_env().await;
    let dir = tempfile::tempdir().unwrap();
    let notes = [dir.path().join("a.json"), dir.path().join("b.json")];
    let env = [
        ("NRLLM_DATABASE_URL", pg.url.as_str()),
        ("NRLLM_LEASE_SECS", "2"),
    ];
    // One after the other: the first start migrates the database and creates the admin.
    let a = start(&older_notes(&notes[0]), &env).await;
    let b = start(&older_notes(&notes[1]), &env).await;
    let admin = log_in(&a, "admin", ADMIN_PASSWORD).await;
    let writes = || {
        notes
            .iter()
            .map(|path| Notebook::load(path).map_or(0, |book| book.writes))
            .sum::<u64>()
    };
    // Whichever instance's worker took the run holds the call; the reply goes through the other.
    let holder = |run: String| {
        let (db, a, b) = (pg.db.clone(), &a, &b);
        async move {
            let owner: Option<String> =
                sqlx::query_scalar("SELECT held_by FROM agent_run WHERE id = $1")
                    .bind(&run)
                    .fetch_one(db.pool())
                    .await
                    .unwrap();
            let owner = owner.expect("the waiting run is held for the instance holding its call");
            match (a.owns(&owner), b.owns(&owner)) {
                (true, false) => (a, b),
                (false, true) => (b, a),
                _ => panic!("the hold {owner} is neither instance's"),
            }
        }
    };
    for n in 1..=3u64 {
        let (run, _) = held_question(&a, &admin, &format!("Write a note saying n{n}")).await;
        let (_, other) = holder(run.clone()).await;
        let view = name_note(other, &admin, &run, &format!("n{n}")).await;
        assert!(
            view.to_string().contains(&format!("Wrote note n{n}")),
            "{view}"
        );
        assert!(!view.to_string().contains("no longer held open"), "{view}");
        assert_eq!(writes(), n);
    }

    // The holding instance dies: its hold lapses, and the survivor goes on with the run.
    let (lost, _) = held_question(&a, &admin, "Write a note saying lost").await;
    let (holding, survivor) = holder(lost.clone()).await;
    holding.signal("KILL");
    let view = name_note(survivor, &admin, &lost, "lost").await;
    assert!(
        view["summary"]["final_answer"]
            .to_string()
            .contains("no longer held open"),
        "{view}"
    );
    assert_eq!(writes(), 3);
    drop((a, b));
    pg.cleanup().await;
}

/// A call held open keeps its run's running slot: with `max_running_runs = 1`, a run started
/// meanwhile stays queued; the reply is still taken (the held call's slot is its own), and once
/// its call is done the queued run goes on.
#[tokio::test]
async fn a_call_held_open_keeps_its_runs_running_slot() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.json");
    let server = start(&older_notes(&notes), &[("NRLLM_MAX_RUNNING_RUNS", "1")]).await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    let (held, _) = held_question(&server, &admin, "Write a note saying slot").await;
    let queued = start_run(
        &server,
        &admin,
        json!({ "prompt": "Rename the home page to \"Later\"" }),
    )
    .await;
    // The queue is looked at every 500 ms: three looks, and the run is still queued.
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    let view = wait_for(&server, &admin, &queued, "queued").await;
    assert_eq!(view["summary"]["status"], "queued", "{view}");
    let view = name_note(&server, &admin, &held, "slot").await;
    assert!(view.to_string().contains("Wrote note slot"), "{view}");
    wait_for(&server, &admin, &queued, "waiting_for_approval").await;
    assert_eq!(Notebook::load(&notes).unwrap().writes, 1);
}

/// A tool list that changes mid-run: while a run waits for approval of a call to the demo
/// server's `write_note` (served over HTTP here), the server drops that tool; the system page
/// says the list changed, and the approved call is answered that the tool is no longer
/// available — nothing is written.
#[tokio::test]
async fn a_tool_dropped_while_a_run_waits_is_refused_when_its_turn_is_decided() {
    use nrllm_mcp::demo::DemoServer;
    let web = DemoServer::open(None).unwrap();
    let router = nrllm_mcp::demo::serving::router(web.clone());
    let url = format!("{}/mcp", common::fakes::serve(router).await);
    let settings = format!("[[mcp_servers]]\nname = \"web\"\nurl = \"{url}\"\n");
    let server = start(&settings, &[]).await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;
    let run = start_run(
        &server,
        &admin,
        json!({ "prompt": "Write the note todo saying \"Buy milk\"" }),
    )
    .await;
    let view = wait_for(&server, &admin, &run, "waiting_for_approval").await;
    assert!(view.to_string().contains("web__write_note"), "{view}");

    let kept = DemoServer::tools()
        .into_iter()
        .filter(|tool| tool.name != "write_note")
        .collect();
    web.replace_tools(kept).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let page = html(&server, &admin.cookies, "/system").await;
        if page.contains("tool list changed 1 time(s)") {
            break;
        }
        assert!(Instant::now() < deadline, "the list change is seen: {page}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = call(
        &server,
        &admin,
        "nrllm_tool_resume",
        json!({ "run_id": run, "decision": "approve_all" }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let view = wait_for(&server, &admin, &run, "completed").await;
    assert!(view.to_string().contains("no longer available"), "{view}");
    assert_eq!(web.notebook().writes, 0);
}
