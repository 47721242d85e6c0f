//! The built-in tools. Ten read-only tools inspect the demo site, the clock, arithmetic and the
//! run history; five side-effecting tools change the site or write to the outbox, and each of those
//! waits for an operator's approval and offers a preview of its effect.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::site::{page_basis, Author, Page, PageStatus, SiteError, SiteStore};
use nrllm_core::registry::ToolRegistry;
use nrllm_core::run_store::{RunFilter, RunStatus, RunStore};
use nrllm_core::tool::{Preview, Tool, ToolContext, ToolError};

/// The tool group of the site's pages and outbox.
pub const GROUP_SITE: &str = "site";
/// The tool group of clock and arithmetic.
pub const GROUP_SYSTEM: &str = "system";
/// The tool group of the run history.
pub const GROUP_RUNS: &str = "runs";

/// Registers every built-in tool.
pub fn builtin_registry(site: SiteStore, runs: Arc<dyn RunStore>) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    let results = [
        registry.register(ListPages(site.clone())).map(|_| ()),
        registry.register(GetPage(site.clone())).map(|_| ()),
        registry.register(SearchPages(site.clone())).map(|_| ()),
        registry.register(PageHistory(site.clone())).map(|_| ()),
        registry.register(SiteStatsTool(site.clone())).map(|_| ()),
        registry.register(ListOutbox(site.clone())).map(|_| ()),
        registry.register(CurrentTime).map(|_| ()),
        registry.register(Calculate).map(|_| ()),
        registry.register(ListRuns(Arc::clone(&runs))).map(|_| ()),
        registry.register(GetRunSummary(runs)).map(|_| ()),
        registry.register(UpdatePage(site.clone())).map(|_| ()),
        registry.register(CreatePage(site.clone())).map(|_| ()),
        registry.register(PublishPage(site.clone())).map(|_| ()),
        registry.register(DeletePage(site.clone())).map(|_| ()),
        registry.register(SendMessage(site)).map(|_| ()),
        registry
            .register(nrllm_core::question::AskOperator)
            .map(|_| ()),
    ];
    // The names above are distinct; a clash would be a programming error caught by the tests.
    debug_assert!(results.iter().all(Result::is_ok));
    registry
}

fn site_error(err: SiteError) -> ToolError {
    match err {
        SiteError::NotFound(_)
        | SiteError::AlreadyExists(_)
        | SiteError::Changed(_)
        | SiteError::LeaseLost => ToolError::Refused(err.to_string()),
        SiteError::Database(cause) => ToolError::internal(cause),
    }
}

fn author(ctx: &ToolContext) -> Author {
    Author {
        actor: ctx.actor.clone(),
        run_id: (!ctx.run_id.is_empty()).then(|| ctx.run_id.clone()),
        approved_basis: ctx.approved_basis.clone(),
        effect_key: ctx.effect_key.clone(),
        lease_epoch: ctx.lease_epoch,
    }
}

fn page_json(page: &Page) -> serde_json::Value {
    json!({"slug": page.slug, "title": page.title, "status": page.status, "body": page.body})
}

/// A page as shown in a before/after preview.
fn page_text(page: &Page) -> String {
    format!(
        "title: {}\nstatus: {}\n\n{}",
        page.title,
        page.status.as_str(),
        page.body
    )
}

/// Arguments naming one page.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlugArgs {
    /// The page's slug: lowercase letters, digits and dashes.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9-]{0,63}$"))]
    pub slug: String,
}

/// Arguments of `list_pages`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListPagesArgs {
    /// Only pages with this status.
    #[serde(default)]
    pub status: Option<PageStatus>,
}

/// Lists the site's pages.
pub struct ListPages(pub SiteStore);

#[async_trait]
impl Tool for ListPages {
    type Args = ListPagesArgs;
    const NAME: &'static str = "list_pages";
    const DESCRIPTION: &'static str =
        "List the site's pages (slug, title, status), optionally only drafts or published pages.";
    const GROUP: &'static str = GROUP_SITE;

    async fn call(&self, args: ListPagesArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let pages = self.0.list_pages(args.status).await.map_err(site_error)?;
        let list: Vec<_> = pages
            .iter()
            .map(|p| json!({"slug": p.slug, "title": p.title, "status": p.status}))
            .collect();
        Ok(json!({ "pages": list }).to_string())
    }
}

/// Reads one page.
pub struct GetPage(pub SiteStore);

#[async_trait]
impl Tool for GetPage {
    type Args = SlugArgs;
    const NAME: &'static str = "get_page";
    const DESCRIPTION: &'static str = "Read one page: title, status and body.";
    const GROUP: &'static str = GROUP_SITE;

    async fn call(&self, args: SlugArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let page = self.0.get_page(&args.slug).await.map_err(site_error)?;
        Ok(page_json(&page).to_string())
    }
}

