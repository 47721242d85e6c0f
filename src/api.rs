//! The server functions: the app's API, each at a fixed endpoint under `/api/` (DESIGN §6). They
//! take form posts (answered with a redirect, errors carried back in the URL) and JSON (answered
//! with JSON and a status code). They are thin: validation, then the run service. Whether the
//! caller may decide, answer, fork, retry or cancel a run is the core's authority to say (the run
//! service asks it, `nrllm_core::authority`); here a caller only has to be logged in.

// A server function's arguments are its form fields, one per field; the client stubs the macro
// generates for them cannot carry an attribute of their own.
#![allow(clippy::too_many_arguments)]

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;
use crate::model::{
    ApprovalsPage, PlaygroundOptions, ResumeAccepted, RunList, RunView, SystemView,
};

/// One call's part of an approval form.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallForm {
    pub call_id: String,
    /// `approve`, `deny` or `edit`: read when the decision is `per_call`.
    #[serde(default)]
    pub choice: Option<String>,
    /// The arguments as the form holds them, as JSON text. Text that differs from the model's
    /// arguments is an edit: the call runs with it when it is approved.
    #[serde(default)]
    pub arguments: Option<String>,
    /// The reason the model reads if this call is denied (with `failed`: what the operator
    /// knows).
    #[serde(default)]
    pub reason: Option<String>,
    /// With `respond`: the result the model reads instead of running the tool.
    #[serde(default)]
    pub result: Option<String>,
    /// For a question of the turn (`ask_operator`), with the choice `answer`: the answer's text,
    /// or one of the question's choices …
    #[serde(default)]
    pub answer: Option<String>,
    /// … or, for a question with a form, each field's text by name.
    #[serde(default)]
    pub fields: Option<std::collections::BTreeMap<String, String>>,
    /// With an approving choice: `run` — always approve this tool for this run from now on;
    /// `configuration` — for every run of the run's configuration (administrators only). With a
    /// denying choice: `never_run`, `never_configuration` — never allow it there.
    #[serde(default)]
    pub remember: Option<String>,
    /// Only when this argument … (empty: whatever the arguments).
    #[serde(default)]
    pub rule_argument: Option<String>,
    /// … compares so (`equals`, `starts_with`, `ends_with`, `contains`) …
    #[serde(default)]
    pub rule_op: Option<String>,
    /// … with this value.
    #[serde(default)]
    pub rule_value: Option<String>,
}

/// Starts a run and returns its id; a browser is sent on to `/runs/<id>`. The run executes in
/// the background.
#[server(endpoint = "nrllm_tool_run")]
pub async fn nrllm_tool_run(
    prompt: String,
    configuration: Option<String>,
    system_prompt: Option<String>,
    max_rounds: Option<String>,
    temperature: Option<String>,
    max_tokens: Option<String>,
    tools: Option<Vec<String>>,
    choose_tools: Option<String>,
    skills: Option<String>,
) -> Result<String, AppError> {
    use crate::server::{require, state, wants_html};
    let who = require(nrllm_types::Role::Operator)?;
    let form = ssr::RunForm {
        prompt,
        configuration,
        system_prompt,
        max_rounds,
        temperature,
        max_tokens,
        tools,
        choose_tools,
        skills,
    };
    let state = state()?;
    ssr::accepting(&state)?;
    let configuration = form.validate(&state)?;
    ssr::run_start_allowed(&state, &who)?;
    let run = state.runs.create(configuration, &who.name).await?;
    state.queue.wake();
    let id = run.id.to_string();
    if wants_html() {
        leptos_axum::redirect(&format!("/runs/{id}"));
    }
    Ok(id)
}

