//! Slack: a waiting run posted in a channel as a Block Kit message with its calls, previews and
//! the buttons *Approve*, *Deny* and *Open* (`chat.postMessage`); the message updated to say who
//! decided what once the turn is decided, anywhere (`chat.update`); and the presses, which Slack
//! posts to [`INTERACTIONS_PATH`] signed with the app's signing secret (`v0:` timestamp and body,
//! HMAC-SHA256). Every string a run supplied goes in `plain_text` objects (Slack never reads
//! markup, links or mentions in them) and is cut to Slack's limits.

use std::time::Duration;

use nrllm_core::preview::cut;
use nrllm_core::run_service::PendingTurn;
use nrllm_core::run_store::RunRecord;
use nrllm_store::notifications::Round;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::page_data::ApprovalsView;

/// Where Slack posts button presses.
pub const INTERACTIONS_PATH: &str = "/hooks/slack/interactions";
/// A press signed longer ago (or further ahead) than this is refused: a recorded one cannot be
/// replayed later.
pub const MAX_SKEW_SECS: i64 = 300;
/// Calls listed in one message (Slack takes 50 blocks).
const MAX_CALLS: usize = 10;
/// Characters of a call's arguments shown (a section's text takes 3000).
const MAX_ARGUMENT_CHARS: usize = 1_500;
/// One API call may take this long (Slack answers a press within 3 s; ours answers first).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What a button carries: the run, the turn it was posted for, and when (its offer expires with
/// the turn, at most seven days after).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ButtonValue {
    pub run: uuid::Uuid,
    pub digest: String,
    pub sent_at_ms: i64,
}

fn plain(text: &str) -> Value {
    json!({ "type": "plain_text", "text": text, "emoji": false })
}

/// The message for `run` waiting on `pending`: a headline, each call with its arguments and
/// preview, and the buttons.
pub fn message(
    run: &RunRecord,
    (pending, approvals): (&PendingTurn, Option<&ApprovalsView>),
    (round, links_expire_ms, now_ms): (Round, i64, i64),
    public_url: &str,
) -> Value {
    let short = &run.id.to_string()[..8];
    let lead = match round {
        Round::Waiting => "waits for a decision",
        Round::Reminder => "still waits for a decision (a reminder)",
        Round::Escalation => "has waited too long for a decision (escalated)",
    };
    let headline = format!(
        "Run {short} ({}, requested by {}) {lead}. {}",
        run.configuration
            .as_ref()
            .map_or("", |c| c.provider.as_str()),
        cut(&run.requested_by, 64),
        super::mail::by_when(run, links_expire_ms)
    );
    let mut blocks = vec![json!({ "type": "section", "text": plain(&headline) })];
    if let Some(approvals) = approvals {
        let line = super::mail::count_line(approvals);
        blocks.push(json!({ "type": "context", "elements": [plain(&line)] }));
    }
    for (call, preview) in pending
        .state
        .pending
        .iter()
        .zip(&pending.previews)
        .take(MAX_CALLS)
    {
        let gate = if preview.gated {
            "waits for approval"
        } else {
            "runs with the turn"
        };
        let mut text = format!(
            "{} ({gate})\n{}",
            cut(&call.name, 100),
            cut(&call.arguments, MAX_ARGUMENT_CHARS)
        );
        if let Some(summary) = crate::server::webhook::preview_summary(&preview.outcome) {
            text.push_str(&format!("\npreview: {}", cut(&summary, 500)));
        }
        blocks.push(json!({ "type": "section", "text": plain(&text) }));
    }
    let more = pending.state.pending.len().saturating_sub(MAX_CALLS);
    if more > 0 {
        let text = format!("... and {more} more call(s): open the run to see them.");
        blocks.push(json!({ "type": "context", "elements": [plain(&text)] }));
    }
    let value = serde_json::to_string(&ButtonValue {
        run: run.id,
        digest: pending.digest.clone(),
        sent_at_ms: now_ms,
    })
    .unwrap_or_default();
    blocks.push(json!({
        "type": "actions",
        "block_id": "nrllm_decide",
        "elements": [
            { "type": "button", "action_id": "approve_all", "style": "primary", "text": plain("Approve"), "value": value },
            { "type": "button", "action_id": "deny_all", "style": "danger", "text": plain("Deny"), "value": value },
            { "type": "button", "action_id": "open", "text": plain("Open"), "url": format!("{public_url}/runs/{}", run.id) },
        ],
    }));
    json!({ "text": headline, "blocks": blocks })
}

/// The message that replaces a posted one once its turn is decided: `outcome` says who decided
/// what (or how the run went on).
pub fn closed(run_id: uuid::Uuid, outcome: &str, public_url: &str) -> Value {
    let text = format!("Run {}: {outcome}.", &run_id.to_string()[..8]);
    json!({
        "text": text,
        "blocks": [
            { "type": "section", "text": plain(&text) },
            { "type": "actions", "elements": [
                { "type": "button", "action_id": "open", "text": plain("Open"), "url": format!("{public_url}/runs/{run_id}") },
            ] },
        ],
    })
}

