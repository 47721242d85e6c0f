//! What the tools share: arguments, a page as JSON or text, who acts, the error a site store
//! failure becomes.

use crate::site::{Author, Page, SiteError};
use nrllm_core::tool::{ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

pub(super) fn site_error(err: SiteError) -> ToolError {
    match err {
        SiteError::NotFound(_)
        | SiteError::AlreadyExists(_)
        | SiteError::Changed(_)
        | SiteError::LeaseLost => ToolError::Refused(err.to_string()),
        SiteError::Database(cause) => ToolError::internal(cause),
        SiteError::Store(cause) => ToolError::internal(cause),
    }
}

pub(super) fn author(ctx: &ToolContext) -> Author {
    Author {
        actor: ctx.actor.clone(),
        run_id: (!ctx.run_id.is_empty()).then(|| ctx.run_id.clone()),
        approved_basis: ctx.approved_basis.clone(),
        effect_key: ctx.effect_key.clone(),
        lease_epoch: ctx.lease_epoch,
    }
}

pub(super) fn page_json(page: &Page) -> serde_json::Value {
    json!({"slug": page.slug, "title": page.title, "status": page.status, "body": page.body})
}

/// A page as shown in a before/after preview.
pub(super) fn page_text(page: &Page) -> String {
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

/// Arguments of tools that take none.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// Arguments with only a limit.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitArgs {
    /// At most this many items (default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<u32>,
}

/// The tool group of the site's pages and outbox.
pub const GROUP_SITE: &str = "site";
/// The tool group of clock and arithmetic.
pub const GROUP_SYSTEM: &str = "system";
/// The tool group of the run history.
pub const GROUP_RUNS: &str = "runs";
