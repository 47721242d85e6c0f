//! The demo site: a small content store in the run database that the built-in tools read and
//! change, so an operator can see exactly what an approved write did. Every page change commits
//! together with its history row; messages go to an outbox and never leave the machine.

use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;
use sqlx::Row;

use nrllm_core::clock::now_ms;
use nrllm_core::failpoint;
use nrllm_store::db::{Backend, Database};

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

    fn parse(text: &str) -> PageStatus {
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
}

/// The demo site's pages, history and outbox.
#[derive(Debug, Clone)]
pub struct SiteStore {
    db: Database,
}

const SEED_PAGES: &[(&str, &str, &str, PageStatus)] = &[
    (
        "home",
        "Welcome",
        "Welcome to the Example Co. website. We make tools for careful teams.",
        PageStatus::Published,
    ),
    (
        "about",
        "About us",
        "Example Co. was founded in 2019 by three engineers who like reliable software.",
        PageStatus::Published,
    ),
    (
        "pricing",
        "Pricing",
        "Starter: free. Team: 12 EUR per seat and month. Enterprise: ask us.",
        PageStatus::Published,
    ),
    (
        "contact",
        "Contact",
        "Write to hello@example.com or call +49 341 000000 on weekdays.",
        PageStatus::Published,
    ),
    (
        "careers",
        "Careers",
        "We are hiring a Rust engineer and a technical writer.",
        PageStatus::Draft,
    ),
    (
        "changelog",
        "Changelog",
        "2026-11: approvals for side-effecting tools. 2026-10: run history.",
        PageStatus::Draft,
    ),
];

fn read_page(row: &AnyRow) -> Result<Page, sqlx::Error> {
    Ok(Page {
        slug: row.try_get("slug")?,
        title: row.try_get("title")?,
        body: row.try_get("body")?,
        status: PageStatus::parse(&row.try_get::<String, _>("status")?),
        updated_at_ms: row.try_get("updated_at_ms")?,
    })
}

impl SiteStore {
    /// The site in `db`.
    pub fn new(db: Database) -> SiteStore {
        SiteStore { db }
    }

    async fn begin(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        match self.db.backend() {
            Backend::Sqlite => self.db.pool().begin_with("BEGIN IMMEDIATE").await,
            Backend::Postgres => self.db.pool().begin().await,
        }
    }

    /// Seeds the demo pages the first time the database is used; later calls (also from other
    /// instances) change nothing, even after pages were deleted. Returns whether it seeded.
    pub async fn seed_once(&self) -> Result<bool, SiteError> {
        let mut tx = self.begin().await?;
        let marked = sqlx::query(
            "INSERT INTO site_meta (key, value) VALUES ('seeded', $1) ON CONFLICT (key) DO NOTHING",
        )
        .bind(now_ms().to_string())
        .execute(&mut *tx)
        .await?;
        if marked.rows_affected() == 0 {
            return Ok(false);
        }
        let now = now_ms();
        for (slug, title, body, status) in SEED_PAGES {
            sqlx::query("INSERT INTO site_page (slug, title, body, status, updated_at_ms) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (slug) DO NOTHING")
                .bind(*slug)
                .bind(*title)
                .bind(*body)
                .bind(status.as_str())
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Pages by slug, optionally only those with `status`.
    pub async fn list_pages(&self, status: Option<PageStatus>) -> Result<Vec<Page>, SiteError> {
        let rows = sqlx::query("SELECT slug, title, body, status, updated_at_ms FROM site_page WHERE ($1 IS NULL OR status = $1) ORDER BY slug")
            .bind(status.map(PageStatus::as_str))
            .fetch_all(self.db.pool())
            .await?;
        Ok(rows.iter().map(read_page).collect::<Result<_, _>>()?)
    }

    /// One page.
    pub async fn get_page(&self, slug: &str) -> Result<Page, SiteError> {
        let row = sqlx::query(
            "SELECT slug, title, body, status, updated_at_ms FROM site_page WHERE slug = $1",
        )
        .bind(slug)
        .fetch_optional(self.db.pool())
        .await?;
        match row {
            Some(row) => Ok(read_page(&row)?),
            None => Err(SiteError::NotFound(slug.to_owned())),
        }
    }

    /// Pages whose title or body contain every word of `query` (case-insensitive), best first:
    /// title matches outrank body matches.
    pub async fn search(&self, query: &str, limit: usize) -> Result<Vec<Page>, SiteError> {
        let words: Vec<String> = query
            .split_whitespace()
            .map(|w| {
                w.trim_matches(|c: char| !c.is_alphanumeric())
                    .to_lowercase()
            })
            .filter(|w| !w.is_empty())
            .collect();
        if words.is_empty() {
            return Ok(Vec::new());
        }
        let mut scored: Vec<(usize, Page)> = self
            .list_pages(None)
            .await?
            .into_iter()
            .filter_map(|page| {
                let title = page.title.to_lowercase();
                let body = page.body.to_lowercase();
                let mut score = 0;
                for word in &words {
                    let in_title = title.matches(word.as_str()).count();
                    let in_body = body.matches(word.as_str()).count();
                    if in_title + in_body == 0 {
                        return None;
                    }
                    score += 3 * in_title + in_body;
                }
                Some((score, page))
            })
            .collect();
        scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.slug.cmp(&b.1.slug)));
        Ok(scored
            .into_iter()
            .take(limit)
            .map(|(_, page)| page)
            .collect())
    }

