//! The server functions of accounts: log in (with a password or a one-time link), log out, set
//! one's password, and — for admins — manage users, API tokens and tools. Like the run API they take
//! form posts (answered with a redirect) and JSON.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

/// Who is logged in, for the header and the account page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Me {
    pub name: String,
    pub role: String,
    pub is_admin: bool,
}

/// A user as the admin page lists them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserView {
    pub name: String,
    pub role: String,
    pub disabled: bool,
    pub has_password: bool,
    pub created: String,
    /// Where they are reached (empty: nowhere).
    pub email: String,
    pub slack_team_id: String,
    pub slack_user_id: String,
}

/// An API token as the admin and account pages list it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenView {
    pub name: String,
    pub role: String,
    /// The user it acts as (empty: nobody, it works no more).
    pub user: String,
    pub created_by: String,
    pub created: String,
    pub last_used: Option<String>,
}

/// The admin page: users, tokens, the roles there are, and a token created a moment ago (shown
/// once, to the admin who created it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminView {
    pub users: Vec<UserView>,
    pub tokens: Vec<TokenView>,
    pub roles: Vec<(String, String)>,
    pub new_token: Option<(String, String)>,
    /// Every tool, enabled or not.
    pub tools: Vec<crate::page_data::ToolView>,
}

/// One's own account page: one's API tokens, the roles there are, and a token created a moment
/// ago (shown once, to whoever created it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountView {
    pub tokens: Vec<TokenView>,
    pub roles: Vec<(String, String)>,
    pub new_token: Option<(String, String)>,
}

/// Logs in with a name and password; a browser is sent on to `next` (a path of this site).
#[server(endpoint = "nrllm_login")]
pub async fn nrllm_login(
    name: String,
    password: String,
    next: Option<String>,
) -> Result<String, AppError> {
    use crate::server::{request::caller, request::state};
    let state = state()?;
    // Cut before it keys a limiter, reaches the log or the database.
    let name = crate::server::auth::login_name(&name);
    let peer = caller().and_then(|c| c.peer);
    if !state.limits.login_allowed(&name, peer) {
        tracing::warn!(%name, ?peer, "refused: too many login attempts");
        return Err(AppError::TooManyRequests(
            "Too many login attempts; wait a minute and try again.".to_owned(),
        ));
    }
    let user = state
        .accounts
        .check_password(&name, &password)
        .await
        .map_err(|err| AppError::internal("checking a password", err))?;
    let Some(user) = user else {
        tracing::warn!(%name, ?peer, "login failed");
        return Err(AppError::Unauthorized(
            "The name or the password is wrong.".to_owned(),
        ));
    };
    ssr::start_session(&state, &user.name).await?;
    tracing::info!(who = %user.name, "logged in");
    ssr::go(&ssr::local_path(next.as_deref()));
    Ok(user.name)
}

/// Logs in with a one-time link's token (the first start's admin link, or one from
/// `nrllm-playground login-link`); the browser goes on to set a password.
#[server(endpoint = "nrllm_login_link")]
pub async fn nrllm_login_link(token: String) -> Result<String, AppError> {
    use crate::server::request::state;
    let state = state()?;
    let name = state
        .accounts
        .use_login_link(token.trim(), nrllm_core::clock::now_ms())
        .await
        .map_err(|err| AppError::internal("using a login link", err))?
        .ok_or_else(|| {
            AppError::Unauthorized(
                "This login link was used already or has expired; ask for a new one \
                 (`nrllm-playground login-link <user>`)."
                    .to_owned(),
            )
        })?;
    ssr::start_session(&state, &name).await?;
    tracing::info!(who = %name, "logged in with a one-time link");
    ssr::go("/account");
    Ok(name)
}

/// Ends this session.
#[server(endpoint = "nrllm_logout")]
pub async fn nrllm_logout() -> Result<(), AppError> {
    use crate::server::auth::{set_cookie, SESSION_COOKIE};
    use crate::server::{request::caller, request::state};
    let state = state()?;
    if let Some(secret) = caller().and_then(|c| c.session) {
        state
            .accounts
            .end_session(&secret)
            .await
            .map_err(|err| AppError::internal("ending a session", err))?;
    }
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.append_header(
            http::header::SET_COOKIE,
            set_cookie(SESSION_COOKIE, "", 0, state.auth.secure),
        );
    }
    ssr::go("/login");
    Ok(())
}

