//! The MCP client against real servers: the demo server started as a child process over stdio
//! (`nrllm-mcp-demo`, the same code as `nrllm-playground mcp-demo`) and served over Streamable
//! HTTP on a local port. Nothing leaves 127.0.0.1.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nrllm_core::mcp::{ApprovalPolicy, ServerPolicy};
use nrllm_core::registry::{AllowList, ToolRegistry};
use nrllm_core::tool::{Preview, ToolContext, ToolError};
use nrllm_mcp::config::{Server, Transport};
use nrllm_mcp::demo::{DemoServer, Fault, Notebook};
use nrllm_mcp::gates::GateMemory;
use nrllm_mcp::hub::{McpHub, State, Status};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

fn stdio(name: &str, data: &Path, env: &[(&str, &str)]) -> Server {
    Server {
        name: name.to_owned(),
        transport: Transport::Stdio {
            command: env!("CARGO_BIN_EXE_nrllm-mcp-demo").to_owned(),
            args: vec!["--data".to_owned(), data.display().to_string()],
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            pass_env: Vec::new(),
        },
        allow: None,
        policy: ServerPolicy::default(),
        call_timeout: Duration::from_secs(10),
        elicitation_timeout: None,
    }
}

fn http(name: &str, url: &str) -> Server {
    Server {
        name: name.to_owned(),
        transport: Transport::Http {
            url: url.to_owned(),
            headers: BTreeMap::from([("X-Team".to_owned(), "ops".to_owned())]),
            header_env: BTreeMap::new(),
        },
        allow: None,
        policy: ServerPolicy::default(),
        call_timeout: Duration::from_secs(10),
        elicitation_timeout: None,
    }
}

/// The demo server over Streamable HTTP on a free local port: its URL and its state.
async fn http_server(fault: Option<Fault>) -> (String, DemoServer) {
    let server = DemoServer::open(None).unwrap().with_fault(fault);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let router = nrllm_mcp::demo::serving::router(server.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (url, server)
}

async fn start(servers: Vec<Server>) -> (Arc<McpHub>, Arc<ToolRegistry>, CancellationToken) {
    let registry = Arc::new(ToolRegistry::new());
    let shutdown = CancellationToken::new();
    let hub = McpHub::start(
        servers,
        Arc::clone(&registry),
        shutdown.clone(),
        (WAIT, None),
    )
    .await;
    (hub, registry, shutdown)
}

fn status<'a>(statuses: &'a [Status], name: &str) -> &'a Status {
    statuses.iter().find(|s| s.name == name).unwrap()
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn keyed(key: &str) -> ToolContext {
    ToolContext {
        effect_key: Some(key.to_owned()),
        ..ToolContext::default()
    }
}

