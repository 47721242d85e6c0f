//! One waiting run's panel as the inbox opens it in place: the run page's panel, rendered here on
//! the server (hostile text escaped as everywhere), its previews computed now.

use leptos::prelude::*;

use crate::error::AppError;

/// The approval (or question) panel of waiting run `run_id`, as HTML for the inbox to show in
/// its row; a short note when the run no longer waits. `inbox`: the inbox's query (its filters),
/// so that a decision made in the panel goes on to the next turn of the same inbox.
#[server(endpoint = "nrllm_approval_panel", input = leptos::server_fn::codec::GetUrl)]
pub async fn nrllm_approval_panel(
    run_id: String,
    inbox: Option<String>,
) -> Result<String, AppError> {
    use leptos::tachys::view::RenderHtml;
    let who = crate::server::request::require(nrllm_types::Role::Viewer)?;
    let state = crate::server::request::state()?;
    let id = crate::api::checks::parse_run_id(&run_id)?;
    let then = crate::api::waiting::InboxQuery::from_query(inbox.as_deref().unwrap_or(""))?.then();
    let html = match crate::api::waiting::panel_view(&state, id, &who).await? {
        Some(run) => view! { <super::rows::OpenPanel run then /> }.to_html(),
        None => view! {
            <p class="mt-2 text-sm" data-testid="no-longer-waiting">
                "This run no longer waits for a decision: " <a href=format!("/runs/{id}") class="underline">"open it"</a> "."
            </p>
        }
        .to_html(),
    };
    Ok(html)
}
