//! Tools about the system itself: the time, arithmetic, runs and their summaries, exports.

use super::common::*;
use crate::site::SiteStore;
use async_trait::async_trait;
use nrllm_core::run_store::{RunFilter, RunStatus, RunStore};
use nrllm_core::tool::{Preview, Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

/// The current date and time (UTC).
pub struct CurrentTime;

#[async_trait]
impl Tool for CurrentTime {
    type Args = NoArgs;
    const NAME: &'static str = "current_time";
    const DESCRIPTION: &'static str = "The current date and time in UTC.";
    const GROUP: &'static str = GROUP_SYSTEM;

    async fn call(&self, _args: NoArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        Ok(nrllm_core::clock::format_utc(nrllm_core::clock::now_ms()))
    }
}

/// Arguments of `calculate`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CalculateArgs {
    /// An arithmetic expression: numbers, + - * / ^, parentheses, and functions such as sqrt.
    #[schemars(length(min = 1, max = 500))]
    pub expression: String,
}

/// Arithmetic through a real expression parser (never an eval).
pub struct Calculate;

#[async_trait]
impl Tool for Calculate {
    type Args = CalculateArgs;
    const NAME: &'static str = "calculate";
    const DESCRIPTION: &'static str =
        "Evaluate an arithmetic expression, e.g. (12 * 7) / 3 or sqrt(2).";
    const GROUP: &'static str = GROUP_SYSTEM;

    async fn call(&self, args: CalculateArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let value = exmex::eval_str::<f64>(&args.expression).map_err(|err| {
            ToolError::InvalidArguments {
                field: "expression".into(),
                message: format!("cannot evaluate `{}`: {err}", args.expression),
            }
        })?;
        if !value.is_finite() {
            return Err(ToolError::Refused(format!(
                "`{}` has no finite value",
                args.expression
            )));
        }
        Ok(format!("{} = {}", args.expression.trim(), value))
    }
}

/// Arguments of `list_runs`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListRunsArgs {
    /// Only runs with this status (`completed`, `waiting_for_approval`, …).
    #[serde(default)]
    pub status: Option<RunStatus>,
    /// At most this many runs (default 10), newest first.
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<u32>,
}

/// Recent runs of this playground.
pub struct ListRuns(pub Arc<dyn RunStore>);

#[async_trait]
impl Tool for ListRuns {
    type Args = ListRunsArgs;
    const NAME: &'static str = "list_runs";
    const DESCRIPTION: &'static str = "List recent agent runs (id, status, prompt), newest first.";
    const GROUP: &'static str = GROUP_RUNS;

    async fn call(&self, args: ListRunsArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let runs = self
            .0
            .list(&RunFilter {
                status: args.status,
                limit: args.limit.unwrap_or(10),
                ..RunFilter::default()
            })
            .await
            .map_err(ToolError::internal)?;
        let list: Vec<_> = runs
            .iter()
            .map(|r| {
                json!({"id": r.id, "status": r.status, "prompt": r.configuration.as_ref().map(|c| &c.prompt)})
            })
            .collect();
        Ok(json!({ "runs": list }).to_string())
    }
}

/// Arguments of `get_run_summary`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunIdArgs {
    /// The run's id (a UUID).
    #[schemars(length(min = 32, max = 36))]
    pub run_id: String,
}

/// One run's status and totals.
pub struct GetRunSummary(pub Arc<dyn RunStore>);

#[async_trait]
impl Tool for GetRunSummary {
    type Args = RunIdArgs;
    const NAME: &'static str = "get_run_summary";
    const DESCRIPTION: &'static str =
        "Status, rounds, tool calls, tokens and answer of one agent run.";
    const GROUP: &'static str = GROUP_RUNS;

    async fn call(&self, args: RunIdArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let id = uuid::Uuid::parse_str(&args.run_id).map_err(|_| ToolError::InvalidArguments {
            field: "run_id".into(),
            message: "not a UUID".into(),
        })?;
        let run = self
            .0
            .get(id)
            .await
            .map_err(ToolError::internal)?
            .ok_or_else(|| ToolError::Refused(format!("no run with id {id}")))?;
        Ok(json!({
            "id": run.id, "status": run.status, "termination_reason": run.termination_reason,
            "rounds": run.counters.iterations, "tool_calls": run.counters.tool_calls,
            "prompt_tokens": run.counters.usage.prompt_tokens,
            "completion_tokens": run.counters.usage.completion_tokens,
            "answer": run.final_answer,
        })
        .to_string())
    }
}

/// Writes a page to a file in the export folder: an effect outside the database. Nothing can tell
/// afterwards whether an export that a restart cut off happened, so such a call waits for an
/// operator ("outcome unknown") instead of running again.
pub struct ExportPage {
    site: SiteStore,
    folder: std::path::PathBuf,
}

impl ExportPage {
    /// Exports pages of `site` into `folder` (created when needed).
    pub fn new(site: SiteStore, folder: impl Into<std::path::PathBuf>) -> ExportPage {
        ExportPage {
            site,
            folder: folder.into(),
        }
    }
}

#[async_trait]
impl Tool for ExportPage {
    type Args = SlugArgs;
    const NAME: &'static str = "export_page";
    const DESCRIPTION: &'static str =
        "Write a page (title and body) to a text file in the export folder.";
    const GROUP: &'static str = GROUP_SITE;
    const REQUIRES_APPROVAL: bool = true;

    async fn call(&self, args: SlugArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let page = self.site.get_page(&args.slug).await.map_err(site_error)?;
        let path = self.folder.join(format!("{}.txt", page.slug));
        tokio::fs::create_dir_all(&self.folder)
            .await
            .map_err(ToolError::internal)?;
        tokio::fs::write(&path, format!("{}\n\n{}\n", page.title, page.body))
            .await
            .map_err(ToolError::internal)?;
        nrllm_core::failpoint::reach("in_tool_after_effect");
        Ok(format!(
            "Exported page `{}` to {}.txt in the export folder.",
            page.slug, page.slug
        ))
    }

    async fn preview(
        &self,
        args: SlugArgs,
        _ctx: &ToolContext,
    ) -> Result<Option<Preview>, ToolError> {
        let page = self.site.get_page(&args.slug).await.map_err(site_error)?;
        Ok(Some(Preview::text(format!(
            "Writes {}.txt in the export folder (replacing a file of that name):\n\n{}\n\n{}",
            page.slug, page.title, page.body
        ))))
    }
}
