//! A server's tool as a registry tool: its schema checks the arguments, its annotations and the
//! operator's policy decide whether calls wait, and a call is one `tools/call` request with the
//! effect key in its `_meta`, a time limit, and a cancel sent when the run stops waiting for it.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use nrllm_core::mcp::{registry_name, rerun_after_crash, Annotations, ServerPolicy};
use nrllm_core::tool::{
    ArgumentValidator, CallProgress, DynTool, Preview, Progress, ToolContext, ToolError, ToolSpec,
};
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, ContentBlock, InputRequiredResult, MetaObject, RequestId, RequestMetaObject,
    ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::{Map, Value};

use crate::elicit::{self, Answers, Needed, MAX_DECLINED_ROUNDS};

/// The `_meta` key a call's effect key travels under: a server that keeps the keys it has
/// applied can answer a repeat (after a crash) without applying it again.
pub const EFFECT_KEY_META: &str = "io.nrllm/effectKey";
/// The `_meta` key of the basis the operator approved the call against (from the tool's
/// `__preview`), for a server that checks its target did not change since.
pub const APPROVED_BASIS_META: &str = "io.nrllm/approvedBasis";
/// A tool `<tool>__preview` on the same server is the dry run of `<tool>`: it takes the same
/// arguments, changes nothing, and answers what the call would do.
pub const PREVIEW_SUFFIX: &str = "__preview";

/// The most of a tool's description kept (a server's text, shown to models and operators).
pub const MAX_DESCRIPTION: usize = 2_000;
/// The largest input schema accepted, serialized; a tool with a larger one does not join.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Sends `tools/call` with `params` through `peer` and awaits the answer, handing the server's
/// progress notifications for it to the run (`progress`) while it runs. The SDK gives each
/// request a progress token of its own; the call listens under that one. Dropping the future
/// (a cancelled run, the time limit) tells the server to cancel the call.
async fn call_with_progress(
    peer: &Peer<RoleClient>,
    params: CallToolRequestParams,
    dispatcher: &ProgressDispatcher,
    progress: Option<&CallProgress>,
) -> Result<Answered, ServiceError> {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await?;
    let mut abandoned = CancelOnDrop {
        peer: peer.clone(),
        id: Some(handle.id.clone()),
    };
    let mut subscriber = match progress {
        Some(_) => Some(dispatcher.subscribe(handle.progress_token.clone()).await),
        None => None,
    };
    let answer = handle.await_response();
    tokio::pin!(answer);
    let answer = loop {
        let next = async {
            match subscriber.as_mut() {
                Some(subscriber) => subscriber.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            answer = &mut answer => break answer,
            Some(note) = next => {
                let report = Progress::bounded(note.progress, note.total, note.message.as_deref());
                if let (Some(report), Some(progress)) = (report, progress) {
                    progress.report(&report);
                }
            }
        }
    };
    abandoned.id = None;
    match answer? {
        ServerResult::CallToolResult(result) => Ok(Answered::Complete(result)),
        ServerResult::InputRequiredResult(input) => Ok(Answered::Input(input)),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// A server's answer to `tools/call`: the result, or the input it needs first.
enum Answered {
    Complete(CallToolResult),
    Input(InputRequiredResult),
}

/// A request whose caller stopped waiting: the server is told to cancel it.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        tokio::spawn(async move {
            let cancel = CancelledNotificationParam::new(
                Some(id),
                Some("the run stopped waiting for the call".to_owned()),
            );
            let _ = peer.notify_cancelled(cancel).await;
        });
    }
}

/// The most of a result kept for the model.
pub const MAX_RESULT: usize = 64 * 1024;

/// The live connection to one server, shared by its tools: replaced when the server connects
/// again; while it is down, why (a call then fails at once, saying so). Its calls' progress
/// comes through one dispatcher, whatever the connection.
pub struct Link {
    peer: RwLock<Result<Peer<RoleClient>, String>>,
    progress: ProgressDispatcher,
}

