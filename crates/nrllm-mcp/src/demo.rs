//! The playground's own MCP server (`nrllm-playground mcp-demo`): a notebook of named notes,
//! so the MCP flow works offline. It has one read-only tool (`read_note`) and one destructive
//! one (`write_note`, which overwrites), with the dry run `write_note__preview` that the
//! approval panel calls. `write_note` keeps the effect keys it applied (`_meta`
//! `io.nrllm/effectKey`) and answers a repeat with its first result, so it says it is
//! idempotent. With `--data FILE` the notebook outlives the process.
//!
//! Served over stdio (the default) or Streamable HTTP (`--http ADDR`, at `/mcp`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ProtocolVersion, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::tool::{bounded, EFFECT_KEY_META, TRACEPARENT_META};

mod name;
pub mod serving;
use name::{ask_for_name, ask_inside, checked_name, named, Named, UNNAMED};

/// The longest note the demo keeps.
pub const MAX_NOTE: usize = 10_000;
/// The most notes it keeps.
pub const MAX_NOTES: usize = 1_000;

/// A fault the tests ask for through `NRLLM_MCP_DEMO_FAULT` (never set in normal use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `write_note` applies the change, then the process exits before it answers.
    ExitDuringWrite,
    /// `write_note` waits until the call is cancelled (and records the cancel).
    HangDuringWrite,
}

impl Fault {
    fn from_env() -> Option<Fault> {
        match std::env::var("NRLLM_MCP_DEMO_FAULT").ok()?.as_str() {
            "exit-during-write" => Some(Fault::ExitDuringWrite),
            "hang-during-write" => Some(Fault::HangDuringWrite),
            _ => None,
        }
    }
}

/// The notebook, as kept in the data file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notebook {
    pub notes: BTreeMap<String, String>,
    /// Effect key → the result its write answered.
    pub applied: BTreeMap<String, String>,
    /// How many writes changed the notebook (a repeated key does not count).
    pub writes: u64,
    /// The reasons of the cancels the server received for calls in progress.
    pub cancelled: Vec<String>,
}

impl Notebook {
    /// The notebook in `path` (empty if the file does not exist).
    pub fn load(path: &Path) -> Result<Notebook, String> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|err| format!("{} is not a notebook: {err}", path.display())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Notebook::default()),
            Err(err) => Err(format!("cannot read {}: {err}", path.display())),
        }
    }

    fn save(&self, path: &Path) -> Result<(), String> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|err| format!("cannot create {}: {err}", parent.display()))?;
        }
        let tmp = path.with_extension("tmp");
        let json = serde_json::to_vec_pretty(self).map_err(|err| err.to_string())?;
        std::fs::write(&tmp, json)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|err| format!("cannot write {}: {err}", path.display()))
    }
}

/// The demo server.
#[derive(Clone)]
pub struct DemoServer {
    book: Arc<Mutex<Notebook>>,
    data: Option<PathBuf>,
    fault: Option<Fault>,
    /// The tool list served once a test replaced it (`None`: [`DemoServer::tools`]).
    listed: Arc<Mutex<Option<Vec<Tool>>>>,
    /// The clients listening for changes of the list (MCP 2026-07-28 `subscriptions/listen`).
    listeners: Arc<Mutex<Vec<rmcp::service::SubscriptionSink>>>,
    /// How many times a client listed the tools.
    listings: Arc<std::sync::atomic::AtomicU32>,
    /// It speaks only the versions before MCP 2026-07-28 (`--protocol 2025-11-25`), and asks
    /// for a note's name inside the open call.
    older: bool,
    /// The `traceparent`s the calls carried in `_meta`, latest last (at most
    /// [`MAX_TRACEPARENTS`]).
    traceparents: Arc<Mutex<Vec<String>>>,
}

/// How many `traceparent`s the demo server keeps.
const MAX_TRACEPARENTS: usize = 100;

