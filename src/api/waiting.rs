//! What the server functions of waiting runs share: the inbox's filter as a form gives it, a page
//! of waiting runs, one waiting run's panel, the next turn a person may decide, and where a
//! browser goes after deciding.

use nrllm_core::run_service::{ClaimedRun, ResumeError};
use nrllm_core::run_store::{RunRecord, RunStatus, SearchWords, WaitingFilter, WaitingOrder};
use nrllm_store::accounts::Principal;
use uuid::Uuid;

use crate::api::checks::{at_most, decide_block, parse_cursor, present, INBOX_PAGE};
use crate::error::AppError;
use crate::page_data::{ResumeAccepted, RunView};
use crate::server::AppState;

/// Characters of one filter's text at most.
const MAX_FILTER_CHARS: usize = 200;

/// The inbox's filter fields, in the order [`InboxQuery::read`] takes them.
const FILTER_FIELDS: [&str; 6] = ["configuration", "tool", "requester", "kind", "q", "sort"];

/// The inbox's filter, order and page, read from its form, and the same again for its links.
pub struct InboxQuery {
    pub filter: WaitingFilter,
    /// The filters set, by field name, as the page's links carry them on.
    pairs: Vec<(&'static str, String)>,
    /// This page's cursor, as it came.
    after: Option<String>,
    /// Rows a page shows.
    limit: u32,
}

impl InboxQuery {
    /// The inbox's query from its fields: configuration, tool, requester, kind (`approval` or
    /// `input`), q (words of the prompt) and sort (`waiting` or `deadline`); `after` a cursor.
    pub fn read(
        fields: [Option<String>; 6],
        after: Option<String>,
        limit: Option<u32>,
    ) -> Result<InboxQuery, AppError> {
        let fields = fields.map(present);
        let mut pairs = Vec::new();
        for (name, value) in FILTER_FIELDS.into_iter().zip(&fields) {
            at_most(name, value.as_deref(), MAX_FILTER_CHARS)?;
            if let Some(value) = value {
                pairs.push((name, value.clone()));
            }
        }
        let [configuration, tool, requester, kind, q, sort] = fields;
        let kind = kind.map(|kind| waiting_kind(&kind)).transpose()?;
        let order = match sort.as_deref() {
            None | Some("waiting") => WaitingOrder::Longest,
            Some("deadline") => WaitingOrder::Deadline,
            Some(other) => {
                return Err(AppError::invalid(
                    "sort",
                    format!("`{other}` is not an order of the inbox (waiting or deadline)"),
                ))
            }
        };
        let after = present(after);
        let cursor = after.as_deref().map(parse_cursor).transpose()?;
        let limit = limit.unwrap_or(INBOX_PAGE).clamp(1, 200);
        Ok(InboxQuery {
            filter: WaitingFilter {
                provider: configuration,
                tool,
                requested_by: requester,
                kind,
                search: q.as_deref().and_then(SearchWords::parse),
                order,
                after: cursor,
                limit: limit + 1,
            },
            pairs,
            after,
            limit,
        })
    }

    /// The inbox's query as a URL's query string gives it (`q=deploy&sort=deadline`); fields
    /// other than the filters are ignored.
    pub fn from_query(text: &str) -> Result<InboxQuery, AppError> {
        let mut fields: [Option<String>; 6] = Default::default();
        for (name, value) in form_urlencoded::parse(text.as_bytes()) {
            if let Some(at) = FILTER_FIELDS.iter().position(|field| *field == name) {
                fields[at] = Some(value.into_owned());
            }
        }
        InboxQuery::read(fields, None, None)
    }

    /// The filters, then `after` and `open` when given, encoded (`tool=update_page&q=deploy`).
    fn encoded(&self, after: Option<&str>, open: Option<Uuid>) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (name, value) in &self.pairs {
            query.append_pair(name, value);
        }
        if let Some(after) = after {
            query.append_pair("after", after);
        }
        if let Some(open) = open {
            query.append_pair("open", &open.to_string());
        }
        query.finish()
    }

    /// The inbox with these filters, after cursor `after`, with `open`'s panel open.
    fn link(&self, after: Option<&str>, open: Option<Uuid>) -> String {
        let query = self.encoded(after, open);
        let anchor = open.map(|id| format!("#row-{id}")).unwrap_or_default();
        match query.is_empty() {
            true => format!("/approvals{anchor}"),
            false => format!("/approvals?{query}{anchor}"),
        }
    }