/// Who is logged in (the header and the account page).
#[server(endpoint = "nrllm_me")]
pub async fn nrllm_me() -> Result<Option<Me>, AppError> {
    Ok(crate::server::request::caller()
        .and_then(|c| c.principal)
        .map(|p| Me {
            is_admin: p.role == nrllm_types::Role::Admin,
            role: p.role.to_string(),
            name: p.name,
        }))
}

/// Sets the caller's own password. A user who has one gives it too.
#[server(endpoint = "nrllm_password_set")]
pub async fn nrllm_password_set(current: Option<String>, password: String) -> Result<(), AppError> {
    use crate::server::{request::require, request::state};
    let who = require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    let user = ssr::user(&state, &who.name).await?;
    if user.has_password {
        let ok = state
            .accounts
            .check_password(&who.name, current.as_deref().unwrap_or_default())
            .await
            .map_err(|err| AppError::internal("checking a password", err))?;
        if ok.is_none() {
            return Err(AppError::invalid(
                "current",
                "this is not your current password",
            ));
        }
    }
    state
        .accounts
        .update_user(&who.name, user.role, user.disabled, Some(&password))
        .await
        .map_err(ssr::account_error)?;
    // Setting a password ends every session of the user, this one too: log in again.
    ssr::go("/login?next=%2F");
    Ok(())
}

/// Users and API tokens (admins only).
#[server(endpoint = "nrllm_admin_get")]
pub async fn nrllm_admin_get(shown: Option<String>) -> Result<AdminView, AppError> {
    use crate::server::{request::require, request::state};
    use nrllm_core::clock::format_utc;
    let who = require(nrllm_types::Role::Admin)?;
    let state = state()?;
    let users = state
        .accounts
        .users()
        .await
        .map_err(|err| AppError::internal("listing users", err))?;
    let tokens = state
        .accounts
        .tokens(None)
        .await
        .map_err(|err| AppError::internal("listing tokens", err))?;
    let contacts: std::collections::HashMap<String, nrllm_store::contacts::Contact> = state
        .notify
        .contacts
        .all()
        .await
        .map_err(|err| AppError::internal("listing users' addresses", err))?
        .into_iter()
        .map(|person| (person.name, person.contact))
        .collect();
    Ok(AdminView {
        users: users
            .into_iter()
            .map(|u| {
                let contact = contacts.get(&u.name).cloned().unwrap_or_default();
                let slack = contact.slack.unwrap_or(nrllm_store::contacts::SlackId {
                    team: String::new(),
                    user: String::new(),
                });
                UserView {
                    name: u.name,
                    role: u.role.to_string(),
                    disabled: u.disabled,
                    has_password: u.has_password,
                    created: format_utc(u.created_at_ms),
                    email: contact.email.unwrap_or_default(),
                    slack_team_id: slack.team,
                    slack_user_id: slack.user,
                }
            })
            .collect(),
        tokens: tokens.into_iter().map(ssr::token_view).collect(),
        roles: ssr::roles(),
        new_token: shown.and_then(|id| state.shown_tokens.get(&id, &who.name)),
        tools: crate::server::present::tool_views(&state.registry),
    })
}

/// One's own API tokens, and one created a moment ago (shown once).
#[server(endpoint = "nrllm_account_get")]
pub async fn nrllm_account_get(shown: Option<String>) -> Result<AccountView, AppError> {
    use crate::server::{request::require, request::state};
    let who = require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    let tokens = state
        .accounts
        .tokens(Some(&who.name))
        .await
        .map_err(|err| AppError::internal("listing tokens", err))?;
    Ok(AccountView {
        tokens: tokens.into_iter().map(ssr::token_view).collect(),
        roles: ssr::roles(),
        new_token: shown.and_then(|id| state.shown_tokens.get(&id, &who.name)),
    })
}

