//! Where a turn that needs several people's approvals stands (M-of-N), as a panel shows it.

use leptos::prelude::*;

use crate::page_data::ApprovalsView;

/// "Needs 2 approvals … 1 of 2 approvals: alice", whether the viewer's approval counts, who may
/// still approve, and that no rule decides such a turn. Nothing for a turn one person decides.
#[component]
pub fn ApprovalCount(approvals: Option<ApprovalsView>) -> impl IntoView {
    approvals.map(|approvals| {
        let others = match approvals.may_still_approve.as_slice() {
            [] => "Nobody else here may approve it now.".to_owned(),
            names => format!("May still approve: {}.", names.join(", ")),
        };
        view! {
            <div class="mt-2 rounded border border-sky-300 bg-sky-50 p-2 text-sm dark:border-sky-800 dark:bg-sky-950/40" data-testid="approval-count">
                <p class="font-medium">
                    {format!("This turn needs {} approvals from different people, for the same choices. ", approvals.required)}
                    <span data-testid="approval-tally">{approvals.text.clone()}</span>"."
                </p>
                {approvals.yours.then(|| view! {
                    <p data-testid="approval-yours">"Your approval counts. Approving other choices (an edit, another choice for a call) starts a new count."</p>
                })}
                <p data-testid="approval-others">{others}</p>
                <p class="text-xs text-slate-600 dark:text-slate-400">"Approval rules and the tools' own checks decide nothing here; one denial decides the turn."</p>
            </div>
        }
    })
}