/// Applies an operator's decision to a waiting run: exactly what the form showed when its button
/// was pressed (edited arguments run, each reason reaches its call; a button that would drop typed
/// text is refused unless `acknowledge_discard` is set). The claim happens now (exactly one
/// decision wins); the run continues in the background.
#[server(endpoint = "nrllm_tool_resume")]
pub async fn nrllm_tool_resume(
    run_id: String,
    decision: String,
    reason: Option<String>,
    digest: Option<String>,
    calls: Option<Vec<CallForm>>,
    acknowledge_discard: Option<String>,
) -> Result<ResumeAccepted, AppError> {
    use crate::server::{require, state, wants_html};
    let who = require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    ssr::accepting(&state)?;
    let id = ssr::parse_run_id(&run_id)?;
    let digest = digest.filter(|d| !d.is_empty());
    if digest.is_none() && wants_html() {
        return Err(AppError::BadRequest(
            "The form is missing what it was showing (its digest): reload the page and decide again."
                .to_owned(),
        ));
    }
    let calls = calls.unwrap_or_default();
    let scopes = ssr::rule_scopes(&calls)?;
    let mut submission = ssr::submission(
        &decision,
        reason,
        calls,
        acknowledge_discard.is_some_and(|a| !a.is_empty() && a != "false"),
    )?;
    for (call, remember) in submission.calls.iter_mut().zip(scopes) {
        call.remember = remember;
    }
    // The claim checks who may decide (the core's authority) and queues the decision; this
    // instance's worker (or another's) carries it out.
    state
        .runs
        .claim_submission(id, &submission, &who, digest.as_deref())
        .await?;
    Ok(ssr::queued(&state, id))
}

/// Answers the question a waiting run asks (`ask_operator`): `answer` — the text, or one of the
/// question's choices — or, for a question with a form, `fields` (each field's text by name;
/// numbers and yes/no are read as the form's schema says). The answer is checked against the
/// question (`400` naming the field if it does not fit) and becomes the call's result. Claimed
/// like any decision: exactly one answer wins. `call_id` picks the question when a turn asks
/// several (default: the first). An answer decides only its question: on a turn whose other
/// calls wait for a decision too it is refused (`409`, naming them); such a turn is decided
/// whole with `nrllm_tool_resume` (`per_call`, the question's entry carrying the answer).
#[server(endpoint = "nrllm_input_answer")]
pub async fn nrllm_input_answer(
    run_id: String,
    digest: Option<String>,
    call_id: Option<String>,
    answer: Option<String>,
    fields: Option<std::collections::BTreeMap<String, String>>,
) -> Result<ResumeAccepted, AppError> {
    use crate::server::{require, state};
    let who = require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    ssr::accepting(&state)?;
    let id = ssr::parse_run_id(&run_id)?;
    let digest = digest.filter(|d| !d.is_empty());
    let answer = nrllm_core::question::FormAnswer { answer, fields };
    state
        .runs
        .claim_answer(id, call_id.as_deref(), &answer, &who, digest.as_deref())
        .await?;
    Ok(ssr::queued(&state, id))
}

/// One run: summary, counters, pending calls (with previews), the latest steps (or those before
/// `steps_before`), and the detail of step `step` (the latest if absent) with tab `tab` selected.
#[server(endpoint = "nrllm_run_get")]
pub async fn nrllm_run_get(
    run_id: String,
    step: Option<i64>,
    tab: Option<String>,
    steps_before: Option<i64>,
) -> Result<RunView, AppError> {
    use crate::server::{state, views};
    let who = crate::server::require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    let id = ssr::parse_run_id(&run_id)?;
    let run = state
        .store
        .get(id)
        .await
        .map_err(|err| AppError::internal("reading a run", err))?
        .ok_or_else(|| AppError::NotFound(format!("There is no run {id}.")))?;
    let events = state
        .store
        .events(id, 0)
        .await
        .map_err(|err| AppError::internal("reading a run's events", err))?;
    let pending = state.runs.pending(&run).await;
    let detail = views::step_detail(&events, step, tab.as_deref(), &state.registry);
    let mut view = views::run_view(&run, &events, steps_before, pending.as_ref(), detail);
    let verdict = state
        .sql_store
        .verify_log(id)
        .await
        .map_err(|err| AppError::internal("verifying a run's log", err))?;
    view.decide_block = ssr::decide_block(&state, &run, &who).await?;
    view.rules_for_configuration = who.role.allows(nrllm_types::Role::Admin);
    view.children = state
        .store
        .children(id, 100)
        .await
        .map_err(|err| AppError::internal("reading the runs that go on from a run", err))?
        .iter()
        .map(views::child_view)
        .collect();
    if let Some(configuration) = &run.configuration {
        view.rules = state
            .store
            .rules_for(id, &configuration.provider)
            .await
            .map_err(|err| AppError::internal("reading a run's approval rules", err))?
            .iter()
            .map(|rule| views::rule_view(rule, crate::rules_api::ssr::may_change(&who, rule)))
            .collect();
    }
    if run.status == nrllm_core::store::RunStatus::Queued {
        view.summary.queue_position = state
            .store
            .queue_position(id)
            .await
            .map_err(|err| AppError::internal("reading a run's place in the queue", err))?;
    }
    view.webhooks = crate::server::webhook::run_webhooks(&state.webhook_store, id)
        .await
        .map_err(|err| AppError::internal("reading a run's webhook deliveries", err))?;
    view.log = verdict.map(|verdict| crate::model::LogCheck {
        verified: verdict.is_verified(),
        failed: verdict.is_failure(),
        text: verdict.describe(),
    });
    // A running segment's steps are not committed yet; show what this server has seen of them.
    if view.latest {
        let last = view.last_sequence;
        for event in state
            .live
            .unpersisted(id)
            .iter()
            .filter(|e| e.sequence > last)
        {
            view.steps.push(views::live_step(event));
            view.last_sequence = event.sequence;
        }
    }
    Ok(view)
}

