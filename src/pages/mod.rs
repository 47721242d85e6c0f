//! The pages: `/` playground, `/runs` history, `/runs/:id` one run, `/approvals` inbox,
//! `/rules` approval rules, `/system` health. Each renders completely on the server; islands add
//! live updates.

pub mod account;
pub mod approvals;
pub mod decide;
pub mod playground;
pub mod rules;
pub mod run;
pub mod runs;
pub mod system;

use leptos::prelude::*;

/// The page for an unknown address or run (status 404).
#[component]
pub fn NotFound(#[prop(into)] message: String) -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.set_status(http::StatusCode::NOT_FOUND);
    }
    view! {
        <div class="py-16 text-center">
            <h1 class="text-2xl font-semibold">"Not found"</h1>
            <p class="mt-2 text-slate-600 dark:text-slate-400" data-testid="not-found">{message}</p>
            <a href="/runs" class="mt-4 inline-block text-indigo-700 underline dark:text-indigo-300">"All runs"</a>
        </div>
    }
}