    /// What this inbox's panels say comes after a decision: the next turn of the same inbox.
    pub fn then(&self) -> String {
        format!("next?{}", self.encoded(None, None))
    }

    /// The inbox, filtered as this one, with run `id`'s panel open (where triage starts).
    pub fn start(&self, id: Uuid) -> String {
        self.link(None, Some(id))
    }

    /// The inbox with the same filters: on this page with `open`'s panel open, or, given
    /// `next`, the page after this one.
    pub fn href(&self, open: Option<Uuid>, next: Option<&str>) -> String {
        self.link(next.or(self.after.as_deref()), open)
    }
}

/// A kind of waiting as the inbox's filter names it.
fn waiting_kind(text: &str) -> Result<RunStatus, AppError> {
    match text {
        "approval" | "waiting_for_approval" => Ok(RunStatus::WaitingForApproval),
        "input" | "waiting_for_input" => Ok(RunStatus::WaitingForInput),
        "budget" | "waiting_for_budget" => Ok(RunStatus::WaitingForBudget),
        other => Err(AppError::invalid(
            "kind",
            format!("`{other}` is not a kind of waiting (approval, input or budget)"),
        )),
    }
}

/// A page of the waiting runs `query` asks for, and the cursor of the page after it.
pub async fn page(
    state: &AppState,
    query: &InboxQuery,
) -> Result<(Vec<RunRecord>, Option<String>), AppError> {
    let mut waiting = state
        .store
        .waiting(&query.filter)
        .await
        .map_err(|err| AppError::internal("listing waiting runs", err))?;
    let more = waiting.len() > query.limit as usize;
    waiting.truncate(query.limit as usize);
    let next = waiting.last().filter(|_| more).map(|run| {
        let key = WaitingFilter::key(
            query.filter.order,
            run.updated_at_ms,
            run.approval_deadline_ms,
        );
        format!("{key}.{}", run.id)
    });
    Ok((waiting, next))
}

/// Waiting run `run` as its panel shows it to `who`: its calls with their previews, the digest
/// of the turn, and why `who` cannot decide it, if they cannot.
pub async fn waiting_view(
    state: &AppState,
    run: &RunRecord,
    who: &Principal,
) -> Result<RunView, AppError> {
    let pending = state.runs.pending(run).await;
    let mut view = crate::server::present::run_view(run, &[], None, pending.as_ref(), None);
    (view.budget, view.budget_stop) = budget_view(state, run, pending.as_ref(), &[]);
    view.decide_block = decide_block(state, run, who).await?;
    view.approvals = crate::api::quorum::approvals_view(state, run, Some(&who.name)).await?;
    Ok(view)
}

/// Run `run`'s budget as its page shows it, its cost so far under its configuration's prices.
pub fn budget_view(
    state: &AppState,
    run: &RunRecord,
    pending: Option<&nrllm_core::run_service::PendingTurn>,
    events: &[nrllm_core::run_store::StoredEvent],
) -> (
    Vec<crate::page_data::LimitView>,
    Option<crate::page_data::BudgetStopView>,
) {
    use nrllm_core::run_service::LoopFactory;
    let usage = pending.map_or(run.counters.usage, |p| p.state.counters.usage);
    let cost = run
        .configuration
        .as_ref()
        .and_then(|c| state.configurations.estimate_cost_micros(c, usage));
    crate::server::present::budget(run, pending, events, cost)
}

/// Run `id`'s panel for `who`, if the run waits.
pub async fn panel_view(
    state: &AppState,
    id: Uuid,
    who: &Principal,
) -> Result<Option<RunView>, AppError> {
    let run = state
        .store
        .get(id)
        .await
        .map_err(|err| AppError::internal("reading a run", err))?;
    match run.filter(|run| RunStatus::WAITING.contains(&run.status)) {
        Some(run) => Ok(Some(waiting_view(state, &run, who).await?)),
        None => Ok(None),
    }
}

/// Waiting runs looked at for the next one a person may decide.
const NEXT_LOOKS_AT: u32 = 25;

