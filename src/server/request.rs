//! What a server function knows about the request it serves: the app state, whether a browser
//! posted a plain form (answered with a redirect) or a client wants JSON (answered with a status),
//! and who is acting.

use leptos::prelude::*;

use super::AppState;
use crate::error::AppError;

/// The app state, as `leptos_routes` provides it to every server function and page.
pub fn state() -> Result<AppState, AppError> {
    use_context::<AppState>()
        .ok_or_else(|| AppError::internal("server state", "AppState missing from context"))
}

/// Whether this request is a browser's plain form post (it accepts HTML): such requests are
/// answered with a redirect, everything else with JSON and a status code.
pub fn wants_html() -> bool {
    use_context::<http::request::Parts>()
        .and_then(|parts| {
            parts
                .headers
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.contains("text/html"))
        })
        .unwrap_or(false)
}

/// Gives the response of a failed server function its HTTP status, for API clients (a browser's
/// form post is redirected back instead, with the error in the URL). Called once, where every
/// server function's error is encoded ([`AppError`]'s `FromServerFnError::ser`).
pub fn set_error_status(err: &AppError) {
    if !wants_html() {
        if let Some(options) = use_context::<leptos_axum::ResponseOptions>() {
            options.set_status(err.status());
        }
    }
}

/// Who is acting. Accounts come later; until then every operator is `operator`.
pub fn current_operator() -> String {
    "operator".to_owned()
}