#[tokio::test]
async fn the_demo_server_joins_over_stdio_and_over_http_gated_by_its_annotations() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _web) = http_server(None).await;
    let (hub, registry, shutdown) = start(vec![
        stdio("notes", &dir.path().join("notes.json"), &[]),
        http("web", &url),
    ])
    .await;
    let statuses = hub.statuses();
    for name in ["notes", "web"] {
        let s = status(&statuses, name);
        assert_eq!(s.state, State::Connected, "{s:?}");
        assert_eq!(
            s.server_info
                .as_deref()
                .map(|i| i.starts_with("nrllm-notes")),
            Some(true)
        );
        let names: Vec<&str> = s.tools.iter().map(|t| t.name.as_str()).collect();
        // The dry run `write_note__preview` is the preview's, not the model's.
        assert_eq!(
            names,
            [
                format!("{name}__read_note"),
                format!("{name}__write_note"),
                format!("{name}__count_words")
            ]
        );
    }
    let gate = registry.gate(&AllowList::All, false);
    assert_eq!(
        gate.names(),
        [
            "notes__count_words",
            "notes__read_note",
            "notes__write_note",
            "web__count_words",
            "web__read_note",
            "web__write_note"
        ]
    );
    let read = gate.tool("web__read_note").unwrap();
    let write = gate.tool("web__write_note").unwrap();
    // readOnlyHint: no approval; destructiveHint: approval, and re-run after a crash
    // (idempotentHint).
    assert!(!read.spec().requires_approval);
    assert!(write.needs_approval(&json!({"name": "a", "text": "b"})));
    assert!(write.spec().idempotent_by_key);
    assert_eq!(write.spec().parameters["required"], json!(["text"]));

    for server in ["notes", "web"] {
        let write = registry.get(&format!("{server}__write_note")).unwrap();
        let read = registry.get(&format!("{server}__read_note")).unwrap();
        let args = json!({"name": "todo", "text": "Buy <b>milk</b>"});
        let preview = write.preview(&args, &ToolContext::default()).await.unwrap();
        assert_eq!(
            preview,
            Some(Preview::change("note todo", "", "Buy <b>milk</b>"))
        );
        let first = write.execute(&args, &keyed("k-1")).await.unwrap();
        assert_eq!(first, "Wrote note todo (15 characters).");
        // The same effect key again (a re-run after a crash): the first answer, no second write.
        let again = write.execute(&args, &keyed("k-1")).await.unwrap();
        assert_eq!(again, first);
        let text = read
            .execute(&json!({"name": "todo"}), &ToolContext::default())
            .await;
        assert_eq!(text.unwrap(), "Buy <b>milk</b>");
        // isError: the tool's own text goes back to the model as a tool error.
        let missing = read
            .execute(&json!({"name": "nope"}), &ToolContext::default())
            .await;
        assert_eq!(
            missing.unwrap_err(),
            ToolError::Refused("there is no note named nope".to_owned())
        );
        // Arguments that do not fit the schema never reach the server.
        let bad = write.execute(&json!({"name": "todo"}), &keyed("k-2")).await;
        assert!(
            matches!(bad, Err(ToolError::InvalidArguments { ref field, .. }) if field == "text"),
            "{bad:?}"
        );
    }
    let book = Notebook::load(&dir.path().join("notes.json")).unwrap();
    assert_eq!(book.writes, 1, "one write for one effect key: {book:?}");
    shutdown.cancel();
}

#[tokio::test]
async fn the_policy_overrides_the_annotations_and_the_allow_list_limits_the_tools() {
    let (url, _web) = http_server(None).await;
    let mut always = http("always", &url);
    always.policy = ServerPolicy {
        approval: ApprovalPolicy::Always,
        tools: BTreeMap::from([("write_note".to_owned(), ApprovalPolicy::Never)]),
    };
    let mut only = http("only", &url);
    only.allow = Some(vec!["read_note".to_owned()]);
    let (hub, registry, shutdown) = start(vec![always, only]).await;
    let gate = registry.gate(&AllowList::All, false);
    assert_eq!(
        gate.names(),
        [
            "always__count_words",
            "always__read_note",
            "always__write_note",
            "only__read_note"
        ]
    );
    let args = json!({"name": "a", "text": "b"});
    // `always` holds even a read-only tool; `never` lets a destructive one through.
    assert!(gate
        .tool("always__read_note")
        .unwrap()
        .needs_approval(&json!({"name": "a"})));
    let write = gate.tool("always__write_note").unwrap();
    assert!(!write.needs_approval(&args));
    // … but its calls still have effects: they are journaled, and the step says who let it pass.
    assert!(write.spec().requires_approval);
    let statuses = hub.statuses();
    let tools = &status(&statuses, "always").tools;
    assert!(tools
        .iter()
        .any(|t| t.name == "always__read_note" && t.waits));
    assert!(tools
        .iter()
        .any(|t| t.name == "always__write_note" && !t.waits));
    shutdown.cancel();
}

#[tokio::test]
async fn a_server_that_dies_mid_call_makes_a_clear_failure_and_is_started_again() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("notes.json");
    let (hub, registry, shutdown) = start(vec![stdio(
        "notes",
        &data,
        &[("NRLLM_MCP_DEMO_FAULT", "exit-during-write")],
    )])
    .await;
    assert_eq!(status(&hub.statuses(), "notes").connections, 1);
    let write = registry.get("notes__write_note").unwrap();
    let err = write
        .execute(&json!({"name": "todo", "text": "x"}), &keyed("k-1"))
        .await
        .unwrap_err();
    let text = err.model_text();
    assert!(text.contains("was lost during the call"), "{text}");
    assert!(text.contains("may or may not have taken effect"), "{text}");
    // It did apply the write before it died: "may or may not" was the honest answer.
    assert_eq!(Notebook::load(&data).unwrap().writes, 1);
    // The supervisor starts it again (after its backoff), and the tools answer through it.
    until("the server is connected again", || {
        let s = hub.statuses();
        let s = status(&s, "notes");
        s.state == State::Connected && s.connections == 2
    })
    .await;
    let read = registry.get("notes__read_note").unwrap();
    let note = read
        .execute(&json!({"name": "todo"}), &ToolContext::default())
        .await;
    assert_eq!(note.unwrap(), "x");
    shutdown.cancel();
}