/// Runs, newest first, optionally with one status; `before` (a creation time in ms) pages on.
#[server(endpoint = "nrllm_runs_list")]
pub async fn nrllm_runs_list(
    status: Option<String>,
    before: Option<i64>,
    limit: Option<u32>,
) -> Result<RunList, AppError> {
    use crate::server::{state, views};
    use nrllm_core::store::{RunFilter, RunStatus};
    crate::server::require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    let status =
        match status.as_deref().filter(|s| !s.is_empty() && *s != "all") {
            None => None,
            Some(text) => Some(RunStatus::parse(text).ok_or_else(|| {
                AppError::invalid("status", format!("`{text}` is not a run status"))
            })?),
        };
    let limit = limit.unwrap_or(25).clamp(1, 200);
    let runs = state
        .store
        .list(&RunFilter {
            status,
            created_before_ms: before,
            limit: limit + 1,
        })
        .await
        .map_err(|err| AppError::internal("listing runs", err))?;
    let more = runs.len() > limit as usize;
    let runs: Vec<_> = runs
        .iter()
        .take(limit as usize)
        .map(views::summary)
        .collect();
    Ok(RunList {
        next_before: more.then(|| runs.last().map(|r| r.created_at_ms)).flatten(),
        runs,
    })
}

/// Runs waiting for a decision, oldest first (the approvals inbox), each with its pending calls,
/// previews and digest: `configuration` and `tool` filter, `after` (the `next_after` of the page
/// before) pages on. Previews are built concurrently, each within a time limit.
#[server(endpoint = "nrllm_approvals_list")]
pub async fn nrllm_approvals_list(
    configuration: Option<String>,
    tool: Option<String>,
    after: Option<String>,
    limit: Option<u32>,
) -> Result<ApprovalsPage, AppError> {
    use crate::server::{state, views};
    use futures::StreamExt;
    use nrllm_core::store::WaitingFilter;
    let who = crate::server::require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    let present = |v: Option<String>| v.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let after = match present(after) {
        None => None,
        Some(cursor) => Some(ssr::parse_cursor(&cursor)?),
    };
    let limit = limit.unwrap_or(ssr::INBOX_PAGE).clamp(1, 200);
    let filter = WaitingFilter {
        provider: present(configuration),
        tool: present(tool),
        after,
        limit: limit + 1,
    };
    let mut waiting = state
        .store
        .waiting(&filter)
        .await
        .map_err(|err| AppError::internal("listing waiting runs", err))?;
    let more = waiting.len() > limit as usize;
    waiting.truncate(limit as usize);
    let next_after = more
        .then(|| {
            waiting
                .last()
                .map(|r| format!("{}.{}", r.updated_at_ms, r.id))
        })
        .flatten();
    let runs: Vec<_> = futures::stream::iter(waiting)
        .map(|run| {
            let (state, who) = (&state, &who);
            async move {
                let pending = state.runs.pending(&run).await;
                let mut view = views::run_view(&run, &[], None, pending.as_ref(), None);
                view.decide_block = ssr::decide_block(state, &run, who).await?;
                Ok::<_, AppError>(view)
            }
        })
        .buffered(ssr::INBOX_PREVIEWS_AT_ONCE)
        .collect()
        .await;
    let runs = runs.into_iter().collect::<Result<_, _>>()?;
    let mut tools: Vec<String> = state
        .registry
        .specs()
        .into_iter()
        .filter(|spec| spec.requires_approval)
        .map(|spec| spec.name)
        .collect();
    tools.sort();
    Ok(ApprovalsPage {
        runs,
        next_after,
        configurations: state.configurations.names(),
        tools,
    })
}

