//! Who is told when a run waits, and how: `[notifications]` (the mail server, the defaults) and a
//! configuration's `notify = { … }` over them.
//!
//! ```toml
//! [notifications]
//! smtp_url = "smtp://mail.example.com:587"   # STARTTLS; smtps:// for TLS from the start
//! mail_from = "Playground <nrllm@example.com>"
//! to = ["role:approver"]                      # users by name, or everyone of a role
//! remind_after = "30m"
//! escalate_after = "2h"
//! escalate_to = ["role:admin"]
//! ```
//!
//! The mail server's password comes only from the environment (`smtp_password_env`, default
//! `NRLLM_SMTP_PASSWORD`); its user name may ride in the URL. Slack: `slack_channel` (a channel
//! id, here or per configuration; `slack:<channel>` in `escalate_to`), `slack_api_url` (default
//! Slack's own), and the bot token and signing secret only from the environment
//! (`NRLLM_SLACK_BOT_TOKEN`, `NRLLM_SLACK_SIGNING_SECRET`, or the variables
//! `slack_bot_token_env` and `slack_signing_secret_env` name).

use serde::Deserialize;

use super::parse::parse_timeout;
use nrllm_types::Role;

/// `[notifications]` as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationsFile {
    pub smtp_url: Option<String>,
    pub smtp_password_env: Option<String>,
    pub mail_from: Option<String>,
    pub to: Option<Vec<String>>,
    pub remind_after: Option<String>,
    pub escalate_after: Option<String>,
    pub escalate_to: Option<Vec<String>>,
    pub slack_channel: Option<String>,
    pub slack_api_url: Option<String>,
    pub slack_bot_token_env: Option<String>,
    pub slack_signing_secret_env: Option<String>,
}

/// A configuration's `notify = { … }`: each field over `[notifications]`'s.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyFile {
    pub to: Option<Vec<String>>,
    pub remind_after: Option<String>,
    pub escalate_after: Option<String>,
    pub escalate_to: Option<Vec<String>>,
    /// The Slack channel its waiting runs are posted in (`""`: none).
    pub slack_channel: Option<String>,
}

/// Whom a round goes to: users by name, everyone of some roles (or above), Slack channels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Audience {
    pub users: Vec<String>,
    pub roles: Vec<Role>,
    pub channels: Vec<String>,
}

/// `id` if it reads as a Slack channel id (`C024BE91L`), else why not.
fn check_channel(id: &str) -> Result<String, String> {
    let id = id.trim();
    match nrllm_store::contacts::check_slack_id("a Slack channel", id) {
        Ok(()) => Ok(id.to_owned()),
        Err(message) => Err(format!("`{id}`: {message}")),
    }
}

impl Audience {
    /// `["alice", "role:approver"]`, checked.
    pub fn parse(entries: &[String]) -> Result<Audience, String> {
        let mut audience = Audience::default();
        for entry in entries {
            let entry = entry.trim();
            if let Some(channel) = entry.strip_prefix("slack:") {
                audience.channels.push(check_channel(channel)?);
                continue;
            }
            match entry.strip_prefix("role:") {
                Some(role) => audience.roles.push(Role::parse(role).ok_or_else(|| {
                    format!("`{entry}`: a role is one of viewer, operator, approver, admin")
                })?),
                None => {
                    nrllm_store::accounts::check_name(entry)
                        .map_err(|message| format!("`{entry}`: a user's name is {message}"))?;
                    audience.users.push(entry.to_owned());
                }
            }
        }
        Ok(audience)
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty() && self.roles.is_empty() && self.channels.is_empty()
    }

    /// Whether user `name` of `role` is in it (a role entry takes that role and above).
    pub fn includes(&self, name: &str, role: Role) -> bool {
        self.users.iter().any(|user| user == name) || self.roles.iter().any(|r| role.allows(*r))
    }
}

/// Whom a configuration's waiting runs are told about, and when again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Told when a turn begins to wait, and reminded.
    pub to: Audience,
    pub remind_after_ms: Option<u64>,
    pub escalate_after_ms: Option<u64>,
    /// Told at the escalation.
    pub escalate_to: Audience,
    /// Where its waiting runs are posted in Slack (and reminded), if anywhere.
    pub slack_channel: Option<String>,
}

/// Slack: where its Web API is, and the environment variables with the bot token and the
/// signing secret (the values are read at start, never written anywhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slack {
    pub api_url: String,
    pub bot_token_env: String,
    pub signing_secret_env: String,
}

/// The mail server and the sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mail {
    pub smtp_url: String,
    pub password_env: String,
    pub from: String,
}

