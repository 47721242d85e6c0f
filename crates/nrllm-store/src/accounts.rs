//! Who may do what: users (argon2 password hashes), their sessions, API tokens and one-time login
//! links, all in the database so that every instance sees the same. Secrets are random 256-bit
//! values given out once; only their SHA-256 is stored, so a copy of the database logs nobody in.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use nrllm_core::run_store::StoreError;
use nrllm_types::Role;
use serde::Serialize;
use sqlx::Row;

use crate::db::Database;
use crate::error::backend;
pub use crate::secret::{new_secret, secret_hash};
use crate::transition::{Cells as _, Statement};

/// Names are short, printable and never look like a token's (`token:`).
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&name.chars().count())
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'));
    if ok {
        Ok(())
    } else {
        Err("1 to 64 letters, digits, or . _ - @".to_owned())
    }
}

/// The shortest password accepted.
pub const MIN_PASSWORD_CHARS: usize = 10;

/// A user as the admin page lists them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct User {
    pub name: String,
    pub role: Role,
    pub disabled: bool,
    pub has_password: bool,
    pub created_at_ms: i64,
}

/// An API token as the admin page lists it (the token itself is shown only when created).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiToken {
    pub name: String,
    pub role: Role,
    /// The user it acts as (`None`: a token from before tokens had users, whose creator is gone;
    /// it works no more).
    pub user: Option<String>,
    pub created_by: String,
    pub created_at_ms: i64,
    pub last_used_at_ms: Option<i64>,
}

/// Who a request acts as: a user, through their session or one of their API tokens (the core's
/// [`nrllm_core::authority::Actor`], which every move of a run is checked for).
pub use nrllm_core::authority::Actor as Principal;

/// Why an account change was refused.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("{0} already exists")]
    Exists(String),
    #[error("there is no user {0}")]
    NoUser(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Users, sessions, tokens and login links.
#[derive(Clone)]
pub struct AccountStore {
    db: Database,
}

/// Password hashes computed at once. Each argon2id hash (default parameters) takes 19 MiB while
/// it runs, and logins come from anyone: unbounded, a burst of them would take gigabytes.
static HASHING: std::sync::LazyLock<tokio::sync::Semaphore> = std::sync::LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    tokio::sync::Semaphore::new(cores.clamp(2, 8))
});

/// Runs `hash` (an argon2 computation) off the async threads, at most [`HASHING`] at once.
async fn hashing<T: Send + 'static>(hash: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let _slot = HASHING.acquire().await.ok()?;
    tokio::task::spawn_blocking(hash).await.ok()
}

/// Hashes a password with argon2id (default parameters), off the async threads.
async fn hash_password(password: &str) -> Result<String, StoreError> {
    let password = password.to_owned();
    hashing(move || {
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).expect("the operating system's random source");
        let salt = SaltString::encode_b64(&salt).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|hash| hash.to_string())
            .map_err(|e| StoreError::Corrupt(e.to_string()))
    })
    .await
    .ok_or_else(|| StoreError::Corrupt("hashing a password was cut off".into()))?
}

/// Checks a password against a stored argon2 hash, off the async threads.
async fn password_matches(password: &str, stored: &str) -> bool {
    let (password, stored) = (password.to_owned(), stored.to_owned());
    hashing(move || {
        PasswordHash::new(&stored).is_ok_and(|hash| {
            Argon2::default()
                .verify_password(password.as_bytes(), &hash)
                .is_ok()
        })
    })
    .await
    .unwrap_or(false)
}

fn user_from(row: &sqlx::any::AnyRow) -> Result<User, StoreError> {
    let role: String = row.try_get("role").map_err(backend)?;
    Ok(User {
        name: row.try_get("name").map_err(backend)?,
        role: Role::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("role {role}")))?,
        disabled: row.try_get::<i64, _>("disabled").map_err(backend)? != 0,
        has_password: row
            .try_get::<Option<String>, _>("password_hash")
            .map_err(backend)?
            .is_some(),
        created_at_ms: row.try_get("created_at_ms").map_err(backend)?,
    })
}

impl AccountStore {
    pub fn new(db: Database) -> AccountStore {
        AccountStore { db }
    }

    /// How many users there are.
    pub async fn user_count(&self) -> Result<i64, StoreError> {
        sqlx::query_scalar("SELECT COUNT(*) FROM app_user")
            .fetch_one(self.db.pool())
            .await
            .map_err(backend)
    }

