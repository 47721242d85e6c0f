//! `/rules`: the approval rules — every run's and every configuration's — with who added each
//! and when, a button to remove it, and (for administrators) a form to add a configuration's
//! rule: always approve, or never allow, one tool's calls, optionally only when one argument
//! matches. A run's rules are added from its approval panel and listed on its page too.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::api::rules::{nrllm_rules_list, NrllmRuleAdd, NrllmRuleRemove};
use crate::components::{
    op_options, url_error, ErrorBanner, BUTTON_PRIMARY, BUTTON_SECONDARY, INPUT,
};
use crate::field;
use crate::forms::{action, CsrfField};
use crate::page_data::{RuleView, RulesView};

/// The rules page.
#[component]
pub fn RulesPage() -> impl IntoView {
    let rules = Resource::new(|| (), |_| nrllm_rules_list());
    view! {
        <Title text="Approval rules — nrllm playground" />
        <h1 class="text-2xl font-semibold">"Approval rules"</h1>
        <p class="mt-1 text-sm text-slate-600 dark:text-slate-400">
            "A call a rule decides does not wait: an allowing rule runs it, a denying rule refuses it (the model reads why). Its step names the rule. A denying rule wins over an allowing one."
        </p>
        <ErrorBanner error=url_error() />
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match rules.await {
                    Ok(view) => view! { <Rules view /> }.into_any(),
                    Err(err) => view! { <ErrorBanner error=Some(err) /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// A list of rules, each with its remove button when the viewer may remove it.
#[component]
pub fn RuleList(rules: Vec<RuleView>) -> impl IntoView {
    if rules.is_empty() {
        return view! { <p class="text-sm text-slate-500" data-testid="no-rules">"No rules."</p> }
            .into_any();
    }
    let items = rules
        .into_iter()
        .map(|rule| {
            let scope = match (&rule.run_id, &rule.configuration) {
                (Some(run), _) => view! {
                    <a href=format!("/runs/{run}") class="underline">{format!("run {}", &run[..8.min(run.len())])}</a>
                }
                .into_any(),
                (None, Some(name)) => view! { <span>{format!("configuration {name}")}</span> }.into_any(),
                (None, None) => ().into_any(),
            };
            view! {
                <li class="flex flex-wrap items-center gap-2 py-2" data-testid="rule" data-rule=rule.id data-effect=rule.effect.clone()>
                    <span class="font-mono text-xs">{format!("#{}", rule.id)}</span>
                    <span data-testid="rule-text">{rule.description.clone()}</span>
                    <span class="text-xs text-slate-500">{scope}{format!(" · added by {} at {}", rule.created_by, rule.created)}</span>
                    {rule.removable.then(|| view! {
                        <form method="post" action={action::<NrllmRuleRemove>()}>
                            <CsrfField />
                            <input type="hidden" name=field!(NrllmRuleRemove, id) value=rule.id.to_string() />
                            <button type="submit" class=BUTTON_SECONDARY aria-label=format!("Remove rule {}", rule.id)>"Remove"</button>
                        </form>
                    })}
                </li>
            }
        })
        .collect_view();
    view! { <ul class="divide-y divide-slate-200 dark:divide-slate-800" data-testid="rules">{items}</ul> }
        .into_any()
}

#[component]
fn Rules(view: RulesView) -> impl IntoView {
    let add = view.can_add.then(|| {
        let tools = view
            .tools
            .iter()
            .map(|t| view! { <option value=t.clone()>{t.clone()}</option> })
            .collect_view();
        let configurations = view
            .configurations
            .iter()
            .map(|c| view! { <option value=c.clone()>{c.clone()}</option> })
            .collect_view();
        view! {
            <section class="mt-6 rounded-lg border border-slate-200 p-4 dark:border-slate-700">
                <h2 class="font-semibold">"Add a rule for a configuration"</h2>
                <form method="post" action={action::<NrllmRuleAdd>()} class="mt-3 flex flex-wrap items-end gap-2" data-testid="rule-add">
                    <CsrfField />
                    <input type="hidden" name=field!(NrllmRuleAdd, scope) value="configuration" />
                    <label class="text-sm">"Effect"
                        <select name=field!(NrllmRuleAdd, effect) class=INPUT>
                            <option value="allow">"always approve"</option>
                            <option value="deny">"never allow"</option>
                        </select>
                    </label>
                    <label class="text-sm">"Tool"
                        <select name=field!(NrllmRuleAdd, tool) class=INPUT>{tools}</select>
                    </label>
                    <label class="text-sm">"Configuration"
                        <select name=field!(NrllmRuleAdd, configuration) class=INPUT>{configurations}</select>
                    </label>
                    <label class="text-sm">"Only when argument"
                        <input name=field!(NrllmRuleAdd, argument) class=INPUT placeholder="(any arguments)" maxlength=nrllm_types::RULE_NAME_CHARS />
                    </label>
                    <select name=field!(NrllmRuleAdd, op) class=INPUT aria-label="compares">{op_options()}</select>
                    <input name=field!(NrllmRuleAdd, value) class=INPUT placeholder="value" aria-label="value" maxlength=nrllm_types::RULE_VALUE_CHARS />
                    <button type="submit" class=BUTTON_PRIMARY>"Add rule"</button>
                </form>
            </section>
        }
    });
    view! {
        <section class="mt-4">
            <RuleList rules=view.rules />
        </section>
        {add}
    }
}
