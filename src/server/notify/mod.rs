//! Telling people a run waits for them, where they are: a mail with signed *Approve* and *Deny*
//! links to each person the configuration names who may decide the run (the core's authority
//! says who may: role, four-eyes), and a message with buttons in the configuration's Slack
//! channel; again after `remind_after`, and to `escalate_to` (people, roles, Slack channels)
//! after `escalate_after`. A posted Slack message is updated to say who decided what once its
//! turn is decided, anywhere.
//!
//! Every notification goes through the durable outbox ([`NotificationStore`]): a round and its
//! notifications are written once whatever the instances, each is sent by one instance at a
//! time with retries like a webhook's, and its record (who was told, how, when, delivered or
//! not) shows on the run page. Nothing here is on a decision's path: a dead mail server shows on
//! the run page and `/system`, never as an error on a decision, and nothing is journaled, so the
//! turn's digest, and every open page and link, stays valid.

pub mod hooks;
pub mod links;
pub mod mail;
pub mod slack;

use std::sync::Arc;
use std::time::Duration;

use nrllm_core::authority::Act;
use nrllm_core::clock::{format_utc, now_ms};
use nrllm_core::moves::BulkVerdict;
use nrllm_core::offer::{offer_expiry, Channel};
use nrllm_core::run_service::{PendingTurn, RunService};
use nrllm_core::run_store::RunRecord;
use nrllm_core::run_store::StoreError;
use nrllm_store::accounts::AccountStore;
use nrllm_store::contacts::{ContactStore, Reachable};
use nrllm_store::notifications::{
    ClaimedNotification, DueTurn, NewNotification, Notification, NotificationStore, Round,
};
use nrllm_store::webhooks::{Attempt, DeliveryState};
use tokio_util::sync::CancellationToken;

use crate::page_data::{ApprovalsView, WebhookView};
use crate::server::outbox::{failed_attempt, Bell};
use crate::settings::notify::{Audience, Policy};
use crate::settings::Settings;
use links::{Link, LinkKey};

/// Checked for due rounds and notifications this often when nothing wakes the sender.
const POLL: Duration = Duration::from_secs(1);
/// An instance holds a notification it sends this long.
const LEASE: Duration = Duration::from_secs(60);
/// Turns that began waiting longer ago than this get no first round any more (turning mail on
/// does not mail every old waiting run).
const LOOKBACK_MS: i64 = 24 * 3_600_000;
/// Rounds planned and notifications sent per pass.
const BATCH: u32 = 16;

/// One round a policy asks for: when it is due after the turn began to wait, the people it
/// goes to, and the Slack channels it is posted in.
struct Due<'a> {
    round: Round,
    after_ms: u64,
    people: &'a Audience,
    channels: Vec<&'a str>,
}

/// The rounds `policy` asks for.
fn rounds(policy: &Policy) -> Vec<Due<'_>> {
    let mut rounds = Vec::new();
    let channels: Vec<&str> = policy.slack_channel.as_deref().into_iter().collect();
    if !policy.to.is_empty() || !channels.is_empty() {
        let due = |round, after_ms| Due {
            round,
            after_ms,
            people: &policy.to,
            channels: channels.clone(),
        };
        rounds.push(due(Round::Waiting, 0));
        if let Some(after) = policy.remind_after_ms {
            rounds.push(due(Round::Reminder, after));
        }
    }
    if let Some(after) = policy.escalate_after_ms {
        rounds.push(Due {
            round: Round::Escalation,
            after_ms: after,
            people: &policy.escalate_to,
            channels: policy
                .escalate_to
                .channels
                .iter()
                .map(String::as_str)
                .collect(),
        });
    }
    rounds
}

/// Slack, when its bot token is set: the Web API client and the secret presses are signed with.
pub struct SlackApp {
    pub client: slack::Client,
    pub signing_secret: String,
}

impl SlackApp {
    /// Slack as `settings` name it, if its bot token is in the environment (the signing secret
    /// must be too: presses could not be checked without it).
    pub fn from_settings(
        settings: &crate::settings::notify::Slack,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<SlackApp>, String> {
        let Some(token) = env(&settings.bot_token_env).filter(|t| !t.is_empty()) else {
            return Ok(None);
        };
        let signing_secret = env(&settings.signing_secret_env)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                format!(
                    "{} is set but {} is not: Slack's button presses could not be checked; set \
                     the app's signing secret",
                    settings.bot_token_env, settings.signing_secret_env
                )
            })?;
        Ok(Some(SlackApp {
            client: slack::Client::new(&settings.api_url, token)?,
            signing_secret,
        }))
    }
}