    /// Every user, by name.
    pub async fn users(&self) -> Result<Vec<User>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, password_hash, role, disabled, created_at_ms FROM app_user ORDER BY name",
        )
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter().map(user_from).collect()
    }

    /// Creates a user; without a password they can log in only by a one-time link.
    pub async fn create_user(
        &self,
        name: &str,
        password: Option<&str>,
        role: Role,
        now_ms: i64,
    ) -> Result<User, AccountError> {
        check_name(name).map_err(|message| AccountError::Invalid {
            field: "name",
            message,
        })?;
        let hash = match password {
            Some(password) => Some(checked_hash(password).await?),
            None => None,
        };
        let statement = sqlx::query(
            "INSERT INTO app_user (name, password_hash, role, disabled, created_at_ms) \
             VALUES ($1, $2, $3, 0, $4) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(hash)
        .bind(role.as_str())
        .bind(now_ms);
        let inserted = self.db.write(statement).await.map_err(backend)?;
        if inserted.rows_affected() == 0 {
            return Err(AccountError::Exists(format!("a user named {name}")));
        }
        Ok(User {
            name: name.to_owned(),
            role,
            disabled: false,
            has_password: password.is_some(),
            created_at_ms: now_ms,
        })
    }

    /// Changes a user's role, password (if given) or whether they may log in. It ends their
    /// sessions and voids their unused login links (a link made before a password was set, or
    /// for a user now disabled, logs nobody in).
    pub async fn update_user(
        &self,
        name: &str,
        role: Role,
        disabled: bool,
        password: Option<&str>,
    ) -> Result<(), AccountError> {
        let hash = match password {
            Some(password) => Some(checked_hash(password).await?),
            None => None,
        };
        let mut tx = self.db.begin_write().await.map_err(backend)?;
        let updated = sqlx::query(
            "UPDATE app_user SET role = $1, disabled = $2, \
             password_hash = COALESCE($3, password_hash) WHERE name = $4",
        )
        .bind(role.as_str())
        .bind(i64::from(disabled))
        .bind(hash)
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        if updated.rows_affected() == 0 {
            return Err(AccountError::NoUser(name.to_owned()));
        }
        for table in ["app_session", "login_link"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE user_name = $1"))
                .bind(name)
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(())
    }

    /// Deletes the sessions and login links that expired before `now_ms`; how many of each.
    pub async fn purge_expired(&self, now_ms: i64) -> Result<(u64, u64), StoreError> {
        let mut counts = [0; 2];
        for (count, table) in counts.iter_mut().zip(["app_session", "login_link"]) {
            let sql = format!("DELETE FROM {table} WHERE expires_at_ms <= $1");
            let statement = sqlx::query(&sql).bind(now_ms);
            *count = self
                .db
                .write(statement)
                .await
                .map_err(backend)?
                .rows_affected();
        }
        Ok((counts[0], counts[1]))
    }

    /// The user, if `name` and `password` match an enabled user.
    pub async fn check_password(
        &self,
        name: &str,
        password: &str,
    ) -> Result<Option<User>, StoreError> {
        let row = sqlx::query(
            "SELECT name, password_hash, role, disabled, created_at_ms FROM app_user WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(self.db.pool())
        .await
        .map_err(backend)?;
        let Some(row) = row else {
            // As slow as a wrong password, so a name's existence does not show in the timing.
            let dummy = DUMMY_HASH
                .get_or_try_init(|| hash_password("not anyone's password"))
                .await?;
            let _ = password_matches(password, dummy).await;
            return Ok(None);
        };
        let stored: Option<String> = row.try_get("password_hash").map_err(backend)?;
        let user = user_from(&row)?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        if password_matches(password, &stored).await && !user.disabled {
            Ok(Some(user))
        } else {
            Ok(None)
        }
    }

    /// Starts a session for `name`: the secret for the cookie.
    pub async fn create_session(
        &self,
        name: &str,
        now_ms: i64,
        lifetime_ms: i64,
    ) -> Result<String, StoreError> {
        let secret = new_secret();
        let statement = sqlx::query(
            "INSERT INTO app_session (token_hash, user_name, created_at_ms, expires_at_ms) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(secret_hash(&secret))
        .bind(name)
        .bind(now_ms)
        .bind(now_ms + lifetime_ms);
        self.db.write(statement).await.map_err(backend)?;
        Ok(secret)
    }

    /// Who the session with this cookie secret belongs to, while it lasts and the user is enabled.
    pub async fn session(
        &self,
        secret: &str,
        now_ms: i64,
    ) -> Result<Option<Principal>, StoreError> {
        let row = sqlx::query(
            "SELECT u.name, u.role FROM app_session s JOIN app_user u ON u.name = s.user_name \
             WHERE s.token_hash = $1 AND s.expires_at_ms > $2 AND u.disabled = 0",
        )
        .bind(secret_hash(secret))
        .bind(now_ms)
        .fetch_optional(self.db.pool())
        .await
        .map_err(backend)?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(Principal::user(
            row.try_get::<String, _>("name").map_err(backend)?,
            role_of(&row, "role")?,
        )))
    }

    /// Ends a session.
    pub async fn end_session(&self, secret: &str) -> Result<(), StoreError> {
        let statement =
            sqlx::query("DELETE FROM app_session WHERE token_hash = $1").bind(secret_hash(secret));
        self.db.write(statement).await.map_err(backend)?;
        Ok(())
    }

    /// Creates an API token with `role` that acts as user `user` (made by `created_by`: the
    /// user themselves, or an admin): the token, to be shown once. It acts with the lower of its
    /// role and its user's.
    pub async fn create_token(
        &self,
        name: &str,
        role: Role,
        user: &str,
        created_by: &str,
        now_ms: i64,
    ) -> Result<String, AccountError> {
        check_name(name).map_err(|message| AccountError::Invalid {
            field: "name",
            message,
        })?;
        let secret = format!("nrllm_{}", new_secret());
        // Only for a user who exists; the insert says nothing when one does not.
        let statement = sqlx::query(
            "INSERT INTO api_token (name, token_hash, role, user_name, created_by, created_at_ms) \
             SELECT $1, $2, $3, name, $5, $6 FROM app_user WHERE name = $4 \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(secret_hash(&secret))
        .bind(role.as_str())
        .bind(user)
        .bind(created_by)
        .bind(now_ms);
        let inserted = self.db.write(statement).await.map_err(backend)?;
        if inserted.rows_affected() == 0 {
            let users: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM app_user WHERE name = $1")
                .bind(user)
                .fetch_one(self.db.pool())
                .await
                .map_err(backend)?;
            return Err(match users {
                0 => AccountError::NoUser(user.to_owned()),
                _ => AccountError::Exists(format!("a token named {name}")),
            });
        }
        Ok(secret)
    }

    /// A token with `role` for a program (a test harness, a scraper) that acts as user `user`,
    /// who is made with `role` and no password (nobody logs in as them) if there is no such user
    /// yet: the token, to be shown once.
    pub async fn create_program_token(
        &self,
        user: &str,
        role: Role,
        name: &str,
        now_ms: i64,
    ) -> Result<String, AccountError> {
        match self.create_user(user, None, role, now_ms).await {
            Ok(_) | Err(AccountError::Exists(_)) => {}
            Err(err) => return Err(err),
        }
        self.create_token(name, role, user, user, now_ms).await
    }

    /// Every API token, by name (`of`: only those that act as this user).
    pub async fn tokens(&self, of: Option<&str>) -> Result<Vec<ApiToken>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, role, user_name, created_by, created_at_ms, last_used_at_ms \
             FROM api_token WHERE $1 IS NULL OR user_name = $1 ORDER BY name",
        )
        .bind(of)
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter()
            .map(|row| {
                let role: String = row.try_get("role").map_err(backend)?;
                Ok(ApiToken {
                    name: row.try_get("name").map_err(backend)?,
                    role: Role::parse(&role)
                        .ok_or_else(|| StoreError::Corrupt(format!("role {role}")))?,
                    user: row.try_get("user_name").map_err(backend)?,
                    created_by: row.try_get("created_by").map_err(backend)?,
                    created_at_ms: row.try_get("created_at_ms").map_err(backend)?,
                    last_used_at_ms: row.try_get("last_used_at_ms").map_err(backend)?,
                })
            })
            .collect()
    }

    /// Revokes a token (`of`: only if it acts as this user); whether there was one.
    pub async fn revoke_token(&self, name: &str, of: Option<&str>) -> Result<bool, StoreError> {
        let statement =
            sqlx::query("DELETE FROM api_token WHERE name = $1 AND ($2 IS NULL OR user_name = $2)")
                .bind(name)
                .bind(of);
        let deleted = self.db.write(statement).await.map_err(backend)?;
        Ok(deleted.rows_affected() > 0)
    }

    /// Who an `Authorization: Bearer` token acts as: its user, with the lower of the token's
    /// role and theirs, while that user is enabled.
    pub async fn token(&self, secret: &str, now_ms: i64) -> Result<Option<Principal>, StoreError> {
        let hash = secret_hash(secret);
        // Asked on every API request: a point read on the store's own connections (on SQLite
        // this thread or the idle writer, not a trip to sqlx's worker thread).
        let rows = self
            .db
            .query(
                &Statement::new(
                    "SELECT t.name, t.role, t.last_used_at_ms, u.name AS user_name, \
                     u.role AS user_role \
                     FROM api_token t JOIN app_user u ON u.name = t.user_name \
                     WHERE t.token_hash = $1 AND u.disabled = 0",
                )
                .bind(hash.as_str()),
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let principal = Principal::through_token(
            row.required_text("user_name")?,
            parse_role(row.required_text("user_role")?)?,
            row.required_text("name")?,
            parse_role(row.required_text("role")?)?,
        );
        // "Last used" to the minute: a busy script does not turn every request into a write.
        let stale = row
            .int("last_used_at_ms")?
            .is_none_or(|at| now_ms - at > 60_000);
        // A row is read on one thread: it goes before the write's await.
        drop(rows);
        if stale {
            let statement =
                sqlx::query("UPDATE api_token SET last_used_at_ms = $1 WHERE token_hash = $2")
                    .bind(now_ms)
                    .bind(&hash);
            self.db.write(statement).await.map_err(backend)?;
        }
        Ok(Some(principal))
    }

    /// A one-time login link's secret for `name`, valid for `lifetime_ms`.
    pub async fn create_login_link(
        &self,
        name: &str,
        now_ms: i64,
        lifetime_ms: i64,
    ) -> Result<String, StoreError> {
        let secret = new_secret();
        let statement = sqlx::query(
            "INSERT INTO login_link (token_hash, user_name, expires_at_ms) VALUES ($1, $2, $3)",
        )
        .bind(secret_hash(&secret))
        .bind(name)
        .bind(now_ms + lifetime_ms);
        self.db.write(statement).await.map_err(backend)?;
        Ok(secret)
    }

    /// Uses a one-time login link: the user it logs in, once, while it lasts and the user is
    /// enabled.
    pub async fn use_login_link(
        &self,
        secret: &str,
        now_ms: i64,
    ) -> Result<Option<String>, StoreError> {
        let name: Option<String> = sqlx::query_scalar(
            "DELETE FROM login_link WHERE token_hash = $1 AND expires_at_ms > $2 \
             AND user_name IN (SELECT name FROM app_user WHERE disabled = 0) RETURNING user_name",
        )
        .bind(secret_hash(secret))
        .bind(now_ms)
        .fetch_optional(self.db.pool())
        .await
        .map_err(backend)?;
        Ok(name)
    }

    /// The named server-wide secret, created at random the first time it is asked for (shared by
    /// every instance on the same database).
    pub async fn server_secret(&self, name: &str) -> Result<String, StoreError> {
        let statement = sqlx::query(
            "INSERT INTO app_secret (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(new_secret());
        self.db.write(statement).await.map_err(backend)?;
        sqlx::query_scalar("SELECT value FROM app_secret WHERE name = $1")
            .bind(name)
            .fetch_one(self.db.pool())
            .await
            .map_err(backend)
    }
}

/// A hash of a password nobody has, to spend the same time on unknown names.
static DUMMY_HASH: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();

async fn checked_hash(password: &str) -> Result<String, AccountError> {
    let chars = password.chars().count();
    if !(MIN_PASSWORD_CHARS..=1024).contains(&chars) {
        return Err(AccountError::Invalid {
            field: "password",
            message: format!("{MIN_PASSWORD_CHARS} to 1024 characters"),
        });
    }
    Ok(hash_password(password).await?)
}

fn role_of(row: &sqlx::any::AnyRow, column: &str) -> Result<Role, StoreError> {
    parse_role(row.try_get(column).map_err(backend)?)
}

fn parse_role(role: String) -> Result<Role, StoreError> {
    Role::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("role {role}")))
}
