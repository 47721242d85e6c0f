//! Changes to the site, each applied at most once by its effect key, and only while the page is
//! still what the operator saw.

use super::records::*;
use super::store::*;
use nrllm_core::clock::now_ms;
use nrllm_core::failpoint;
use nrllm_core::run_store::StoreError;
use nrllm_store::db::{Backend, TypedTx};
use nrllm_store::{Cells, Statement};

/// A change's transaction, begun.
enum Change {
    /// Open, for the change to be written in.
    Open(TypedTx),
    /// Over: the change's effect key was applied before, with this result.
    AppliedBefore(String),
}

impl SiteStore {
    /// Refuses, in the change's transaction, an author whose run is no longer at the version the
    /// applying instance holds it at (a takeover moved it on). On Postgres the run's row stays
    /// locked until the change commits, so a takeover waits for it and then finds its effect.
    pub(super) async fn still_holds(
        tx: &mut TypedTx,
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
        let statement = Statement::new(sql)
            .bind(run)
            .bind(nrllm_core::run_store::RunStatus::Running.as_str());
        let version = match tx.query_one(&statement).await? {
            Some(row) => row.int("version")?,
            None => None,
        };
        match version {
            Some(version) if version == epoch => Ok(()),
            _ => Err(SiteError::LeaseLost),
        }
    }

    /// The result of the effect applied under `key` before, if one was.
    pub(super) async fn applied_before(
        tx: &mut TypedTx,
        key: Option<&str>,
    ) -> Result<Option<String>, SiteError> {
        let Some(key) = key else {
            return Ok(None);
        };
        let statement =
            Statement::new("SELECT result FROM site_effect WHERE effect_key = $1").bind(key);
        Ok(match tx.query_one(&statement).await? {
            Some(row) => Some(row.required_text("result")?),
            None => None,
        })
    }

    /// Records that the effect under `key` was applied, with its result, in its transaction.
    pub(super) async fn record_effect(
        tx: &mut TypedTx,
        key: Option<&str>,
        result: &str,
    ) -> Result<(), SiteError> {
        if let Some(key) = key {
            tx.query(
                &Statement::new(
                    "INSERT INTO site_effect (effect_key, result, created_at_ms) VALUES ($1, $2, $3)",
                )
                .bind(key)
                .bind(result)
                .bind(now_ms()),
            )
            .await?;
        }
        Ok(())
    }

    /// Begins a change's transaction and checks that its author may make it: the run still
    /// held (see [`SiteStore::still_holds`]), and its effect key not applied before.
    async fn begin_change(&self, author: &Author) -> Result<Change, SiteError> {
        let mut tx = self.db.begin_typed().await?;
        let checked = match Self::still_holds(&mut tx, self.db.backend(), author).await {
            Ok(()) => Self::applied_before(&mut tx, author.effect_key.as_deref()).await,
            Err(err) => Err(err),
        };
        match checked {
            Ok(None) => Ok(Change::Open(tx)),
            Ok(Some(result)) => {
                tx.roll_back().await?;
                Ok(Change::AppliedBefore(result))
            }
            Err(err) => Self::refuse(tx, err).await,
        }
    }

    /// Ends a change's transaction: committed if it was `written` (then the crash tests' point
    /// after an effect is reached), rolled back if it was refused.
    async fn finish(tx: TypedTx, written: Result<String, SiteError>) -> Result<String, SiteError> {
        match written {
            Ok(result) => {
                tx.commit().await?;
                failpoint::reach("in_tool_after_effect");
                Ok(result)
            }
            Err(err) => Self::refuse(tx, err).await,
        }
    }

    /// Rolls back a change refused with `err`, which the caller hears whatever the rollback came
    /// to (a failed rollback is logged; nothing of the change was committed either way).
    async fn refuse<T>(tx: TypedTx, err: SiteError) -> Result<T, SiteError> {
        if let Err(rollback) = tx.roll_back().await {
            tracing::warn!(error = %rollback, "rolling back a refused site change failed");
        }
        Err(err)
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
        let mut tx = match self.begin_change(author).await? {
            Change::Open(tx) => tx,
            Change::AppliedBefore(result) => return Ok(result),
        };
        let written = Self::write_change(&mut tx, (slug, action), author, change, describe).await;
        Self::finish(tx, written).await
    }

