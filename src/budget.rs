//! A run's budget on its page: each limit used against its value, and — while the run waits at
//! its budget — the form that raises the limit that stopped it or stops the run. The form posts
//! to `nrllm_budget_decide` and works without JavaScript.

use leptos::prelude::*;

use crate::api::NrllmBudgetDecide;
use crate::components::{BUTTON_DENY, BUTTON_PRIMARY, INPUT};
use crate::field;
use crate::forms::{action, CsrfField};
use crate::page_data::RunView;
use crate::times::deadline_line;

/// How a reached limit stands out.
pub const REACHED: &str = "font-medium text-amber-800 dark:text-amber-300";

/// Each limit of the run's budget, used against its value (nothing when it has none). While the
/// run runs, the live step list moves each with what its steps use.
#[component]
pub fn BudgetStrip(run: RunView) -> impl IntoView {
    (!run.budget.is_empty()).then(|| {
        view! {
            <ul class="mt-2 flex flex-wrap gap-x-4 gap-y-1 text-sm text-slate-600 dark:text-slate-400" data-testid="budget">
                {run.budget.into_iter().map(|limit| view! {
                    <li data-testid="limit" data-kind=limit.kind.key() data-reached=limit.reached.to_string()
                        class=if limit.reached { REACHED } else { "" }>
                        {limit.text()}
                    </li>
                }).collect_view()}
            </ul>
        }
    })
}

/// The decision on a run waiting at its budget: raise the limit that stopped it (to a value or
/// by an amount) and go on, or stop the run. `then` (from the inbox): where the browser goes
/// after.
#[component]
pub fn BudgetPanel(run: RunView, #[prop(optional)] then: Option<String>) -> impl IntoView {
    let Some(stop) = run.budget_stop.clone() else {
        return ().into_any();
    };
    let id = run.summary.id.clone();
    let classes = "mt-4 rounded-lg border-2 border-amber-300 bg-amber-50/50 p-4 dark:border-amber-800 dark:bg-amber-950/30";
    let title = match stop.daily {
        true => "The run reached a daily spend cap",
        false => "The run reached its budget",
    };
    let heading = view! {
        <h2 class="font-semibold" tabindex="-1" data-panel-heading="">{title}</h2>
        <p class="mt-1" data-testid="budget-stop">{stop.explanation.clone()}</p>
        {deadline_line(&run)}
    };
    if let Some(block) = run.decide_block.clone() {
        return view! {
            <section class=classes data-testid="budget-panel">
                {heading}
                <p class="mt-2 text-sm font-medium" data-testid="cannot-decide">{block}</p>
            </section>
        }
        .into_any();
    }
    let (to_id, by_id) = (format!("raise-to-{id}"), format!("raise-by-{id}"));
    let hidden = view! {
        <input type="hidden" name=field!(NrllmBudgetDecide, run_id) value=id.clone() />
        <input type="hidden" name=field!(NrllmBudgetDecide, digest) value=run.digest.clone().unwrap_or_default() />
        {then.map(|then| view! { <input type="hidden" name=field!(NrllmBudgetDecide, then) value=then /> })}
    };
    if stop.daily {
        return view! {
            <section class=classes data-testid="budget-panel">
                {heading}
                <p class="mt-2 text-sm" data-testid="daily-cap-note">
                    "No run's own limit lifts a cap across runs: an administrator may raise today's cap on the "
                    <a href="/system" class="underline">"System page"</a>
                    ", and the run goes on by itself once the cap has room (at the latest when the next UTC day begins), unless its deadline comes first."
                </p>
                <form method="post" action={action::<NrllmBudgetDecide>()} class="mt-3">
                    <CsrfField />
                    {hidden}
                    <button type="submit" name=field!(NrllmBudgetDecide, decision) value="stop" class=BUTTON_DENY data-testid="stop-at-budget">"Stop the run"</button>
                </form>
            </section>
        }
        .into_any();
    }
    view! {
        <section class=classes data-testid="budget-panel">
            {heading}
            <form method="post" action={action::<NrllmBudgetDecide>()} class="mt-3 space-y-2">
                <CsrfField />
                {hidden}
                <div class="grid gap-2 sm:grid-cols-2">
                    <div>
                        <label for=to_id.clone() class="block text-sm font-medium">
                            {format!("Raise the limit on {} to ({}, at least {})", stop.limit, stop.unit, stop.least)}
                        </label>
                        <input id=to_id name=field!(NrllmBudgetDecide, raise_to) inputmode="decimal" class=INPUT data-testid="raise-to" />
                    </div>
                    <div>
                        <label for=by_id.clone() class="block text-sm font-medium">"or raise it by"</label>
                        <input id=by_id name=field!(NrllmBudgetDecide, raise_by) inputmode="decimal" class=INPUT data-testid="raise-by" />
                    </div>
                </div>
                <div class="flex flex-wrap gap-2">
                    <button type="submit" name=field!(NrllmBudgetDecide, decision) value="raise" class=BUTTON_PRIMARY data-testid="raise">"Raise and go on"</button>
                    <button type="submit" name=field!(NrllmBudgetDecide, decision) value="stop" class=BUTTON_DENY data-testid="stop-at-budget">"Stop the run"</button>
                </div>
            </form>
        </section>
    }
    .into_any()
}
