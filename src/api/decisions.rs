//! The server functions of waiting runs: the inbox, and the decisions and answers that move a
//! run on (each through the run service, which asks the core's authority).

// A server function's arguments are its form fields, one per field; the client stubs the macro
// generates for them cannot carry an attribute of their own.
#![allow(clippy::too_many_arguments)]

use leptos::prelude::*;

use crate::api::SubmittedCall;
use crate::error::AppError;
use crate::page_data::inbox::ApprovalsPage;
use crate::page_data::ResumeAccepted;

/// Runs waiting for a decision (the approvals inbox), each with its pending calls, previews and
/// digest: filtered and sorted as `nrllm_inbox` is (`configuration`, `tool`, `requester`,
/// `kind`, `q`, `sort`); `after` (the `next_after` of the page before) pages on. Previews are
/// built concurrently, each within a time limit.
#[server(endpoint = "nrllm_approvals_list")]
pub async fn nrllm_approvals_list(
    configuration: Option<String>,
    tool: Option<String>,
    after: Option<String>,
    limit: Option<u32>,
    requester: Option<String>,
    kind: Option<String>,
    q: Option<String>,
    sort: Option<String>,
) -> Result<ApprovalsPage, AppError> {
    use crate::api::waiting::{self, InboxQuery};
    use futures::StreamExt;
    let who = crate::server::request::require(nrllm_types::Role::Viewer)?;
    let state = crate::server::request::state()?;
    let query = InboxQuery::read(
        [configuration, tool, requester, kind, q, sort],
        after,
        limit,
    )?;
    let (waiting, next_after) = waiting::page(&state, &query).await?;
    let runs: Vec<_> = futures::stream::iter(waiting)
        .map(|run| {
            let (state, who) = (&state, &who);
            async move { waiting::waiting_view(state, &run, who).await }
        })
        .buffered(crate::api::checks::INBOX_PREVIEWS_AT_ONCE)
        .collect()
        .await;
    Ok(ApprovalsPage {
        runs: runs.into_iter().collect::<Result<_, _>>()?,
        next_after,
        configurations: state.configurations.names(),
        tools: waiting::gated_tools(&state),
    })
}

/// Applies an operator's decision to a waiting run: exactly what the form showed when its button
/// was pressed (edited arguments run, each reason reaches its call; a button that would drop typed
/// text is refused unless `acknowledge_discard` is set). The claim happens now (exactly one
/// decision wins); the run continues in the background. A browser goes back to the run's page,
/// or with `then=next` (the inbox's forms) to the next turn it may decide.
#[server(endpoint = "nrllm_tool_resume")]
pub async fn nrllm_tool_resume(
    run_id: String,
    decision: String,
    reason: Option<String>,
    digest: Option<String>,
    calls: Option<Vec<SubmittedCall>>,
    acknowledge_discard: Option<String>,
    then: Option<String>,
) -> Result<ResumeAccepted, AppError> {
    let (who, state, id, digest) = crate::api::checks::deciding(&run_id, digest)?;
    if digest.is_none() && crate::server::wants_html() {
        return Err(AppError::BadRequest(
            "The form is missing what it was showing (its digest): reload the page and decide again."
                .to_owned(),
        ));
    }
    // The form's fields as they came: the core reads them (the button, each call's choice,
    // edit and rule), checks who may decide (its authority) and queues the decision; this
    // instance's worker (or another's) carries it out.
    let submission = nrllm_types::submission::Submission {
        decision,
        reason,
        calls: calls.unwrap_or_default(),
        acknowledge_discard: nrllm_types::submission::ticked(acknowledge_discard.as_deref()),
    };
    let outcome = state
        .runs
        .claim_submission(id, &submission, &who, digest.as_deref())
        .await;
    crate::api::waiting::claimed(&state, id, &who, then.as_deref(), outcome).await
}

/// Answers the question a waiting run asks (`ask_operator`): `answer` — the text, or one of the
/// question's choices — or, for a question with a form, `fields` (each field's text by name;
/// numbers and yes/no are read as the form's schema says). The answer is checked against the
/// question (`400` naming the field if it does not fit) and becomes the call's result. Claimed
/// like any decision: exactly one answer wins. `call_id` picks the question when a turn asks
/// several (default: the first). An answer decides only its question: on a turn whose other
/// calls wait for a decision too it is refused (`409`, naming them); such a turn is decided
/// whole with `nrllm_tool_resume` (`per_call`, the question's entry carrying the answer).
/// `then=next`: a browser goes on to the next turn it may decide, as with `nrllm_tool_resume`.
/// A question a tool's server asked (MCP elicitation) is answered the same way, and may also be
/// refused: `action` is `accept` (the default: the fields go back to the server), `decline` or
/// `cancel`.
#[server(endpoint = "nrllm_input_answer")]
pub async fn nrllm_input_answer(
    run_id: String,
    digest: Option<String>,
    call_id: Option<String>,
    answer: Option<String>,
    fields: Option<std::collections::BTreeMap<String, String>>,
    action: Option<String>,
    then: Option<String>,
) -> Result<ResumeAccepted, AppError> {
    let (who, state, id, digest) = crate::api::checks::deciding(&run_id, digest)?;
    let action = match action.as_deref() {
        None => None,
        Some(text) => Some(nrllm_core::elicit::ReplyAction::parse(text).ok_or_else(|| {
            AppError::invalid("action", "`accept`, `decline` or `cancel`".to_owned())
        })?),
    };
    let answer = nrllm_core::question::FormAnswer {
        answer,
        fields,
        action,
    };
    state
        .runs
        .claim_answer(id, call_id.as_deref(), &answer, &who, digest.as_deref())
        .await?;
    crate::api::waiting::decided(&state, id, &who, then.as_deref()).await
}

/// Decides on a run waiting at its budget (`waiting_for_budget`): `decision=raise` raises the
/// limit that stopped it — `raise_to` a new value, or `raise_by` an amount over the limit, in
/// the limit's unit (US dollars for cost, seconds for running time, a whole number otherwise) —
/// and the run goes on from exactly where it stopped; `decision=stop` ends it there
/// (`budget_exhausted`). Claimed like an approval: the same authority and four-eyes, the
/// digest of what the page showed, and exactly one decision wins. `then=next`: a browser goes
/// on to the next turn it may decide, as with `nrllm_tool_resume`.
#[server(endpoint = "nrllm_budget_decide")]
pub async fn nrllm_budget_decide(
    run_id: String,
    decision: String,
    raise_to: Option<String>,
    raise_by: Option<String>,
    digest: Option<String>,
    then: Option<String>,
) -> Result<ResumeAccepted, AppError> {
    let (who, state, id, digest) = crate::api::checks::deciding(&run_id, digest)?;
    let budget = match decision.as_str() {
        "stop" => nrllm_core::moves::BudgetMove::Stop,
        "raise" => {
            let kind = crate::api::waiting::budget_kind(&state, id).await?;
            nrllm_core::moves::BudgetMove::Raise(crate::api::checks::raise(
                kind,
                raise_to.as_deref(),
                raise_by.as_deref(),
            )?)
        }
        other => {
            return Err(AppError::invalid(
                "decision",
                format!("`{other}` is not a budget decision (raise or stop)"),
            ))
        }
    };
    state
        .runs
        .claim_budget(id, &budget, &who, digest.as_deref())
        .await?;
    crate::api::waiting::decided(&state, id, &who, then.as_deref()).await
}