/// Cancels a queued or waiting run; `reason` goes into its steps with who cancelled it.
#[server(endpoint = "nrllm_run_cancel")]
pub async fn nrllm_run_cancel(
    run_id: String,
    reason: Option<String>,
) -> Result<crate::model::RunStatus, AppError> {
    use crate::server::{require, state, wants_html};
    let who = require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    let id = ssr::parse_run_id(&run_id)?;
    let reason = reason
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty());
    ssr::at_most("reason", reason.as_deref(), crate::model::MAX_REASON_CHARS)?;
    let run = state.runs.cancel(id, &who, reason.as_deref()).await?;
    if wants_html() {
        leptos_axum::redirect(&format!("/runs/{id}"));
    }
    Ok(run.status)
}

/// Starts a new run that goes on from a failed run's journal (its model call is asked again;
/// no tool of the failed run runs again); returns the new run's id.
#[server(endpoint = "nrllm_run_retry")]
pub async fn nrllm_run_retry(run_id: String) -> Result<String, AppError> {
    use crate::server::{require, state, wants_html};
    let who = require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    ssr::accepting(&state)?;
    let id = ssr::parse_run_id(&run_id)?;
    // A retry starts a run: it counts toward the caller's starts a minute.
    ssr::run_start_allowed(&state, &who)?;
    let run = state.runs.retry(id, &who).await?;
    state.queue.wake();
    let new_id = run.id.to_string();
    if wants_html() {
        leptos_axum::redirect(&format!("/runs/{new_id}"));
    }
    Ok(new_id)
}

/// Forks a run at its step `step` (a sequence number): a new run whose steps up to there are
/// copies of this run's and whose transcript is its journal up to there; it goes on with the
/// turn that step left undecided (decided again), or asks the model — with `prompt` as a new user
/// message if given. Nothing the parent ran runs again. Returns the new run's id; a browser is
/// sent on to it.
#[server(endpoint = "nrllm_run_fork")]
pub async fn nrllm_run_fork(
    run_id: String,
    step: String,
    prompt: Option<String>,
) -> Result<String, AppError> {
    use crate::server::{require, state, wants_html};
    use nrllm_core::service::ForkError;
    let who = require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    ssr::accepting(&state)?;
    let id = ssr::parse_run_id(&run_id)?;
    let at: i64 = step
        .trim()
        .parse()
        .map_err(|_| AppError::invalid("step", "a step's number"))?;
    let prompt = prompt.filter(|p| !p.trim().is_empty());
    ssr::at_most("prompt", prompt.as_deref(), ssr::MAX_PROMPT_CHARS)?;
    // A fork starts a run: it counts toward the caller's starts a minute.
    ssr::run_start_allowed(&state, &who)?;
    let run = state
        .runs
        .fork(id, at, prompt.as_deref(), &who, false)
        .await
        .map_err(|err| match err {
            ForkError::NotFound(_) => AppError::NotFound(format!("There is no run {id}.")),
            ForkError::NoStep(_) | ForkError::BeforeFirstRequest => {
                AppError::invalid("step", err.to_string())
            }
            ForkError::PromptOnPendingTurn => AppError::invalid("prompt", err.to_string()),
            ForkError::Service(err) => AppError::from(err),
        })?;
    state.queue.wake();
    tracing::info!(by = %who.name, parent = %id, at, run_id = %run.id, "run forked");
    let new_id = run.id.to_string();
    if wants_html() {
        leptos_axum::redirect(&format!("/runs/{new_id}"));
    }
    Ok(new_id)
}

/// What the playground form offers: configurations, tools, example prompts.
#[server(endpoint = "nrllm_playground_options")]
pub async fn nrllm_playground_options() -> Result<PlaygroundOptions, AppError> {
    crate::server::require(nrllm_types::Role::Viewer)?;
    let state = crate::server::state()?;
    Ok(PlaygroundOptions {
        configurations: state.configurations.views(),
        tools: crate::server::views::tool_views(&state.registry),
        example_prompts: nrllm_demo::demo::DEMO_PROMPTS
            .iter()
            .map(|p| (*p).to_owned())
            .collect(),
    })
}

