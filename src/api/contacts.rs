//! Where users are reached when a run waits for them: an email address and a Slack identity
//! (team id and user id), set by an administrator.

use leptos::prelude::*;

use crate::error::AppError;

/// Sets how user `name` is reached (admins only): `email`, and the Slack user `slack_user_id` of
/// team `slack_team_id` (both or neither). An empty field clears. Refused with the field named if
/// an address does not read, or if the Slack user is another user's already.
#[server(endpoint = "nrllm_user_contact")]
pub async fn nrllm_user_contact(
    name: String,
    email: Option<String>,
    slack_team_id: Option<String>,
    slack_user_id: Option<String>,
) -> Result<(), AppError> {
    use crate::api::accounts::ssr::{account_error, go};
    use crate::api::checks::present;
    use nrllm_store::contacts::{Contact, SlackId};
    let who = crate::server::request::require(nrllm_types::Role::Admin)?;
    let state = crate::server::request::state()?;
    let slack = match (present(slack_team_id), present(slack_user_id)) {
        (Some(team), Some(user)) => Some(SlackId { team, user }),
        (None, None) => None,
        (Some(_), None) => {
            return Err(AppError::invalid(
                "slack_user_id",
                "give the Slack user id beside the team id (or clear both)",
            ))
        }
        (None, Some(_)) => {
            return Err(AppError::invalid(
                "slack_team_id",
                "give the Slack team id beside the user id (or clear both)",
            ))
        }
    };
    let contact = Contact {
        email: present(email),
        slack,
    };
    state
        .notify
        .contacts
        .set(name.trim(), &contact)
        .await
        .map_err(account_error)?;
    tracing::info!(by = %who.name, user = %name.trim(), email = contact.email.is_some(), slack = contact.slack.is_some(), "user's addresses changed");
    go("/admin");
    Ok(())
}