impl DemoServer {
    /// A server over the notebook in `data` (in memory only if `None`).
    pub fn open(data: Option<PathBuf>) -> Result<DemoServer, String> {
        let book = match &data {
            Some(path) => Notebook::load(path)?,
            None => Notebook::default(),
        };
        Ok(DemoServer {
            book: Arc::new(Mutex::new(book)),
            data,
            fault: Fault::from_env(),
            listed: Arc::default(),
            listeners: Arc::default(),
            listings: Arc::default(),
            older: false,
            traceparents: Arc::default(),
        })
    }

    /// The same server speaking only the versions before MCP 2026-07-28.
    pub fn older(mut self) -> DemoServer {
        self.older = true;
        self
    }

    /// Serves `tools` from now on and tells every listening client that the list changed
    /// (tests of a server whose tools change while it runs).
    pub async fn replace_tools(&self, tools: Vec<Tool>) {
        if let Ok(mut listed) = self.listed.lock() {
            *listed = Some(tools);
        }
        self.announce_list_change().await;
    }

    /// Tells every listening client that the tool list changed (whether or not it did).
    pub async fn announce_list_change(&self) {
        let listeners = self.listeners.lock().map(|l| l.clone()).unwrap_or_default();
        let mut open = Vec::new();
        for sink in listeners {
            if sink.notify_tool_list_changed().await.is_ok() {
                open.push(sink);
            }
        }
        if let Ok(mut listeners) = self.listeners.lock() {
            *listeners = open;
        }
    }

