//! `/`: start a run. A plain form (it works without JavaScript); bad values come back as a
//! message at the field and nothing is started. The demo's example prompts are links that fill
//! the prompt box (`/?example=2`).

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::{nrllm_playground_options, NrllmToolRun};
use crate::components::{url_error, ErrorBanner, FieldError, TextArea, BUTTON_PRIMARY, INPUT};
use crate::field;
use crate::forms::{action, CsrfField};
use crate::islands::ModelFields;
use crate::page_data::PlaygroundOptions;

/// The playground form.
#[component]
pub fn PlaygroundPage() -> impl IntoView {
    let options = Resource::new(|| (), |_| nrllm_playground_options());
    let query = use_query_map();
    // Which example prompt fills the prompt box: an index into the server's own list.
    let example = move || {
        query
            .read()
            .get("example")
            .and_then(|n| n.parse::<usize>().ok())
    };
    view! {
        <h1 class="text-2xl font-semibold">"Playground"</h1>
        <p class="mt-1 max-w-prose text-sm text-slate-600 dark:text-slate-400">
            "Give the agent a task. Tools that change something wait for your approval."
        </p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match options.await {
                    Ok(options) => {
                        let prompt = example()
                            .and_then(|n| options.example_prompts.get(n).cloned())
                            .unwrap_or_default();
                        view! { <RunForm options prompt /> }.into_any()
                    }
                    Err(err) => view! { <ErrorBanner error=Some(err) /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn RunForm(
    options: PlaygroundOptions,
    /// The prompt box's text as the page opens (an example chosen, or empty).
    prompt: String,
) -> impl IntoView {
    let error = url_error();
    let field_only = error.as_ref().and_then(|e| e.field()).is_some();
    let banner = if field_only { None } else { error.clone() };
    let tool_groups = tool_groups(&options);
    let examples = options
        .example_prompts
        .iter()
        .enumerate()
        .map(|(n, p)| {
            view! {
                <li class="font-mono text-xs">
                    <a href=format!("/?example={n}") class="underline decoration-dotted hover:text-indigo-700 dark:hover:text-indigo-300"
                        title="Put this in the prompt box" data-testid="example-prompt">{p.clone()}</a>
                </li>
            }
        })
        .collect_view();
    view! {
        <ErrorBanner error=banner />
        <form method="post" action={action::<NrllmToolRun>()} class="mt-4 grid gap-6 lg:grid-cols-3" data-testid="run-form">
            <CsrfField />
            <input type="hidden" name=field!(NrllmToolRun, choose_tools) value="1" />
            <div class="space-y-4 lg:col-span-2">
                <div>
                    <label for="prompt" class="text-sm font-medium">"Prompt"</label>
                    <TextArea id="prompt" name=field!(NrllmToolRun, prompt) rows=4 required=true class=INPUT maxlength=20_000
                        value=prompt placeholder="Rename the home page to \"Hello\"" />
                    <FieldError error=error.clone() field="prompt" />
                </div>
                <div>
                    <label for="system_prompt" class="text-sm font-medium">"System prompt"</label>
                    <TextArea id="system_prompt" name=field!(NrllmToolRun, system_prompt) rows=2 class=INPUT maxlength=20_000
                        value="You maintain the Example Co. website. Look before you change anything." />
                </div>
                <div>
                    <label for="skills" class="text-sm font-medium">"Skills"</label>
                    <TextArea id="skills" name=field!(NrllmToolRun, skills) rows=3 class=INPUT maxlength=50_000
                        placeholder="style-guide\nTitles are short.\n---\nglossary\nEUR, not €." />
                    <p class="mt-1 text-xs text-slate-500">"Blocks separated by a line ---; the first line of each is its name. The model reads them as untrusted reference text."</p>
                    <FieldError error=error.clone() field="skills" />
                </div>
                <button type="submit" class=BUTTON_PRIMARY data-testid="start-run">"Start run"</button>
                <div>
                    <h2 class="mt-2 text-sm font-medium">"The demo model understands (click one to put it in the prompt box)"</h2>
                    <ul class="mt-1 list-inside list-disc text-slate-600 dark:text-slate-400">{examples}</ul>
                </div>
            </div>
            <div class="space-y-4">
                <ModelFields configurations=options.configurations.clone() />
                <FieldError error=error.clone() field="configuration" />
                <FieldError error=error.clone() field="max_rounds" />
                <FieldError error=error.clone() field="temperature" />
                <FieldError error=error.clone() field="max_tokens" />
                <div class="space-y-2">
                    <p class="text-sm font-medium">"Tools"</p>
                    {tool_groups}
                    <FieldError error=error.clone() field="tools" />
                </div>
            </div>
        </form>
    }
}

/// The tools to offer, in their groups, each with whether it needs approval.
fn tool_groups(options: &PlaygroundOptions) -> AnyView {
    let mut groups: Vec<String> = options.tools.iter().map(|t| t.group.clone()).collect();
    groups.dedup();
    groups.sort();
    groups.dedup();
    groups
        .into_iter()
        .map(|group| {
            let tools = options
                .tools
                .iter()
                .enumerate()
                .filter(|(_, t)| t.group == group)
                .map(|(i, tool)| {
                    let id = format!("tool-{}", tool.name);
                    view! {
                        <label for=id.clone() class="flex items-start gap-2 py-0.5 text-sm" title=tool.description.clone()>
                            <input type="checkbox" id=id.clone() name=format!("{}[{i}]", field!(NrllmToolRun, tools)) value=tool.name.clone()
                                checked={tool.enabled} disabled={!tool.enabled} class="mt-1" />
                            <span>
                                <span class="font-mono">{tool.name.clone()}</span>
                                {tool.requires_approval.then(|| view! {
                                    <span class="ml-1 rounded bg-amber-100 px-1 text-xs text-amber-900 dark:bg-amber-900/40 dark:text-amber-200">
                                        {if tool.approval_per_call { "needs approval for some arguments" } else { "needs approval" }}
                                    </span>
                                })}
                                {(!tool.enabled).then(|| view! { <span class="ml-1 text-xs text-slate-500">"(disabled)"</span> })}
                            </span>
                        </label>
                    }
                })
                .collect_view();
            view! {
                <fieldset class="rounded-md border border-slate-200 p-3 dark:border-slate-800">
                    <legend class="px-1 text-sm font-medium">{group}</legend>
                    {tools}
                </fieldset>
            }
        })
        .collect_view()
        .into_any()
}
