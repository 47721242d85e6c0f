//! The server functions of the inbox: its page of compact rows (waiting turns, without previews),
//! and bulk decisions (each picked run claimed on its own through the run service, which asks the
//! core's authority). One row's panel is rendered by the inbox page's own server function.

// A server function's arguments are its form fields, one per field.
#![allow(clippy::too_many_arguments)]

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;
use crate::page_data::inbox::{BulkOutcome, InboxPage};

/// A run picked for a bulk decision: its id, and the digest of the turn its panel showed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkPick {
    pub run_id: String,
    pub digest: String,
}

/// The inbox as compact rows, one per waiting turn: `configuration`, `tool`, `requester` (a user
/// name), `kind` (`approval` or `input`) and `q` (words of the prompt) filter; `sort` is
/// `waiting` (the longest waiting first, the default) or `deadline` (the soonest first, turns
/// without one last); `after` (from the page before) pages on. `open` names the run whose panel
/// is open on the page (its previews are computed; no row's are).
#[server(endpoint = "nrllm_inbox")]
pub async fn nrllm_inbox(
    configuration: Option<String>,
    tool: Option<String>,
    requester: Option<String>,
    kind: Option<String>,
    q: Option<String>,
    sort: Option<String>,
    after: Option<String>,
    open: Option<String>,
    limit: Option<u32>,
) -> Result<InboxPage, AppError> {
    use crate::api::checks;
    use crate::api::waiting::{self, InboxQuery};
    use crate::server::{present, request::state};
    let who = crate::server::request::require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    let query = InboxQuery::read(
        [configuration, tool, requester, kind, q, sort],
        after,
        limit,
    )?;
    let open = checks::present(open)
        .map(|id| checks::parse_run_id(&id))
        .transpose()?;
    let (waiting, next_after) = waiting::page(&state, &query).await?;
    let mut rows = Vec::with_capacity(waiting.len());
    for run in &waiting {
        let mut row = present::inbox_row(run, query.href(Some(run.id), None));
        let tally = state
            .runs
            .tally(run)
            .await
            .map_err(|err| AppError::internal("reading a turn's approvals", err))?;
        row.approvals = tally.map(|tally| tally.describe());
        rows.push(row);
    }
    // The open run and where triage starts are usually on this page already: not read again.
    let open = match open.map(|id| (id, waiting.iter().find(|run| run.id == id))) {
        Some((_, Some(run))) => Some(waiting::waiting_view(&state, run, &who).await?),
        Some((id, None)) => waiting::panel_view(&state, id, &who).await?,
        None => None,
    };
    let triage = match query.filter.after {
        None => waiting::first_decidable(&state, &who, &waiting).await?,
        Some(_) => waiting::next_to_decide(&state, &who, &query.filter).await?,
    };
    Ok(InboxPage {
        rows,
        next_href: next_after.map(|after| query.href(None, Some(&after))),
        configurations: state.configurations.names(),
        tools: waiting::gated_tools(&state),
        open,
        triage_href: triage.map(|id| query.start(id)),
        then: query.then(),
    })
}

/// Approves (`decision=approve_all`) or denies (`deny_all`, with `reason` for the model) the
/// whole pending turn of each picked run, as its own form's button would: each run is claimed
/// on its own, with the digest of the turn its panel showed, so one refusal (changed since it
/// was seen, expired, four-eyes, decided already) leaves the others as they are. The answer says
/// run by run what happened. `csrf` is the page's token (the auth middleware checks it).
#[server(endpoint = "nrllm_bulk_decide")]
pub async fn nrllm_bulk_decide(
    decision: String,
    reason: Option<String>,
    runs: Option<Vec<BulkPick>>,
    csrf: Option<String>,
) -> Result<BulkOutcome, AppError> {
    use crate::page_data::inbox::BulkResult;
    use crate::server::request::{require, state};
    use nrllm_core::run_service::{BulkVerdict, Pick, MAX_BULK_RUNS};
    let _ = csrf;
    let who = require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    crate::api::checks::accepting(&state)?;
    let verdict = BulkVerdict::parse(decision.trim()).ok_or_else(|| {
        AppError::invalid("decision", "approve_all or deny_all for a bulk decision")
    })?;
    let reason = crate::api::checks::present(reason);
    crate::api::checks::at_most(
        "reason",
        reason.as_deref(),
        crate::page_data::MAX_REASON_CHARS,
    )?;
    let runs = runs.unwrap_or_default();
    if runs.is_empty() || runs.len() > MAX_BULK_RUNS {
        return Err(AppError::invalid(
            "runs",
            format!("pick from 1 to {MAX_BULK_RUNS} runs"),
        ));
    }
    let picks = runs
        .iter()
        .map(|pick| {
            Ok(Pick {
                id: crate::api::checks::parse_run_id(&pick.run_id)?,
                digest: pick.digest.trim().to_owned(),
            })
        })
        .collect::<Result<Vec<_>, AppError>>()?;
    let outcomes = state
        .runs
        .claim_each(&picks, verdict, reason.as_deref(), &who)
        .await;
    state.queue.wake();
    let done = match verdict {
        BulkVerdict::ApproveAll => "Approved.",
        BulkVerdict::DenyAll => "Denied.",
    };
    let results = outcomes
        .into_iter()
        .map(|(id, outcome)| BulkResult {
            run_id: id.to_string(),
            decided: outcome.is_ok(),
            message: match outcome {
                Ok(()) => done.to_owned(),
                Err(err) => AppError::from(err).to_string(),
            },
        })
        .collect();
    Ok(BulkOutcome { results })
}
