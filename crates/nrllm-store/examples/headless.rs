//! A headless consumer of the runtime: one process starts a run, which suspends to the database
//! when the model asks for a side-effecting tool; another process — later, or after a restart —
//! applies the operator's decision given on the command line and finishes the run. The side effect
//! (appending a line to a notes file) happens only in the second process, only when approved, and
//! only once however often the decision is sent.
//!
//! ```text
//! cargo run -p nrllm-store --example headless -- start  sqlite:runs.db notes.txt "remember the milk"
//! cargo run -p nrllm-store --example headless -- resume sqlite:runs.db notes.txt RUN_ID approve
//! cargo run -p nrllm-store --example headless -- resume sqlite:runs.db notes.txt RUN_ID deny "not now"
//! ```

use nrllm_core::authority::Actor;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use async_trait::async_trait;
use nrllm_core::provider::{
    ChatRequest, ChatResponse, Provider, ProviderError, RetryObserver, Usage,
};
use nrllm_core::registry::ToolRegistry;
use nrllm_core::run_service::{RunService, SingleLoop};
use nrllm_core::run_store::{RunConfiguration, RunRecord};
use nrllm_core::tool::{Tool, ToolContext, ToolError};
use nrllm_core::transcript::{Message, ToolCall};
use nrllm_core::{Decision, RunSettings, SuspendedState, ToolLoop};
use nrllm_store::db::Database;
use nrllm_store::SqlRunStore;
use schemars::JsonSchema;
use serde::Deserialize;

/// Appends a line to the notes file: a side effect, so it needs approval.
struct AppendNote {
    path: PathBuf,
}

#[derive(Deserialize, JsonSchema)]
struct AppendArgs {
    /// The line to append.
    line: String,
}

#[async_trait]
impl Tool for AppendNote {
    type Args = AppendArgs;
    const NAME: &'static str = "append_note";
    const DESCRIPTION: &'static str = "Appends a line to the notes file.";
    const REQUIRES_APPROVAL: bool = true;

    async fn call(&self, args: AppendArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(ToolError::internal)?;
        writeln!(file, "{}", args.line).map_err(ToolError::internal)?;
        Ok(format!("appended \"{}\"", args.line))
    }
}

/// A deterministic stand-in for a model: asks to note the user's words, then reports the result.
struct NoteTaker;

#[async_trait]
impl Provider for NoteTaker {
    fn name(&self) -> &str {
        "note-taker"
    }

    fn model(&self) -> &str {
        "rules"
    }

    async fn complete(
        &self,
        request: &ChatRequest,
        _on_retry: RetryObserver<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let usage = Usage::tokens(10, 5);
        Ok(match request.messages.last() {
            Some(Message::User { content }) => ChatResponse::calls(
                vec![ToolCall::new(
                    "call_1",
                    "append_note",
                    &serde_json::json!({ "line": content }),
                )],
                usage,
            ),
            Some(Message::Tool { content, .. }) => {
                ChatResponse::text(format!("Finished: {content}"), usage)
            }
            _ => ChatResponse::text("Nothing to do.", usage),
        })
    }
}

async fn service(db_url: &str, notes: PathBuf) -> Result<RunService, String> {
    let db = Database::connect(db_url)
        .await
        .map_err(|err| err.to_string())?;
    let mut registry = ToolRegistry::new();
    registry
        .register(AppendNote { path: notes })
        .map_err(|err| err.to_string())?;
    let tool_loop = Arc::new(ToolLoop::new(Arc::new(NoteTaker), Arc::new(registry)));
    Ok(RunService::new(
        Arc::new(SqlRunStore::new(db)),
        Arc::new(SingleLoop(tool_loop)),
    ))
}

fn describe(run: &RunRecord) -> String {
    let pending = run
        .suspended_state
        .as_deref()
        .and_then(|text| SuspendedState::from_json(text).ok())
        .map(|state| {
            let calls: Vec<String> = state
                .pending
                .iter()
                .map(|c| format!("{}({})", c.name, c.arguments))
                .collect();
            format!(" {}", calls.join(", "))
        })
        .unwrap_or_default();
    let answer = run
        .final_answer
        .as_deref()
        .map(|a| format!(": {a}"))
        .unwrap_or_default();
    format!("run {} {}{pending}{answer}", run.id, run.status)
}

async fn start(db_url: &str, notes: PathBuf, prompt: String) -> Result<String, String> {
    let configuration = RunConfiguration {
        continues: None,
        approval_timeout_ms: None,
        provider: "note-taker".into(),
        model: "rules".into(),
        prompt,
        system_prompt: None,
        skills: Vec::new(),
        settings: RunSettings::default(),
    };
    let run = service(db_url, notes)
        .await?
        .start(configuration, "cli")
        .await
        .map_err(|err| err.to_string())?;
    Ok(describe(&run))
}

async fn resume(
    db_url: &str,
    notes: PathBuf,
    run_id: &str,
    verdict: &str,
    reason: Option<String>,
) -> Result<String, String> {
    let id = uuid::Uuid::parse_str(run_id).map_err(|_| format!("`{run_id}` is not a run id"))?;
    let decision = match verdict {
        "approve" => Decision::ApproveAll,
        "deny" => Decision::DenyAll { reason },
        other => {
            return Err(format!(
                "the decision must be `approve` or `deny`, not `{other}`"
            ))
        }
    };
    let run = service(db_url, notes)
        .await?
        .resume(id, &decision, &Actor::headless("operator"), None)
        .await
        .map_err(|err| err.to_string())?;
    Ok(describe(&run))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [cmd, db, notes, prompt] if cmd == "start" => start(db, notes.into(), prompt.clone()).await,
        [cmd, db, notes, run_id, verdict, rest @ ..] if cmd == "resume" && rest.len() <= 1 => {
            resume(db, notes.into(), run_id, verdict, rest.first().cloned()).await
        }
        _ => Err("usage: headless start DB_URL NOTES PROMPT | headless resume DB_URL NOTES RUN_ID approve|deny [REASON]".into()),
    };
    match result {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("headless: {message}");
            ExitCode::from(2)
        }
    }
}