    /// A page's changes, newest first.
    pub async fn history(&self, slug: &str, limit: u32) -> Result<Vec<HistoryEntry>, SiteError> {
        let rows = sqlx::query(
            "SELECT id, slug, action, actor, run_id, before_json, after_json, created_at_ms FROM site_page_history \
             WHERE slug = $1 ORDER BY id DESC LIMIT $2",
        )
        .bind(slug)
        .bind(i64::from(limit))
        .fetch_all(self.db.pool())
        .await?;
        rows.iter()
            .map(|row| {
                let page = |column: &str| -> Result<Option<Page>, sqlx::Error> {
                    let text: Option<String> = row.try_get(column)?;
                    Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
                };
                Ok(HistoryEntry {
                    id: row.try_get("id")?,
                    slug: row.try_get("slug")?,
                    action: row.try_get("action")?,
                    actor: row.try_get("actor")?,
                    run_id: row.try_get("run_id")?,
                    before: page("before_json")?,
                    after: page("after_json")?,
                    created_at_ms: row.try_get("created_at_ms")?,
                })
            })
            .collect()
    }

    /// Counts of pages, changes and messages.
    pub async fn stats(&self) -> Result<SiteStats, SiteError> {
        let count = |sql: &'static str| async move {
            let (n,): (i64,) = sqlx::query_as(sql).fetch_one(self.db.pool()).await?;
            Ok::<i64, sqlx::Error>(n)
        };
        Ok(SiteStats {
            pages: count("SELECT COUNT(*) FROM site_page").await?,
            published: count("SELECT COUNT(*) FROM site_page WHERE status = 'published'").await?,
            drafts: count("SELECT COUNT(*) FROM site_page WHERE status = 'draft'").await?,
            changes: count("SELECT COUNT(*) FROM site_page_history").await?,
            messages: count("SELECT COUNT(*) FROM site_outbox").await?,
        })
    }

    /// Messages, newest first.
    pub async fn outbox(&self, limit: u32) -> Result<Vec<OutboxMessage>, SiteError> {
        let rows = sqlx::query(
            "SELECT id, recipient, subject, body, actor, run_id, created_at_ms FROM site_outbox ORDER BY id DESC LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(self.db.pool())
        .await?;
        rows.iter()
            .map(|row| {
                Ok(OutboxMessage {
                    id: row.try_get("id")?,
                    recipient: row.try_get("recipient")?,
                    subject: row.try_get("subject")?,
                    body: row.try_get("body")?,
                    actor: row.try_get("actor")?,
                    run_id: row.try_get("run_id")?,
                    created_at_ms: row.try_get("created_at_ms")?,
                })
            })
            .collect()
    }

    /// Refuses, in the change's transaction, an author whose run is no longer at the version the
    /// applying instance holds it at (a takeover moved it on). On Postgres the run's row stays
    /// locked until the change commits, so a takeover waits for it and then finds its effect.
    async fn still_holds(
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        backend: Backend,
        author: &Author,
    ) -> Result<(), SiteError> {
        let (Some(run), Some(epoch)) = (author.run_id.as_deref(), author.lease_epoch) else {
            return Ok(());
        };
        let sql = match backend {
            Backend::Postgres => {
                "SELECT version FROM agent_run WHERE id = $1 AND status = $2 FOR UPDATE"
            }
            // Writers are serialized already (BEGIN IMMEDIATE).
            Backend::Sqlite => "SELECT version FROM agent_run WHERE id = $1 AND status = $2",
        };
        let version: Option<i64> = sqlx::query_scalar(sql)
            .bind(run)
            .bind(nrllm_core::run_store::RunStatus::Running.as_str())
            .fetch_optional(&mut **tx)
            .await?;
        match version {
            Some(version) if version == epoch => Ok(()),
            _ => Err(SiteError::LeaseLost),
        }
    }

    /// The result of the effect applied under `key` before, if one was.
    async fn applied_before(
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        key: Option<&str>,
    ) -> Result<Option<String>, SiteError> {
        let Some(key) = key else {
            return Ok(None);
        };
        let row = sqlx::query("SELECT result FROM site_effect WHERE effect_key = $1")
            .bind(key)
            .fetch_optional(&mut **tx)
            .await?;
        Ok(row.map(|row| row.try_get("result")).transpose()?)
    }

    /// Records that the effect under `key` was applied, with its result, in its transaction.
    async fn record_effect(
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        key: Option<&str>,
        result: &str,
    ) -> Result<(), SiteError> {
        if let Some(key) = key {
            sqlx::query(
                "INSERT INTO site_effect (effect_key, result, created_at_ms) VALUES ($1, $2, $3)",
            )
            .bind(key)
            .bind(result)
            .bind(now_ms())
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    /// Applies `change` to the page `slug` (or creates it) and records the history row, in one
    /// transaction. `change` gets the current page (if any) and returns the new one (or `None`
    /// to delete); `describe` says what happened, from the page before and after. Under the
    /// author's effect key the change is applied at most once: the same key again returns the
    /// first result and changes nothing.
    async fn change_page(
        &self,
        slug: &str,
        action: &str,
        author: &Author,
        change: impl FnOnce(Option<Page>) -> Result<Option<Page>, SiteError>,
        describe: impl FnOnce(&Option<Page>, &Option<Page>) -> String,
    ) -> Result<String, SiteError> {
        let key = author.effect_key.as_deref();
        let mut tx = self.begin().await?;
        Self::still_holds(&mut tx, self.db.backend(), author).await?;
        if let Some(result) = Self::applied_before(&mut tx, key).await? {
            return Ok(result);
        }
        let row = sqlx::query(
            "SELECT slug, title, body, status, updated_at_ms FROM site_page WHERE slug = $1",
        )
        .bind(slug)
        .fetch_optional(&mut *tx)
        .await?;
        let before = row.as_ref().map(read_page).transpose()?;
        // The operator approved a diff of the page as it was then; a page that changed since is
        // not touched. (A basis of another target, after an edit of the slug, says nothing here.)
        if let Some(approved) = &author.approved_basis {
            let current = page_basis(slug, before.as_ref());
            let same_target = approved.split('@').next() == current.split('@').next();
            if same_target && *approved != current {
                return Err(SiteError::Changed(slug.to_owned()));
            }
        }
        let after = change(before.clone())?;
        match (&before, &after) {
            (None, Some(page)) => {
                sqlx::query("INSERT INTO site_page (slug, title, body, status, updated_at_ms) VALUES ($1, $2, $3, $4, $5)")
                    .bind(&page.slug)
                    .bind(&page.title)
                    .bind(&page.body)
                    .bind(page.status.as_str())
                    .bind(page.updated_at_ms)
                    .execute(&mut *tx)
                    .await?;
            }
            (Some(_), Some(page)) => {
                sqlx::query("UPDATE site_page SET title = $1, body = $2, status = $3, updated_at_ms = $4 WHERE slug = $5")
                    .bind(&page.title)
                    .bind(&page.body)
                    .bind(page.status.as_str())
                    .bind(page.updated_at_ms)
                    .bind(&page.slug)
                    .execute(&mut *tx)
                    .await?;
            }
            (Some(_), None) => {
                sqlx::query("DELETE FROM site_page WHERE slug = $1")
                    .bind(slug)
                    .execute(&mut *tx)
                    .await?;
            }
            (None, None) => return Err(SiteError::NotFound(slug.to_owned())),
        }
        let json = |page: &Option<Page>| page.as_ref().and_then(|p| serde_json::to_string(p).ok());
        sqlx::query(
            "INSERT INTO site_page_history (slug, action, actor, run_id, before_json, after_json, created_at_ms, effect_key) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(slug)
        .bind(action)
        .bind(&author.actor)
        .bind(author.run_id.as_deref())
        .bind(json(&before))
        .bind(json(&after))
        .bind(now_ms())
        .bind(key)
        .execute(&mut *tx)
        .await?;
        let result = describe(&before, &after);
        Self::record_effect(&mut tx, key, &result).await?;
        tx.commit().await?;
        failpoint::reach("in_tool_after_effect");
        Ok(result)
    }

    /// Creates a draft page; `describe` says so, from the new page.
    pub async fn create_page(
        &self,
        (slug, title, body): (&str, &str, &str),
        author: &Author,
        describe: impl FnOnce(&Page) -> String,
    ) -> Result<String, SiteError> {
        self.change_page(
            slug,
            "create",
            author,
            |before| match before {
                Some(_) => Err(SiteError::AlreadyExists(slug.to_owned())),
                None => Ok(Some(Page {
                    slug: slug.to_owned(),
                    title: title.to_owned(),
                    body: body.to_owned(),
                    status: PageStatus::Draft,
                    updated_at_ms: now_ms(),
                })),
            },
            |_, after| after.as_ref().map(describe).unwrap_or_default(),
        )
        .await
    }

    /// Changes a page's title and/or body; `describe` says how, from the page before and after.
    pub async fn update_page(
        &self,
        (slug, title, body): (&str, Option<&str>, Option<&str>),
        author: &Author,
        describe: impl FnOnce(&Page, &Page) -> String,
    ) -> Result<String, SiteError> {
        self.change_page(
            slug,
            "update",
            author,
            |before| {
                let mut page = before.ok_or_else(|| SiteError::NotFound(slug.to_owned()))?;
                if let Some(title) = title {
                    page.title = title.to_owned();
                }
                if let Some(body) = body {
                    page.body = body.to_owned();
                }
                page.updated_at_ms = now_ms();
                Ok(Some(page))
            },
            |before, after| match (before, after) {
                (Some(before), Some(after)) => describe(before, after),
                _ => String::new(),
            },
        )
        .await
    }

    /// Sets a page's status; `describe` says how, from the page before and after.
    pub async fn set_status(
        &self,
        slug: &str,
        status: PageStatus,
        author: &Author,
        describe: impl FnOnce(&Page, &Page) -> String,
    ) -> Result<String, SiteError> {
        let action = match status {
            PageStatus::Published => "publish",
            PageStatus::Draft => "unpublish",
        };
        self.change_page(
            slug,
            action,
            author,
            |before| {
                let mut page = before.ok_or_else(|| SiteError::NotFound(slug.to_owned()))?;
                page.status = status;
                page.updated_at_ms = now_ms();
                Ok(Some(page))
            },
            |before, after| match (before, after) {
                (Some(before), Some(after)) => describe(before, after),
                _ => String::new(),
            },
        )
        .await
    }

    /// Deletes a page; `describe` says so, from what it was.
    pub async fn delete_page(
        &self,
        slug: &str,
        author: &Author,
        describe: impl FnOnce(&Page) -> String,
    ) -> Result<String, SiteError> {
        self.change_page(
            slug,
            "delete",
            author,
            |before| match before {
                Some(_) => Ok(None),
                None => Err(SiteError::NotFound(slug.to_owned())),
            },
            |before, _| before.as_ref().map(describe).unwrap_or_default(),
        )
        .await
    }

    /// Puts a message in the outbox; `describe` says so, from the message. Under the author's
    /// effect key the message is put at most once.
    pub async fn send_message(
        &self,
        (recipient, subject, body): (&str, &str, &str),
        author: &Author,
        describe: impl FnOnce(&OutboxMessage) -> String,
    ) -> Result<String, SiteError> {
        let key = author.effect_key.as_deref();
        let mut tx = self.begin().await?;
        Self::still_holds(&mut tx, self.db.backend(), author).await?;
        if let Some(result) = Self::applied_before(&mut tx, key).await? {
            return Ok(result);
        }
        let now = now_ms();
        let row = sqlx::query(
            "INSERT INTO site_outbox (recipient, subject, body, actor, run_id, created_at_ms, effect_key) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        )
        .bind(recipient)
        .bind(subject)
        .bind(body)
        .bind(&author.actor)
        .bind(author.run_id.as_deref())
        .bind(now)
        .bind(key)
        .fetch_one(&mut *tx)
        .await?;
        let message = OutboxMessage {
            id: row.try_get("id")?,
            recipient: recipient.to_owned(),
            subject: subject.to_owned(),
            body: body.to_owned(),
            actor: author.actor.clone(),
            run_id: author.run_id.clone(),
            created_at_ms: now,
        };
        let result = describe(&message);
        Self::record_effect(&mut tx, key, &result).await?;
        tx.commit().await?;
        failpoint::reach("in_tool_after_effect");
        Ok(result)
    }
}