#[tokio::test]
async fn a_cancelled_or_timed_out_call_sends_the_server_a_cancel() {
    let (url, web) = http_server(Some(Fault::HangDuringWrite)).await;
    let mut server = http("web", &url);
    server.call_timeout = Duration::from_secs(1);
    let (_hub, registry, shutdown) = start(vec![server]).await;
    let write = registry.get("web__write_note").unwrap();
    let args = json!({"name": "todo", "text": "x"});
    // A run cancelled while its call is in flight drops the call's future.
    let dropped = tokio::time::timeout(
        Duration::from_millis(300),
        write.execute(&args, &keyed("k-1")),
    )
    .await;
    assert!(dropped.is_err(), "the call hangs until cancelled");
    until("the server hears the cancel", || {
        web.notebook().cancelled.len() == 1
    })
    .await;
    // A call past its time limit is cancelled the same way, and says so.
    let err = write.execute(&args, &keyed("k-2")).await.unwrap_err();
    assert!(
        err.model_text().contains("did not answer within 1 s"),
        "{err:?}"
    );
    until("the server hears the second cancel", || {
        web.notebook().cancelled.len() == 2
    })
    .await;
    assert_eq!(web.notebook().writes, 0);
    shutdown.cancel();
}

#[tokio::test]
async fn a_server_that_cannot_start_fails_with_a_reason_and_stops_nothing() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let mut missing = stdio("missing", Path::new("/nonexistent"), &[]);
    if let Transport::Stdio { command, .. } = &mut missing.transport {
        *command = "/nonexistent/mcp-server".to_owned();
    }
    let (url_ok, _web) = http_server(None).await;
    let started = Instant::now();
    let (hub, registry, shutdown) =
        start(vec![missing, http("gone", &url), http("web", &url_ok)]).await;
    assert!(
        started.elapsed() < WAIT,
        "start does not wait for failed servers' retries"
    );
    let statuses = hub.statuses();
    match &status(&statuses, "missing").state {
        State::Failed {
            reason,
            retry_at_ms,
        } => {
            assert!(
                reason.starts_with("cannot start `/nonexistent/mcp-server`"),
                "{reason}"
            );
            assert!(retry_at_ms.is_some());
        }
        other => panic!("{other:?}"),
    }
    match &status(&statuses, "gone").state {
        State::Failed { reason, .. } => assert!(reason.contains("cannot connect to"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(status(&statuses, "web").state, State::Connected);
    assert!(registry.get("web__read_note").is_some());
    assert!(registry.get("missing__read_note").is_none());
    // An admin's reconnect lists the tools again on a new connection.
    assert!(hub.reconnect("web"));
    assert!(!hub.reconnect("nope"));
    until("the server is connected again", || {
        status(&hub.statuses(), "web").connections == 2
    })
    .await;
    shutdown.cancel();
}

/// A call's progress, as the server reports it, reaches the run while the call runs (over
/// stdio and over HTTP); a call whose run shows no progress asks for none, and gets its answer
/// all the same.
#[tokio::test]
async fn a_servers_progress_reaches_the_run_while_the_call_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _web) = http_server(None).await;
    let (hub, registry, shutdown) = start(vec![
        stdio("notes", &dir.path().join("notes.json"), &[]),
        http("web", &url),
    ])
    .await;
    assert!(hub.statuses().iter().all(|s| s.state == State::Connected));
    for server in ["notes", "web"] {
        let tool = registry.get(&format!("{server}__count_words")).unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let hook = {
            let seen = Arc::clone(&seen);
            nrllm_core::tool::ProgressHook::new(move |call_id, tool, progress| {
                seen.lock()
                    .unwrap()
                    .push((call_id.to_owned(), tool.to_owned(), progress.clone()));
            })
        };
        let ctx = ToolContext {
            progress: Some(hook.for_call("c1", "count_words")),
            ..ToolContext::default()
        };
        let answer = tool.execute(&json!({}), &ctx).await.unwrap();
        assert!(answer.contains("words in"), "{answer}");
        let seen = seen.lock().unwrap().clone();
        // One report a step, while the call runs: the last may cross the answer on the wire
        // (it then shows nothing the step does not).
        assert!(
            (4..=5).contains(&seen.len()),
            "{server}: one report a step: {seen:?}"
        );
        for (n, (_, _, report)) in seen.iter().enumerate() {
            assert_eq!(report.progress, (n + 1) as f64, "{server}: in order");
            assert_eq!(report.total, Some(5.0));
            assert_eq!(
                report.message.as_deref(),
                Some(format!("counted {} of 5 parts", n + 1).as_str())
            );
        }
        let (call_id, tool_name, _) = seen.last().unwrap();
        assert_eq!(
            (call_id.as_str(), tool_name.as_str()),
            ("c1", "count_words")
        );
        assert!(
            seen.windows(2).all(|w| w[0].2.progress < w[1].2.progress),
            "{server}: in order"
        );
        // Without a place for progress, none is asked for: the answer comes as before.
        let plain = tool
            .execute(&json!({}), &ToolContext::default())
            .await
            .unwrap();
        assert_eq!(plain, answer);
    }
    shutdown.cancel();
}