impl Default for Link {
    fn default() -> Link {
        Link {
            peer: RwLock::new(Err(String::new())),
            progress: ProgressDispatcher::new(),
        }
    }
}

impl Link {
    fn set(&self, now: Result<Peer<RoleClient>, String>) {
        if let Ok(mut slot) = self.peer.write() {
            *slot = now;
        }
    }

    /// Where the server's progress notifications go (the connection's client hands them on).
    pub(crate) fn progress(&self) -> ProgressDispatcher {
        self.progress.clone()
    }

    pub(crate) fn connected(&self, peer: Peer<RoleClient>) {
        self.set(Ok(peer));
    }

    pub(crate) fn disconnected(&self, reason: &str) {
        self.set(Err(reason.to_owned()));
    }

    fn peer(&self) -> Result<Peer<RoleClient>, String> {
        self.peer
            .read()
            .map_or_else(|_| Err(String::new()), |link| link.clone())
    }
}

/// What a server said about one of its tools, as the registry takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    /// The name on the server.
    pub name: String,
    pub description: String,
    pub schema: Value,
    pub annotations: Annotations,
    /// The server also has `<name>__preview`.
    pub has_preview: bool,
}

/// One server tool in the registry.
pub struct McpTool {
    spec: ToolSpec,
    server: String,
    remote: String,
    link: Arc<Link>,
    validator: ArgumentValidator,
    /// The operator's policy (or the hints) make calls wait.
    waits: bool,
    preview: Option<String>,
    timeout: Duration,
}

impl McpTool {
    /// The registry tool for `listed` on `server`; `Err` says why it cannot join (shown on the
    /// system page).
    pub fn new(
        server: &str,
        listed: Listed,
        policy: &ServerPolicy,
        link: Arc<Link>,
        (timeout, hold): (Duration, bool),
    ) -> Result<McpTool, String> {
        let name = registry_name(server, &listed.name).map_err(|err| err.to_string())?;
        let schema_bytes = serde_json::to_string(&listed.schema).map_or(usize::MAX, |s| s.len());
        if schema_bytes > MAX_SCHEMA_BYTES {
            return Err(format!(
                "its input schema is {schema_bytes} bytes, more than the {MAX_SCHEMA_BYTES} accepted"
            ));
        }
        // `hold`: its hints became looser since it joined; it waits as before until an
        // administrator accepts that.
        let waits = hold || policy.requires_approval(&listed.name, &listed.annotations);
        // A tool that does not say it is read-only may change something: its calls are
        // journaled like approved ones even when the policy lets them through.
        let effects = waits || listed.annotations.read_only != Some(true);
        Ok(McpTool {
            validator: ArgumentValidator::new(&listed.schema),
            spec: ToolSpec {
                name,
                description: bounded(&listed.description, MAX_DESCRIPTION),
                parameters: listed.schema,
                group: format!("mcp:{server}"),
                enabled_by_default: true,
                admin_only: false,
                requires_approval: effects,
                approval_per_call: effects,
                idempotent_by_key: rerun_after_crash(&listed.annotations),
                asks_operator: false,
            },
            server: server.to_owned(),
            preview: listed
                .has_preview
                .then(|| format!("{}{PREVIEW_SUFFIX}", listed.name)),
            remote: listed.name,
            link,
            waits,
            timeout,
        })
    }

    /// Whether calls wait for an operator (the policy, or the hints).
    pub fn waits(&self) -> bool {
        self.waits
    }

