//! What the client of a request accepts: a browser's plain form post is answered with a
//! redirect, everything else with JSON and a status code. Below every server function and its
//! errors ([`crate::error::AppError`]), so both read it.

use leptos::prelude::*;

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
/// server function's error is encoded (`AppError`'s `FromServerFnError::ser`).
pub fn set_error_status(status: http::StatusCode) {
    if !wants_html() {
        if let Some(options) = use_context::<leptos_axum::ResponseOptions>() {
            options.set_status(status);
        }
    }
}
