//! A server's tool as a registry tool: its schema checks the arguments, its annotations and the
//! operator's policy decide whether calls wait, and a call is one `tools/call` request with the
//! effect key in its `_meta`, a time limit, and a cancel sent when the run stops waiting for it.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nrllm_core::elicit::{Asked, Replied, ReplyAction};
use nrllm_core::mcp::{registry_name, rerun_after_crash, Annotations, ServerPolicy};
use nrllm_core::tool::{ArgumentValidator, DynTool, Preview, ToolContext, ToolError, ToolSpec};
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ElicitResult, ElicitationAction,
    MetaObject, RequestMetaObject,
};
use rmcp::service::{Peer, RoleClient, ServiceError};
use serde_json::{Map, Value};

use crate::call::{Answered, Next, Running};
use crate::elicit::{self, Answers, Needed, MAX_DECLINED_ROUNDS};
use crate::held::{Ask, Held};
use crate::parked::{Parked, ParkedCalls};

/// The `_meta` key a call's effect key travels under: a server that keeps the keys it has
/// applied can answer a repeat (after a crash) without applying it again.
pub const EFFECT_KEY_META: &str = "io.nrllm/effectKey";
/// The `_meta` key of the basis the operator approved the call against (from the tool's
/// `__preview`), for a server that checks its target did not change since.
pub const APPROVED_BASIS_META: &str = "io.nrllm/approvedBasis";
/// The `_meta` key of the W3C `traceparent` naming the call's span (as MCP's trace context
/// proposal spells it), when spans are exported.
pub const TRACEPARENT_META: &str = "traceparent";
/// A tool `<tool>__preview` on the same server is the dry run of `<tool>`: it takes the same
/// arguments, changes nothing, and answers what the call would do.
pub const PREVIEW_SUFFIX: &str = "__preview";

/// The most of a tool's description kept (a server's text, shown to models and operators).
pub const MAX_DESCRIPTION: usize = 2_000;
/// The largest input schema accepted, serialized; a tool with a larger one does not join.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// The most of a result kept for the model.
pub const MAX_RESULT: usize = 64 * 1024;

/// The live connection to one server, shared by its tools: replaced when the server connects
/// again; while it is down, why (a call then fails at once, saying so). Its calls' progress
/// comes through one dispatcher, whatever the connection.
pub struct Link {
    peer: RwLock<Result<Peer<RoleClient>, String>>,
    progress: ProgressDispatcher,
    /// Where the questions its server asks inside a call go.
    held: Arc<Held>,
    /// The calls held open for the operator's reply to such a question.
    parked: ParkedCalls,
}

impl Default for Link {
    fn default() -> Link {
        Link::new(None)
    }
}

impl Link {
    /// A server's link, whose questions asked inside a call are held open `hold` (none: declined).
    pub fn new(hold: Option<Duration>) -> Link {
        Link {
            peer: RwLock::new(Err(String::new())),
            progress: ProgressDispatcher::new(),
            held: Arc::new(Held::new(hold)),
            parked: ParkedCalls::default(),
        }
    }

    /// Where its server's questions asked inside a call go (the connection's client hands
    /// them on).
    pub fn held(&self) -> Arc<Held> {
        Arc::clone(&self.held)
    }

    /// How many of its calls are held open for the operator's reply now.
    pub fn parked(&self) -> usize {
        self.parked.count()
    }

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