    /// Sends `tools/call` for `tool` and waits at most the time limit. Dropping the future
    /// (a cancelled run) or running out of time sends `notifications/cancelled` for it.
    async fn call(
        &self,
        tool: &str,
        args: &Value,
        ctx: &ToolContext,
        answers: Option<Answers>,
    ) -> Result<Answered, ToolError> {
        let peer = self.link.peer().map_err(|reason| {
            ToolError::Refused(format!(
                "the MCP server `{}` is not connected ({reason}); the call was not sent",
                self.server
            ))
        })?;
        let mut meta = Map::new();
        if let Some(key) = &ctx.effect_key {
            meta.insert(EFFECT_KEY_META.to_owned(), Value::from(key.clone()));
        }
        if let Some(basis) = &ctx.approved_basis {
            meta.insert(APPROVED_BASIS_META.to_owned(), Value::from(basis.clone()));
        }
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = args.as_object().cloned();
        if !meta.is_empty() {
            params.meta = Some(RequestMetaObject(MetaObject(meta)));
        }
        if let Some(answers) = answers {
            params.input_responses = Some(answers.responses);
            params.request_state = answers.request_state;
        }
        let call = call_with_progress(&peer, params, &self.link.progress, ctx.progress.as_ref());
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(err)) => {
                tracing::warn!(server = %self.server, tool, %err, "an MCP call failed");
                Err(ToolError::Refused(self.failure_text(&err)))
            }
            Err(_) => {
                tracing::warn!(server = %self.server, tool, timeout_secs = self.timeout.as_secs(), "an MCP call timed out");
                Err(ToolError::Refused(format!(
                    "the MCP server `{}` did not answer within {} s; it was told to cancel the \
                     call, which may or may not have taken effect",
                    self.server,
                    self.timeout.as_secs()
                )))
            }
        }
    }

    /// What the model (and the operator, in the step) reads about a failed request.
    fn failure_text(&self, err: &ServiceError) -> String {
        match err {
            ServiceError::McpError(data) => format!(
                "the MCP server `{}` refused the call: {}",
                self.server,
                bounded(&data.message, 500)
            ),
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => format!(
                "the connection to the MCP server `{}` was lost during the call (the server \
                 stopped or the network failed); the call may or may not have taken effect",
                self.server
            ),
            _ => format!(
                "the call to the MCP server `{}` failed (the details are in the server log); \
                 it may or may not have taken effect",
                self.server
            ),
        }
    }
}

#[async_trait]
impl DynTool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn check_arguments(&self, args: &Value) -> Result<(), ToolError> {
        self.validator.check(args)
    }

    fn needs_approval(&self, args: &Value) -> bool {
        self.waits || (self.spec.requires_approval && self.validator.check(args).is_err())
    }

    /// Sends the call (with the operator's reply, when its server asked before) and reads the
    /// answer. A question the operator can be shown makes the run wait ([`ToolError::Asks`]);
    /// one that cannot be shown is declined at once, and the result says so.
    async fn execute(&self, args: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        self.validator.check(args)?;
        let mut answers = ctx.reply.as_ref().map(|replied| {
            elicit::answers(&replied.key, &replied.reply, replied.request_state.clone())
        });
        let mut declined = Vec::new();
        let result = loop {
            match self.call(&self.remote, args, ctx, answers.take()).await? {
                Answered::Complete(result) => break result,
                Answered::Input(input) => match elicit::needed(&self.server, input) {
                    Needed::Ask(asked) => return Err(ToolError::Asks(asked)),
                    Needed::Declined { .. } if declined.len() >= MAX_DECLINED_ROUNDS => {
                        return Err(ToolError::Refused(format!(
                            "the MCP server `{}` kept asking for input that cannot be shown ({});                              the call was given up",
                            self.server,
                            declined.join("; ")
                        )))
                    }
                    Needed::Declined { answers: sent, why } => {
                        tracing::info!(server = %self.server, tool = %self.remote, %why, "an MCP server's question was declined");
                        declined.push(why);
                        answers = Some(sent);
                    }
                },
            }
        };
        if ctx.effect_key.is_some() {
            // The server answered: its effect is applied, our journal does not know it yet.
            nrllm_core::failpoint::reach("in_tool_after_effect");
        }
        let mut text = result_text(&result);
        if !declined.is_empty() {
            text = format!(
                "(The server asked for input that was declined: {}.)\n{text}",
                declined.join("; ")
            );
        }
        if result.is_error == Some(true) {
            return Err(ToolError::Refused(text));
        }
        Ok(text)
    }

    async fn preview(&self, args: &Value, ctx: &ToolContext) -> Result<Option<Preview>, ToolError> {
        self.validator.check(args)?;
        let Some(preview) = &self.preview else {
            return Ok(None);
        };
        let mut ctx = ctx.clone();
        ctx.effect_key = None;
        let Answered::Complete(result) = self.call(preview, args, &ctx, None).await? else {
            return Err(ToolError::Refused(format!(
                "{preview} asked for the operator's input; a preview never waits for it"
            )));
        };
        let text = result_text(&result);
        if result.is_error == Some(true) {
            return Err(ToolError::Refused(text));
        }
        Ok(Some(preview_of(result.structured_content.as_ref(), &text)))
    }

    fn passed_note(&self) -> String {
        format!(
            "no approval needed: the approval policy for the MCP server `{}` lets {} through",
            self.server, self.remote
        )
    }
}