/// Enables or disables a tool for every run from now on, runs waiting for a decision too
/// (admins only).
#[server(endpoint = "nrllm_tool_set")]
pub async fn nrllm_tool_set(name: String, enabled: Option<String>) -> Result<(), AppError> {
    use crate::server::{request::require, request::state};
    let who = require(nrllm_types::Role::Admin)?;
    let state = state()?;
    if state.registry.get(&name).is_none() {
        return Err(AppError::invalid(
            "name",
            format!(
                "there is no tool named {}",
                name.chars().take(64).collect::<String>()
            ),
        ));
    }
    let enabled = enabled.is_some_and(|e| !e.is_empty() && e != "false");
    state
        .tool_settings
        .set_tool(&state.registry, &name, enabled)
        .await
        .map_err(|err| AppError::internal("saving a tool setting", err))?;
    tracing::info!(by = %who.name, tool = %name, enabled, "tool setting changed");
    ssr::go("/admin");
    Ok(())
}

/// Creates a user (admins only).
#[server(endpoint = "nrllm_user_create")]
pub async fn nrllm_user_create(
    name: String,
    password: String,
    role: String,
) -> Result<String, AppError> {
    use crate::server::{request::require, request::state};
    let who = require(nrllm_types::Role::Admin)?;
    let state = state()?;
    let role = ssr::role(&role)?;
    let name = name.trim().to_owned();
    state
        .accounts
        .create_user(&name, Some(&password), role, nrllm_core::clock::now_ms())
        .await
        .map_err(ssr::account_error)?;
    tracing::info!(by = %who.name, user = %name, %role, "user created");
    ssr::go("/admin");
    Ok(name)
}

/// Changes a user's role, whether they may log in, and (if given) their password (admins only).
#[server(endpoint = "nrllm_user_update")]
pub async fn nrllm_user_update(
    name: String,
    role: String,
    disabled: Option<String>,
    password: Option<String>,
) -> Result<(), AppError> {
    use crate::server::{request::require, request::state};
    let who = require(nrllm_types::Role::Admin)?;
    let state = state()?;
    let role = ssr::role(&role)?;
    let disabled = disabled.is_some_and(|d| !d.is_empty() && d != "false");
    if name == who.name && (disabled || role != nrllm_types::Role::Admin) {
        return Err(AppError::invalid(
            "role",
            "you cannot take away your own admin role or lock yourself out; another admin can",
        ));
    }
    let password = password.filter(|p| !p.is_empty());
    state
        .accounts
        .update_user(&name, role, disabled, password.as_deref())
        .await
        .map_err(ssr::account_error)?;
    tracing::info!(by = %who.name, user = %name, %role, disabled, "user changed");
    ssr::go("/admin");
    Ok(())
}

/// Creates an API token that acts as user `user` (default: the caller) with role `role`: any
/// user for themselves, an admin for anyone. It acts with the lower of its role and its user's,
/// and stops working when its user is disabled. The token is returned once; a browser is sent to
/// the page it was made on (`/admin` for an admin, else `/account`), which shows it once.
#[server(endpoint = "nrllm_token_create")]
pub async fn nrllm_token_create(
    name: String,
    role: String,
    user: Option<String>,
) -> Result<String, AppError> {
    use crate::server::{request::require, request::state, wants_html};
    let who = require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    let role = ssr::role(&role)?;
    let name = name.trim().to_owned();
    let user = user
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| who.name.clone());
    if user != who.name {
        require(nrllm_types::Role::Admin).map_err(|_| {
            AppError::Forbidden("Only an administrator can make a token for another user.".into())
        })?;
    }
    let token = state
        .accounts
        .create_token(&name, role, &user, &who.name, nrllm_core::clock::now_ms())
        .await
        .map_err(ssr::account_error)?;
    tracing::info!(by = %who.label(), token = %name, %user, %role, "API token created");
    if wants_html() {
        let shown = state.shown_tokens.put(&who.name, &name, &token);
        let page = match who.role == nrllm_types::Role::Admin {
            true => "/admin",
            false => "/account",
        };
        leptos_axum::redirect(&format!("{page}?shown={shown}"));
    }
    Ok(token)
}

/// Revokes an API token: an admin any, a user their own.
#[server(endpoint = "nrllm_token_revoke")]
pub async fn nrllm_token_revoke(name: String) -> Result<(), AppError> {
    use crate::server::{request::require, request::state};
    let who = require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    let admin = who.role == nrllm_types::Role::Admin;
    let revoked = state
        .accounts
        .revoke_token(&name, (!admin).then_some(who.name.as_str()))
        .await
        .map_err(|err| AppError::internal("revoking a token", err))?;
    if !revoked {
        return Err(AppError::NotFound(format!(
            "You have no token named {}.",
            name.chars().take(64).collect::<String>()
        )));
    }
    tracing::info!(by = %who.label(), token = %name, "API token revoked");
    ssr::go(if admin { "/admin" } else { "/account" });
    Ok(())
}