/// Arguments of `search_pages`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// Words to look for in titles and bodies; every word must occur.
    #[schemars(length(min = 1, max = 200))]
    pub query: String,
    /// At most this many pages (default 5).
    #[serde(default)]
    #[schemars(range(min = 1, max = 50))]
    pub limit: Option<u32>,
}

/// Full-text search over titles and bodies.
pub struct SearchPages(pub SiteStore);

#[async_trait]
impl Tool for SearchPages {
    type Args = SearchArgs;
    const NAME: &'static str = "search_pages";
    const DESCRIPTION: &'static str =
        "Search the pages' titles and bodies for words; best matches first.";
    const GROUP: &'static str = GROUP_SITE;

    async fn call(&self, args: SearchArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let limit = args.limit.unwrap_or(5) as usize;
        let pages = self
            .0
            .search(&args.query, limit)
            .await
            .map_err(site_error)?;
        let hits: Vec<_> = pages
            .iter()
            .map(|p| json!({"slug": p.slug, "title": p.title, "status": p.status}))
            .collect();
        Ok(json!({ "query": args.query, "matches": hits }).to_string())
    }
}

/// Arguments of `page_history`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryArgs {
    /// The page's slug.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9-]{0,63}$"))]
    pub slug: String,
    /// At most this many changes (default 10), newest first.
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<u32>,
}

/// A page's change history.
pub struct PageHistory(pub SiteStore);

#[async_trait]
impl Tool for PageHistory {
    type Args = HistoryArgs;
    const NAME: &'static str = "page_history";
    const DESCRIPTION: &'static str =
        "Show who changed a page, when, in which run, and what changed (newest first).";
    const GROUP: &'static str = GROUP_SITE;

    async fn call(&self, args: HistoryArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let entries = self
            .0
            .history(&args.slug, args.limit.unwrap_or(10))
            .await
            .map_err(site_error)?;
        let changes: Vec<_> = entries
            .iter()
            .map(|e| {
                json!({
                    "action": e.action, "actor": e.actor, "run_id": e.run_id, "at_ms": e.created_at_ms,
                    "title_before": e.before.as_ref().map(|p| &p.title),
                    "title_after": e.after.as_ref().map(|p| &p.title),
                })
            })
            .collect();
        Ok(json!({ "slug": args.slug, "changes": changes }).to_string())
    }
}

/// Arguments of tools that take none.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// Counts of pages, changes and messages.
pub struct SiteStatsTool(pub SiteStore);

#[async_trait]
impl Tool for SiteStatsTool {
    type Args = NoArgs;
    const NAME: &'static str = "site_stats";
    const DESCRIPTION: &'static str =
        "Count the site's pages (published and drafts), recorded changes and outbox messages.";
    const GROUP: &'static str = GROUP_SITE;

    async fn call(&self, _args: NoArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let stats = self.0.stats().await.map_err(site_error)?;
        serde_json::to_string(&stats).map_err(ToolError::internal)
    }
}

/// Arguments with only a limit.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitArgs {
    /// At most this many items (default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<u32>,
}

/// The outbox's messages.
pub struct ListOutbox(pub SiteStore);

#[async_trait]
impl Tool for ListOutbox {
    type Args = LimitArgs;
    const NAME: &'static str = "list_outbox";
    const DESCRIPTION: &'static str = "List the messages in the outbox, newest first.";
    const GROUP: &'static str = GROUP_SITE;

    async fn call(&self, args: LimitArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let messages = self
            .0
            .outbox(args.limit.unwrap_or(10))
            .await
            .map_err(site_error)?;
        let list: Vec<_> = messages
            .iter()
            .map(|m| json!({"to": m.recipient, "subject": m.subject, "body": m.body, "run_id": m.run_id}))
            .collect();
        Ok(json!({ "messages": list }).to_string())
    }
}

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
                created_before_ms: None,
                limit: args.limit.unwrap_or(10),
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

/// Arguments of `update_page`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdatePageArgs {
    /// The page's slug.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9-]{0,63}$"))]
    pub slug: String,
    /// The new title, if it changes.
    #[serde(default)]
    #[schemars(length(min = 1, max = 200))]
    pub title: Option<String>,
    /// The new body, if it changes.
    #[serde(default)]
    #[schemars(length(max = 20000))]
    pub body: Option<String>,
}

/// Changes a page's title and/or body.
pub struct UpdatePage(pub SiteStore);

#[async_trait]
impl Tool for UpdatePage {
    type Args = UpdatePageArgs;
    const NAME: &'static str = "update_page";
    const DESCRIPTION: &'static str = "Change a page's title and/or body.";
    const GROUP: &'static str = GROUP_SITE;
    const REQUIRES_APPROVAL: bool = true;
    // The site applies each keyed change at most once (in the change's own transaction).
    const IDEMPOTENT_BY_KEY: bool = true;