/// A `__preview` tool's answer as a preview: an object with `before` and `after` (and
/// optionally `target` and `basis`) is a change; anything else is a description.
pub fn preview_of(structured: Option<&Value>, text: &str) -> Preview {
    let parsed;
    let value = match structured {
        Some(value) => Some(value),
        None => {
            parsed = serde_json::from_str::<Value>(text).ok();
            parsed.as_ref()
        }
    };
    let field = |name: &str| {
        value
            .and_then(|v| v.get(name))
            .and_then(Value::as_str)
            .map(|s| bounded(s, MAX_RESULT))
    };
    match (field("before"), field("after")) {
        (Some(before), Some(after)) => {
            let preview = Preview::change(
                field("target").unwrap_or_else(|| "the target".to_owned()),
                before,
                after,
            );
            match field("basis") {
                Some(basis) => preview.with_basis(bounded(&basis, 200)),
                None => preview,
            }
        }
        _ => Preview::text(bounded(text, MAX_RESULT)),
    }
}

/// The result as the model reads it: the text blocks, a note for each other block, or the
/// structured content when there is no text; at most [`MAX_RESULT`] bytes.
pub fn result_text(result: &CallToolResult) -> String {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        parts.push(match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => {
                format!("[an image ({})]", bounded(&image.mime_type, 100))
            }
            ContentBlock::Audio(audio) => format!("[audio ({})]", bounded(&audio.mime_type, 100)),
            ContentBlock::Resource(_) => "[an embedded resource]".to_owned(),
            ContentBlock::ResourceLink(link) => format!("[a link to {}]", bounded(&link.uri, 500)),
            _ => "[content of another kind]".to_owned(),
        });
    }
    if parts.is_empty() {
        if let Some(structured) = &result.structured_content {
            parts.push(structured.to_string());
        }
    }
    bounded(&parts.join("\n"), MAX_RESULT)
}