/// `[notifications]`, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Notifications {
    /// `None`: no mail is sent.
    pub mail: Option<Mail>,
    /// Slack's API and secrets' names (whether Slack is on depends on the token being set).
    pub slack: Slack,
    /// What a configuration without `notify` gets.
    pub defaults: Policy,
}

impl Default for Slack {
    fn default() -> Slack {
        Slack {
            api_url: "https://slack.com/api".to_owned(),
            bot_token_env: "NRLLM_SLACK_BOT_TOKEN".to_owned(),
            signing_secret_env: "NRLLM_SLACK_SIGNING_SECRET".to_owned(),
        }
    }
}

fn duration(field: &str, value: Option<&str>) -> Result<Option<u64>, String> {
    value
        .map(|v| parse_timeout(v).map_err(|message| format!("{field}: {message}")))
        .transpose()
        .map(Option::flatten)
}

/// `smtp://`, `smtps://` with a host, else why not.
fn check_smtp_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("smtp://")
        .or_else(|| url.strip_prefix("smtps://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') && !url.contains(char::is_whitespace) => Ok(()),
        _ => Err(
            "smtp_url: smtp://host:port (STARTTLS when the server offers it; add ?tls=required to insist) or smtps://host:port (TLS from the start)"
                .to_owned(),
        ),
    }
}

impl Notifications {
    /// `[notifications]` as written, checked.
    pub fn from_file(file: NotificationsFile) -> Result<Notifications, String> {
        let mail = match (file.smtp_url, file.mail_from) {
            (None, None) => None,
            (Some(url), Some(from)) => {
                check_smtp_url(&url)?;
                if from.trim().is_empty() || from.contains(['\r', '\n']) {
                    return Err(
                        "mail_from: a sender such as \"Playground <nrllm@example.com>\"".to_owned(),
                    );
                }
                Some(Mail {
                    smtp_url: url,
                    password_env: file
                        .smtp_password_env
                        .unwrap_or_else(|| "NRLLM_SMTP_PASSWORD".to_owned()),
                    from,
                })
            }
            (Some(_), None) => {
                return Err(
                    "mail_from: set it beside smtp_url (whom the mail comes from)".to_owned(),
                )
            }
            (None, Some(_)) => {
                return Err(
                    "smtp_url: set it beside mail_from (the server that sends the mail)".to_owned(),
                )
            }
        };
        let base = Slack::default();
        let slack = Slack {
            api_url: match file.slack_api_url {
                Some(url) => super::parse::web_url(url.trim_end_matches('/'))
                    .map_err(|_| "slack_api_url: http:// or https:// and a host".to_owned())?,
                None => base.api_url,
            },
            bot_token_env: file.slack_bot_token_env.unwrap_or(base.bot_token_env),
            signing_secret_env: file
                .slack_signing_secret_env
                .unwrap_or(base.signing_secret_env),
        };
        let defaults = policy_of(
            &NotifyFile {
                to: file.to,
                remind_after: file.remind_after,
                escalate_after: file.escalate_after,
                escalate_to: file.escalate_to,
                slack_channel: file.slack_channel,
            },
            &Policy::default(),
        )?;
        Ok(Notifications {
            mail,
            slack,
            defaults,
        })
    }

    /// The policy of a configuration with `notify` (if it has one).
    pub fn policy(&self, notify: Option<&NotifyFile>) -> Result<Policy, String> {
        match notify {
            None => Ok(self.defaults.clone()),
            Some(notify) => policy_of(notify, &self.defaults),
        }
    }
}