/// Makes and sends the notifications.
pub struct Notifier {
    store: NotificationStore,
    contacts: ContactStore,
    runs: Arc<RunService>,
    accounts: AccountStore,
    /// Each configuration's policy, for those that notify anyone.
    policies: Vec<(String, Policy)>,
    mailer: Option<mail::Mailer>,
    slack: Option<Arc<SlackApp>>,
    links: LinkKey,
    bell: Arc<Bell>,
    public_url: String,
    max_attempts: u32,
    backoff_ms: u32,
}

/// The notifications as the app holds them.
#[derive(Clone)]
pub struct Wiring {
    /// The outbox, and the decision links that decided.
    pub store: NotificationStore,
    /// Users' addresses and Slack identities.
    pub contacts: ContactStore,
    /// Signs and reads decision links.
    pub links: LinkKey,
    /// Sends the notifications, if anyone is notified of anything.
    pub sender: Option<Arc<Notifier>>,
    /// Slack, if its bot token is set.
    pub slack: Option<Arc<SlackApp>>,
}

/// What the notifier needs besides the settings.
pub struct Parts {
    pub store: NotificationStore,
    pub contacts: ContactStore,
    pub runs: Arc<RunService>,
    /// Who may still approve a turn that needs several approvals is said from the users.
    pub accounts: AccountStore,
    pub links: LinkKey,
    pub bell: Arc<Bell>,
    pub slack: Option<Arc<SlackApp>>,
}

impl Notifier {
    /// The notifier for `settings`' configurations (`configurations`: every configuration's
    /// name, the demo's too), or `None` when nobody is notified of anything.
    pub fn new(
        parts: Parts,
        settings: &Settings,
        configurations: &[String],
    ) -> Result<Option<Notifier>, String> {
        let own = |name: &str| {
            settings
                .configurations
                .iter()
                .find(|c| c.name == name)
                .and_then(|c| c.notify.as_ref())
        };
        let mut policies = Vec::new();
        for name in configurations {
            let policy = settings.notifications.policy(own(name))?;
            if !rounds(&policy).is_empty() {
                policies.push((name.clone(), policy));
            }
        }
        let mailer = match &settings.notifications.mail {
            Some(mail) => Some(mail::Mailer::new(
                mail,
                std::env::var(&mail.password_env).ok(),
            )?),
            None => None,
        };
        if policies.is_empty() || (mailer.is_none() && parts.slack.is_none()) {
            return Ok(None);
        }
        Ok(Some(Notifier {
            store: parts.store,
            contacts: parts.contacts,
            runs: parts.runs,
            accounts: parts.accounts,
            policies,
            mailer,
            slack: parts.slack,
            links: parts.links,
            bell: parts.bell,
            public_url: settings.public_url.clone(),
            max_attempts: settings.webhook_max_attempts,
            backoff_ms: settings.webhook_backoff_ms,
        }))
    }

