//! The first start: the first administrator and their one-time login link.

use nrllm_store::accounts::AccountStore;
use nrllm_types::Role;

/// On the first start (no users yet) creates `admin`: with the password in
/// `NRLLM_ADMIN_PASSWORD`, or else without one, logging a one-time login link.
pub async fn first_admin(
    accounts: &AccountStore,
    public_url: &str,
    password: Option<String>,
) -> Result<(), String> {
    let count = accounts
        .user_count()
        .await
        .map_err(|err| format!("cannot read the users: {err}"))?;
    if count > 0 {
        return Ok(());
    }
    let now = nrllm_core::clock::now_ms();
    let password = password.filter(|p| !p.is_empty());
    match accounts
        .create_user("admin", password.as_deref(), Role::Admin, now)
        .await
    {
        Ok(_) => {}
        // Another instance starting at the same moment on the same database made it first.
        Err(nrllm_store::accounts::AccountError::Exists(_)) => return Ok(()),
        Err(err) => {
            return Err(format!(
                "cannot create the first user: {err} (NRLLM_ADMIN_PASSWORD)"
            ))
        }
    }
    if password.is_some() {
        tracing::info!(
            "first start: created the user `admin` with the password in NRLLM_ADMIN_PASSWORD"
        );
        return Ok(());
    }
    let link = login_link(accounts, public_url, "admin").await?;
    tracing::warn!(
        "first start: created the user `admin`. Open this one-time link to log in and set a \
         password (valid 24 hours): {link}"
    );
    Ok(())
}

/// A one-time login link for `name`, valid 24 hours.
pub async fn login_link(
    accounts: &AccountStore,
    public_url: &str,
    name: &str,
) -> Result<String, String> {
    let secret = accounts
        .create_login_link(name, nrllm_core::clock::now_ms(), 24 * 3600 * 1000)
        .await
        .map_err(|err| format!("cannot create a login link: {err}"))?;
    Ok(format!("{public_url}/login/once?token={secret}"))
}