/// The first turn in `filter`'s order (from its start) that `who` may decide, among the first
/// few, if any.
pub async fn next_to_decide(
    state: &AppState,
    who: &Principal,
    filter: &WaitingFilter,
) -> Result<Option<Uuid>, AppError> {
    let filter = WaitingFilter {
        after: None,
        limit: NEXT_LOOKS_AT,
        ..filter.clone()
    };
    let waiting = state
        .store
        .waiting(&filter)
        .await
        .map_err(|err| AppError::internal("listing waiting runs", err))?;
    first_decidable(state, who, &waiting).await
}

/// The first of `runs` that `who` may decide (of the first few).
pub async fn first_decidable(
    state: &AppState,
    who: &Principal,
    runs: &[RunRecord],
) -> Result<Option<Uuid>, AppError> {
    for run in runs.iter().take(NEXT_LOOKS_AT as usize) {
        // A turn whose count this person's approval is in already is left for the others.
        if decide_block(state, run, who).await?.is_none()
            && !crate::api::quorum::counts_already(state, run, &who.name).await
        {
            return Ok(Some(run.id));
        }
    }
    Ok(None)
}

/// The tools whose calls wait for a decision, by name (what the inbox filters by).
pub fn gated_tools(state: &AppState) -> Vec<String> {
    let mut tools: Vec<String> = state
        .registry
        .specs()
        .into_iter()
        .filter(|spec| spec.requires_approval)
        .map(|spec| spec.name)
        .collect();
    tools.sort();
    tools
}

/// A decision or an answer on run `id` was claimed: the worker is woken; a browser goes back to
/// the run, or — `then` = `next?<filters>`, from the inbox — to the next turn `who` may decide in
/// that inbox (the inbox itself when none is left). `then` is read as an inbox query, never
/// followed as a URL. The decision stands whatever happens here: filters that do not read go to
/// the whole inbox, and a failure to find the next turn (logged) to that inbox.
pub async fn decided(
    state: &AppState,
    id: Uuid,
    who: &Principal,
    then: Option<&str>,
) -> Result<ResumeAccepted, AppError> {
    state.queue.wake();
    go_on(state, id, who, then).await;
    Ok(ResumeAccepted {
        run_id: id.to_string(),
        status: crate::page_data::RunStatus::Queued,
        approvals: None,
    })
}

/// Where a browser goes after deciding run `id` (see [`decided`]).
async fn go_on(state: &AppState, id: Uuid, who: &Principal, then: Option<&str>) {
    if crate::server::wants_html() {
        let inbox = then.and_then(|then| then.strip_prefix("next"));
        let target = match inbox {
            Some(filters) => next_href(state, who, filters.trim_start_matches('?')).await,
            None => format!("/runs/{id}"),
        };
        leptos_axum::redirect(&target);
    }
}

/// What a claim of run `id` by `who` came to: decided (the run goes on; a browser goes where
/// `then` says, [`crate::api::waiting::decided`]), or their approval counted toward a turn that
/// needs several (nothing was queued; the run still waits: a browser goes back to it, or on to
/// the next turn).
pub async fn claimed(
    state: &AppState,
    id: Uuid,
    who: &Principal,
    then: Option<&str>,
    outcome: Result<ClaimedRun, ResumeError>,
) -> Result<ResumeAccepted, AppError> {
    let tally = match outcome {
        Ok(_) => return decided(state, id, who, then).await,
        Err(ResumeError::Counted(tally)) => tally,
        Err(err) => return Err(err.into()),
    };
    let run = state
        .store
        .get(id)
        .await
        .map_err(|err| AppError::internal("reading a run", err))?
        .ok_or_else(|| AppError::NotFound(format!("There is no run {id}.")))?;
    let approvals = crate::server::approvals::tally_view(
        (&state.accounts, &state.runs),
        &run,
        &tally,
        Some(&who.name),
    )
    .await
    .map_err(|err| AppError::internal("reading a turn's approvals", err))?;
    go_on(state, id, who, then).await;
    Ok(ResumeAccepted {
        run_id: id.to_string(),
        status: crate::page_data::RunStatus::WaitingForApproval,
        approvals: Some(approvals),
    })
}