    /// Plans and sends until `shutdown`: at once when a run begins to wait here, and every
    /// second for reminders, retries and runs that wait elsewhere.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let passes = (POLL, &*self.bell, shutdown);
        crate::server::outbox::keep_passing("notifications", passes, || self.pass()).await;
    }

    /// One pass: every due round written with its notifications, then every due notification
    /// sent.
    pub async fn pass(&self) -> Result<(), StoreError> {
        let now = now_ms();
        // Who can be mailed, read once a pass and only when a round is due.
        let mut people = None;
        for (configuration, policy) in &self.policies {
            for due in rounds(policy) {
                let after = i64::try_from(due.after_ms).unwrap_or(i64::MAX / 2);
                let window = (now - LOOKBACK_MS - after, now.saturating_sub(after));
                let turns = self
                    .store
                    .due(configuration, due.round, window, BATCH)
                    .await?;
                for turn in turns {
                    let people = match &mut people {
                        Some(people) => people,
                        None => people.insert(self.mailable().await?),
                    };
                    self.plan(&turn, &due, people, now).await?;
                }
            }
        }
        let claimed = self
            .store
            .claim_due(now, now + LEASE.as_millis() as i64, BATCH)
            .await?;
        let sent = futures::future::join_all(claimed.into_iter().map(|c| self.send(c))).await;
        sent.into_iter().collect::<Result<(), StoreError>>()?;
        self.close_decided(now).await
    }

    /// Updates each posted Slack message whose turn was decided to say who decided what.
    async fn close_decided(&self, now: i64) -> Result<(), StoreError> {
        let Some(slack) = &self.slack else {
            return Ok(());
        };
        for note in self.store.to_close(BATCH).await? {
            let Some((channel, ts)) = note.message_ref.as_deref().and_then(|r| r.split_once(' '))
            else {
                continue;
            };
            let outcome = match self.runs.store().get(note.run_id).await? {
                Some(run) => outcome_text(&run),
                None => "deleted".to_owned(),
            };
            let mut body = slack::closed(note.run_id, &outcome, &self.public_url);
            body["channel"] = channel.into();
            body["ts"] = ts.into();
            match slack.client.call("chat.update", &body).await {
                Ok(_) => {
                    self.store.close(note.id, now).await?;
                }
                // Refused for good (the message or channel is gone): nothing more to update.
                Err(slack::CallError::Refused(error)) => {
                    tracing::warn!(notification = %note.id, %error, "a Slack message could not be updated");
                    self.store.close(note.id, now).await?;
                }
                // Slack unreachable: the next pass tries again (and this one asks no more).
                Err(slack::CallError::Unreachable(_)) => break,
            }
        }
        Ok(())
    }

    /// The users a mail can reach: those who may log in and have an address (none without a
    /// mail server).
    async fn mailable(&self) -> Result<Vec<Reachable>, StoreError> {
        if self.mailer.is_none() {
            return Ok(Vec::new());
        }
        let mut people = self.contacts.all().await?;
        people.retain(|person| !person.disabled && person.contact.email.is_some());
        Ok(people)
    }

    /// Writes `due`'s round of `turn` with a mail for each of its `people` who may decide the run
    /// (the authority says, the run's facts read once) and a post in each of its Slack channels.
    async fn plan(
        &self,
        turn: &DueTurn,
        due: &Due<'_>,
        people: &[Reachable],
        now: i64,
    ) -> Result<(), StoreError> {
        let Some(run) = self.runs.store().get(turn.run_id).await? else {
            return Ok(());
        };
        if run.version != turn.run_version {
            return Ok(());
        }
        let named: Vec<&Reachable> = people
            .iter()
            .filter(|person| due.people.includes(&person.name, person.role))
            .collect();
        let actors: Vec<_> = named
            .iter()
            .map(|person| nrllm_store::accounts::Principal::user(person.name.clone(), person.role))
            .collect();
        let allowed = self.runs.may_each(&actors, Act::Decide, &run).await?;
        // A turn that needs several approvals: whoever's approval counts already is not asked
        // again.
        let counted: Vec<String> = match self.runs.tally(&run).await? {
            Some(tally) => tally.leading().iter().map(|v| v.approver.clone()).collect(),
            None => Vec::new(),
        };
        let mut notes: Vec<NewNotification> = named
            .iter()
            .zip(allowed)
            .filter(|(person, allowed)| allowed.is_ok() && !counted.contains(&person.name))
            .filter_map(|(person, _)| {
                Some(NewNotification {
                    channel: Channel::Email,
                    recipient: person.name.clone(),
                    address: person.contact.email.clone()?,
                })
            })
            .collect();
        if self.slack.is_some() {
            notes.extend(due.channels.iter().map(|channel| NewNotification {
                channel: Channel::Slack,
                recipient: (*channel).to_owned(),
                address: (*channel).to_owned(),
            }));
        }
        if self.store.add_round(turn, due.round, &notes, now).await? {
            tracing::info!(run_id = %turn.run_id, round = due.round.as_str(), people = notes.len(), "notifications planned");
        }
        Ok(())
    }

    async fn send(&self, claimed: ClaimedNotification) -> Result<(), StoreError> {
        let note = &claimed.notification;
        let mut message_ref = None;
        let attempt = if !claimed.still_waiting {
            Attempt::Obsolete
        } else {
            let sent = match note.channel {
                Channel::Email => self.mail(note).await.map(|()| None),
                Channel::Slack => self.post(note).await.map(Some),
            };
            match sent {
                Ok(posted) => {
                    message_ref = posted;
                    Attempt::Delivered { status: 200 }
                }
                Err(error) => {
                    tracing::warn!(notification = %note.id, run_id = %note.run_id, to = %note.recipient, attempt = note.attempts + 1, %error, "a notification failed");
                    let retries = (self.max_attempts, self.backoff_ms);
                    failed_attempt((None, error), (note.attempts, note.id), retries)
                }
            }
        };
        let recorded = self
            .store
            .record(note, &attempt, message_ref.as_deref(), now_ms())
            .await?;
        if !recorded {
            tracing::warn!(notification = %note.id, "a notification's lease ran out before its attempt was recorded");
        }
        Ok(())
    }

    /// Mails `note`'s recipient about its run's turn, with links signed for them.
    async fn mail(&self, note: &Notification) -> Result<(), String> {
        let mailer = self
            .mailer
            .as_ref()
            .ok_or_else(|| "no mail server is set up any more".to_owned())?;
        let (run, pending) = self.waiting_turn(note).await?;
        let now = now_ms();
        let expires = offer_expiry(now, run.approval_deadline_ms);
        let link = |verdict| {
            let link = Link::new(run.id, &pending.digest, &note.recipient, verdict, expires);
            format!(
                "{}/decide?token={}",
                self.public_url,
                self.links.sign(&link)
            )
        };
        let links = mail::Links {
            approve: link(BulkVerdict::ApproveAll),
            deny: link(BulkVerdict::DenyAll),
            open: format!("{}/runs/{}", self.public_url, run.id),
        };
        let approvals = self.approvals(&run).await;
        let content = mail::compose(
            &run,
            (&pending, approvals.as_ref()),
            note.round,
            expires,
            &links,
        );
        mailer.send(&note.address, &content).await
    }
}