/// The server asks for a note's name (MCP 2026-07-28: "input required" in answer to the call),
/// over stdio and over HTTP: the question reaches the run as `ToolError::Asks` with nothing
/// written; the call sent again with a reply that does not fit is asked again, saying why; an
/// accepted name is written once under the call's effect key; a declined one writes nothing.
#[tokio::test]
async fn a_server_that_needs_a_name_asks_and_the_reply_goes_back_with_the_call() {
    use nrllm_core::elicit::{Replied, Reply, ReplyAction};
    let dir = tempfile::tempdir().unwrap();
    let (url, web) = http_server(None).await;
    let (_hub, registry, shutdown) = start(vec![
        stdio("notes", &dir.path().join("notes.json"), &[]),
        http("web", &url),
    ])
    .await;
    for server in ["notes", "web"] {
        let write = registry.get(&format!("{server}__write_note")).unwrap();
        let args = json!({"text": "ideas <script>"});
        let preview = write.preview(&args, &ToolContext::default()).await.unwrap();
        assert!(
            matches!(&preview, Some(Preview { effect: nrllm_core::tool::Effect::Change { target, .. }, .. }) if target.contains("will be asked for")),
            "{preview:?}"
        );
        let asked = match write.execute(&args, &keyed("k-ask")).await {
            Err(ToolError::Asks(asked)) => asked,
            other => panic!("{server}: expected a question, got {other:?}"),
        };
        assert_eq!(asked.server, server);
        assert_eq!(asked.key, "name");
        assert_eq!(asked.message, "What should the new note be called?");
        assert_eq!(asked.schema["required"], json!(["name"]));
        assert_eq!(asked.request_state.as_deref(), Some("asked-name"));
        let replied = |action, name: Option<&str>| ToolContext {
            reply: Some(Replied {
                key: asked.key.clone(),
                request_state: asked.request_state.clone(),
                reply: Reply {
                    action,
                    content: name.map(|n| json!({ "name": n })),
                },
                held: false,
            }),
            ..keyed("k-ask")
        };
        let again = write
            .execute(&args, &replied(ReplyAction::Accept, Some("Big Ideas")))
            .await;
        assert!(
            matches!(&again, Err(ToolError::Asks(second)) if second.message.contains("Big Ideas") && second.message.contains("What should")),
            "{again:?}"
        );
        let declined = write
            .execute(&args, &replied(ReplyAction::Decline, None))
            .await;
        assert_eq!(
            declined,
            Err(ToolError::Refused(
                "The note was not written: the operator declined to name it.".into()
            ))
        );
        let written = write
            .execute(&args, &replied(ReplyAction::Accept, Some("ideas")))
            .await
            .unwrap();
        assert_eq!(written, "Wrote note ideas (14 characters).");
    }
    let book = Notebook::load(&dir.path().join("notes.json")).unwrap();
    assert_eq!(
        book.notes.get("ideas").map(String::as_str),
        Some("ideas <script>")
    );
    assert_eq!(book.writes, 1, "{book:?}");
    assert_eq!(web.notebook().writes, 1);
    shutdown.cancel();
}

