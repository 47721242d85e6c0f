//! Telling people a run waits for them, where they are: a mail with signed *Approve* and *Deny*
//! links to each person the configuration names who may decide the run (the core's authority
//! says who may: role, four-eyes), again after `remind_after`, and to `escalate_to` after
//! `escalate_after`.
//!
//! Every notification goes through the durable outbox ([`NotificationStore`]): a round and its
//! notifications are written once whatever the instances, each is sent by one instance at a
//! time with retries like a webhook's, and its record (who was told, how, when, delivered or
//! not) shows on the run page. Nothing here is on a decision's path: a dead mail server shows on
//! the run page and `/system`, never as an error on a decision, and nothing is journaled, so the
//! turn's digest, and every open page and link, stays valid.

pub mod links;
pub mod mail;

use std::sync::Arc;
use std::time::Duration;

use nrllm_core::authority::Act;
use nrllm_core::clock::{format_utc, now_ms};
use nrllm_core::moves::BulkVerdict;
use nrllm_core::offer::{offer_expiry, Channel};
use nrllm_core::run_service::RunService;
use nrllm_core::run_store::StoreError;
use nrllm_store::contacts::ContactStore;
use nrllm_store::notifications::{
    ClaimedNotification, DueTurn, NewNotification, Notification, NotificationStore, Round,
};
use nrllm_store::webhooks::{Attempt, DeliveryState};
use tokio_util::sync::CancellationToken;

use crate::page_data::WebhookView;
use crate::server::webhook::{retry_wait_ms, Bell};
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

/// The rounds `policy` asks for: each round, how long after the turn began to wait it is due,
/// and whom it goes to.
fn rounds(policy: &Policy) -> Vec<(Round, u64, &Audience)> {
    let mut rounds = Vec::new();
    if !policy.to.is_empty() {
        rounds.push((Round::Waiting, 0, &policy.to));
        if let Some(after) = policy.remind_after_ms {
            rounds.push((Round::Reminder, after, &policy.to));
        }
    }
    if let Some(after) = policy.escalate_after_ms {
        rounds.push((Round::Escalation, after, &policy.escalate_to));
    }
    rounds
}

/// Makes and sends the notifications.
pub struct Notifier {
    store: NotificationStore,
    contacts: ContactStore,
    runs: Arc<RunService>,
    /// Each configuration's policy, for those that notify anyone.
    policies: Vec<(String, Policy)>,
    mailer: Option<mail::Mailer>,
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
}

/// What the notifier needs besides the settings.
pub struct Parts {
    pub store: NotificationStore,
    pub contacts: ContactStore,
    pub runs: Arc<RunService>,
    pub links: LinkKey,
    pub bell: Arc<Bell>,
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
        if policies.is_empty() || mailer.is_none() {
            return Ok(None);
        }
        Ok(Some(Notifier {
            store: parts.store,
            contacts: parts.contacts,
            runs: parts.runs,
            policies,
            mailer,
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
        loop {
            if let Err(err) = self.pass().await {
                tracing::error!(%err, "notifications");
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.bell.wait() => {}
                _ = tokio::time::sleep(POLL) => {}
            }
        }
    }

    /// One pass: every due round written with its notifications, then every due notification
    /// sent.
    pub async fn pass(&self) -> Result<(), StoreError> {
        let now = now_ms();
        for (configuration, policy) in &self.policies {
            for (round, after, audience) in rounds(policy) {
                let until = now.saturating_sub(i64::try_from(after).unwrap_or(i64::MAX));
                let window = (now - LOOKBACK_MS - i64::try_from(after).unwrap_or(0), until);
                for turn in self.store.due(configuration, round, window, BATCH).await? {
                    self.plan(&turn, round, audience, now).await?;
                }
            }
        }
        let claimed = self
            .store
            .claim_due(now, now + LEASE.as_millis() as i64, BATCH)
            .await?;
        let sent = futures::future::join_all(claimed.into_iter().map(|c| self.send(c))).await;
        sent.into_iter().collect()
    }

    /// Writes `round` of `turn` with a notification for each person of `audience` who may
    /// decide the run (the authority says) and can be reached.
    async fn plan(
        &self,
        turn: &DueTurn,
        round: Round,
        audience: &Audience,
        now: i64,
    ) -> Result<(), StoreError> {
        let Some(run) = self.runs.store().get(turn.run_id).await? else {
            return Ok(());
        };
        if run.version != turn.run_version {
            return Ok(());
        }
        let mut notes = Vec::new();
        for person in self.contacts.all().await? {
            if person.disabled || !audience.includes(&person.name, person.role) {
                continue;
            }
            let Some(email) = person.contact.email.clone() else {
                continue;
            };
            let who = nrllm_store::accounts::Principal::user(person.name.clone(), person.role);
            if !matches!(self.runs.may(&who, Act::Decide, &run).await?, Ok(())) {
                continue;
            }
            notes.push(NewNotification {
                channel: Channel::Email,
                recipient: person.name,
                address: email,
            });
        }
        if self.store.add_round(turn, round, &notes, now).await? {
            tracing::info!(run_id = %turn.run_id, round = round.as_str(), people = notes.len(), "notifications planned");
        }
        Ok(())
    }

    async fn send(&self, claimed: ClaimedNotification) -> Result<(), StoreError> {
        let note = &claimed.notification;
        let attempt = if !claimed.still_waiting {
            Attempt::Obsolete
        } else {
            let sent = match note.channel {
                Channel::Email => self.mail(note).await,
                Channel::Slack => Err("Slack is not set up on this server".to_owned()),
            };
            match sent {
                Ok(()) => Attempt::Delivered { status: 250 },
                Err(error) => {
                    let attempts = note.attempts + 1;
                    let retry_at_ms = (attempts < i64::from(self.max_attempts))
                        .then(|| now_ms() + retry_wait_ms(self.backoff_ms, attempts, note.id));
                    tracing::warn!(notification = %note.id, run_id = %note.run_id, to = %note.recipient, attempt = attempts, %error, "a notification failed");
                    Attempt::Failed {
                        status: None,
                        error,
                        retry_at_ms,
                    }
                }
            }
        };
        if !self.store.record(note, &attempt, None, now_ms()).await? {
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
        let run = match self.runs.store().get(note.run_id).await {
            Ok(Some(run)) => run,
            _ => return Err("the run could not be read".to_owned()),
        };
        let pending = self
            .runs
            .pending(&run)
            .await
            .ok_or_else(|| "the run's waiting turn could not be read".to_owned())?;
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
        let content = mail::compose(&run, &pending, note.round, expires, &links);
        mailer.send(&note.address, &content).await
    }
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
