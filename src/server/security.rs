//! Response headers that keep a page safe even if a bug let markup through: a Content-Security-
//! Policy on every HTML response (scripts only with the page's nonce, no inline event handlers,
//! no framing by other sites), the usual hardening headers on everything, and
//! `Cache-Control: no-store` on everything but the built assets (a new API token is shown once on
//! a page; no cache between the server and the browser may keep it).
//!
//! Pages get a policy with the nonce Leptos generated for that response (its hydration script
//! carries it); any other HTML the server sends (a bare error page) gets one that allows no script.

use axum::extract::Request;
use axum::http::header::{
    HeaderValue, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::middleware::Next;
use axum::response::Response;

/// The policy of an HTML response that runs no script at all.
pub const NO_SCRIPT_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The policy of a page whose scripts carry `nonce`. `'strict-dynamic'` lets the nonce'd loader
/// import the app's module, and nothing else: no inline handler (`onerror=`, `onload=`), no
/// `<script>` without the nonce, not even one from this origin. `'wasm-unsafe-eval'` lets it
/// compile the wasm bundle. With `dev_reload`, `cargo leptos watch`'s reload socket may connect.
pub fn page_policy(nonce: &str, dev_reload: bool) -> String {
    let reload = if dev_reload { " ws: wss:" } else { "" };
    format!(
        "default-src 'self'; script-src 'nonce-{nonce}' 'strict-dynamic' 'wasm-unsafe-eval'; \
         style-src 'self'; img-src 'self' data:; connect-src 'self'{reload}; object-src 'none'; \
         base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
}

/// Called while a page whose URL carries a secret renders (a decision link's token): no request
/// from it names its URL.
pub fn set_no_referrer() {
    if let Some(response) = leptos::prelude::use_context::<leptos_axum::ResponseOptions>() {
        response.insert_header(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    }
}

/// Called while a page renders: sets the page's policy with this response's nonce.
pub fn set_page_policy() {
    let Some(response) = leptos::prelude::use_context::<leptos_axum::ResponseOptions>() else {
        return;
    };
    let policy = match leptos::nonce::use_nonce() {
        Some(nonce) => page_policy(&nonce, std::env::var_os("LEPTOS_WATCH").is_some()),
        None => NO_SCRIPT_POLICY.to_owned(),
    };
    if let Ok(value) = HeaderValue::from_str(&policy) {
        response.insert_header(CONTENT_SECURITY_POLICY, value);
    }
}

/// The middleware: hardening headers on every response, and a no-script policy on any HTML
/// response that has no policy of its own.
pub async fn security_headers(request: Request, next: Next) -> Response {
    // Pages, API answers and downloads are the caller's own (a new API token shows once on a
    // page): no cache keeps them. The built assets are the same for everyone.
    let static_asset = {
        let path = request.uri().path();
        path.starts_with("/pkg/") || path == "/favicon.ico"
    };
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    if !static_asset && !headers.contains_key(CACHE_CONTROL) {
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // Same-origin unless the page says otherwise (a decision link's page: none at all).
    if !headers.contains_key(REFERRER_POLICY) {
        headers.insert(REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    }
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    let html = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if html && !headers.contains_key(CONTENT_SECURITY_POLICY) {
        headers.insert(
            CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(NO_SCRIPT_POLICY),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_policy_allows_scripts_only_by_nonce_and_forbids_framing() {
        let policy = page_policy("abc123", false);
        let script_src = policy
            .split(';')
            .map(str::trim)
            .find(|d| d.starts_with("script-src"))
            .unwrap();
        assert_eq!(
            script_src,
            "script-src 'nonce-abc123' 'strict-dynamic' 'wasm-unsafe-eval'"
        );
        assert!(!policy.contains("unsafe-inline"));
        assert!(policy.contains("frame-ancestors 'none'"));
        assert!(policy.contains("object-src 'none'"));
        assert!(!policy.contains("ws:"));
        assert!(page_policy("abc123", true).contains("connect-src 'self' ws: wss:"));
        assert!(NO_SCRIPT_POLICY.contains("default-src 'none'"));
        assert!(NO_SCRIPT_POLICY.contains("frame-ancestors 'none'"));
    }
}