    async fn call(&self, args: UpdatePageArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        if args.title.is_none() && args.body.is_none() {
            return Err(ToolError::InvalidArguments {
                field: "title".into(),
                message: "give a new title or a new body".into(),
            });
        }
        self.0
            .update_page(
                (&args.slug, args.title.as_deref(), args.body.as_deref()),
                &author(ctx),
                |before, after| {
                    let mut changes = Vec::new();
                    if before.title != after.title {
                        changes.push(format!("title \"{}\" → \"{}\"", before.title, after.title));
                    }
                    if before.body != after.body {
                        changes.push(format!(
                            "body changed ({} → {} characters)",
                            before.body.chars().count(),
                            after.body.chars().count()
                        ));
                    }
                    if changes.is_empty() {
                        changes.push("nothing changed".into());
                    }
                    format!("Updated page `{}`: {}.", after.slug, changes.join("; "))
                },
            )
            .await
            .map_err(site_error)
    }

    async fn preview(
        &self,
        args: UpdatePageArgs,
        _ctx: &ToolContext,
    ) -> Result<Option<Preview>, ToolError> {
        let before = self.0.get_page(&args.slug).await.map_err(site_error)?;
        let mut after = before.clone();
        if let Some(title) = args.title {
            after.title = title;
        }
        if let Some(body) = args.body {
            after.body = body;
        }
        Ok(Some(
            Preview::change(
                format!("page {}", before.slug),
                page_text(&before),
                page_text(&after),
            )
            .with_basis(page_basis(&before.slug, Some(&before))),
        ))
    }
}

/// Arguments of `create_page`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePageArgs {
    /// The new page's slug: lowercase letters, digits and dashes.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9-]{0,63}$"))]
    pub slug: String,
    /// The title.
    #[schemars(length(min = 1, max = 200))]
    pub title: String,
    /// The body text.
    #[serde(default)]
    #[schemars(length(max = 20000))]
    pub body: String,
}

/// Creates a draft page.
pub struct CreatePage(pub SiteStore);

#[async_trait]
impl Tool for CreatePage {
    type Args = CreatePageArgs;
    const NAME: &'static str = "create_page";
    const DESCRIPTION: &'static str = "Create a new draft page.";
    const GROUP: &'static str = GROUP_SITE;
    // A scratch page (slug `scratch-…`) is the agent's own notepad and is created at once; any
    // other page waits for approval.
    const APPROVAL_PER_CALL: bool = true;
    // The site applies each keyed change at most once (in the change's own transaction).
    const IDEMPOTENT_BY_KEY: bool = true;

    fn needs_approval(&self, args: &CreatePageArgs) -> bool {
        !args.slug.starts_with(SCRATCH_PREFIX)
    }

    async fn call(&self, args: CreatePageArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        self.0
            .create_page(
                (&args.slug, &args.title, &args.body),
                &author(ctx),
                |page| {
                    format!(
                        "Created draft page `{}` titled \"{}\".",
                        page.slug, page.title
                    )
                },
            )
            .await
            .map_err(site_error)
    }

    async fn preview(
        &self,
        args: CreatePageArgs,
        _ctx: &ToolContext,
    ) -> Result<Option<Preview>, ToolError> {
        let after = Page {
            slug: args.slug,
            title: args.title,
            body: args.body,
            status: PageStatus::Draft,
            updated_at_ms: 0,
        };
        Ok(Some(
            Preview::change(format!("new page {}", after.slug), "", page_text(&after))
                .with_basis(page_basis(&after.slug, None)),
        ))
    }
}

/// Publishes a page.
pub struct PublishPage(pub SiteStore);

#[async_trait]
impl Tool for PublishPage {
    type Args = SlugArgs;
    const NAME: &'static str = "publish_page";
    const DESCRIPTION: &'static str = "Publish a page so that visitors see it.";
    const GROUP: &'static str = GROUP_SITE;
    const REQUIRES_APPROVAL: bool = true;
    // The site applies each keyed change at most once (in the change's own transaction).
    const IDEMPOTENT_BY_KEY: bool = true;

    async fn call(&self, args: SlugArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        self.0
            .set_status(
                &args.slug,
                PageStatus::Published,
                &author(ctx),
                |before, after| match before.status {
                    PageStatus::Published => {
                        format!("Page `{}` was already published.", after.slug)
                    }
                    PageStatus::Draft => {
                        format!("Published page `{}` (\"{}\").", after.slug, after.title)
                    }
                },
            )
            .await
            .map_err(site_error)
    }

    async fn preview(
        &self,
        args: SlugArgs,
        _ctx: &ToolContext,
    ) -> Result<Option<Preview>, ToolError> {
        let before = self.0.get_page(&args.slug).await.map_err(site_error)?;
        let after = Page {
            status: PageStatus::Published,
            ..before.clone()
        };
        Ok(Some(
            Preview::change(
                format!("page {}", before.slug),
                page_text(&before),
                page_text(&after),
            )
            .with_basis(page_basis(&before.slug, Some(&before))),
        ))
    }
}

