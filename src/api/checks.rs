//! Checks every server function makes: the server takes work, the caller may start a run, a
//! text is not too long, an id or a cursor reads.

use crate::error::AppError;
use crate::server::AppState;
use uuid::Uuid;

pub const MAX_PROMPT_CHARS: usize = 20_000;

pub const MAX_SYSTEM_PROMPT_CHARS: usize = 20_000;

pub const MAX_SKILLS_CHARS: usize = 50_000;

/// More tool names than any registry holds.
pub const MAX_TOOLS: usize = 200;

/// Why `who` cannot decide `run`, if they cannot: their role, or four-eyes (the core's
/// authority says; the page only shows it).
pub async fn decide_block(
    state: &AppState,
    run: &nrllm_core::run_store::RunRecord,
    who: &nrllm_store::accounts::Principal,
) -> Result<Option<String>, AppError> {
    use nrllm_core::authority::{Act, Refusal};
    match state
        .runs
        .may(who, Act::Decide, run)
        .await
        .map_err(|err| AppError::internal("reading a run's lineage", err))?
    {
        // A run that does not wait has no panel; nothing to explain.
        Ok(()) | Err(Refusal::State(_)) => Ok(None),
        Err(refusal) => Ok(Some(AppError::from(refusal).to_string())),
    }
}

/// Refuses a run start (a new run, a fork, a retry) past the caller's starts a minute.
pub fn run_start_allowed(
    state: &AppState,
    who: &nrllm_store::accounts::Principal,
) -> Result<(), AppError> {
    if state.limits.run_starts.check_key(&who.name).is_err() {
        tracing::warn!(who = %who.label(), "refused: run starts over the limit");
        return Err(AppError::TooManyRequests(format!(
            "{} has started too many runs in the last minute (the limit is {} a minute); try again shortly.",
            who.name, state.limits.run_starts_per_minute
        )));
    }
    Ok(())
}

/// Refuses work while the server is shutting down.
pub fn accepting(state: &AppState) -> Result<(), AppError> {
    if state.shutdown.is_cancelled() {
        return Err(AppError::Unavailable(
            "The server is shutting down and takes no new runs or decisions now; try again \
             in a moment."
                .to_owned(),
        ));
    }
    Ok(())
}

/// A form field's text, trimmed; `None` when it is missing or blank.
pub fn present(text: Option<String>) -> Option<String> {
    text.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty())
}

/// Refuses `text` in `field` if it is longer than `max` characters.
pub fn at_most(field: &str, text: Option<&str>, max: usize) -> Result<(), AppError> {
    match text {
        Some(text) if text.chars().count() > max => Err(AppError::invalid(
            field,
            format!("at most {max} characters"),
        )),
        _ => Ok(()),
    }
}

/// Waiting runs on one page of the inbox, unless the client asks for another number.
pub const INBOX_PAGE: u32 = 50;

/// Waiting runs whose previews are built at the same time.
pub const INBOX_PREVIEWS_AT_ONCE: usize = 8;

/// An inbox cursor: `<key>.<run id>` of the last run on the page before (the key of the page's
/// order: when the run began waiting, or its deadline).
pub fn parse_cursor(text: &str) -> Result<(i64, Uuid), AppError> {
    text.split_once('.')
        .and_then(|(ms, id)| Some((ms.parse().ok()?, Uuid::parse_str(id).ok()?)))
        .ok_or_else(|| AppError::invalid("after", format!("`{text}` is not a page cursor")))
}

/// What every decision on a waiting run starts with: who asks (any logged-in caller; the
/// core's authority says whether they may), the server taking work, the run's id, and the
/// digest the page showed (an empty one is none).
pub fn deciding(
    run_id: &str,
    digest: Option<String>,
) -> Result<
    (
        nrllm_store::accounts::Principal,
        AppState,
        Uuid,
        Option<String>,
    ),
    AppError,
> {
    let who = crate::server::request::require(nrllm_types::Role::Viewer)?;
    let state = crate::server::request::state()?;
    accepting(&state)?;
    let id = parse_run_id(run_id)?;
    Ok((who, state, id, digest.filter(|d| !d.is_empty())))
}

pub fn parse_run_id(text: &str) -> Result<Uuid, AppError> {
    Uuid::parse_str(text.trim())
        .map_err(|_| AppError::invalid("run_id", format!("`{text}` is not a run id")))
}

/// How a person raises a limit of `kind`: to `to` or by `by` (one of them), typed in the
/// limit's unit.
pub fn raise(
    kind: nrllm_core::state::LimitKind,
    to: Option<&str>,
    by: Option<&str>,
) -> Result<nrllm_core::moves::Raise, AppError> {
    use nrllm_core::moves::Raise;
    fn typed(text: Option<&str>) -> Option<&str> {
        text.map(str::trim).filter(|t| !t.is_empty())
    }
    let read = |field: &str, text: &str| {
        kind.parse(text)
            .ok_or_else(|| AppError::invalid(field, format!("write {} above 0", kind.unit())))
    };
    match (typed(to), typed(by)) {
        (Some(to), None) => Ok(Raise::To(read("raise_to", to)?)),
        (None, Some(by)) => Ok(Raise::By(read("raise_by", by)?)),
        (Some(_), Some(_)) => Err(AppError::invalid(
            "raise_to",
            "raise the limit to a value or by an amount, not both",
        )),
        (None, None) => Err(AppError::invalid(
            "raise_to",
            format!("write the new limit ({})", kind.unit()),
        )),
    }
}