    /// [`SiteStore::change_page`]'s reads and writes, in its open transaction `tx`: what it
    /// did, described.
    async fn write_change(
        tx: &mut TypedTx,
        (slug, action): (&str, &str),
        author: &Author,
        change: impl FnOnce(Option<Page>) -> Result<Option<Page>, SiteError>,
        describe: impl FnOnce(&Option<Page>, &Option<Page>) -> String,
    ) -> Result<String, SiteError> {
        let key = author.effect_key.as_deref();
        let row = tx
            .query_one(
                &Statement::new(
                    "SELECT slug, title, body, status, updated_at_ms FROM site_page WHERE slug = $1",
                )
                .bind(slug),
            )
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
        tx.query(&Self::write_page(slug, &before, &after)?).await?;
        let json = |page: &Option<Page>| page.as_ref().and_then(|p| serde_json::to_string(p).ok());
        tx.query(
            &Statement::new(
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
            .bind(key),
        )
        .await?;
        let result = describe(&before, &after);
        Self::record_effect(tx, key, &result).await?;
        Ok(result)
    }

    /// The statement that writes the page as `change` left it: inserted, updated or deleted.
    fn write_page(
        slug: &str,
        before: &Option<Page>,
        after: &Option<Page>,
    ) -> Result<Statement, SiteError> {
        Ok(match (before, after) {
            (None, Some(page)) => Statement::new(
                "INSERT INTO site_page (slug, title, body, status, updated_at_ms) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&page.slug)
            .bind(&page.title)
            .bind(&page.body)
            .bind(page.status.as_str())
            .bind(page.updated_at_ms),
            (Some(_), Some(page)) => Statement::new(
                "UPDATE site_page SET title = $1, body = $2, status = $3, updated_at_ms = $4 WHERE slug = $5",
            )
            .bind(&page.title)
            .bind(&page.body)
            .bind(page.status.as_str())
            .bind(page.updated_at_ms)
            .bind(&page.slug),
            (Some(_), None) => Statement::new("DELETE FROM site_page WHERE slug = $1").bind(slug),
            (None, None) => return Err(SiteError::NotFound(slug.to_owned())),
        })
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
        let mut tx = match self.begin_change(author).await? {
            Change::Open(tx) => tx,
            Change::AppliedBefore(result) => return Ok(result),
        };
        let written =
            Self::write_message(&mut tx, (recipient, subject, body), author, describe).await;
        Self::finish(tx, written).await
    }

    /// [`SiteStore::send_message`]'s writes, in its open transaction `tx`: what it did,
    /// described.
    async fn write_message(
        tx: &mut TypedTx,
        (recipient, subject, body): (&str, &str, &str),
        author: &Author,
        describe: impl FnOnce(&OutboxMessage) -> String,
    ) -> Result<String, SiteError> {
        let key = author.effect_key.as_deref();
        let now = now_ms();
        let row = tx
            .query_one(
                &Statement::new(
                    "INSERT INTO site_outbox (recipient, subject, body, actor, run_id, created_at_ms, effect_key) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                )
                .bind(recipient)
                .bind(subject)
                .bind(body)
                .bind(&author.actor)
                .bind(author.run_id.as_deref())
                .bind(now)
                .bind(key),
            )
            .await?
            .ok_or_else(|| StoreError::Corrupt("an outbox insert returned no id".into()))?;
        let message = OutboxMessage {
            id: row.required_int("id")?,
            recipient: recipient.to_owned(),
            subject: subject.to_owned(),
            body: body.to_owned(),
            actor: author.actor.clone(),
            run_id: author.run_id.clone(),
            created_at_ms: now,
        };
        let result = describe(&message);
        Self::record_effect(tx, key, &result).await?;
        Ok(result)
    }
}
