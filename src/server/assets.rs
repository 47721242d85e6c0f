//! Everything the routes do not name: a built asset from the site's folder (the app's script,
//! wasm and stylesheet, the favicon), or else the app's not-found page.
//!
//! Not `leptos_axum::file_and_error_handler`: it answers an asset inside a reactive owner it
//! makes as a child of the thread's current one, and a page rendering on that thread leaves its
//! own there while it waits. The asset then found the page's `ResponseOptions` and took its
//! headers: the page went out without its Content-Security-Policy (so its script was refused)
//! or its cookies, and the asset went out with them. Here an asset is a plain file answer that
//! never looks at any page's context (`tests/assets.rs`).

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::MethodRouter;
use leptos::prelude::provide_context;
use tower_http::services::ServeDir;

use super::AppState;
use crate::app::shell;

/// The fallback service: the file under the site's folder that the path names (`GET` and
/// `HEAD`; never outside the folder), else the not-found page. Compression is the router's.
pub fn site_files(state: AppState) -> ServeDir<MethodRouter> {
    ServeDir::new(&*state.leptos_options.site_root)
        .call_fallback_on_method_not_allowed(true)
        .fallback(axum::routing::any(not_found).with_state(state))
}

/// The app's page for an address nothing answers: 404, unless the page set its own status.
async fn not_found(State(state): State<AppState>, request: Request) -> Response {
    let options = state.leptos_options.clone();
    let render = leptos_axum::render_app_async_with_context(
        move || provide_context(state.clone()),
        move || shell(options.clone()),
    );
    let mut response = render(request).await;
    if response.status() == StatusCode::OK {
        *response.status_mut() = StatusCode::NOT_FOUND;
    }
    response
}