/// At most `max` bytes of `text`, cut at a character boundary, marked when cut.
pub fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let end = text.floor_char_boundary(max);
    format!("{}… [cut at {max} bytes]", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use nrllm_core::mcp::ApprovalPolicy;
    use serde_json::json;

    fn listed(name: &str, annotations: Annotations) -> Listed {
        Listed {
            name: name.to_owned(),
            description: "does things".to_owned(),
            schema: json!({"type": "object", "properties": {"name": {"type": "string"}},
                           "required": ["name"]}),
            annotations,
            has_preview: false,
        }
    }

    fn tool(name: &str, annotations: Annotations, policy: &ServerPolicy) -> McpTool {
        McpTool::new(
            "notes",
            listed(name, annotations),
            policy,
            Arc::default(),
            (Duration::from_secs(1), false),
        )
        .unwrap()
    }

    const READ_ONLY: Annotations = Annotations {
        read_only: Some(true),
        destructive: None,
        idempotent: None,
        open_world: None,
    };
    const DESTRUCTIVE_IDEMPOTENT: Annotations = Annotations {
        read_only: Some(false),
        destructive: Some(true),
        idempotent: Some(true),
        open_world: None,
    };

    #[test]
    fn the_annotations_decide_unless_the_policy_says_otherwise() {
        let hints = ServerPolicy::default();
        let read = tool("read_note", READ_ONLY, &hints);
        assert_eq!(read.spec().name, "notes__read_note");
        assert!(!read.spec().requires_approval);
        assert!(!read.needs_approval(&json!({"name": "a"})));
        let write = tool("write_note", DESTRUCTIVE_IDEMPOTENT, &hints);
        assert!(write.spec().requires_approval && write.spec().idempotent_by_key);
        assert!(write.needs_approval(&json!({"name": "a"})));
        // No hints at all: the call may change something, so it waits, and it is not re-run.
        let bare = tool("touch", Annotations::default(), &hints);
        assert!(bare.needs_approval(&json!({"name": "a"})));
        assert!(!bare.spec().idempotent_by_key);

        let never_write = ServerPolicy {
            approval: ApprovalPolicy::Annotations,
            tools: [("write_note".to_owned(), ApprovalPolicy::Never)].into(),
        };
        let write = tool("write_note", DESTRUCTIVE_IDEMPOTENT, &never_write);
        assert!(!write.needs_approval(&json!({"name": "a"})));
        // It still has effects: its calls are journaled, and the step says why nobody was asked.
        assert!(write.spec().requires_approval);
        assert!(write.passed_note().contains("approval policy"));
        let always = ServerPolicy {
            approval: ApprovalPolicy::Always,
            tools: Default::default(),
        };
        assert!(tool("read_note", READ_ONLY, &always).needs_approval(&json!({"name": "a"})));
    }

    #[test]
    fn hostile_names_and_huge_schemas_do_not_join() {
        let policy = ServerPolicy::default();
        let bad = McpTool::new(
            "notes",
            listed("<script>", READ_ONLY),
            &policy,
            Arc::default(),
            (Duration::from_secs(1), false),
        );
        assert!(bad.is_err());
        let mut huge = listed("big", READ_ONLY);
        huge.schema = json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)});
        let err = McpTool::new(
            "notes",
            huge,
            &policy,
            Arc::default(),
            (Duration::from_secs(1), false),
        )
        .err()
        .unwrap();
        assert!(err.contains("input schema"), "{err}");
    }

    #[tokio::test]
    async fn a_call_to_a_server_that_is_down_is_not_sent_and_says_why() {
        let link = Arc::new(Link::default());
        link.disconnected("the server process exited with status 1");
        let write = McpTool::new(
            "notes",
            listed("write_note", DESTRUCTIVE_IDEMPOTENT),
            &ServerPolicy::default(),
            link,
            (Duration::from_secs(1), false),
        )
        .unwrap();
        let err = write
            .execute(&json!({"name": "a"}), &ToolContext::default())
            .await
            .unwrap_err();
        let text = err.model_text();
        assert!(
            text.contains("not connected (the server process exited"),
            "{text}"
        );
        assert!(text.contains("not sent"), "{text}");
        // Arguments that do not fit the schema never reach the server.
        let err = write
            .execute(&json!({"name": 7}), &ToolContext::default())
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err:?}");
    }

    #[test]
    fn previews_and_results_are_read_as_text_and_bounded() {
        let change = preview_of(
            None,
            r#"{"target": "note a", "before": "x", "after": "y", "basis": "v1"}"#,
        );
        assert_eq!(change, Preview::change("note a", "x", "y").with_basis("v1"));
        let text = preview_of(None, "<b>would delete 3 rows</b>");
        assert_eq!(text, Preview::text("<b>would delete 3 rows</b>"));
        let long = bounded(&"é".repeat(MAX_RESULT), 11);
        assert!(
            long.starts_with("ééééé") && long.ends_with("[cut at 11 bytes]"),
            "{long}"
        );
        let result = CallToolResult::success(vec![
            ContentBlock::text("line one"),
            ContentBlock::text("line two"),
        ]);
        assert_eq!(result_text(&result), "line one\nline two");
    }
}