#[cfg(feature = "ssr")]
pub(crate) mod ssr {
    use crate::error::AppError;
    use crate::server::auth::{set_cookie, CSRF_COOKIE, SESSION_COOKIE};
    use crate::server::AppState;
    use leptos::prelude::*;
    use nrllm_store::accounts::{AccountError, User};

    /// Starts a session for `name`: the session cookie, and a fresh CSRF token.
    pub async fn start_session(state: &AppState, name: &str) -> Result<(), AppError> {
        let secret = state
            .accounts
            .create_session(name, nrllm_core::clock::now_ms(), state.session_ms)
            .await
            .map_err(|err| AppError::internal("starting a session", err))?;
        if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
            let secure = state.auth.secure;
            response.append_header(
                http::header::SET_COOKIE,
                set_cookie(SESSION_COOKIE, &secret, state.session_ms / 1000, secure),
            );
            response.append_header(
                http::header::SET_COOKIE,
                set_cookie(
                    CSRF_COOKIE,
                    &nrllm_store::accounts::new_secret(),
                    400 * 24 * 3600,
                    secure,
                ),
            );
        }
        Ok(())
    }

    /// A path of this site to go on to ([`crate::server::auth::is_site_path`]; anything else:
    /// `/`).
    pub fn local_path(next: Option<&str>) -> String {
        match next {
            Some(path) if crate::server::auth::is_site_path(path) => path.to_owned(),
            _ => "/".to_owned(),
        }
    }

    /// Sends a browser's form post on to `path`.
    pub fn go(path: &str) {
        if crate::server::wants_html() {
            leptos_axum::redirect(path);
        }
    }

    /// Every role with what it adds, least first.
    pub fn roles() -> Vec<(String, String)> {
        nrllm_types::Role::ALL
            .into_iter()
            .map(|r| (r.to_string(), r.describe().to_owned()))
            .collect()
    }

    pub fn token_view(token: nrllm_store::accounts::ApiToken) -> super::TokenView {
        use nrllm_core::clock::format_utc;
        super::TokenView {
            name: token.name,
            role: token.role.to_string(),
            user: token.user.unwrap_or_default(),
            created_by: token.created_by,
            created: format_utc(token.created_at_ms),
            last_used: token.last_used_at_ms.map(format_utc),
        }
    }

    pub fn role(text: &str) -> Result<nrllm_types::Role, AppError> {
        nrllm_types::Role::parse(text.trim())
            .ok_or_else(|| AppError::invalid("role", "one of viewer, operator, approver, admin"))
    }

    pub async fn user(state: &AppState, name: &str) -> Result<User, AppError> {
        state
            .accounts
            .users()
            .await
            .map_err(|err| AppError::internal("reading users", err))?
            .into_iter()
            .find(|u| u.name == name)
            .ok_or_else(|| AppError::Unauthorized("Log in first.".to_owned()))
    }

    pub(crate) fn account_error(err: AccountError) -> AppError {
        match err {
            AccountError::Invalid { field, message } => AppError::invalid(field, message),
            AccountError::Exists(what) => AppError::Conflict(format!("There is already {what}.")),
            AccountError::NoUser(name) => AppError::NotFound(format!("There is no user {name}.")),
            AccountError::Store(err) => AppError::internal("changing accounts", err),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::local_path;

        #[test]
        fn only_paths_of_this_site_are_followed_after_login() {
            assert_eq!(local_path(Some("/runs/1?step=2")), "/runs/1?step=2");
            for bad in [
                "//evil.example/x",
                "https://evil.example",
                "/\\evil.example",
                "runs",
                "/\t/evil.example",
                "/\n/evil.example",
                "/runs\r\nSet-Cookie: x=1",
                "/\u{7f}x",
            ] {
                assert_eq!(local_path(Some(bad)), "/", "{bad}");
            }
            assert_eq!(local_path(None), "/");
        }
    }
}
