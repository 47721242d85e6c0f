//! What the demo site holds: pages, their history, the outbox, and what goes wrong.

use serde::{Deserialize, Serialize};

/// Whether a page is visible on the site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PageStatus {
    Draft,
    Published,
}

impl PageStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            PageStatus::Draft => "draft",
            PageStatus::Published => "published",
        }
    }

    pub(super) fn parse(text: &str) -> PageStatus {
        if text == "published" {
            PageStatus::Published
        } else {
            PageStatus::Draft
        }
    }
}

/// One page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    pub slug: String,
    pub title: String,
    pub body: String,
    pub status: PageStatus,
    pub updated_at_ms: i64,
}

/// One recorded change of a page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub id: i64,
    pub slug: String,
    pub action: String,
    pub actor: String,
    pub run_id: Option<String>,
    pub before: Option<Page>,
    pub after: Option<Page>,
    pub created_at_ms: i64,
}

/// One message in the outbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxMessage {
    pub id: i64,
    pub recipient: String,
    pub subject: String,
    pub body: String,
    pub actor: String,
    pub run_id: Option<String>,
    pub created_at_ms: i64,
}

/// Counts for `site_stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteStats {
    pub pages: i64,
    pub published: i64,
    pub drafts: i64,
    pub changes: i64,
    pub messages: i64,
}

/// Who makes a change: the operator (and the run) it is recorded against, and what they saw.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Author {
    pub actor: String,
    pub run_id: Option<String>,
    /// The page's [`page_basis`] when the operator approved the change. If the page has changed
    /// since, the change is refused ([`SiteError::Changed`]) and nothing is written.
    pub approved_basis: Option<String>,
    /// The key the change is applied under (an approved call's effect key): the same key again
    /// changes nothing and returns the first result.
    pub effect_key: Option<String>,
    /// The run's version while the instance applying the change holds it (its lease's epoch):
    /// if the run has moved on (another instance took it over), nothing is written
    /// ([`SiteError::LeaseLost`]). Checked in the change's own transaction.
    pub lease_epoch: Option<i64>,
}

/// The version of a page that a preview was computed from: its slug and a hash of its content
/// (`absent` when there is no such page). Equal bases mean the preview's diff is still exact.
pub fn page_basis(slug: &str, page: Option<&Page>) -> String {
    match page {
        None => format!("page:{slug}@absent"),
        Some(page) => {
            let parts = [page.title.as_str(), &page.body, page.status.as_str()];
            let hash = nrllm_core::hash::short_hash(parts.iter().map(|p| p.as_bytes()), 8);
            format!("page:{slug}@{hash}")
        }
    }
}

/// A failed site operation. `NotFound` and `AlreadyExists` are answers the model may read.
#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    #[error("no page with slug `{0}`")]
    NotFound(String),
    #[error("a page with slug `{0}` already exists")]
    AlreadyExists(String),
    #[error("the page `{0}` changed after the operator approved this change; nothing was written")]
    Changed(String),
    /// The instance applying the change no longer drives the run: another one took it over.
    #[error(
        "this server no longer drives the run (another instance took it over); nothing was written"
    )]
    LeaseLost,
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("database error: {0}")]
    Store(#[from] nrllm_core::run_store::StoreError),
}
