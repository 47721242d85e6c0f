//! Tools that change the site's pages: update, create, publish, delete (each gated, each
//! previewed, each applied once by its effect key).

use super::common::*;
use super::messages::*;
use crate::site::{page_basis, Page, PageStatus, SiteStore};
use async_trait::async_trait;
use nrllm_core::tool::{Preview, Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;

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