/// What a scripted server says of itself: tools, nothing more.
fn tools_only() -> rmcp::model::ServerConfig {
    rmcp::model::ServerConfig::new(
        rmcp::model::ServerCapabilities::builder()
            .enable_tools()
            .build(),
    )
}

/// A scripted server's one read-only tool, taking `properties`.
fn one_tool(
    name: &str,
    description: &str,
    properties: serde_json::Value,
) -> rmcp::model::ListToolsResult {
    let serde_json::Value::Object(schema) = json!({"type": "object", "properties": properties})
    else {
        unreachable!()
    };
    let tool = rmcp::model::Tool::new(name.to_owned(), description.to_owned(), schema)
        .annotate(rmcp::model::ToolAnnotations::new().read_only(true));
    rmcp::model::ListToolsResult::with_all_items(vec![tool])
}

/// Serves a scripted server over Streamable HTTP on a free local port: its URL.
async fn scripted<S: rmcp::ServerHandler + Clone + Send + Sync + 'static>(server: S) -> String {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, axum::Router::new().nest_service("/mcp", service)).await
    });
    url
}

/// A scripted server whose one tool asks the operator to open a page first (URL mode of MCP
/// 2026-07-28's "input required"), then answers as the reply says.
#[derive(Clone)]
struct LinkServer;

impl rmcp::ServerHandler for LinkServer {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        tools_only()
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::service::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        Ok(one_tool("sign_in", "Signs in to the tracker.", json!({})))
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        _context: rmcp::service::RequestContext<rmcp::service::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        use rmcp::model::{CallToolResult, ContentBlock};
        let reply = request
            .input_responses
            .as_ref()
            .and_then(|responses| responses.get("signin"))
            .and_then(|reply| reply["action"].as_str().map(str::to_owned));
        Ok(match reply.as_deref() {
            Some("accept") => CallToolResult::success(vec![ContentBlock::text("signed in")]).into(),
            Some(other) => {
                CallToolResult::error(vec![ContentBlock::text(format!("not signed in: {other}"))])
                    .into()
            }
            None => {
                let question: rmcp::model::InputRequest = serde_json::from_value(json!({
                    "method": "elicitation/create",
                    "params": {"mode": "url", "message": "Sign in to the <b>tracker</b>",
                               "url": "https://bücher.example/login?next=%2F",
                               "elicitationId": "e1"}}))
                .unwrap();
                rmcp::model::InputRequiredResult::new(
                    Some(BTreeMap::from([("signin".to_owned(), question)])),
                    Some("waiting-for-sign-in".to_owned()),
                )
                .into()
            }
        })
    }
}

/// URL mode: the server's link reaches the run with its host in ASCII (punycode), and the call
/// sent again with "done" (accept) or cancel goes on as the server says.
#[tokio::test]
async fn a_server_that_asks_the_operator_to_open_a_link_gets_the_reply_with_the_call() {
    use nrllm_core::elicit::{Replied, Reply, ReplyAction};
    let url = scripted(LinkServer).await;
    let (_hub, registry, shutdown) = start(vec![http("auth", &url)]).await;
    let tool = registry
        .get("auth__sign_in")
        .expect("the scripted server joined");
    let asked = match tool.execute(&json!({}), &ToolContext::default()).await {
        Err(ToolError::Asks(asked)) => asked,
        other => panic!("expected a question, got {other:?}"),
    };
    assert_eq!(asked.message, "Sign in to the <b>tracker</b>");
    let link = asked.link.clone().expect("a link to open");
    assert_eq!(link.host, "xn--bcher-kva.example");
    assert_eq!(link.url, "https://xn--bcher-kva.example/login?next=%2F");
    let replied = |action| ToolContext {
        reply: Some(Replied {
            key: asked.key.clone(),
            request_state: asked.request_state.clone(),
            reply: Reply::without_content(action),
            held: false,
        }),
        ..ToolContext::default()
    };
    assert_eq!(
        tool.execute(&json!({}), &replied(ReplyAction::Accept))
            .await,
        Ok("signed in".to_owned())
    );
    assert_eq!(
        tool.execute(&json!({}), &replied(ReplyAction::Cancel))
            .await,
        Err(ToolError::Refused("not signed in: cancel".to_owned()))
    );
    shutdown.cancel();
}

