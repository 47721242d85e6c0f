//! Tools that read the site's pages (no effects).

use super::common::*;
use crate::site::{PageStatus, SiteStore};
use async_trait::async_trait;
use nrllm_core::tool::{Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

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