    /// How many times a client listed the tools (tests of how often a client asks).
    pub fn listings(&self) -> u32 {
        self.listings.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The `traceparent`s its calls carried in `_meta` (the caller's span of each call), latest
    /// last.
    pub fn traceparents(&self) -> Vec<String> {
        self.traceparents
            .lock()
            .map(|seen| seen.clone())
            .unwrap_or_default()
    }

    fn saw_traceparent(&self, traceparent: Option<&str>) {
        let Some(traceparent) = traceparent else {
            return;
        };
        if let Ok(mut seen) = self.traceparents.lock() {
            if seen.len() == MAX_TRACEPARENTS {
                seen.remove(0);
            }
            // A header's length (55); anything longer is not one.
            seen.push(traceparent.chars().take(64).collect());
        }
    }

    /// The same server with `fault` (tests).
    pub fn with_fault(mut self, fault: Option<Fault>) -> DemoServer {
        self.fault = fault;
        self
    }

    /// The notebook now (read again from its file, which another process may share).
    pub fn notebook(&self) -> Notebook {
        let Ok(mut book) = self.book.lock() else {
            return Notebook::default();
        };
        self.reload(&mut book);
        book.clone()
    }

    fn reload(&self, book: &mut Notebook) {
        if let Some(path) = &self.data {
            match Notebook::load(path) {
                Ok(on_disk) => *book = on_disk,
                Err(err) => {
                    tracing::warn!(%err, "the notebook file cannot be read; keeping the one in memory")
                }
            }
        }
    }

    fn change(&self, change: impl FnOnce(&mut Notebook) -> String) -> Result<String, ErrorData> {
        let mut book = self
            .book
            .lock()
            .map_err(|_| ErrorData::internal_error("the notebook is unavailable", None))?;
        self.reload(&mut book);
        let answer = change(&mut book);
        if let Some(path) = &self.data {
            book.save(path).map_err(|err| {
                tracing::error!(%err, "the notebook could not be saved");
                ErrorData::internal_error("the notebook could not be saved", None)
            })?;
        }
        Ok(answer)
    }

    /// The tools, with their annotations. With `NRLLM_MCP_DEMO_HINTS=plain` (tests of the
    /// crash rules) `write_note` does not say it is idempotent.
    pub fn tools() -> Vec<Tool> {
        let idempotent = std::env::var("NRLLM_MCP_DEMO_HINTS").as_deref() != Ok("plain");
        let object = |value: Value| match value {
            Value::Object(map) => map,
            _ => unreachable!("a schema literal is an object"),
        };
        let name = json!({"type": "string", "description": "The note's name (1 to 64 of a-z, 0-9, - and _)."});
        let text = json!({"type": "string", "description": "The note's whole new text; it replaces the old."});
        let read = Tool::new(
            "read_note",
            "Reads a note by name, or lists the notes' names when no name is given.",
            object(json!({"type": "object", "properties": {"name": name},
                          "additionalProperties": false})),
        )
        .annotate(
            ToolAnnotations::new()
                .read_only(true)
                .idempotent(true)
                .open_world(false),
        );
        let write_schema = object(json!({
            "type": "object", "properties": {"name": name, "text": text},
            "required": ["text"], "additionalProperties": false}));
        let write = Tool::new(
            "write_note",
            "Writes a note, replacing its text (the old text is lost). Without a name, the \
             operator is asked for one.",
            write_schema.clone(),
        )
        .annotate(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(true)
                .idempotent(idempotent)
                .open_world(false),
        );
        let preview = Tool::new(
            "write_note__preview",
            "What write_note would change, without changing it.",
            write_schema,
        )
        .annotate(ToolAnnotations::new().read_only(true).open_world(false));
        let count = Tool::new(
            "count_words",
            "Counts the words of every note, reporting its progress as it goes.",
            object(json!({"type": "object", "properties": {}, "additionalProperties": false})),
        )
        .annotate(
            ToolAnnotations::new()
                .read_only(true)
                .idempotent(true)
                .open_world(false),
        );
        vec![read, write, preview, count]
    }

    fn read(&self, args: &Args) -> Result<CallToolResult, ErrorData> {
        let book = self.notebook();
        Ok(match &args.name {
            None if book.notes.is_empty() => text("The notebook is empty."),
            None => text(format!(
                "Notes: {}",
                book.notes.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
            Some(name) => match book.notes.get(name) {
                Some(note) => text(note.clone()),
                None => CallToolResult::error(vec![ContentBlock::text(format!(
                    "there is no note named {name}"
                ))]),
            },
        })
    }

    fn preview(&self, name: &str, new: &str) -> CallToolResult {
        let before = self.notebook().notes.get(name).cloned().unwrap_or_default();
        let answer = json!({"target": format!("note {name}"), "before": before, "after": new});
        CallToolResult::success(vec![ContentBlock::text(answer.to_string())])
    }

    async fn write(
        &self,
        name: &str,
        new: &str,
        key: Option<String>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let book = self.notebook();
        if book.notes.len() >= MAX_NOTES && !book.notes.contains_key(name) {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "the notebook holds at most {MAX_NOTES} notes"
            ))]));
        }
        if let Some(earlier) = key.as_ref().and_then(|k| book.applied.get(k)) {
            return Ok(text(earlier.clone()));
        }
        if self.fault == Some(Fault::HangDuringWrite) {
            context.ct.cancelled().await;
            self.change(|book| {
                book.cancelled
                    .push(format!("write_note {name} was cancelled"));
                String::new()
            })?;
            return Err(ErrorData::internal_error("cancelled", None));
        }
        let answer = self.change(|book| {
            let answer = match book.notes.insert(name.to_owned(), new.to_owned()) {
                Some(_) => format!("Replaced note {name} ({} characters).", new.chars().count()),
                None => format!("Wrote note {name} ({} characters).", new.chars().count()),
            };
            book.writes += 1;
            if let Some(key) = key {
                book.applied.insert(key, answer.clone());
            }
            answer
        })?;
        if self.fault == Some(Fault::ExitDuringWrite) {
            tracing::error!("exiting during write_note, as NRLLM_MCP_DEMO_FAULT asks");
            std::process::exit(3);
        }
        Ok(text(answer))
    }
}

/// The arguments of the notebook's tools.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    name: Option<String>,
    text: Option<String>,
}

/// The steps `count_words` takes (each a progress notification, when asked for one).
const COUNT_STEPS: usize = 5;
/// How long each step of `count_words` takes, so that its progress can be seen.
const COUNT_STEP: std::time::Duration = std::time::Duration::from_millis(300);