/// `file` over `base`, field by field, checked.
pub fn policy_of(file: &NotifyFile, base: &Policy) -> Result<Policy, String> {
    let audience = |field: &str, entries: &Option<Vec<String>>, base: &Audience| match entries {
        Some(entries) => Audience::parse(entries).map_err(|message| format!("{field}: {message}")),
        None => Ok(base.clone()),
    };
    let policy = Policy {
        to: audience("to", &file.to, &base.to)?,
        remind_after_ms: match &file.remind_after {
            Some(value) => duration("remind_after", Some(value))?,
            None => base.remind_after_ms,
        },
        escalate_after_ms: match &file.escalate_after {
            Some(value) => duration("escalate_after", Some(value))?,
            None => base.escalate_after_ms,
        },
        escalate_to: audience("escalate_to", &file.escalate_to, &base.escalate_to)?,
        slack_channel: match file.slack_channel.as_deref().map(str::trim) {
            Some("") => None,
            Some(channel) => {
                Some(check_channel(channel).map_err(|m| format!("slack_channel: {m}"))?)
            }
            None => base.slack_channel.clone(),
        },
    };
    if policy.escalate_after_ms.is_some() && policy.escalate_to.is_empty() {
        return Err("escalate_after: name whom to escalate to (escalate_to)".to_owned());
    }
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Option<Vec<String>> {
        Some(items.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn an_audience_names_users_and_roles_and_refuses_anything_else() {
        let audience = Audience::parse(&strings(&["alice", "role:approver"]).unwrap()).unwrap();
        assert_eq!(audience.users, ["alice"]);
        assert_eq!(audience.roles, [Role::Approver]);
        assert!(audience.includes("alice", Role::Viewer));
        assert!(
            audience.includes("bob", Role::Admin),
            "a role takes those above it"
        );
        assert!(!audience.includes("bob", Role::Operator));
        let err = Audience::parse(&strings(&["role:boss"]).unwrap()).unwrap_err();
        assert!(err.contains("viewer, operator, approver, admin"), "{err}");
        assert!(Audience::parse(&strings(&["al ice"]).unwrap()).is_err());
        let channels = Audience::parse(&strings(&["slack:C024BE91L"]).unwrap()).unwrap();
        assert_eq!(channels.channels, ["C024BE91L"]);
        assert!(!channels.is_empty());
        assert!(Audience::parse(&strings(&["slack:#general"]).unwrap()).is_err());
    }

    #[test]
    fn a_slack_channel_is_an_id_and_an_empty_one_turns_it_off() {
        let base = Policy {
            slack_channel: Some("C1".into()),
            ..Policy::default()
        };
        let off = NotifyFile {
            slack_channel: Some(String::new()),
            ..NotifyFile::default()
        };
        assert_eq!(policy_of(&off, &base).unwrap().slack_channel, None);
        assert_eq!(
            policy_of(&NotifyFile::default(), &base)
                .unwrap()
                .slack_channel
                .as_deref(),
            Some("C1")
        );
        let bad = NotifyFile {
            slack_channel: Some("general".into()),
            ..NotifyFile::default()
        };
        assert!(policy_of(&bad, &base)
            .unwrap_err()
            .starts_with("slack_channel"));
        let slack = Notifications::from_file(NotificationsFile {
            slack_api_url: Some("http://127.0.0.1:9/api/".into()),
            ..NotificationsFile::default()
        })
        .unwrap()
        .slack;
        assert_eq!(slack.api_url, "http://127.0.0.1:9/api");
        assert_eq!(slack.bot_token_env, "NRLLM_SLACK_BOT_TOKEN");
    }

    #[test]
    fn a_configuration_s_notify_goes_over_the_defaults_field_by_field() {
        let notifications = Notifications::from_file(NotificationsFile {
            smtp_url: Some("smtp://127.0.0.1:2525".into()),
            mail_from: Some("Playground <nrllm@example.com>".into()),
            to: strings(&["role:approver"]),
            remind_after: Some("30m".into()),
            ..NotificationsFile::default()
        })
        .unwrap();
        let mail = notifications.mail.clone().unwrap();
        assert_eq!(mail.password_env, "NRLLM_SMTP_PASSWORD");
        let own = notifications
            .policy(Some(&NotifyFile {
                to: strings(&["alice"]),
                escalate_after: Some("2h".into()),
                escalate_to: strings(&["role:admin"]),
                ..NotifyFile::default()
            }))
            .unwrap();
        assert_eq!(own.to.users, ["alice"]);
        assert_eq!(
            own.remind_after_ms,
            Some(30 * 60_000),
            "kept from the defaults"
        );
        assert_eq!(own.escalate_after_ms, Some(2 * 3_600_000));
        assert_eq!(notifications.policy(None).unwrap(), notifications.defaults);
    }

    #[test]
    fn a_half_set_mail_server_or_an_escalation_to_nobody_is_refused() {
        let only_url = NotificationsFile {
            smtp_url: Some("smtp://127.0.0.1:25".into()),
            ..NotificationsFile::default()
        };
        assert!(Notifications::from_file(only_url)
            .unwrap_err()
            .contains("mail_from"));
        let bad_url = NotificationsFile {
            smtp_url: Some("http://mail".into()),
            mail_from: Some("a@example.com".into()),
            ..NotificationsFile::default()
        };
        assert!(Notifications::from_file(bad_url)
            .unwrap_err()
            .starts_with("smtp_url"));
        let header_injection = NotificationsFile {
            smtp_url: Some("smtp://127.0.0.1:25".into()),
            mail_from: Some("a@example.com\r\nBcc: eve@example.com".into()),
            ..NotificationsFile::default()
        };
        assert!(Notifications::from_file(header_injection).is_err());
        let nobody = NotifyFile {
            escalate_after: Some("1h".into()),
            ..NotifyFile::default()
        };
        assert!(policy_of(&nobody, &Policy::default())
            .unwrap_err()
            .contains("escalate_to"));
    }
}
