//! Where people are reached: each user's email address and Slack identity (team id and user id),
//! set by an administrator. A Slack user who presses a button is looked up here to know which
//! playground user decides; an address never decides anything by itself.

use nrllm_core::run_store::StoreError;
use nrllm_types::Role;
use serde::Serialize;
use sqlx::Row;

use crate::accounts::{AccountError, Principal};
use crate::db::Database;
use crate::error::backend;

/// The longest email address accepted (RFC 5321's path limit).
pub const MAX_EMAIL_CHARS: usize = 254;

/// A Slack identity: the workspace (team) and the user in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlackId {
    pub team: String,
    pub user: String,
}

/// How one user is reached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Contact {
    pub email: Option<String>,
    pub slack: Option<SlackId>,
}

/// A user with how they are reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reachable {
    pub name: String,
    pub role: Role,
    pub disabled: bool,
    pub contact: Contact,
}

/// `address` if it reads as one mailbox (`local@domain`, printable, no spaces), else why not.
/// The mail library checks it again when it sends.
pub fn check_email(address: &str) -> Result<(), String> {
    let shape = address.split_once('@').is_some_and(|(local, domain)| {
        !local.is_empty()
            && domain.contains('.')
            && !domain.starts_with('.')
            && !domain.ends_with('.')
            && !domain.contains('@')
    });
    let printable = address
        .chars()
        .all(|c| c.is_ascii_graphic() || !c.is_ascii());
    let forbidden = address.contains(['<', '>', '"', ',', ';', '\\']);
    if address.chars().count() <= MAX_EMAIL_CHARS && shape && printable && !forbidden {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not an email address (name@example.com, at most {MAX_EMAIL_CHARS} characters)",
            nrllm_core::preview::cut(address, 80)
        ))
    }
}

/// `id` if it reads as a Slack id (upper-case letters and digits, as Slack writes `T024BE7LD`
/// and `U0G9QF9C6`), else why not.
pub fn check_slack_id(field: &str, id: &str) -> Result<(), String> {
    let ok = (2..=32).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{field} is a Slack id: 2 to 32 upper-case letters and digits (like T024BE7LD)"
        ))
    }
}

/// Users' addresses and Slack identities.
#[derive(Clone)]
pub struct ContactStore {
    db: Database,
}

impl ContactStore {
    pub fn new(db: Database) -> ContactStore {
        ContactStore { db }
    }

    /// Sets how user `name` is reached (`None`s clear). Refused if an address does not read, if
    /// the user does not exist, or if the Slack identity is another user's already.
    pub async fn set(&self, name: &str, contact: &Contact) -> Result<(), AccountError> {
        let invalid = |field, message| AccountError::Invalid { field, message };
        if let Some(email) = &contact.email {
            check_email(email).map_err(|m| invalid("email", m))?;
        }
        if let Some(slack) = &contact.slack {
            check_slack_id("slack_team_id", &slack.team)
                .map_err(|m| invalid("slack_team_id", m))?;
            check_slack_id("slack_user_id", &slack.user)
                .map_err(|m| invalid("slack_user_id", m))?;
            let holder: Option<String> = sqlx::query_scalar(
                "SELECT name FROM app_user WHERE slack_team_id = $1 AND slack_user_id = $2",
            )
            .bind(&slack.team)
            .bind(&slack.user)
            .fetch_optional(self.db.pool())
            .await
            .map_err(backend)?;
            if let Some(holder) = holder.filter(|holder| holder != name) {
                return Err(AccountError::Exists(format!(
                    "the Slack user {} of team {} (it is {holder}'s)",
                    slack.user, slack.team
                )));
            }
        }
        let statement = sqlx::query(
            "UPDATE app_user SET email = $1, slack_team_id = $2, slack_user_id = $3 WHERE name = $4",
        )
        .bind(contact.email.as_deref())
        .bind(contact.slack.as_ref().map(|s| s.team.as_str()))
        .bind(contact.slack.as_ref().map(|s| s.user.as_str()))
        .bind(name);
        let updated = self
            .db
            .write(statement)
            .await
            // Two administrators giving one Slack user to two people at once: the index refuses one.
            .map_err(|err| match err.as_database_error() {
                Some(db) if db.is_unique_violation() => {
                    AccountError::Exists("that Slack user (another user's)".to_owned())
                }
                _ => AccountError::Store(backend(err)),
            })?;
        if updated.rows_affected() == 0 {
            return Err(AccountError::NoUser(name.to_owned()));
        }
        Ok(())
    }