/// The limit run `id` waits at (the run must wait at its budget).
pub async fn budget_kind(
    state: &AppState,
    id: Uuid,
) -> Result<nrllm_core::state::LimitKind, AppError> {
    let run = state
        .store
        .get(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("There is no run {id}.")))?;
    run.suspended_state
        .as_deref()
        .and_then(|raw| nrllm_core::SuspendedState::from_json(raw).ok())
        .and_then(|state| state.budget)
        .map(|stop| stop.limit)
        .ok_or_else(|| AppError::Conflict("The run does not wait at its budget.".to_owned()))
}

/// The inbox filtered by `filters` with the next turn `who` may decide open (the inbox alone
/// when none is left, or when it cannot be read).
async fn next_href(state: &AppState, who: &Principal, filters: &str) -> String {
    let Ok(query) = InboxQuery::from_query(filters) else {
        return "/approvals".to_owned();
    };
    match next_to_decide(state, who, &query.filter).await {
        Ok(Some(next)) => query.start(next),
        Ok(None) | Err(_) => query.href(None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> [Option<String>; 6] {
        FILTER_FIELDS.map(|name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn the_inbox_query_reads_its_filters_and_refuses_what_it_does_not_know() {
        let query = InboxQuery::read(
            fields(&[
                ("configuration", " demo "),
                ("kind", "input"),
                ("q", "Deploy  prod!"),
                ("sort", "deadline"),
                ("requester", ""),
            ]),
            None,
            None,
        )
        .unwrap();
        assert_eq!(query.filter.provider.as_deref(), Some("demo"));
        assert_eq!(query.filter.kind, Some(RunStatus::WaitingForInput));
        assert_eq!(query.filter.order, WaitingOrder::Deadline);
        assert_eq!(query.filter.requested_by, None, "blank is no filter");
        assert_eq!(
            query.filter.search.as_ref().map(|s| s.words().to_vec()),
            Some(vec!["deploy".to_owned(), "prod".to_owned()])
        );
        assert_eq!(
            query.filter.limit,
            INBOX_PAGE + 1,
            "one more: is there a next page"
        );
        for (field, value) in [("kind", "nap"), ("sort", "name")] {
            let err = InboxQuery::read(fields(&[(field, value)]), None, None)
                .err()
                .unwrap();
            assert_eq!(err.field(), Some(field));
        }
        let long = "x".repeat(MAX_FILTER_CHARS + 1);
        assert!(InboxQuery::read(fields(&[("q", &long)]), None, None).is_err());
        assert!(InboxQuery::read(fields(&[]), Some("nope".into()), None).is_err());
    }

    #[test]
    fn the_inbox_links_keep_the_filters_encoded() {
        let hostile = "\"><img src=x>&x=1";
        let query = InboxQuery::read(
            fields(&[("q", hostile), ("tool", "update_page")]),
            Some(format!("5.{}", Uuid::nil())),
            None,
        )
        .unwrap();
        let id = Uuid::from_u128(7);
        let open = query.href(Some(id), None);
        assert!(open
            .starts_with("/approvals?tool=update_page&q=%22%3E%3Cimg+src%3Dx%3E%26x%3D1&after=5."));
        assert!(open.ends_with(&format!("&open={id}#row-{id}")));
        let next = query.href(None, Some("9.abc"));
        assert!(next.ends_with("&after=9.abc"), "{next}");
        let plain = InboxQuery::read(fields(&[]), None, None).unwrap();
        assert_eq!(plain.href(None, None), "/approvals");
        // After a decision: the same filters, read back from the panel's `then`.
        assert_eq!(
            query.then(),
            "next?tool=update_page&q=%22%3E%3Cimg+src%3Dx%3E%26x%3D1"
        );
        let again = InboxQuery::from_query(query.then().trim_start_matches("next?")).unwrap();
        assert_eq!(again.filter.tool.as_deref(), Some("update_page"));
        assert_eq!(again.filter.search, query.filter.search);
        assert_eq!(again.filter.after, None);
        assert_eq!(
            again.start(id),
            format!(
                "/approvals?tool=update_page&q=%22%3E%3Cimg+src%3Dx%3E%26x%3D1&open={id}#row-{id}"
            )
        );
        assert!(InboxQuery::from_query("kind=nap").is_err());
        assert_eq!(
            InboxQuery::from_query("kind=budget").unwrap().filter.kind,
            Some(RunStatus::WaitingForBudget)
        );
    }
}