/// Whether `signature` (`X-Slack-Signature`, `v0=` and hex) is Slack's, under `secret`, for
/// `body` sent at `timestamp` (`X-Slack-Request-Timestamp`, Unix seconds) — refused when that is
/// more than [`MAX_SKEW_SECS`] from `now_secs`.
pub fn verify(
    secret: &str,
    (timestamp, signature): (&str, &str),
    body: &[u8],
    now_secs: i64,
) -> Result<(), &'static str> {
    use hmac::{Hmac, Mac};
    let sent: i64 = timestamp.trim().parse().map_err(|_| "timestamp")?;
    if (now_secs - sent).abs() > MAX_SKEW_SECS {
        return Err("old timestamp");
    }
    let hex = signature.trim().strip_prefix("v0=").ok_or("signature")?;
    let bytes = const_hex::decode(hex).map_err(|_| "signature")?;
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(format!("v0:{sent}:").as_bytes());
    mac.update(body);
    mac.verify_slice(&bytes).map_err(|_| "signature")
}

/// A press, as Slack's `block_actions` payload says it (only what is used).
#[derive(Debug, Deserialize)]
pub struct Press {
    pub user: PressUser,
    #[serde(default)]
    pub team: Option<PressTeam>,
    #[serde(default)]
    pub actions: Vec<PressAction>,
    #[serde(default)]
    pub channel: Option<PressChannel>,
}

#[derive(Debug, Deserialize)]
pub struct PressUser {
    pub id: String,
    #[serde(default)]
    pub team_id: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct PressTeam {
    pub id: String,
}

#[derive(Debug, Deserialize)]
pub struct PressAction {
    pub action_id: String,
    #[serde(default)]
    pub value: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct PressChannel {
    pub id: String,
}

impl Press {
    /// The Slack identity that pressed.
    pub fn who(&self) -> Option<nrllm_store::contacts::SlackId> {
        let team = self
            .team
            .as_ref()
            .map(|t| t.id.clone())
            .or_else(|| self.user.team_id.clone())?;
        Some(nrllm_store::contacts::SlackId {
            team,
            user: self.user.id.clone(),
        })
    }
}

/// Why a call to Slack did not go through, in our words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No answer (tried again later).
    #[error("{0}")]
    Unreachable(String),
    /// Slack answered that it would not (its documented error code kept).
    #[error("{0}")]
    Refused(String),
}

/// Slack's Web API, with the bot's token.
pub struct Client {
    api_url: String,
    token: String,
    http: reqwest::Client,
}

impl Client {
    pub fn new(api_url: &str, token: String) -> Result<Client, String> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|err| format!("cannot build the Slack client: {err}"))?;
        Ok(Client {
            api_url: api_url.trim_end_matches('/').to_owned(),
            token,
            http,
        })
    }

    /// Calls `method` with `body`; Slack's answer when it says `ok`, else what went wrong in
    /// our words (Slack's own error code is one of its documented words, kept).
    pub async fn call(&self, method: &str, body: &Value) -> Result<Value, CallError> {
        let response = self
            .http
            .post(format!("{}/{method}", self.api_url))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .map_err(|err| {
                tracing::warn!(%err, method, "a Slack call failed");
                CallError::Unreachable(match err.is_timeout() {
                    true => "Slack did not answer in time".to_owned(),
                    false => "could not reach Slack".to_owned(),
                })
            })?;
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        if answer["ok"] == Value::Bool(true) {
            return Ok(answer);
        }
        let error = answer["error"].as_str().unwrap_or("no answer");
        let error: String = error
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(60)
            .collect();
        Err(CallError::Refused(format!(
            "Slack refused {method} (HTTP {}, {error})",
            status.as_u16()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(secret: &str, at: i64, body: &str) -> String {
        use hmac::{Hmac, Mac};
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("v0:{at}:{body}").as_bytes());
        format!("v0={}", const_hex::encode(mac.finalize().into_bytes()))
    }

    #[test]
    fn only_slack_s_recent_signature_over_the_very_body_passes() {
        let body = "payload=%7B%7D";
        let good = signed("secret", 1_000, body);
        assert_eq!(
            verify("secret", ("1000", &good), body.as_bytes(), 1_100),
            Ok(())
        );
        assert_eq!(
            verify(
                "secret",
                ("1000", &good),
                body.as_bytes(),
                1_000 + MAX_SKEW_SECS + 1
            ),
            Err("old timestamp")
        );
        assert_eq!(
            verify("other", ("1000", &good), body.as_bytes(), 1_000),
            Err("signature")
        );
        assert_eq!(
            verify("secret", ("1000", &good), b"payload=x", 1_000),
            Err("signature")
        );
        assert_eq!(
            verify("secret", ("1001", &good), body.as_bytes(), 1_000),
            Err("signature")
        );
        assert_eq!(
            verify("secret", ("soon", &good), body.as_bytes(), 1_000),
            Err("timestamp")
        );
        assert_eq!(
            verify("secret", ("1000", "sha256=00"), body.as_bytes(), 1_000),
            Err("signature")
        );
    }

    #[test]
    fn a_press_names_its_team_from_the_payload_s_team_or_the_user_s() {
        let press: Press = serde_json::from_value(json!({
            "type": "block_actions",
            "user": { "id": "U1", "team_id": "T9" },
            "actions": [{ "action_id": "approve_all", "value": "{}" }],
        }))
        .unwrap();
        assert_eq!(press.who().unwrap().team, "T9");
        let press: Press = serde_json::from_value(json!({
            "user": { "id": "U1" }, "team": { "id": "T1" }, "actions": [],
        }))
        .unwrap();
        let who = press.who().unwrap();
        assert_eq!((who.team.as_str(), who.user.as_str()), ("T1", "U1"));
    }
}