/// The state of the pieces under the playground: version, database, configurations, tools and
/// live streams.
#[server(endpoint = "nrllm_system_status")]
pub async fn nrllm_system_status() -> Result<SystemView, AppError> {
    let who = crate::server::require(nrllm_types::Role::Viewer)?;
    let state = crate::server::state()?;
    let migrations: Result<(i64,), _> =
        sqlx::query_as("SELECT COUNT(*) FROM _sqlx_migrations WHERE success")
            .fetch_one(state.db.pool())
            .await;
    if let Err(err) = &migrations {
        tracing::error!(%err, "the system page cannot read the database");
    }
    let live = state.live.stats();
    let tools = state.registry.specs();
    let admin = who.role.allows(nrllm_types::Role::Admin);
    Ok(SystemView {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        database: match state.db.backend() {
            nrllm_store::db::Backend::Sqlite => "SQLite".to_owned(),
            nrllm_store::db::Backend::Postgres => "Postgres".to_owned(),
        },
        database_ok: migrations.is_ok(),
        migrations: migrations.map(|(n,)| n).unwrap_or_default(),
        configurations: state.configurations.views(),
        tools_enabled: tools
            .iter()
            .filter(|spec| state.registry.is_enabled(&spec.name))
            .count(),
        tools_total: tools.len(),
        running_here: live.runs,
        live_streams: live.subscribers,
        mcp_servers: state
            .mcp
            .statuses()
            .into_iter()
            .map(|status| crate::server::views::mcp_server_view(status, admin))
            .collect(),
        can_reconnect: admin,
    })
}

/// Connects an MCP server again now, listing its tools again (administrators).
#[server(endpoint = "nrllm_mcp_reconnect")]
pub async fn nrllm_mcp_reconnect(name: String) -> Result<(), AppError> {
    let who = crate::server::require(nrllm_types::Role::Admin)?;
    let state = crate::server::state()?;
    if !state.mcp.reconnect(&name) {
        return Err(AppError::invalid(
            "name",
            format!(
                "there is no MCP server named {}",
                name.chars().take(40).collect::<String>()
            ),
        ));
    }
    tracing::info!(by = %who.name, server = %name, "MCP server reconnect asked for");
    if crate::server::wants_html() {
        leptos_axum::redirect("/system");
    }
    Ok(())
}

#[cfg(feature = "ssr")]
pub(crate) mod ssr {
    //! Validation and error mapping for the server functions above.

    use nrllm_core::assembly::Skill;
    use nrllm_core::decision::{Action, Remember, RememberScope, Submission, SubmittedCall};
    use nrllm_core::provider::ModelOptions;
    use nrllm_core::question::FormAnswer;
    use nrllm_core::registry::AllowList;
    use nrllm_core::rules::RuleEffect;
    use nrllm_core::store::RunConfiguration;
    use nrllm_core::RunSettings;
    use uuid::Uuid;

    use super::CallForm;
    use crate::error::AppError;
    use crate::model::{MAX_EDIT_CHARS, MAX_REASON_CHARS};
    use crate::server::AppState;

    pub const MAX_PROMPT_CHARS: usize = 20_000;
    pub const MAX_SYSTEM_PROMPT_CHARS: usize = 20_000;
    pub const MAX_SKILLS_CHARS: usize = 50_000;
    /// More tool names than any registry holds.
    pub const MAX_TOOLS: usize = 200;

    /// Why `who` cannot decide `run`, if they cannot: their role, or four-eyes (the core's
    /// authority says; the page only shows it).
    pub async fn decide_block(
        state: &AppState,
        run: &nrllm_core::store::RunRecord,
        who: &nrllm_store::accounts::Principal,
    ) -> Result<Option<String>, AppError> {
        use nrllm_core::authority::{Act, Refusal};
        match state
            .runs
            .may(who, Act::Decide, run)
            .await
            .map_err(|err| AppError::internal("reading a run's lineage", err))?
        {
            // A run that does not wait has no panel; nothing to explain.
            Ok(()) | Err(Refusal::State(_)) => Ok(None),
            Err(refusal) => Ok(Some(AppError::from(refusal).to_string())),
        }
    }

    /// Refuses a run start (a new run, a fork, a retry) past the caller's starts a minute.
    pub fn run_start_allowed(
        state: &AppState,
        who: &nrllm_store::accounts::Principal,
    ) -> Result<(), AppError> {
        if state.limits.run_starts.check_key(&who.name).is_err() {
            tracing::warn!(who = %who.label(), "refused: run starts over the limit");
            return Err(AppError::TooManyRequests(format!(
                "{} has started too many runs in the last minute (the limit is {} a minute); try again shortly.",
                who.name, state.limits.run_starts_per_minute
            )));
        }
        Ok(())
    }

