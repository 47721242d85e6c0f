//! The inbox's filter form (a plain GET form: it works without JavaScript).

use leptos::prelude::*;

use crate::components::{BUTTON_SECONDARY, INPUT};

/// A select of `options` named `name`, with `current` chosen and "All" first.
fn choice(
    id: &'static str,
    name: &'static str,
    label: &'static str,
    options: Vec<(String, String)>,
    current: Option<String>,
) -> impl IntoView {
    let current = current.unwrap_or_default();
    let options = options
        .into_iter()
        .map(|(value, text)| {
            let selected = value == current;
            view! { <option value=value selected=selected>{text}</option> }
        })
        .collect_view();
    view! {
        <div>
            <label for=id class="text-sm font-medium">{label}</label>
            <select id=id name=name class=INPUT>{options}</select>
        </div>
    }
}

fn same(list: Vec<String>) -> Vec<(String, String)> {
    std::iter::once((String::new(), "All".to_owned()))
        .chain(list.into_iter().map(|v| (v.clone(), v)))
        .collect()
}

/// `shown`: the query as the URL has it (configuration, tool, requester, kind, q, sort, …).
#[component]
pub fn Filters(
    configurations: Vec<String>,
    tools: Vec<String>,
    shown: [Option<String>; 8],
) -> impl IntoView {
    let [configuration, tool, requester, kind, q, sort, _, _] = shown;
    let kinds = vec![
        (String::new(), "All".to_owned()),
        ("approval".to_owned(), "A decision".to_owned()),
        ("input".to_owned(), "An answer".to_owned()),
        ("budget".to_owned(), "A budget raise".to_owned()),
    ];
    let sorts = vec![
        ("waiting".to_owned(), "Longest waiting first".to_owned()),
        ("deadline".to_owned(), "Soonest deadline first".to_owned()),
    ];
    view! {
        <form method="get" action="/approvals" class="mt-4 flex flex-wrap items-end gap-2" data-testid="inbox-filter" role="search">
            <div>
                <label for="filter-q" class="text-sm font-medium">"Prompt words"</label>
                <input id="filter-q" type="search" name="q" class=INPUT value=q.unwrap_or_default() maxlength="200" />
            </div>
            {choice("filter-configuration", "configuration", "Configuration", same(configurations), configuration)}
            {choice("filter-tool", "tool", "Tool", same(tools), tool)}
            <div>
                <label for="filter-requester" class="text-sm font-medium">"Started by"</label>
                <input id="filter-requester" name="requester" class=INPUT value=requester.unwrap_or_default() maxlength="200" />
            </div>
            {choice("filter-kind", "kind", "Waiting for", kinds, kind)}
            {choice("filter-sort", "sort", "Order", sorts, sort)}
            <button type="submit" class=BUTTON_SECONDARY>"Filter"</button>
        </form>
    }
}
