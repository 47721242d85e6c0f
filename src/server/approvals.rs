//! Where a turn that needs several people's approvals stands (M-of-N, `nrllm_core::quorum`):
//! the count, and who else may approve (the authority says), as the pages, the API and the
//! webhook show it.

use nrllm_core::authority::Act;
use nrllm_core::quorum::Tally;
use nrllm_core::run_service::RunService;
use nrllm_core::run_store::{RunRecord, StoreError};
use nrllm_store::accounts::{AccountStore, Principal};
use nrllm_types::Role;

use crate::page_data::ApprovalsView;

/// Names of people who may still approve, at most (the rest are not listed).
const MAX_NAMES: usize = 20;

/// Where `run`'s approvals stand as `viewer` sees them, if its turn needs several.
pub async fn approvals_view(
    (accounts, runs): (&AccountStore, &RunService),
    run: &RunRecord,
    viewer: Option<&str>,
) -> Result<Option<ApprovalsView>, StoreError> {
    match runs.tally(run).await? {
        Some(tally) => Ok(Some(
            tally_view((accounts, runs), run, &tally, viewer).await?,
        )),
        None => Ok(None),
    }
}

/// `tally` of `run` as `viewer` sees it, with who else may approve: the users with a role that
/// decides, not disabled, whom the authority lets decide the run, but those already counted.
pub async fn tally_view(
    (accounts, runs): (&AccountStore, &RunService),
    run: &RunRecord,
    tally: &Tally,
    viewer: Option<&str>,
) -> Result<ApprovalsView, StoreError> {
    let approved_by: Vec<String> = tally
        .leading()
        .iter()
        .map(|vote| vote.approver.clone())
        .collect();
    let others: Vec<Principal> = accounts
        .users()
        .await?
        .into_iter()
        .filter(|user| {
            !user.disabled && user.role >= Role::Approver && !approved_by.contains(&user.name)
        })
        .map(|user| Principal::user(user.name, user.role))
        .collect();
    let allowed = runs.may_each(&others, Act::Decide, run).await?;
    let may_still_approve = others
        .into_iter()
        .zip(allowed)
        .filter(|(_, allowed)| allowed.is_ok())
        .map(|(person, _)| person.name)
        .take(MAX_NAMES)
        .collect();
    Ok(ApprovalsView {
        required: tally.required,
        text: tally.describe(),
        yours: viewer.is_some_and(|name| approved_by.iter().any(|a| a == name)),
        approved_by,
        may_still_approve,
    })
}