    /// Refuses work while the server is shutting down.
    pub fn accepting(state: &AppState) -> Result<(), AppError> {
        if state.shutdown.is_cancelled() {
            return Err(AppError::Unavailable(
                "The server is shutting down and takes no new runs or decisions now; try again \
                 in a moment."
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// Refuses `text` in `field` if it is longer than `max` characters.
    pub fn at_most(field: &str, text: Option<&str>, max: usize) -> Result<(), AppError> {
        match text {
            Some(text) if text.chars().count() > max => Err(AppError::invalid(
                field,
                format!("at most {max} characters"),
            )),
            _ => Ok(()),
        }
    }

    /// The playground form as posted.
    pub struct RunForm {
        pub prompt: String,
        pub configuration: Option<String>,
        pub system_prompt: Option<String>,
        pub max_rounds: Option<String>,
        pub temperature: Option<String>,
        pub max_tokens: Option<String>,
        pub tools: Option<Vec<String>>,
        pub choose_tools: Option<String>,
        pub skills: Option<String>,
    }

    fn present(value: &Option<String>) -> Option<&str> {
        value.as_deref().map(str::trim).filter(|v| !v.is_empty())
    }

    impl RunForm {
        /// The run configuration, or the first field that is not acceptable.
        pub fn validate(self, state: &AppState) -> Result<RunConfiguration, AppError> {
            let prompt = self.prompt.trim().to_owned();
            if prompt.is_empty() {
                return Err(AppError::invalid(
                    "prompt",
                    "write what the agent should do",
                ));
            }
            at_most("prompt", Some(&prompt), MAX_PROMPT_CHARS)?;
            at_most(
                "system_prompt",
                self.system_prompt.as_deref(),
                MAX_SYSTEM_PROMPT_CHARS,
            )?;
            at_most("skills", self.skills.as_deref(), MAX_SKILLS_CHARS)?;
            if self.tools.as_ref().is_some_and(|t| t.len() > MAX_TOOLS) {
                return Err(AppError::invalid(
                    "tools",
                    format!("at most {MAX_TOOLS} tools"),
                ));
            }
            let configuration = present(&self.configuration)
                .unwrap_or(crate::server::configurations::DEMO_CONFIGURATION)
                .to_owned();
            let offered = state.configurations.views();
            let Some(chosen) = offered.iter().find(|c| c.name == configuration) else {
                return Err(AppError::invalid(
                    "configuration",
                    format!("there is no configuration `{configuration}`"),
                ));
            };
            if !chosen.available {
                return Err(AppError::invalid(
                    "configuration",
                    chosen
                        .reason
                        .clone()
                        .unwrap_or_else(|| "this configuration is not available".into()),
                ));
            }
            let max_rounds = match present(&self.max_rounds) {
                None => nrllm_core::state::DEFAULT_MAX_ROUNDS,
                Some(text) => text
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=20).contains(n))
                    .ok_or_else(|| {
                        AppError::invalid("max_rounds", "a whole number from 1 to 20")
                    })?,
            };
            let temperature = match present(&self.temperature) {
                None => None,
                Some(text) => Some(
                    text.parse::<f64>()
                        .ok()
                        .filter(|t| (0.0..=2.0).contains(t))
                        .ok_or_else(|| AppError::invalid("temperature", "a number from 0 to 2"))?,
                ),
            };
            let max_tokens = match present(&self.max_tokens) {
                None => None,
                Some(text) => Some(
                    text.parse::<u32>()
                        .ok()
                        .filter(|n| (1..=200_000).contains(n))
                        .ok_or_else(|| {
                            AppError::invalid("max_tokens", "a whole number from 1 to 200000")
                        })?,
                ),
            };
            let allow_list = match (self.choose_tools.is_some(), self.tools) {
                (false, None) => AllowList::All,
                (_, tools) => {
                    let tools = tools.unwrap_or_default();
                    if let Some(unknown) = tools.iter().find(|t| state.registry.get(t).is_none()) {
                        return Err(AppError::invalid(
                            "tools",
                            format!("there is no tool `{unknown}`"),
                        ));
                    }
                    AllowList::only(tools)
                }
            };
            let skills = parse_skills(self.skills.as_deref().unwrap_or_default())?;
            let defaults = state.configurations.defaults(&chosen.name);
            Ok(RunConfiguration {
                continues: None,
                approval_timeout_ms: state.configurations.approval_timeout_ms(&chosen.name),
                provider: chosen.name.clone(),
                model: chosen.model.clone(),
                prompt,
                system_prompt: present(&self.system_prompt).map(str::to_owned),
                skills,
                settings: RunSettings {
                    allow_list,
                    admin: false,
                    // Values left empty in the form take the configuration's defaults.
                    model: ModelOptions {
                        temperature: temperature.or(defaults.temperature),
                        max_tokens: max_tokens.or(defaults.max_tokens),
                        from_configuration: [
                            (
                                "temperature",
                                temperature.is_none() && defaults.temperature.is_some(),
                            ),
                            (
                                "max_tokens",
                                max_tokens.is_none() && defaults.max_tokens.is_some(),
                            ),
                        ]
                        .into_iter()
                        .filter(|(_, from)| *from)
                        .map(|(name, _)| name.to_owned())
                        .collect(),
                    },
                    max_rounds,
                },
            })
        }
    }

    /// Skills as typed in the form: blocks separated by a line `---`; each block's first line is
    /// its name, the rest its text.
    pub fn parse_skills(text: &str) -> Result<Vec<Skill>, AppError> {
        let mut skills = Vec::new();
        for block in text
            .split("\n---")
            .map(|b| b.trim_matches(|c| c == '\n' || c == '\r' || c == '-'))
        {
            let block = block.trim();
            if block.is_empty() {
                continue;
            }
            let (name, content) = block.split_once('\n').unwrap_or((block, ""));
            if content.trim().is_empty() {
                return Err(AppError::invalid(
                    "skills",
                    format!("the skill `{}` has a name but no text", name.trim()),
                ));
            }
            skills.push(Skill {
                name: name.trim().to_owned(),
                content: content.trim().to_owned(),
            });
        }
        Ok(skills)
    }

    /// Waiting runs on one page of the inbox, unless the client asks for another number.
    pub const INBOX_PAGE: u32 = 50;
    /// Waiting runs whose previews are built at the same time.
    pub const INBOX_PREVIEWS_AT_ONCE: usize = 8;

    /// An inbox cursor: `<updated_at_ms>.<run id>` of the last run on the page before.
    pub fn parse_cursor(text: &str) -> Result<(i64, Uuid), AppError> {
        text.split_once('.')
            .and_then(|(ms, id)| Some((ms.parse().ok()?, Uuid::parse_str(id).ok()?)))
            .ok_or_else(|| AppError::invalid("after", format!("`{text}` is not an inbox cursor")))
    }

    pub fn parse_run_id(text: &str) -> Result<Uuid, AppError> {
        Uuid::parse_str(text.trim())
            .map_err(|_| AppError::invalid("run_id", format!("`{text}` is not a run id")))
    }

    /// The approval form (or JSON client) as submitted.
    pub fn submission(
        action: &str,
        reason: Option<String>,
        calls: Vec<CallForm>,
        acknowledge_discard: bool,
    ) -> Result<Submission, AppError> {
        let action = match action {
            "approve_all" => Action::ApproveAll,
            "deny_all" => Action::DenyAll,
            "per_call" => Action::PerCall,
            other => {
                return Err(AppError::invalid(
                    "decision",
                    format!("`{other}` is not approve_all, deny_all or per_call"),
                ))
            }
        };
        if action == Action::PerCall && calls.is_empty() {
            return Err(AppError::invalid(
                "calls",
                "say what to do with each pending call",
            ));
        }
        at_most("reason", reason.as_deref(), MAX_REASON_CHARS)?;
        for (i, call) in calls.iter().enumerate() {
            at_most(
                &format!("calls[{i}].arguments"),
                call.arguments.as_deref(),
                MAX_EDIT_CHARS,
            )?;
            at_most(
                &format!("calls[{i}].reason"),
                call.reason.as_deref(),
                MAX_REASON_CHARS,
            )?;
            at_most(
                &format!("calls[{i}].result"),
                call.result.as_deref(),
                MAX_EDIT_CHARS,
            )?;
        }
        Ok(Submission {
            action,
            reason,
            calls: calls
                .into_iter()
                .map(|call| SubmittedCall {
                    call_id: call.call_id,
                    choice: call.choice,
                    arguments: call.arguments,
                    reason: call.reason,
                    result: call.result,
                    remember: None,
                    answer: FormAnswer {
                        answer: call.answer,
                        fields: call.fields,
                    },
                })
                .collect(),
            acknowledge_discard,
        })
    }

    /// A decision or an answer was claimed: the worker is woken, a browser goes back to the run.
    pub fn queued(state: &AppState, id: Uuid) -> crate::model::ResumeAccepted {
        state.queue.wake();
        if crate::server::wants_html() {
            leptos_axum::redirect(&format!("/runs/{id}"));
        }
        crate::model::ResumeAccepted {
            run_id: id.to_string(),
            status: crate::model::RunStatus::Queued,
        }
    }

    /// The approval rule each call of a form asks for ("always approve …"), in form order: its
    /// scope — this run, or the run's configuration (whether the decider may add it is the
    /// claim's to check) — and condition.
    pub fn rule_scopes(calls: &[CallForm]) -> Result<Vec<Option<Remember>>, AppError> {
        let mut scopes = Vec::with_capacity(calls.len());
        for (i, call) in calls.iter().enumerate() {
            let remember = call.remember.as_deref().map(str::trim).unwrap_or_default();
            let (effect, scope) = match remember.strip_prefix("never_") {
                Some(scope) => (RuleEffect::Deny, scope),
                None => (RuleEffect::Allow, remember),
            };
            let scope = match scope {
                "" => None,
                "run" => Some(RememberScope::Run),
                "configuration" => Some(RememberScope::Configuration),
                _ => {
                    return Err(AppError::invalid(
                        &format!("calls[{i}].remember"),
                        "run, configuration, never_run or never_configuration",
                    ))
                }
            };
            let remember = match scope {
                Some(scope) => Some(Remember {
                    scope,
                    effect,
                    conditions: crate::rules_api::ssr::conditions(
                        call.rule_argument.clone(),
                        call.rule_op.clone(),
                        call.rule_value.clone(),
                        &format!("calls[{i}].rule_"),
                    )?,
                }),
                None => None,
            };
            scopes.push(remember);
        }
        Ok(scopes)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn skills_are_blocks_with_a_name_line() {
            let skills =
                parse_skills("tone\nBe brief.\n---\nstyle\nUse lists.\nShort ones.").unwrap();
            assert_eq!(skills.len(), 2);
            assert_eq!(skills[1].name, "style");
            assert_eq!(skills[1].content, "Use lists.\nShort ones.");
            assert!(parse_skills("  ").unwrap().is_empty());
            let err = parse_skills("lonely name").unwrap_err();
            assert_eq!(err.field(), Some("skills"));
        }

        #[test]
        fn oversized_decision_texts_are_refused_naming_the_field() {
            let call = |arguments: String, reason: String| CallForm {
                call_id: "c1".into(),
                choice: None,
                arguments: Some(arguments),
                reason: Some(reason),
                result: None,
                ..CallForm::default()
            };
            let err = submission(
                "approve_all",
                None,
                vec![call("x".repeat(MAX_EDIT_CHARS + 1), String::new())],
                false,
            )
            .unwrap_err();
            assert_eq!(err.field(), Some("calls[0].arguments"));
            let err = submission(
                "deny_all",
                None,
                vec![call("{}".into(), "r".repeat(MAX_REASON_CHARS + 1))],
                false,
            )
            .unwrap_err();
            assert_eq!(err.field(), Some("calls[0].reason"));
            let err = submission(
                "deny_all",
                Some("r".repeat(MAX_REASON_CHARS + 1)),
                vec![],
                false,
            )
            .unwrap_err();
            assert_eq!(err.field(), Some("reason"));
            // The app's limit is the runtime's.
            assert_eq!(MAX_REASON_CHARS, nrllm_core::decision::MAX_REASON_CHARS);
        }

        #[test]
        fn forms_name_a_bad_button_and_an_empty_per_call_decision() {
            let err = submission("maybe", None, vec![], false).unwrap_err();
            assert_eq!(err.field(), Some("decision"));
            let err = submission("per_call", None, vec![], false).unwrap_err();
            assert_eq!(err.field(), Some("calls"));
            let call = CallForm {
                call_id: "c1".into(),
                choice: Some("deny".into()),
                arguments: None,
                reason: Some("no".into()),
                ..CallForm::default()
            };
            let ok = submission("per_call", Some("all".into()), vec![call], true).unwrap();
            assert_eq!(ok.action, Action::PerCall);
            assert!(ok.acknowledge_discard);
            assert_eq!(ok.calls[0].reason.as_deref(), Some("no"));
        }
    }
}
