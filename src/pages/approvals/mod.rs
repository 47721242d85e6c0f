//! `/approvals`: the inbox — one compact row per waiting turn (no previews), filtered by
//! configuration, tool, requester, waiting kind and words of the prompt, sorted by waiting time
//! or deadline. One row's panel opens in place at a time (with JavaScript, fetched as it opens;
//! without, by loading the inbox with `open=`); "Start triage" opens the longest waiting turn,
//! and a decision made from the inbox goes on to the next one. Keys for triage, and bulk
//! decisions over the rows whose panels were opened, come with JavaScript.

mod bulk;
mod filters;
mod panel;
mod rows;

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::nrllm_inbox;
use crate::components::{url_error, ErrorBanner};
use crate::islands::{ApprovalGuard, InboxDesk};
use crate::page_data::inbox::InboxPage;

pub use panel::nrllm_approval_panel;

/// The inbox's query fields, as the URL carries them.
const FIELDS: [&str; 8] = [
    "configuration",
    "tool",
    "requester",
    "kind",
    "q",
    "sort",
    "after",
    "open",
];

/// The approvals inbox.
#[component]
pub fn ApprovalsPage() -> impl IntoView {
    let query = use_query_map();
    let fields = move || {
        let q = query.read();
        FIELDS.map(|name| q.get(name))
    };
    let page = Resource::new(fields, |f| {
        let [configuration, tool, requester, kind, q, sort, after, open] = f;
        nrllm_inbox(
            configuration,
            tool,
            requester,
            kind,
            q,
            sort,
            after,
            open,
            None,
        )
    });
    view! {
        <h1 class="text-2xl font-semibold">"Approvals"</h1>
        <ErrorBanner error=url_error() />
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || {
                let shown = fields();
                Suspend::new(async move {
                    match page.await {
                        Ok(page) => view! { <Inbox page shown /> }.into_any(),
                        Err(err) => view! { <ErrorBanner error=Some(err) /> }.into_any(),
                    }
                })
            }}
        </Suspense>
    }
}

#[component]
fn Inbox(page: InboxPage, shown: [Option<String>; 8]) -> impl IntoView {
    let empty = page.rows.is_empty();
    let rows = rows::rows(page.rows, page.open, page.then);
    view! {
        <filters::Filters configurations=page.configurations tools=page.tools shown />
        <div class="mt-4 flex flex-wrap items-center gap-3">
            {page.triage_href.map(|href| view! {
                <a href=href class="rounded-md bg-indigo-600 px-3 py-1.5 text-sm font-medium text-white hover:bg-indigo-500" data-testid="start-triage">"Start triage"</a>
            })}
            <KeyHelp />
        </div>
        <bulk::BulkBar />
        {if empty {
            view! { <p class="mt-6 text-slate-600" data-testid="inbox-empty">"Nothing is waiting for a decision."</p> }.into_any()
        } else {
            view! { <ol class="mt-4 space-y-2" aria-label="Waiting turns">{rows}</ol> }.into_any()
        }}
        {page.next_href.map(|href| view! { <a href=href class="mt-4 inline-block underline" data-testid="inbox-next">"More waiting runs"</a> })}
        <ApprovalGuard keys=true />
        <InboxDesk />
    }
}

/// The keys of triage, and the switch that turns them off (with JavaScript; there are no keys
/// without it).
#[component]
fn KeyHelp() -> impl IntoView {
    let key = |k: &'static str, what: &'static str| {
        view! { <li><kbd class="rounded border px-1 font-mono">{k}</kbd> " " {what}</li> }
    };
    view! {
        <details id="key-help" class="text-sm" data-needs-script="" hidden data-testid="key-help">
            <summary class="cursor-pointer underline">"Keyboard shortcuts (?)"</summary>
            <ul class="mt-2 space-y-1">
                {key("j", "open the next turn")}
                {key("k", "open the previous turn")}
                {key("a", "approve all of the open turn")}
                {key("d", "deny all of the open turn")}
                {key("e", "edit the first call's arguments")}
                {key("r", "type the reason")}
                {key("Esc", "leave a field of the open turn")}
                {key("?", "show or hide this list")}
            </ul>
            <label class="mt-2 flex items-center gap-2">
                <input type="checkbox" id="keys-on" checked />
                "Single-key shortcuts on (they never act while you type in a field)"
            </label>
        </details>
    }
}