/// The server's tool list changes while it is connected (MCP 2026-07-28: on a
/// `subscriptions/listen` request the hub opens): the hub lists the tools again — a tool gone
/// leaves the registry; a tool whose hints loosened (now read-only) keeps waiting until an
/// administrator accepts that; a burst of notifications is listed at most once per
/// `RELIST_EVERY`; the status says when the list changed (and a listing that finds nothing new
/// counts no change). The change is made as the hub connects: one made before its subscription
/// opened is found too.
#[tokio::test]
async fn a_changed_tool_list_is_listed_again_and_a_loosened_gate_waits_until_accepted() {
    use nrllm_mcp::relist::RELIST_EVERY;
    let (url, web) = http_server(None).await;
    let (hub, registry, shutdown) = start(vec![http("web", &url)]).await;
    let args = json!({"name": "a", "text": "b"});
    assert!(registry.get("web__count_words").is_some());
    assert!(registry
        .get("web__write_note")
        .unwrap()
        .needs_approval(&args));
    assert_eq!(status(&hub.statuses(), "web").list_changes, 0);

    let changed: Vec<rmcp::model::Tool> = loosened()
        .into_iter()
        .filter(|tool| tool.name != "count_words")
        .collect();
    web.replace_tools(changed).await;
    until("the changed list is listed again", || {
        registry.get("web__count_words").is_none()
    })
    .await;
    let now = status(&hub.statuses(), "web").clone();
    assert_eq!(now.list_changes, 1);
    assert!(now.list_changed_at_ms.is_some());
    let write = now
        .tools
        .iter()
        .find(|t| t.name == "web__write_note")
        .unwrap();
    assert!(write.waits, "{write:?}");
    assert!(write
        .held
        .as_deref()
        .is_some_and(|h| h.contains("administrator accepts")));
    assert!(registry
        .get("web__write_note")
        .unwrap()
        .needs_approval(&args));

    // Nothing changed since: listing again counts no change. Five notifications at once are
    // listed at most twice, RELIST_EVERY apart.
    tokio::time::sleep(RELIST_EVERY * 2).await;
    let before = web.listings();
    for _ in 0..5 {
        web.announce_list_change().await;
    }
    tokio::time::sleep(RELIST_EVERY * 3).await;
    let listings = web.listings() - before;
    assert!((1..=2).contains(&listings), "{listings} listings");
    assert_eq!(status(&hub.statuses(), "web").list_changes, 1);
    // Still held: a listing again is no acceptance.
    assert!(registry
        .get("web__write_note")
        .unwrap()
        .needs_approval(&args));

    assert_eq!(hub.accept_hints("web"), Some(1));
    assert_eq!(hub.accept_hints("nope"), None);
    assert!(!registry
        .get("web__write_note")
        .unwrap()
        .needs_approval(&args));
    let accepted = status(&hub.statuses(), "web").clone();
    assert!(
        accepted.tools.iter().all(|t| t.held.is_none()),
        "{accepted:?}"
    );
    shutdown.cancel();
}

/// The demo server's tools, `write_note` now saying it is read-only.
fn loosened() -> Vec<rmcp::model::Tool> {
    DemoServer::tools()
        .into_iter()
        .map(|tool| match tool.name.as_ref() {
            "write_note" => tool.annotate(rmcp::model::ToolAnnotations::new().read_only(true)),
            _ => tool,
        })
        .collect()
}

/// Gates kept in memory, as the program keeps them in its database.
#[derive(Default)]
struct Kept(std::sync::Mutex<BTreeMap<String, bool>>);

impl Kept {
    fn get(&self, tool: &str) -> Option<bool> {
        self.0.lock().unwrap().get(tool).copied()
    }
}

#[async_trait::async_trait]
impl GateMemory for Kept {
    async fn recall(&self) -> Result<BTreeMap<String, bool>, String> {
        Ok(self.0.lock().unwrap().clone())
    }

    async fn remember(&self, server: &str, gates: BTreeMap<String, bool>) -> Result<(), String> {
        let mut kept = self.0.lock().unwrap();
        kept.retain(|tool, _| !tool.starts_with(&format!("{server}__")));
        kept.extend(gates);
        Ok(())
    }
}

