//! `POST /hooks/slack/interactions`: a button of a posted run pressed in Slack. The request must
//! carry Slack's signature over its body under the app's signing secret, made within five
//! minutes (else `401`, nothing read further); the Slack user is mapped to a playground user
//! (`/admin`), who decides through the same authority as the page (role, four-eyes), on the turn
//! the message was posted for, once. Slack is answered at once (it waits 3 s at most); a refusal
//! is told to the one who pressed, as a message only they see (`chat.postEphemeral`), and the
//! posted message is updated for everyone once the turn is decided (the notifier's pass).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use nrllm_core::moves::BulkVerdict;
use nrllm_core::offer::{offer_expiry, Channel, Offer};
use serde_json::json;

use super::slack::{verify, ButtonValue, Press};
use super::SlackApp;
use crate::error::AppError;
use crate::server::AppState;

fn answer(status: StatusCode, text: &str) -> Response {
    (status, text.to_owned()).into_response()
}

/// The handler (see the module).
pub async fn slack_interactions(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(slack) = state.notify.slack.clone() else {
        return answer(StatusCode::NOT_FOUND, "Slack is not set up on this server.");
    };
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let signed = (
        header("x-slack-request-timestamp"),
        header("x-slack-signature"),
    );
    let now_secs = nrllm_core::clock::now_ms() / 1000;
    if let Err(check) = verify(&slack.signing_secret, signed, &body, now_secs) {
        tracing::warn!(
            check,
            "refused: a Slack interaction without a valid signature"
        );
        return answer(
            StatusCode::UNAUTHORIZED,
            "The request is not signed by Slack.",
        );
    }
    let press = form_urlencoded::parse(&body)
        .find(|(name, _)| name == "payload")
        .and_then(|(_, payload)| serde_json::from_str::<Press>(&payload).ok());
    let Some(press) = press else {
        return answer(
            StatusCode::BAD_REQUEST,
            "The interaction has no payload we read.",
        );
    };
    let Some(action) = press.actions.first() else {
        return answer(StatusCode::OK, "");
    };
    let Some(verdict) = BulkVerdict::parse(&action.action_id) else {
        // The Open button, or anything else: nothing to decide.
        return answer(StatusCode::OK, "");
    };
    let value = action
        .value
        .as_deref()
        .and_then(|v| serde_json::from_str::<ButtonValue>(v).ok());
    let Some(value) = value else {
        return answer(
            StatusCode::BAD_REQUEST,
            "The button carries no run we read.",
        );
    };
    match decide(&state, &press, verdict, &value).await {
        Ok(None) => {}
        // An approval that counts toward a turn needing several: said as it is.
        Ok(Some(counted)) => tell_presser(slack, &press, counted),
        Err(refusal) => {
            tracing::info!(run_id = %value.run, %refusal, "a Slack press decided nothing");
            tell_presser(slack, &press, format!("Nothing was decided: {refusal}"));
        }
    }
    answer(StatusCode::OK, "")
}

/// The press's decision, through the core's authority as the mapped user: decided (`None`), an
/// approval that counts toward a turn needing several (what to tell the presser), or why
/// nothing was decided.
async fn decide(
    state: &AppState,
    press: &Press,
    verdict: BulkVerdict,
    value: &ButtonValue,
) -> Result<Option<String>, String> {
    let who = match press.who() {
        Some(id) => state.notify.contacts.by_slack(&id).await.map_err(|err| {
            tracing::error!(%err, "reading a Slack user's playground user");
            "the server could not read who you are; try again".to_owned()
        })?,
        None => None,
    };
    let Some(who) = who else {
        return Err(
            "your Slack user is not linked to a playground user (an administrator links \
                    it on /admin)."
                .to_owned(),
        );
    };
    // A press counts for seven days after its post at most; the turn's own deadline is the
    // claim's to check, as for any button.
    let offer = Offer {
        channel: Channel::Slack,
        verdict,
        recipient: None,
        expires_at_ms: offer_expiry(value.sent_at_ms, None),
    };
    match state
        .runs
        .claim_offer(value.run, &offer, &who, &value.digest)
        .await
    {
        Ok(_) => {}
        // Not decided yet: the presser is told where the count stands.
        Err(counted @ nrllm_core::run_service::ResumeError::Counted(_)) => {
            return Ok(Some(counted.to_string()))
        }
        Err(err) => return Err(AppError::from(err).to_string()),
    }
    tracing::info!(run_id = %value.run, who = %who.label(), verdict = verdict.button(), "decided in Slack");
    state.queue.wake();
    Ok(None)
}

/// Tells the one who pressed (only them) why nothing happened, after Slack has its answer.
fn tell_presser(slack: Arc<SlackApp>, press: &Press, text: String) {
    let (Some(channel), user) = (
        press.channel.as_ref().map(|c| c.id.clone()),
        press.user.id.clone(),
    ) else {
        return;
    };
    tokio::spawn(async move {
        let body = json!({ "channel": channel, "user": user, "text": text });
        if let Err(err) = slack.client.call("chat.postEphemeral", &body).await {
            tracing::warn!(%err, "telling a Slack user why nothing was decided");
        }
    });
}