impl Notifier {
    /// Where `run`'s approvals stand, if its turn needs several (a failure to read them is
    /// logged, and the notification goes without them).
    async fn approvals(&self, run: &RunRecord) -> Option<ApprovalsView> {
        crate::server::approvals::approvals_view((&self.accounts, &self.runs), run, None)
            .await
            .unwrap_or_else(|err| {
                tracing::warn!(run_id = %run.id, %err, "a turn's approvals could not be read");
                None
            })
    }

    /// `note`'s run and the turn it waits on, as a decision on it would see them.
    async fn waiting_turn(&self, note: &Notification) -> Result<(RunRecord, PendingTurn), String> {
        let run = match self.runs.store().get(note.run_id).await {
            Ok(Some(run)) => run,
            _ => return Err("the run could not be read".to_owned()),
        };
        let pending = self
            .runs
            .pending(&run)
            .await
            .ok_or_else(|| "the run's waiting turn could not be read".to_owned())?;
        Ok((run, pending))
    }

    /// Posts `note`'s run in its Slack channel; what Slack calls the message (`channel ts`).
    async fn post(&self, note: &Notification) -> Result<String, String> {
        let slack = self
            .slack
            .as_ref()
            .ok_or_else(|| "Slack is not set up any more".to_owned())?;
        let (run, pending) = self.waiting_turn(note).await?;
        let now = now_ms();
        let expires = offer_expiry(now, run.approval_deadline_ms);
        let approvals = self.approvals(&run).await;
        let mut body = slack::message(
            &run,
            (&pending, approvals.as_ref()),
            (note.round, expires, now),
            &self.public_url,
        );
        body["channel"] = note.address.clone().into();
        let answer = slack
            .client
            .call("chat.postMessage", &body)
            .await
            .map_err(|err| err.to_string())?;
        let channel = answer["channel"].as_str().unwrap_or(&note.address);
        let ts = answer["ts"]
            .as_str()
            .ok_or_else(|| "Slack's answer named no message".to_owned())?;
        Ok(format!("{channel} {ts}"))
    }
}

/// Who decided what on a run, for a message updated after the decision.
fn outcome_text(run: &RunRecord) -> String {
    crate::server::present::decided(run)
        .unwrap_or_else(|| format!("no longer waiting (it is {})", run.status))
}

/// What the run page says of a notification.
pub fn notification_view(note: &Notification) -> WebhookView {
    let how = match note.channel {
        Channel::Email => format!("mail to {}", note.recipient),
        Channel::Slack => format!("Slack message in {}", note.recipient),
    };
    let round = match note.round {
        Round::Waiting => "",
        Round::Reminder => " (reminder)",
        Round::Escalation => " (escalation)",
    };
    let attempts = note.attempts;
    let plural = if attempts == 1 { "attempt" } else { "attempts" };
    let last = note.last_error.as_deref().unwrap_or("no answer");
    let text = match note.state {
        DeliveryState::Pending if attempts == 0 => format!("{how}{round}: sending"),
        DeliveryState::Pending => format!(
            "{how}{round}: attempt {attempts} failed ({last}); trying again at {}",
            format_utc(note.next_attempt_at_ms)
        ),
        DeliveryState::Delivered => format!(
            "{how}{round}: sent at {}",
            format_utc(note.delivered_at_ms.unwrap_or(note.updated_at_ms))
        ),
        DeliveryState::Failed => {
            format!("{how}{round}: failed after {attempts} {plural} ({last}); nothing more is sent")
        }
        DeliveryState::Obsolete | DeliveryState::Skipped => {
            format!("{how}{round}: not sent: the run was decided first")
        }
    };
    WebhookView {
        state: note.state.as_str().to_owned(),
        attempts,
        text,
    }
}

/// A run's notifications as the run page shows them.
pub async fn run_notifications(
    store: &NotificationStore,
    run_id: uuid::Uuid,
) -> Result<Vec<WebhookView>, StoreError> {
    Ok(store
        .for_run(run_id)
        .await?
        .iter()
        .map(notification_view)
        .collect())
}