    /// Every user with how they are reached, by name.
    pub async fn all(&self) -> Result<Vec<Reachable>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, role, disabled, email, slack_team_id, slack_user_id FROM app_user \
             ORDER BY name",
        )
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter().map(reachable_from).collect()
    }

    /// User `name` with how they are reached, if they exist.
    pub async fn get(&self, name: &str) -> Result<Option<Reachable>, StoreError> {
        let row = sqlx::query(
            "SELECT name, role, disabled, email, slack_team_id, slack_user_id FROM app_user \
             WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(self.db.pool())
        .await
        .map_err(backend)?;
        row.as_ref().map(reachable_from).transpose()
    }

    /// The playground user a Slack user is, if one is mapped and may log in: who a button press
    /// acts as (with the user's own role).
    pub async fn by_slack(&self, slack: &SlackId) -> Result<Option<Principal>, StoreError> {
        let row = sqlx::query(
            "SELECT name, role FROM app_user WHERE slack_team_id = $1 AND slack_user_id = $2 \
             AND disabled = 0",
        )
        .bind(&slack.team)
        .bind(&slack.user)
        .fetch_optional(self.db.pool())
        .await
        .map_err(backend)?;
        row.map(|row| {
            let role: String = row.try_get("role").map_err(backend)?;
            let role =
                Role::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("role {role}")))?;
            Ok(Principal::user(
                row.try_get::<String, _>("name").map_err(backend)?,
                role,
            ))
        })
        .transpose()
    }
}

fn reachable_from(row: &sqlx::any::AnyRow) -> Result<Reachable, StoreError> {
    let role: String = row.try_get("role").map_err(backend)?;
    let team: Option<String> = row.try_get("slack_team_id").map_err(backend)?;
    let user: Option<String> = row.try_get("slack_user_id").map_err(backend)?;
    Ok(Reachable {
        name: row.try_get("name").map_err(backend)?,
        role: Role::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("role {role}")))?,
        disabled: row.try_get::<i64, _>("disabled").map_err(backend)? != 0,
        contact: Contact {
            email: row.try_get("email").map_err(backend)?,
            slack: team.zip(user).map(|(team, user)| SlackId { team, user }),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_email_address_reads_as_one_mailbox() {
        for good in [
            "alice@example.com",
            "a.b+c@mail.example.org",
            "jörg@exämple.de",
        ] {
            assert_eq!(check_email(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "alice",
            "alice@",
            "@example.com",
            "alice@example",
            "alice@@example.com",
            "alice smith@example.com",
            "alice@example.com\r\nBcc: eve@example.com",
            "<alice@example.com>",
            "a@b.c, eve@example.com",
        ] {
            assert!(check_email(bad).is_err(), "{bad:?} was taken");
        }
        let long = format!("{}@example.com", "a".repeat(250));
        assert!(check_email(&long).is_err());
    }

    #[test]
    fn a_slack_id_is_upper_case_letters_and_digits() {
        assert_eq!(check_slack_id("team", "T024BE7LD"), Ok(()));
        for bad in [
            "",
            "T",
            "t024be7ld",
            "U0G9 QF9C6",
            "U0G9<b>",
            &"U".repeat(33),
        ] {
            assert!(check_slack_id("team", bad).is_err(), "{bad:?} was taken");
        }
    }
}