/// A tool whose hints loosened while the program was down — its gate, kept from the last start,
/// says it waited — keeps that gate at the first connection after the start too, until an
/// administrator accepts the change; without the kept gates it would run unasked. The gates are
/// kept as the tools join and as the change is accepted.
#[tokio::test]
async fn a_hint_loosened_while_the_program_was_down_keeps_its_gate_until_accepted() {
    let (url, web) = http_server(None).await;
    let args = json!({"name": "a", "text": "b"});
    let memory = Arc::new(Kept::default());
    let remembering = |memory: &Arc<Kept>| Some(Arc::clone(memory) as Arc<dyn GateMemory>);
    let start_with = |memory: Option<Arc<dyn GateMemory>>| {
        let url = url.clone();
        async move {
            let registry = Arc::new(ToolRegistry::new());
            let shutdown = CancellationToken::new();
            let hub = McpHub::start(
                vec![http("web", &url)],
                Arc::clone(&registry),
                shutdown.clone(),
                (WAIT, memory),
            )
            .await;
            (hub, registry, shutdown)
        }
    };
    let (_, _, shutdown) = start_with(remembering(&memory)).await;
    until("the gates are kept", || {
        memory.get("web__write_note") == Some(true) && memory.get("web__count_words") == Some(false)
    })
    .await;
    shutdown.cancel();

    // While the program is down, the server says write_note is read-only.
    web.replace_tools(loosened()).await;
    let (_, forgetful, shutdown) = start_with(None).await;
    assert!(!forgetful
        .get("web__write_note")
        .unwrap()
        .needs_approval(&args));
    shutdown.cancel();
    let (hub, registry, shutdown) = start_with(remembering(&memory)).await;
    assert!(registry
        .get("web__write_note")
        .unwrap()
        .needs_approval(&args));
    let write = status(&hub.statuses(), "web")
        .tools
        .iter()
        .find(|t| t.name == "web__write_note")
        .cloned()
        .unwrap();
    assert!(write.held.is_some(), "{write:?}");

    assert_eq!(hub.accept_hints("web"), Some(1));
    assert!(!registry
        .get("web__write_note")
        .unwrap()
        .needs_approval(&args));
    until("the accepted gate is kept", || {
        memory.get("web__write_note") == Some(false)
    })
    .await;
    shutdown.cancel();
}

/// A scripted server of a version before 2026-07-28: its one tool asks for a title inside the
/// open call (`elicitation/create` while `tools/call` runs) and answers with what it was told.
/// `{"form": "plain-link"}` asks to open a link that cannot be shown (not https).
#[derive(Clone)]
struct HoldingServer;

