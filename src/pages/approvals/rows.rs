//! The inbox's rows: what waits, for whom and since when, in a line or three; the one open row
//! with its panel.

use leptos::prelude::*;

use crate::approval::ApprovalPanel;
use crate::budget::BudgetPanel;
use crate::page_data::inbox::InboxRow;
use crate::page_data::{RunStatus, RunView};
use crate::question::QuestionPanel;
use crate::times::Moment;

/// The panel of a waiting run as the inbox opens it: a decision (or an answer) goes on to the
/// next turn to decide in the same inbox (`then`: `next?<its filters>`).
#[component]
pub fn OpenPanel(run: RunView, then: String) -> impl IntoView {
    match run.summary.status {
        RunStatus::WaitingForInput => view! { <QuestionPanel run then /> }.into_any(),
        RunStatus::WaitingForBudget => view! { <BudgetPanel run then /> }.into_any(),
        _ => view! { <ApprovalPanel run shortcuts=true then /> }.into_any(),
    }
}

/// The rows, `open`'s with its panel; a run opened that is not among them shows above them.
pub fn rows(rows: Vec<InboxRow>, open: Option<RunView>, then: String) -> impl IntoView {
    let on_page = open
        .as_ref()
        .is_some_and(|run| rows.iter().any(|row| row.id == run.summary.id));
    let (mut open, elsewhere) = match on_page {
        true => (open, None),
        false => (None, open),
    };
    let items = rows
        .into_iter()
        .map(|row| {
            let panel = open.take_if(|run| run.summary.id == row.id);
            view! { <Row row panel then=then.clone() /> }
        })
        .collect_view();
    view! {
        {elsewhere.map(|run| view! {
            <section class="mt-4" data-testid="opened-elsewhere">
                <p class="text-sm text-slate-600">"This turn is not on this page of the inbox:"</p>
                <OpenPanel run then=then.clone() />
            </section>
        })}
        {items}
    }
}

/// What the row says about how the run waits.
fn kind_text(status: RunStatus) -> &'static str {
    match status {
        RunStatus::WaitingForInput => "asks a question",
        RunStatus::WaitingForBudget => "waits at its budget",
        _ => "waits for a decision",
    }
}

#[component]
fn Row(row: InboxRow, panel: Option<RunView>, then: String) -> impl IntoView {
    let id = row.id.clone();
    let panel_id = format!("panel-{id}");
    let open = panel.is_some();
    let pick_label = format!("Pick for a bulk decision: {}", row.prompt);
    let calls = row
        .calls
        .iter()
        .map(|call| {
            view! {
                <li class="flex min-w-0 gap-2">
                    <span class="shrink-0 font-mono" data-testid="inbox-tool">{call.tool.clone()}</span>
                    <span class="truncate text-slate-600 dark:text-slate-400" data-testid="inbox-summary">{call.summary.clone()}</span>
                </li>
            }
        })
        .collect_view();
    let tools = row
        .calls
        .iter()
        .map(|c| c.tool.clone())
        .collect::<Vec<_>>()
        .join(", ");
    let deadline = row.deadline.clone().zip(row.deadline_ms).map(|(utc, ms)| {
        view! { <span data-testid="inbox-deadline">" · decide by " <Moment ms utc /></span> }
    });
    view! {
        <li id=format!("row-{id}") class="rounded-lg border border-slate-200 bg-white p-3 dark:border-slate-800 dark:bg-slate-900" data-testid="inbox-item" data-inbox-row="" data-run-id=id.clone()>
            <div class="flex items-start gap-3">
                <input type="checkbox" class="mt-1" data-pick="" data-needs-script="" hidden disabled aria-label=pick_label data-testid="inbox-pick" />
                <div class="min-w-0 flex-1">
                    <a href=row.open_href.clone() class="font-medium text-indigo-700 underline dark:text-indigo-300" data-panel-toggle="" aria-expanded=open.to_string() aria-controls=panel_id.clone() data-testid="inbox-prompt">{row.prompt.clone()}</a>
                    <p class="mt-1 text-xs text-slate-500" data-testid="inbox-facts">
                        {format!("{} · {} · started by {} · waiting since ", kind_text(row.status), row.configuration, row.requested_by)}
                        <Moment ms=row.waiting_since_ms utc=row.waiting_since.clone() />
                        {deadline}
                    </p>
                    {row.approvals.clone().map(|text| view! {
                        <p class="mt-1 text-xs font-medium text-sky-800 dark:text-sky-300" data-testid="inbox-approvals">{text}</p>
                    })}
                    <ul class="mt-1 space-y-0.5 text-sm" aria-label="Calls that wait" data-testid="inbox-calls" data-tools=tools>{calls}</ul>
                </div>
                <a href=format!("/runs/{id}") class="shrink-0 text-sm underline" data-testid="inbox-run-link">"Run page"</a>
            </div>
            <div id=panel_id data-panel="">{panel.map(|run| view! { <OpenPanel run then /> })}</div>
        </li>
    }
}