/// Deletes a page.
pub struct DeletePage(pub SiteStore);

#[async_trait]
impl Tool for DeletePage {
    type Args = SlugArgs;
    const NAME: &'static str = "delete_page";
    const DESCRIPTION: &'static str = "Delete a page (its history is kept).";
    const GROUP: &'static str = GROUP_SITE;
    const REQUIRES_APPROVAL: bool = true;
    // The site applies each keyed change at most once (in the change's own transaction).
    const IDEMPOTENT_BY_KEY: bool = true;

    async fn call(&self, args: SlugArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        self.0
            .delete_page(&args.slug, &author(ctx), |page| {
                format!("Deleted page `{}` (\"{}\").", page.slug, page.title)
            })
            .await
            .map_err(site_error)
    }

    async fn preview(
        &self,
        args: SlugArgs,
        _ctx: &ToolContext,
    ) -> Result<Option<Preview>, ToolError> {
        let before = self.0.get_page(&args.slug).await.map_err(site_error)?;
        Ok(Some(
            Preview::change(format!("page {}", before.slug), page_text(&before), "")
                .with_basis(page_basis(&before.slug, Some(&before))),
        ))
    }
}

/// The team's own mail domain: `send_message` to an address there needs no approval.
pub const INTERNAL_DOMAIN: &str = "internal.example";

/// Slugs of scratch pages begin with this: `create_page` of one needs no approval.
pub const SCRATCH_PREFIX: &str = "scratch-";

/// Whether `to` is one address at [`INTERNAL_DOMAIN`] (case ignored; nothing else around it):
/// exactly one `@`, a local part of letters, digits and `. _ + -`, and no space, control
/// character, list separator or bracket anywhere — `a@evil.com@internal.example` and an address
/// with a line break in it are not internal.
pub fn is_internal_address(to: &str) -> bool {
    let to = to.trim();
    let mut parts = to.split('@');
    let (Some(local), Some(domain), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    !local.is_empty()
        && local
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'))
        && domain.eq_ignore_ascii_case(INTERNAL_DOMAIN)
}

/// Arguments of `send_message`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessageArgs {
    /// Who the message is for (a name or an address).
    #[schemars(length(min = 1, max = 200))]
    pub to: String,
    /// The subject line.
    #[schemars(length(min = 1, max = 200))]
    pub subject: String,
    /// The message.
    #[schemars(length(min = 1, max = 5000))]
    pub body: String,
}

/// A message as the operator sees it before it is sent.
fn message_text(args: &SendMessageArgs) -> String {
    format!(
        "To: {}\nSubject: {}\n\n{}",
        args.to, args.subject, args.body
    )
}

/// The basis of a message preview: a hash of the text the operator read.
fn message_basis(text: &str) -> String {
    format!(
        "message:{}",
        nrllm_core::hash::short_hash([text.as_bytes()], 8)
    )
}

/// Writes a message to the outbox (nothing leaves the machine).
pub struct SendMessage(pub SiteStore);

#[async_trait]
impl Tool for SendMessage {
    type Args = SendMessageArgs;
    const NAME: &'static str = "send_message";
    const DESCRIPTION: &'static str = "Send a message (it is put in the outbox).";
    const GROUP: &'static str = GROUP_SITE;
    // A message to the team's own domain goes out at once; anyone else's waits for approval.
    const APPROVAL_PER_CALL: bool = true;
    // The site applies each keyed change at most once (in the change's own transaction).
    const IDEMPOTENT_BY_KEY: bool = true;

    fn needs_approval(&self, args: &SendMessageArgs) -> bool {
        !is_internal_address(&args.to)
    }

    async fn call(&self, args: SendMessageArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let approved = ctx.approved_basis.as_deref();
        if approved.is_some_and(|basis| basis.starts_with("message:"))
            && approved != Some(message_basis(&message_text(&args)).as_str())
        {
            return Err(ToolError::Refused(
                "the message differs from the one the operator approved; nothing was sent".into(),
            ));
        }
        self.0
            .send_message(
                (&args.to, &args.subject, &args.body),
                &author(ctx),
                |message| {
                    format!(
                        "Message #{} to {} queued in the outbox: \"{}\".",
                        message.id, message.recipient, message.subject
                    )
                },
            )
            .await
            .map_err(site_error)
    }

    async fn preview(
        &self,
        args: SendMessageArgs,
        _ctx: &ToolContext,
    ) -> Result<Option<Preview>, ToolError> {
        let text = message_text(&args);
        let basis = message_basis(&text);
        Ok(Some(Preview::text(text).with_basis(basis)))
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