impl rmcp::ServerHandler for HoldingServer {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        tools_only()
    }

    fn supported_protocol_versions(
        &self,
    ) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        use rmcp::model::ProtocolVersion;
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    /// A server of those versions does not know `server/discover`.
    async fn discover(
        &self,
        _context: rmcp::service::RequestContext<rmcp::service::RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, rmcp::ErrorData> {
        Err(rmcp::ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            "server/discover",
            None,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::service::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        Ok(one_tool(
            "file_ticket",
            "Files a ticket.",
            json!({"form": {"type": "string"}}),
        ))
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: rmcp::service::RequestContext<rmcp::service::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        use rmcp::model::{CallToolResult, ContentBlock};
        let plain_link = request
            .arguments
            .as_ref()
            .and_then(|args| args.get("form"))
            .is_some_and(|form| form == "plain-link");
        let params = match plain_link {
            true => json!({"mode": "url", "message": "Sign in first",
                           "url": "http://tracker.example/login", "elicitationId": "e1"}),
            false => json!({"mode": "form", "message": "What is the <i>ticket</i> called?",
                            "requestedSchema": {"type": "object", "required": ["title"],
                                "properties": {"title": {"type": "string", "title": "Title"}}}}),
        };
        let params: rmcp::model::ElicitRequestParams = serde_json::from_value(params).unwrap();
        let answer = context
            .peer
            .create_elicitation(params)
            .await
            .map_err(|err| rmcp::ErrorData::internal_error(err.to_string(), None))?;
        let told = serde_json::to_value(&answer).unwrap();
        let text = match told["content"]["title"].as_str() {
            Some(title) => format!("filed: {title}"),
            None => format!("not filed: {}", told["action"].as_str().unwrap_or("?")),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

/// A server before 2026-07-28 asks inside its open call: the call is held open while the run
/// waits (the question reaches the run as `ToolError::Asks`, saying until when), the reply goes
/// to the server in that call — after longer than the call's own time limit, which waits
/// meanwhile —, a question nobody answers in time is answered `cancel` (a later reply is not
/// sent, and the step says so), a reply for a call no longer held says its outcome is unknown,
/// and a question that cannot be shown, or one asked outside a run, is declined at once.
#[tokio::test]
async fn a_server_that_asks_inside_its_call_is_answered_in_that_call() {
    use nrllm_core::elicit::{Asked, Replied, Reply, ReplyAction};
    let url = scripted(HoldingServer).await;
    let hold = Duration::from_millis(2_500);
    let server = Server {
        call_timeout: Duration::from_secs(1),
        elicitation_timeout: Some(hold),
        ..http("tickets", &url)
    };
    let (hub, registry, shutdown) = start(vec![server]).await;
    let Some(tool) = registry.get("tickets__file_ticket") else {
        panic!("the scripted server did not join: {:?}", hub.statuses());
    };
    let in_run = |call: &str| ToolContext {
        run_id: "run-1".to_owned(),
        call_id: call.to_owned(),
        ..ToolContext::default()
    };
    let ask = |call: &'static str| {
        let tool = Arc::clone(&tool);
        async move {
            let before = nrllm_core::clock::now_ms();
            match tool.execute(&json!({}), &in_run(call)).await {
                Err(ToolError::Asks(asked)) => {
                    let until = asked.held_until_ms.expect("held open");
                    assert!(
                        until >= before + 2_000 && until <= before + 5_000,
                        "{until}"
                    );
                    asked
                }
                other => panic!("expected a question, got {other:?}"),
            }
        }
    };
    let replied = |call: &str, asked: &Asked, reply: Reply| ToolContext {
        reply: Some(Replied {
            key: asked.key.clone(),
            request_state: None,
            reply,
            held: true,
        }),
        ..in_run(call)
    };
    let accept = || Reply {
        action: ReplyAction::Accept,
        content: Some(json!({"title": "Disk full"})),
    };

    let asked = ask("c1").await;
    assert_eq!(asked.server, "tickets");
    assert_eq!(asked.message, "What is the <i>ticket</i> called?");
    assert_eq!(asked.schema["required"], json!(["title"]));
    assert_eq!(status(&hub.statuses(), "tickets").held_calls, 1);
    // Longer than the call's own second: that limit waits while the operator does.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        tool.execute(&json!({}), &replied("c1", &asked, accept()))
            .await,
        Ok("filed: Disk full".to_owned())
    );
    let asked = ask("c2").await;
    let declined = Reply::without_content(ReplyAction::Decline);
    assert_eq!(
        tool.execute(&json!({}), &replied("c2", &asked, declined))
            .await,
        Ok("not filed: decline".to_owned())
    );

    // Nobody answers in time: the server hears `cancel`; the late reply is not sent.
    let asked = ask("c3").await;
    tokio::time::sleep(hold + Duration::from_millis(500)).await;
    let late = tool
        .execute(&json!({}), &replied("c3", &asked, accept()))
        .await
        .unwrap();
    assert!(late.ends_with("\nnot filed: cancel"), "{late}");
    assert!(late.contains("came later and was not sent"), "{late}");

    // A reply for a call this process no longer holds (it restarted meanwhile).
    let lost = tool
        .execute(&json!({}), &replied("c9", &asked, accept()))
        .await;
    assert!(
        matches!(&lost, Err(ToolError::Refused(text)) if text.contains("no longer held open") && text.contains("may or may not have taken effect")),
        "{lost:?}"
    );

    // Not shown: a plain http link, and any question outside a run.
    let plain = tool
        .execute(&json!({"form": "plain-link"}), &in_run("c4"))
        .await
        .unwrap();
    assert!(
        plain.contains("declined: it asked the operator to open a link that cannot be shown")
            && plain.ends_with("not filed: decline"),
        "{plain}"
    );
    let outside = tool
        .execute(&json!({}), &ToolContext::default())
        .await
        .unwrap();
    assert!(outside.contains("it asked outside a run"), "{outside}");
    assert_eq!(status(&hub.statuses(), "tickets").held_calls, 0);
    shutdown.cancel();
}
