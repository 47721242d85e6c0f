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

/// What the auth middleware found out about this request ([`super::auth::guard`]).
pub fn caller() -> Option<super::auth::Caller> {
    use_context::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<super::auth::Caller>().cloned())
}

/// Who is acting, if they may act as `role`: 401 if nobody logged in, 403 (saying which role it
/// takes) if their role is lower.
pub fn require(role: nrllm_types::Role) -> Result<nrllm_store::accounts::Principal, AppError> {
    let Some(principal) = caller().and_then(|c| c.principal) else {
        return Err(AppError::Unauthorized(
            "Log in first (or send an API token: Authorization: Bearer …).".to_owned(),
        ));
    };
    if !principal.role.allows(role) {
        tracing::warn!(who = %principal.name, has = %principal.role, needs = %role, "refused: role");
        return Err(AppError::Forbidden(format!(
            "This needs the {role} role; {} is {} {}.",
            principal.name,
            article(principal.role),
            principal.role
        )));
    }
    Ok(principal)
}

fn article(role: nrllm_types::Role) -> &'static str {
    match role {
        nrllm_types::Role::Operator | nrllm_types::Role::Approver | nrllm_types::Role::Admin => {
            "an"
        }
        nrllm_types::Role::Viewer => "a",
    }
}

/// The caller's trace context: its `traceparent`, parsed strictly, with its `tracestate` if that
/// is small and well formed; `None` when absent or malformed (then ignored, never half-read).
/// Only for a caller [`require`] let in.
pub fn trace_parent() -> Option<(nrllm_core::trace::TraceParent, Option<String>)> {
    use nrllm_core::trace::{bounded_tracestate, TraceParent};
    let parts = use_context::<http::request::Parts>()?;
    let header = parts.headers.get_all("traceparent");
    let mut values = header.iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let parent = TraceParent::parse(value.to_str().ok()?)?;
    let state: Vec<&str> = parts
        .headers
        .get_all("tracestate")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect();
    Some((parent, bounded_tracestate(&state.join(","))))
}