impl DemoServer {
    /// Counts the notes' words in [`COUNT_STEPS`] steps, telling the client after each one
    /// when it asked (`token`).
    async fn count_words(
        &self,
        token: Option<ProgressToken>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let book = self.notebook();
        let notes: Vec<(&String, &String)> = book.notes.iter().collect();
        let mut words = 0;
        for step in 0..COUNT_STEPS {
            let share = notes.len().div_ceil(COUNT_STEPS).max(1);
            for (_, note) in notes.iter().skip(step * share).take(share) {
                words += note.split_whitespace().count();
            }
            tokio::time::sleep(COUNT_STEP).await;
            if let Some(token) = &token {
                let note = ProgressNotificationParam::new(token.clone(), (step + 1) as f64)
                    .with_total(COUNT_STEPS as f64)
                    .with_message(format!("counted {} of {COUNT_STEPS} parts", step + 1));
                let _ = context.peer.notify_progress(note).await;
            }
        }
        text(format!("{words} words in {} notes.", notes.len()))
    }
}

/// Text under `key` in a call's `_meta` (the SDK hands it to the handler in its context).
fn meta<'a>(
    context: &'a RequestContext<RoleServer>,
    request: &'a CallToolRequestParams,
    key: &str,
) -> Option<&'a str> {
    context
        .meta
        .get(key)
        .or_else(|| request.meta.as_ref().and_then(|meta| meta.get(key)))
        .and_then(Value::as_str)
}

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text.into())])
}

impl ServerHandler for DemoServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new(
            "nrllm-notes",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions("A notebook of named notes, for the nrllm playground's demo.")
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(match self.older {
            true => ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25),
            false => ProtocolVersion::KNOWN_VERSIONS,
        })
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.listings
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let listed = self.listed.lock().ok().and_then(|l| l.clone());
        Ok(ListToolsResult::with_all_items(
            listed.unwrap_or_else(DemoServer::tools),
        ))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        let mut accepted = rmcp::model::SubscriptionFilter::new();
        accepted.tools_list_changed = requested.tools_list_changed;
        Some(accepted)
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.push(context.sink().clone());
        }
        context.cancelled().await;
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let key = meta(&context, &request, EFFECT_KEY_META).map(str::to_owned);
        self.saw_traceparent(meta(&context, &request, TRACEPARENT_META));
        let args: Args =
            serde_json::from_value(Value::Object(request.arguments.clone().unwrap_or_default()))
                .map_err(|err| {
                    ErrorData::invalid_params(format!("invalid arguments: {err}"), None)
                })?;
        let result = match request.name.as_ref() {
            "read_note" => self.read(&args)?,
            "count_words" => {
                let token = context.meta.get_progress_token().or_else(|| {
                    request
                        .meta
                        .as_ref()
                        .and_then(|meta| meta.get_progress_token())
                });
                self.count_words(token, &context).await
            }
            "write_note" | "write_note__preview" => {
                let new = args
                    .text
                    .as_deref()
                    .ok_or_else(|| ErrorData::invalid_params("`text` is required", None))?;
                if new.len() > MAX_NOTE {
                    return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                        "a note holds at most {MAX_NOTE} bytes"
                    ))])
                    .into());
                }
                let name = match args.name.as_deref() {
                    Some(name) => checked_name(Some(name))?.to_owned(),
                    None if request.name == "write_note__preview" => UNNAMED.to_owned(),
                    None => match match self.older {
                        true => ask_inside(&context.peer).await,
                        false => named(request.input_responses.as_ref()),
                    } {
                        Named::Name(name) => name,
                        Named::Ask(message) => return Ok(ask_for_name(&message)),
                        Named::Refused(why) => {
                            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                                "The note was not written: {why}."
                            ))])
                            .into())
                        }
                    },
                };
                if request.name == "write_note__preview" {
                    self.preview(&name, new)
                } else {
                    self.write(&name, new, key, &context).await?
                }
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("there is no tool named {}", bounded(other, 80)),
                    None,
                ))
            }
        };
        Ok(result.into())
    }
}
