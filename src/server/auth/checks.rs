//! What a request carries: its cookies, its host, its origin, its CSRF token, and who it is
//! from.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use cookie::{Cookie, SameSite};
use nrllm_store::accounts::{AccountStore, Principal};
use std::sync::Arc;

/// The session cookie.
pub const SESSION_COOKIE: &str = "nrllm_session";

/// The CSRF cookie; forms send the same value as their `csrf` field.
pub const CSRF_COOKIE: &str = "nrllm_csrf";

/// The form field and the header that carry the CSRF token.
pub const CSRF_FIELD: &str = "csrf";

pub const CSRF_HEADER: &str = "x-csrf-token";

/// What the middleware found out about a request, for the server functions and pages.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Who acts, if anybody logged in (or sent a token).
    pub principal: Option<Principal>,
    /// The CSRF token forms on the page must send back.
    pub csrf: String,
    /// The session cookie's secret (to end the session at logout).
    pub session: Option<String>,
    /// The client's address (for rate limits).
    pub peer: Option<std::net::IpAddr>,
}

/// How the middleware is set up.
#[derive(Clone)]
pub struct AuthConfig {
    pub accounts: AccountStore,
    /// Host names (without port) this server answers to.
    pub allowed_hosts: Arc<Vec<String>>,
    /// Cookies get `Secure` (the public URL is https).
    pub secure: bool,
}

/// Paths anybody may reach: the login pages and what they load.
pub(super) fn public_path(path: &str) -> bool {
    path == "/login"
        || path == "/login/once"
        || path == "/api/nrllm_login"
        || path == "/api/nrllm_login_link"
        || path.starts_with("/pkg/")
        || path == "/favicon.ico"
}

pub(super) fn safe_method(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

pub(super) fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == name)
        .map(|c| c.value().to_owned())
        .filter(|v| !v.is_empty())
}

/// A `Set-Cookie` value: HttpOnly, SameSite=Strict, path `/`, `Secure` over https.
pub fn set_cookie(name: &str, value: &str, max_age_secs: i64, secure: bool) -> HeaderValue {
    let cookie = Cookie::build((name.to_owned(), value.to_owned()))
        .http_only(true)
        .same_site(SameSite::Strict)
        .path("/")
        .secure(secure)
        .max_age(cookie::time::Duration::seconds(max_age_secs))
        .build();
    HeaderValue::from_str(&cookie.to_string()).expect("cookie values are hex")
}

/// The host name a request was sent to (from `Host`, without the port).
pub(super) fn host_name(headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next()?,
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    Some(name.to_ascii_lowercase())
}

pub(super) fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"))
}

/// The request came from a page of this site (or from no page: a script, curl).
pub(super) fn same_site(headers: &HeaderMap, host: &str) -> Result<(), &'static str> {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if !matches!(site, "same-origin" | "none") {
            return Err("sec-fetch-site");
        }
    }
    let fetch_site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        // A page sent with `Referrer-Policy: no-referrer` (a decision link's) posts with
        // `Origin: null`; the browser's own Sec-Fetch-Site, which no page can set, still says
        // where the post came from.
        if origin == "null" && fetch_site == Some("same-origin") {
            return Ok(());
        }
        let origin_host = origin
            .split_once("://")
            .map(|(_, rest)| rest)
            .unwrap_or_default();
        let request_host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(host);
        if !origin_host.eq_ignore_ascii_case(request_host) {
            return Err("origin");
        }
    }
    Ok(())
}

/// The CSRF token the request carries: the header, or the `csrf` field of a form body (the body
/// is read and put back).
pub(super) async fn csrf_of(request: Request) -> Result<(Option<String>, Request), Response> {
    if let Some(token) = request
        .headers()
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        let token = token.to_owned();
        return Ok((Some(token), request));
    }
    let is_form = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !is_form {
        return Ok((None, request));
    }
    let (parts, body) = request.into_parts();
    // The body limit layer outside this one caps what is read here.
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(|_| StatusCode::PAYLOAD_TOO_LARGE.into_response())?;
    let token = form_urlencoded::parse(&bytes)
        .find(|(name, _)| name == CSRF_FIELD)
        .map(|(_, value)| value.into_owned());
    Ok((token, Request::from_parts(parts, Body::from(bytes))))
}