    /// Sends `tools/call` for `tool` (with the answers of a server that asked before). `Err`
    /// says why it could not be sent.
    async fn send(
        &self,
        tool: &str,
        args: &Value,
        ctx: &ToolContext,
        answers: Option<Answers>,
    ) -> Result<Running, ToolError> {
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
        // The call's own span (`execute_tool`), when spans are exported.
        if let Some(traceparent) = nrllm_core::spans::outbound_traceparent() {
            meta.insert(TRACEPARENT_META.to_owned(), Value::from(traceparent));
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
        let wire = (&self.link.progress, Some(&self.link.held));
        Running::send(&peer, params, wire, self.timeout)
            .await
            .map_err(|err| self.failed(tool, &err))
    }

    /// What comes next on call `running` of `tool`: its answer, or a question its server asked
    /// inside it. Running out of time, or failing, is the call's error.
    async fn next(
        &self,
        tool: &str,
        running: &mut Running,
        ctx: &ToolContext,
    ) -> Result<Result<Answered, Ask>, ToolError> {
        match running.next(ctx.progress.as_ref()).await {
            Next::Answered(Ok(answered)) => Ok(Ok(answered)),
            Next::Answered(Err(err)) => Err(self.failed(tool, &err)),
            Next::Asked(ask) => Ok(Err(ask)),
            Next::TimedOut => {
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

    fn failed(&self, tool: &str, err: &ServiceError) -> ToolError {
        tracing::warn!(server = %self.server, tool, %err, "an MCP call failed");
        ToolError::Refused(self.failure_text(err))
    }

    /// The question a server asked inside a call, as the operator is shown it while the call
    /// is held open ([`crate::held`]), or why it is declined at once (one that cannot be shown,
    /// or one asked outside a run).
    fn question(&self, ask: &Ask, ctx: &ToolContext) -> Result<Box<Asked>, String> {
        if ctx.run_id.is_empty() {
            return Err("it asked outside a run".to_owned());
        }
        let limit = self.link.held.limit().unwrap_or_default();
        let until = nrllm_core::clock::now_ms()
            .saturating_add(i64::try_from(limit.as_millis()).unwrap_or(i64::MAX));
        elicit::inline(&self.server, &ask.params, until).map(Box::new)
    }

    /// Holds call `running` open until its run goes on with the reply to `ask`.
    fn park(&self, ask: Ask, running: Running, ctx: &ToolContext) {
        let parked = Parked {
            running,
            reply: ask.reply,
            since: Instant::now(),
        };
        let key = (ctx.run_id.as_str(), ctx.call_id.as_str());
        let limit = self.link.held.limit().unwrap_or_default();
        self.link.parked.park(key, parked, limit);
    }

    /// The call held open for `replied` (its server asked inside it), the reply handed to it;
    /// `late` says so when the question's time had run out first, and the server heard
    /// `cancel` instead of the reply.
    fn held_call(
        &self,
        ctx: &ToolContext,
        replied: &Replied,
        late: &mut Option<String>,
    ) -> Result<Running, ToolError> {
        let Some(parked) = self.link.parked.unpark(&ctx.run_id, &ctx.call_id) else {
            return Err(ToolError::Refused(format!(
                "the MCP server `{}` asked a question inside this call, and the call was no \
                 longer held open when the reply came (this program or the server restarted \
                 since, or the call was given up): the reply was not sent, and the call may or \
                 may not have taken effect",
                self.server
            )));
        };
        let sent = parked.reply.send(elicit::result(&replied.reply)).is_ok();
        // The server heard `cancel` either way when the reply is one (the deadline's).
        if !sent && replied.reply.action != ReplyAction::Cancel {
            *late = Some(format!(
                "(The server's question was answered `cancel` when its {} s ran out; the \
                 operator's reply, {}, came later and was not sent.)",
                self.link.held.limit().unwrap_or_default().as_secs(),
                replied.reply.describe()
            ));
        }
        Ok(parked.running)
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
    /// one that cannot be shown is declined at once, and the result says so. A question asked
    /// inside the open call keeps the call open meanwhile; the reply goes on in it.
    async fn execute(&self, args: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        self.validator.check(args)?;
        let mut late = None;
        let (mut running, mut answers) = match ctx.reply.as_ref() {
            Some(replied) if replied.held => (Some(self.held_call(ctx, replied, &mut late)?), None),
            Some(replied) => (
                None,
                Some(elicit::answers(
                    &replied.key,
                    &replied.reply,
                    replied.request_state.clone(),
                )),
            ),
            None => (None, None),
        };
        let mut declined = Vec::new();
        let result = loop {
            let mut call = match running.take() {
                Some(call) => call,
                None => self.send(&self.remote, args, ctx, answers.take()).await?,
            };
            match self.next(&self.remote, &mut call, ctx).await? {
                Ok(Answered::Complete(result)) => break result,
                Ok(Answered::Input(input)) => match elicit::needed(&self.server, input) {
                    Needed::Ask(asked) => return Err(ToolError::Asks(asked)),
                    Needed::Declined { .. } if declined.len() >= MAX_DECLINED_ROUNDS => {
                        return Err(ToolError::Refused(format!(
                            "the MCP server `{}` kept asking for input that cannot be shown ({}); \
                             the call was given up",
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
                Err(ask) => match self.question(&ask, ctx) {
                    Ok(asked) => {
                        self.park(ask, call, ctx);
                        return Err(ToolError::Asks(asked));
                    }
                    Err(why) => {
                        tracing::info!(server = %self.server, tool = %self.remote, %why, "an MCP server's question inside a call was declined");
                        let _ = ask
                            .reply
                            .send(ElicitResult::new(ElicitationAction::Decline));
                        if declined.len() < MAX_DECLINED_ROUNDS {
                            declined.push(why);
                        }
                        running = Some(call);
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
        if let Some(late) = late {
            text = format!("{late}\n{text}");
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
        let mut call = self.send(preview, args, &ctx, None).await?;
        let asked = || {
            ToolError::Refused(format!(
                "{preview} asked for the operator's input; a preview never waits for it"
            ))
        };
        let result = match self.next(preview, &mut call, &ctx).await? {
            Ok(Answered::Complete(result)) => result,
            Ok(Answered::Input(_)) => return Err(asked()),
            Err(ask) => {
                let _ = ask
                    .reply
                    .send(ElicitResult::new(ElicitationAction::Decline));
                return Err(asked());
            }
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
