//! A headless consumer of the runtime: one process runs until the run suspends and writes the
//! suspended state to a file; another process reads it, applies the operator's decision given on
//! the command line, and finishes the run. The side effect (appending a line to a notes file)
//! happens only in the second process, and only when approved.
//!
//! ```text
//! cargo run -p nrllm-runtime --example headless -- start  STATE NOTES "remember the milk"
//! cargo run -p nrllm-runtime --example headless -- resume STATE NOTES approve
//! cargo run -p nrllm-runtime --example headless -- resume STATE NOTES deny "not now"
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use async_trait::async_trait;
use nrllm_runtime::events::NullSink;
use nrllm_runtime::provider::{ChatRequest, ChatResponse, Provider, ProviderError, Usage};
use nrllm_runtime::registry::ToolRegistry;
use nrllm_runtime::tool::{Tool, ToolContext, ToolError};
use nrllm_runtime::transcript::{Message, ToolCall};
use nrllm_runtime::{
    Decision, LoopOutcome, RunContext, RunInput, SuspendedState, ToolLoop, ToolLoopService,
};
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

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let usage = Usage {
            prompt_tokens: 10,
            completion_tokens: 5,
        };
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

fn tool_loop(notes: PathBuf) -> ToolLoop {
    let mut registry = ToolRegistry::new();
    registry
        .register(AppendNote { path: notes })
        .expect("one tool registers");
    ToolLoop::new(Arc::new(NoteTaker), Arc::new(registry))
}

async fn start(state_path: PathBuf, notes: PathBuf, prompt: String) -> Result<String, String> {
    let input = RunInput {
        messages: vec![Message::user(prompt)],
        ..RunInput::default()
    };
    let ctx = RunContext {
        run_id: "headless".into(),
        actor: "cli".into(),
    };
    match tool_loop(notes).run(input, &ctx, &NullSink).await {
        Ok(LoopOutcome::Suspended(state)) => {
            std::fs::write(&state_path, state.to_json())
                .map_err(|err| format!("cannot write the state: {err}"))?;
            let calls: Vec<String> = state
                .pending
                .iter()
                .map(|c| format!("{}({})", c.name, c.arguments))
                .collect();
            Ok(format!(
                "suspended: waiting for approval of {}",
                calls.join(", ")
            ))
        }
        Ok(LoopOutcome::Completed(done)) => Ok(format!("completed: {}", done.content)),
        Err(err) => Err(err.to_string()),
    }
}

async fn resume(
    state_path: PathBuf,
    notes: PathBuf,
    verdict: &str,
    reason: Option<String>,
) -> Result<String, String> {
    let text = std::fs::read_to_string(&state_path)
        .map_err(|err| format!("cannot read the state: {err}"))?;
    let state = SuspendedState::from_json(&text).map_err(|err| err.to_string())?;
    let decision = match verdict {
        "approve" => Decision::ApproveAll,
        "deny" => Decision::DenyAll { reason },
        other => {
            return Err(format!(
                "the decision must be `approve` or `deny`, not `{other}`"
            ))
        }
    };
    let ctx = RunContext {
        run_id: "headless".into(),
        actor: "operator".into(),
    };
    // The state is removed before the effect can happen: a second resume finds nothing to run.
    std::fs::remove_file(&state_path).map_err(|err| format!("cannot claim the state: {err}"))?;
    match tool_loop(notes)
        .resume(&state, &decision, &ctx, &NullSink)
        .await
    {
        Ok(LoopOutcome::Completed(done)) => Ok(format!("completed: {}", done.content)),
        Ok(LoopOutcome::Suspended(state)) => {
            std::fs::write(&state_path, state.to_json())
                .map_err(|err| format!("cannot write the state: {err}"))?;
            Ok("suspended again".into())
        }
        Err(err) => Err(err.to_string()),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [cmd, state, notes, prompt] if cmd == "start" => start(state.into(), notes.into(), prompt.clone()).await,
        [cmd, state, notes, verdict, rest @ ..] if cmd == "resume" && rest.len() <= 1 => {
            resume(state.into(), notes.into(), verdict, rest.first().cloned()).await
        }
        _ => Err("usage: headless start STATE NOTES PROMPT | headless resume STATE NOTES approve|deny [REASON]".into()),
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
