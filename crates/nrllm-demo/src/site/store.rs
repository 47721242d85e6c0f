//! The demo site in the run database: seeded once, read by the read-only tools.

use super::records::*;
use nrllm_core::clock::now_ms;
use nrllm_core::run_store::StoreError;
use nrllm_store::db::Database;
use nrllm_store::{Cells, Statement};
use sqlx::Row;

/// The demo site's pages, history and outbox.
#[derive(Debug, Clone)]
pub struct SiteStore {
    pub(super) db: Database,
}

pub(super) const SEED_PAGES: &[(&str, &str, &str, PageStatus)] = &[
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

pub(super) fn read_page(row: &impl Cells) -> Result<Page, StoreError> {
    Ok(Page {
        slug: row.required_text("slug")?,
        title: row.required_text("title")?,
        body: row.required_text("body")?,
        status: PageStatus::parse(&row.required_text("status")?),
        updated_at_ms: row.required_int("updated_at_ms")?,
    })
}

impl SiteStore {
    /// The site in `db`.
    pub fn new(db: Database) -> SiteStore {
        SiteStore { db }
    }

    /// Seeds the demo pages the first time the database is used; later calls (also from other
    /// instances) change nothing, even after pages were deleted. Returns whether it seeded.
    pub async fn seed_once(&self) -> Result<bool, SiteError> {
        let mut tx = self.db.begin_write().await?;
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

    /// One page (a point read on the store's own connections: a preview makes one).
    pub async fn get_page(&self, slug: &str) -> Result<Page, SiteError> {
        let rows = self
            .db
            .query(
                &Statement::new(
                    "SELECT slug, title, body, status, updated_at_ms FROM site_page WHERE slug = $1",
                )
                .bind(slug),
            )
            .await?;
        match rows.first() {
            Some(row) => Ok(read_page(row)?),
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
}
