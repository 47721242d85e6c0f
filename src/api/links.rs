//! The server functions behind a mailed decision link: what it would decide (shown, never done,
//! on a GET), and the one confirming press that decides (through the core's authority, as the
//! offer of the link's recipient).

use leptos::prelude::*;

use crate::error::AppError;
use crate::page_data::{LinkView, ResumeAccepted};

/// What decision link `token` would do, for the page it opens: the run, the verdict, whom it was
/// sent to, the turn's calls and previews, and why it decides nothing now if it does not (sent
/// to someone else, expired, used, or the run moved on). Reads only.
#[server(endpoint = "nrllm_link_get")]
pub async fn nrllm_link_get(token: String) -> Result<LinkView, AppError> {
    use nrllm_core::clock::format_utc;
    use nrllm_core::preview::cut;
    let who = crate::server::request::require(nrllm_types::Role::Viewer)?;
    let state = crate::server::request::state()?;
    let link = state
        .notify
        .links
        .read(&token)
        .map_err(|err| AppError::BadRequest(err.to_string()))?;
    let run = state
        .store
        .get(link.run)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("There is no run {} any more.", link.run)))?;
    let pending = state.runs.pending(&run).await;
    let used = state
        .notify
        .store
        .link_use(&link.id)
        .await
        .map_err(|err| AppError::internal("reading a decision link's use", err))?;
    let blocked = blocked(&state, (&link, &who), (&run, pending.as_ref()), used).await?;
    let calls = pending
        .map(|turn| {
            turn.state
                .pending
                .iter()
                .zip(&turn.previews)
                .take(50)
                .map(|(call, preview)| crate::page_data::LinkCall {
                    tool: cut(&call.name, 200),
                    arguments: cut(&call.arguments, 2_000),
                    preview: crate::server::webhook::preview_summary(&preview.outcome),
                    gated: preview.gated,
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(LinkView {
        run_id: run.id.to_string(),
        approve: link.verdict == "approve_all",
        sent_to: link.to,
        you: who.name,
        blocked,
        calls,
        expires: format_utc(link.expires_at_ms),
        token,
    })
}

/// Why `link` decides nothing for `who` now, if it does not: used, someone else's, expired, its
/// turn moved on, or the authority's refusal (role, four-eyes).
#[cfg(feature = "ssr")]
async fn blocked(
    state: &crate::server::AppState,
    (link, who): (
        &crate::server::notify::links::Link,
        &nrllm_store::accounts::Principal,
    ),
    (run, pending): (
        &nrllm_core::run_store::RunRecord,
        Option<&nrllm_core::run_service::PendingTurn>,
    ),
    used: Option<nrllm_store::notifications::LinkUse>,
) -> Result<Option<String>, AppError> {
    if let Some(used) = used {
        return Ok(Some(used_text(&used)));
    }
    let offer = link.offer();
    if let Some(offer) = offer
        .as_ref()
        .filter(|o| o.has_expired(nrllm_core::clock::now_ms()))
    {
        let expired = nrllm_core::clock::format_utc(offer.expires_at_ms);
        return Ok(Some(
            nrllm_core::run_service::ResumeError::OfferExpired(expired).to_string(),
        ));
    }
    // The link's own act: the role, four-eyes, and that it is the caller's link (the authority).
    let act = nrllm_core::authority::Act::Offered { to: Some(&link.to) };
    match state.runs.may(who, act, run).await? {
        Ok(()) | Err(nrllm_core::authority::Refusal::State(_)) => {}
        Err(refusal) => return Ok(Some(AppError::from(refusal).to_string())),
    }
    match pending {
        Some(turn) if turn.digest == link.digest => Ok(None),
        Some(_) => Ok(Some(
            "The run's turn changed since this mail was sent (it was decided, or moved on and \
             waits again): this link decides nothing now. Open the run to see where it stands."
                .to_owned(),
        )),
        None => Ok(Some(format!(
            "{}. Open the run to see how it went.",
            nrllm_core::run_service::already_decided_text(run)
        ))),
    }
}

/// What a link that decided already says.
#[cfg(feature = "ssr")]
fn used_text(used: &nrllm_store::notifications::LinkUse) -> String {
    format!(
        "This link decided already, at {} (by {}); each link decides once.",
        nrllm_core::clock::format_utc(used.used_at_ms),
        used.used_by
    )
}

/// Decides with mailed link `token`: its verdict on the turn it was made for, by the logged-in
/// user, who must be the one it was sent to (the core's authority checks, with the role and
/// four-eyes as for any button). Refused once the link expired, once it decided, or when the
/// turn moved on. A browser goes to the run's page; a refusal comes back to the link's page.
#[server(endpoint = "nrllm_link_decide")]
pub async fn nrllm_link_decide(token: String) -> Result<ResumeAccepted, AppError> {
    let who = crate::server::request::require(nrllm_types::Role::Viewer)?;
    let state = crate::server::request::state()?;
    let outcome = decide(&state, &token, &who).await;
    match outcome {
        Ok(id) => crate::api::waiting::decided(&state, id, &who, None).await,
        // The link's page sends no Referer (its token must not leak), so a browser is sent back
        // to it here, with the refusal in the URL as every form's is (the guard signs it); the
        // redirect is the answer it follows, the body nobody reads. A token too long to be one
        // of ours is not sent back.
        Err(err) if crate::server::wants_html() => {
            let max = crate::server::notify::links::MAX_TOKEN_CHARS;
            let token = if token.len() <= max {
                token
            } else {
                String::new()
            };
            let query = form_urlencoded::Serializer::new(String::new())
                .append_pair("token", &token)
                .append_pair("__err", &err.to_url_query())
                .finish();
            leptos_axum::redirect(&format!("/decide?{query}"));
            let run_id = state
                .notify
                .links
                .read(&token)
                .map(|l| l.run.to_string())
                .unwrap_or_default();
            Ok(ResumeAccepted {
                run_id,
                status: crate::page_data::RunStatus::WaitingForApproval,
                approvals: None,
            })
        }
        Err(err) => Err(err),
    }
}

#[cfg(feature = "ssr")]
async fn decide(
    state: &crate::server::AppState,
    token: &str,
    who: &nrllm_store::accounts::Principal,
) -> Result<uuid::Uuid, AppError> {
    crate::api::checks::accepting(state)?;
    let link = state
        .notify
        .links
        .read(token)
        .map_err(|err| AppError::BadRequest(err.to_string()))?;
    let offer = link.offer().ok_or_else(|| {
        AppError::BadRequest("This link does not say what it decides.".to_owned())
    })?;
    let store = &state.notify.store;
    if let Some(used) = store
        .link_use(&link.id)
        .await
        .map_err(|err| AppError::internal("reading a decision link's use", err))?
    {
        return Err(AppError::Conflict(used_text(&used)));
    }
    match state
        .runs
        .claim_offer(link.run, &offer, who, &link.digest)
        .await
    {
        // An approval that counts toward a turn needing several: the link did its part.
        Ok(_) | Err(nrllm_core::run_service::ResumeError::Counted(_)) => {}
        Err(err) => return Err(err.into()),
    }
    // The claim won (or the approval counts): the link is marked as used, once.
    store
        .use_link(&link.id, link.run, &who.name, nrllm_core::clock::now_ms())
        .await
        .map_err(|err| AppError::internal("recording a decision link's use", err))?;
    tracing::info!(run_id = %link.run, who = %who.label(), verdict = %link.verdict, "decided by an email link");
    Ok(link.run)
}
