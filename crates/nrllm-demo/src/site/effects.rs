//! Changes to the site, each applied at most once by its effect key, and only while the page is
//! still what the operator saw.

use super::records::*;
use super::store::*;
use nrllm_core::clock::now_ms;
use nrllm_core::failpoint;
use nrllm_store::db::Backend;
use sqlx::Row;

impl SiteStore {
    /// Refuses, in the change's transaction, an author whose run is no longer at the version the
    /// applying instance holds it at (a takeover moved it on). On Postgres the run's row stays
    /// locked until the change commits, so a takeover waits for it and then finds its effect.
    pub(super) async fn still_holds(
        tx: &mut sqlx::AnyConnection,
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
            .fetch_optional(&mut *tx)
            .await?;
        match version {
            Some(version) if version == epoch => Ok(()),
            _ => Err(SiteError::LeaseLost),
        }
    }

    /// The result of the effect applied under `key` before, if one was.
    pub(super) async fn applied_before(
        tx: &mut sqlx::AnyConnection,
        key: Option<&str>,
    ) -> Result<Option<String>, SiteError> {
        let Some(key) = key else {
            return Ok(None);
        };
        let row = sqlx::query("SELECT result FROM site_effect WHERE effect_key = $1")
            .bind(key)
            .fetch_optional(&mut *tx)
            .await?;
        Ok(row.map(|row| row.try_get("result")).transpose()?)
    }

    /// Records that the effect under `key` was applied, with its result, in its transaction.
    pub(super) async fn record_effect(
        tx: &mut sqlx::AnyConnection,
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
            .execute(&mut *tx)
            .await?;
        }
        Ok(())
    }

    /// Applies `change` to the page `slug` (or creates it) and records the history row, in one
    /// transaction. `change` gets the current page (if any) and returns the new one (or `None`
    /// to delete); `describe` says what happened, from the page before and after. Under the
    /// author's effect key the change is applied at most once: the same key again returns the
    /// first result and changes nothing.
    pub(super) async fn change_page(
        &self,
        slug: &str,
        action: &str,
        author: &Author,
        change: impl FnOnce(Option<Page>) -> Result<Option<Page>, SiteError>,
        describe: impl FnOnce(&Option<Page>, &Option<Page>) -> String,
    ) -> Result<String, SiteError> {
        let key = author.effect_key.as_deref();
        let mut tx = self.db.begin_write().await?;
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
        Self::write_page(&mut tx, slug, &before, &after).await?;
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

    /// Writes the page as `change` left it: inserted, updated or deleted.
    async fn write_page(
        tx: &mut sqlx::AnyConnection,
        slug: &str,
        before: &Option<Page>,
        after: &Option<Page>,
    ) -> Result<(), SiteError> {
        match (before, after) {
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
        Ok(())
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
        let mut tx = self.db.begin_write().await?;
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
