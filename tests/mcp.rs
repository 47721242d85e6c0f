//! MCP tools in the real server binary, against the demo notebook server it starts over stdio
//! (`nrllm-playground mcp-demo`): a run cancelled while its approved MCP call is in flight tells
//! the server to cancel the call, and a server that cannot start is shown failed, with its
//! reason, while the rest of the program works; without any, the system page says so.

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
