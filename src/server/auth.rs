//! Who is asking, and whether the request may change anything. One middleware runs before every
//! route:
//! - the `Host` must be one of `allowed_hosts` (a DNS-rebinding page reaches the server under a
//!   foreign name; it gets 403 and reads nothing);
//! - the caller is the user of the session cookie (HttpOnly, SameSite=Strict) or the API token of
//!   an `Authorization: Bearer` header; anybody else may only see the login pages (a page asks to
//!   log in, an API call gets 401);
//! - a request that changes state (any method but GET/HEAD/OPTIONS) from a browser must come from
//!   this site (`Sec-Fetch-Site`, `Origin`) and carry the CSRF token: the `csrf` field of a form,
//!   or the `x-csrf-token` header, equal to the HttpOnly `nrllm_csrf` cookie (double submit,
//!   rotated at every login). Requests with an API token, and JSON requests without a session
//!   cookie (a script logging in), carry no ambient credential and skip the token.
//!
//! Every refusal is 401 or 403 with a message saying what to do, and is logged. Roles are checked
//! where the action is ([`super::request::require`]).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use cookie::{Cookie, SameSite};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use nrllm_store::accounts::{AccountStore, Principal};
use nrllm_types::Role;
use std::num::NonZeroU32;

use super::AppState;

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
fn public_path(path: &str) -> bool {
    path == "/login"
        || path == "/login/once"
        || path == "/api/nrllm_login"
        || path == "/api/nrllm_login_link"
        || path.starts_with("/pkg/")
        || path == "/favicon.ico"
}

fn safe_method(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
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
fn host_name(headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next()?,
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    Some(name.to_ascii_lowercase())
}

fn refuse(status: StatusCode, message: &str, wants_json: bool) -> Response {
    if wants_json {
        let key = match status {
            StatusCode::UNAUTHORIZED => "Unauthorized",
            StatusCode::PAYLOAD_TOO_LARGE => "BadRequest",
            _ => "Forbidden",
        };
        let body = serde_json::json!({ key: message }).to_string();
        (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    } else {
        (
            status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            message.to_owned(),
        )
            .into_response()
    }
}

fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"))
}

/// The request came from a page of this site (or from no page: a script, curl).
fn same_site(headers: &HeaderMap, host: &str) -> Result<(), &'static str> {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if !matches!(site, "same-origin" | "none") {
            return Err("sec-fetch-site");
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
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
async fn csrf_of(request: Request) -> Result<(Option<String>, Request), Response> {
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

/// The middleware (see the module).
pub async fn guard(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let auth = &state.auth;
    let headers = request.headers().clone();
    let json = !wants_html(&headers);
    let path = request.uri().path().to_owned();
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());

    let Some(host) = host_name(&headers).filter(|h| auth.allowed_hosts.contains(h)) else {
        tracing::warn!(host = ?headers.get(header::HOST), %path, "refused: host not allowed");
        return refuse(
            StatusCode::FORBIDDEN,
            "This server does not answer to that host name. Use its own address (setting `allowed_hosts`).",
            json,
        );
    };

    let now = nrllm_core::clock::now_ms();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .map(str::to_owned);
    let session = cookie_value(&headers, SESSION_COOKIE);
    let principal = match (&bearer, &session) {
        (Some(token), _) => match auth.accounts.token(token, now).await {
            Ok(Some(principal)) => Some(principal),
            Ok(None) => {
                tracing::warn!(%path, "refused: unknown API token");
                return refuse(
                    StatusCode::UNAUTHORIZED,
                    "The API token is not valid (revoked, or mistyped).",
                    true,
                );
            }
            Err(err) => {
                tracing::error!(%err, "reading an API token failed");
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            }
        },
        (None, Some(secret)) => match auth.accounts.session(secret, now).await {
            Ok(principal) => principal,
            Err(err) => {
                tracing::error!(%err, "reading a session failed");
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            }
        },
        (None, None) => None,
    };

    // Nobody logged in: only the login pages answer, and their forms are small. A larger body
    // is refused before any of it is read, so that nothing unauthenticated takes memory.
    if principal.is_none() && !safe_method(request.method()) {
        let length = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if length.is_some_and(|n| n > ANONYMOUS_BODY_BYTES as u64) {
            tracing::warn!(%path, ?length, ?peer, "refused: a large body from someone not logged in");
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                "The request is too large (16 KB at most before logging in).",
                json,
            );
        }
        request =
            request.map(|body| Body::new(http_body_util::Limited::new(body, ANONYMOUS_BODY_BYTES)));
    }

    let existing_csrf = cookie_value(&headers, CSRF_COOKIE);
    if !safe_method(request.method()) && bearer.is_none() {
        if let Err(check) = same_site(&headers, &host) {
            tracing::warn!(%path, check, "refused: cross-site request");
            return refuse(
                StatusCode::FORBIDDEN,
                "Refused: a page of another site cannot change anything here.",
                json,
            );
        }
        // A JSON request without a session cookie carries no ambient credential to forge, and a
        // page of another site cannot send JSON here (it would need CORS, which this server never
        // grants): scripts log in that way. Every form post and every request with a session
        // cookie must carry the token.
        let json_body = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        let (sent, rebuilt) = match csrf_of(request).await {
            Ok(found) => found,
            Err(response) => return response,
        };
        request = rebuilt;
        let valid = (json_body && session.is_none())
            || match (&existing_csrf, &sent) {
                (Some(expected), Some(sent)) => {
                    // Equal length hex strings; compare without an early exit.
                    expected.len() == sent.len()
                        && expected
                            .bytes()
                            .zip(sent.bytes())
                            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                            == 0
                }
                _ => false,
            };
        if !valid {
            tracing::warn!(%path, "refused: missing or wrong CSRF token");
            return refuse(
                StatusCode::FORBIDDEN,
                "The form's security token is missing or out of date: reload the page and try again.",
                json,
            );
        }
    }

    if principal.is_none() && bearer.is_none() && !public_path(&path) {
        if safe_method(request.method()) && !json {
            let next_path = match request.uri().path_and_query() {
                Some(pq) => pq.as_str().to_owned(),
                None => "/".to_owned(),
            };
            let target = format!(
                "/login?next={}",
                form_urlencoded::byte_serialize(next_path.as_bytes()).collect::<String>()
            );
            return Redirect::to(&target).into_response();
        }
        return refuse(
            StatusCode::UNAUTHORIZED,
            "Log in first (or send an API token: Authorization: Bearer …).",
            json,
        );
    }

    let csrf = existing_csrf
        .clone()
        .unwrap_or_else(nrllm_store::accounts::new_secret);
    request.extensions_mut().insert(Caller {
        principal,
        csrf: csrf.clone(),
        session,
        peer,
    });
    let mut response = next.run(request).await;
    sign_error_redirect(&mut response, &state.banner_key);
    if auth.secure {
        response.headers_mut().insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    if existing_csrf.is_none() && !response.headers().contains_key(header::SET_COOKIE) {
        response.headers_mut().append(
            header::SET_COOKIE,
            set_cookie(CSRF_COOKIE, &csrf, 400 * 24 * 3600, auth.secure),
        );
    }
    response
}

/// HMAC-SHA256 of `message` under `key`, in lower-case hex: the signature of an error banner's
/// text (`__err` of a redirect, so the page shows only errors this server put there) and of a
/// webhook delivery.
pub fn hmac_hex(key: &[u8], message: &str) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(message.as_bytes());
    const_hex::encode(mac.finalize().into_bytes())
}

/// Whether `signature` is this server's for the banner `encoded`.
pub fn banner_signed(key: &[u8], encoded: &str, signature: Option<&str>) -> bool {
    use hmac::{Hmac, Mac};
    let Some(bytes) = signature.and_then(|s| const_hex::decode(s).ok()) else {
        return false;
    };
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(encoded.as_bytes());
    mac.verify_slice(&bytes).is_ok()
}

/// A form post's error redirect carries its error in `__err`: sign it (`__sig`). The redirect
/// goes back to the form's page, named by the request's `Referer`, with server_fn's `__path` and
/// `__err` appended last. Whatever `__err`, `__path` or `__sig` the Referer carried came from the
/// client and is dropped, so only the error this server chose is signed; and the redirect names
/// only a path of this site, whatever host the Referer named.
fn sign_error_redirect(response: &mut Response, key: &[u8]) {
    let Some(location) = response
        .headers()
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
    else {
        return;
    };
    let Some((target, query)) = location.split_once('?') else {
        return;
    };
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let last = |name: &str| {
        pairs
            .iter()
            .rev()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
    };
    let Some(encoded) = last("__err") else {
        return;
    };
    let mut rebuilt = form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "__err" | "__path" | "__sig"))
    {
        rebuilt.append_pair(name, value);
    }
    if let Some(path) = last("__path") {
        rebuilt.append_pair("__path", &path);
    }
    rebuilt.append_pair("__err", &encoded);
    rebuilt.append_pair("__sig", &hmac_hex(key, &encoded));
    let signed = format!("{}?{}", site_path(target), rebuilt.finish());
    if let Ok(value) = HeaderValue::from_str(&signed) {
        response.headers_mut().insert(header::LOCATION, value);
    }
}

/// The path part of `target` (an absolute URL or a path), if it is a plain path of this site;
/// else `/`.
fn site_path(target: &str) -> &str {
    let path = match target.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |at| &rest[at..]),
        None => target,
    };
    match is_site_path(path) {
        true => path,
        false => "/",
    }
}

/// Whether `path` names a page of this site however a browser reads it. Browsers drop tabs and
/// line breaks from a URL and read a backslash as a slash, so `/\t/evil.example` would become
/// `//evil.example`, another site: a path with any control character or backslash, or one that
/// starts with `//`, is not (and so never reaches a header it cannot be put in).
pub fn is_site_path(path: &str) -> bool {
    path.starts_with('/')
        && !path.starts_with("//")
        && !path.contains('\\')
        && !path.chars().any(char::is_control)
}

/// Rate limits: logins per client address and per user name from one address, run starts per
/// user. Nothing an unauthenticated caller sends keys a limiter unbounded: names are cut to
/// [`LOGIN_NAME_CHARS`] first, the address is checked first, and idle keys are forgotten
/// ([`Limits::forget_idle`], every [`FORGET_IDLE_EVERY`]).
pub struct Limits {
    pub run_starts: DefaultKeyedRateLimiter<String>,
    pub run_starts_per_minute: u32,
    /// By the name tried and the address it came from: failures from elsewhere never lock a
    /// user out.
    logins_per_user: DefaultKeyedRateLimiter<(String, Option<std::net::IpAddr>)>,
    logins_per_address: DefaultKeyedRateLimiter<std::net::IpAddr>,
}

/// The longest login name kept (a user's name is at most 64 characters; a longer one matches
/// nobody): what keys a limiter and reaches the log.
pub const LOGIN_NAME_CHARS: usize = 64;

/// How often the limiters forget keys whose limits have refilled.
pub const FORGET_IDLE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// A login name as the server keeps it: trimmed, and cut to [`LOGIN_NAME_CHARS`] characters
/// (one character more, so that a longer name never equals a real one).
pub fn login_name(name: &str) -> String {
    name.trim().chars().take(LOGIN_NAME_CHARS + 1).collect()
}

/// The largest body a request of someone not logged in may carry (a login form is far smaller).
pub const ANONYMOUS_BODY_BYTES: usize = 16 * 1024;

/// Login attempts one user name, or one client address, may make per minute.
pub const LOGINS_PER_MINUTE_PER_USER: u32 = 5;
pub const LOGINS_PER_MINUTE_PER_ADDRESS: u32 = 20;

impl Limits {
    pub fn new(run_starts_per_minute: u32) -> Limits {
        let per_minute = |n: u32| Quota::per_minute(NonZeroU32::new(n.max(1)).expect("at least 1"));
        Limits {
            run_starts: RateLimiter::keyed(per_minute(run_starts_per_minute)),
            run_starts_per_minute,
            logins_per_user: RateLimiter::keyed(per_minute(LOGINS_PER_MINUTE_PER_USER)),
            logins_per_address: RateLimiter::keyed(per_minute(LOGINS_PER_MINUTE_PER_ADDRESS)),
        }
    }

    /// Whether a login attempt for `name` (as [`login_name`] keeps it) from `peer` may go on:
    /// the address's limit first, then the name's from that address.
    pub fn login_allowed(&self, name: &str, peer: Option<std::net::IpAddr>) -> bool {
        if peer.is_some_and(|ip| self.logins_per_address.check_key(&ip).is_err()) {
            return false;
        }
        self.logins_per_user
            .check_key(&(name.to_lowercase(), peer))
            .is_ok()
    }

    /// Forgets keys whose limits have refilled, so names tried by a guesser do not pile up.
    pub fn forget_idle(&self) {
        self.run_starts.retain_recent();
        self.logins_per_user.retain_recent();
        self.logins_per_address.retain_recent();
    }
}

/// API tokens just created, kept two minutes in memory so that the admin page can show each to
/// the admin who created it (the database keeps only its hash). The page's address names one by
/// a random id, never by the token.
#[derive(Default)]
pub struct ShownTokens {
    shown: std::sync::Mutex<std::collections::HashMap<String, (String, String, String, i64)>>,
}

const SHOWN_FOR_MS: i64 = 2 * 60 * 1000;

impl ShownTokens {
    /// Keeps `token` (named `name`) for `admin`; the id to show it by.
    pub fn put(&self, admin: &str, name: &str, token: &str) -> String {
        let id = nrllm_store::accounts::new_secret();
        let now = nrllm_core::clock::now_ms();
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        shown.retain(|_, (_, _, _, at)| now - *at < SHOWN_FOR_MS);
        shown.insert(
            id.clone(),
            (admin.to_owned(), name.to_owned(), token.to_owned(), now),
        );
        id
    }

    /// The token's name and the token, if `id` is one `admin` created in the last two minutes.
    pub fn get(&self, id: &str, admin: &str) -> Option<(String, String)> {
        let now = nrllm_core::clock::now_ms();
        let shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        shown
            .get(id)
            .filter(|(by, _, _, at)| by == admin && now - *at < SHOWN_FOR_MS)
            .map(|(_, name, token, _)| (name.clone(), token.clone()))
    }
}

/// On the first start (no users yet) creates `admin`: with the password in
/// `NRLLM_ADMIN_PASSWORD`, or else without one, logging a one-time login link.
pub async fn first_admin(
    accounts: &AccountStore,
    public_url: &str,
    password: Option<String>,
) -> Result<(), String> {
    let count = accounts
        .user_count()
        .await
        .map_err(|err| format!("cannot read the users: {err}"))?;
    if count > 0 {
        return Ok(());
    }
    let now = nrllm_core::clock::now_ms();
    let password = password.filter(|p| !p.is_empty());
    match accounts
        .create_user("admin", password.as_deref(), Role::Admin, now)
        .await
    {
        Ok(_) => {}
        // Another instance starting at the same moment on the same database made it first.
        Err(nrllm_store::accounts::AccountError::Exists(_)) => return Ok(()),
        Err(err) => {
            return Err(format!(
                "cannot create the first user: {err} (NRLLM_ADMIN_PASSWORD)"
            ))
        }
    }
    if password.is_some() {
        tracing::info!(
            "first start: created the user `admin` with the password in NRLLM_ADMIN_PASSWORD"
        );
        return Ok(());
    }
    let link = login_link(accounts, public_url, "admin").await?;
    tracing::warn!(
        "first start: created the user `admin`. Open this one-time link to log in and set a \
         password (valid 24 hours): {link}"
    );
    Ok(())
}

/// A one-time login link for `name`, valid 24 hours.
pub async fn login_link(
    accounts: &AccountStore,
    public_url: &str,
    name: &str,
) -> Result<String, String> {
    let secret = accounts
        .create_login_link(name, nrllm_core::clock::now_ms(), 24 * 3600 * 1000)
        .await
        .map_err(|err| format!("cannot create a login link: {err}"))?;
    Ok(format!("{public_url}/login/once?token={secret}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn only_the_error_the_server_appended_is_signed_and_the_redirect_stays_on_this_site() {
        let key = b"banner key";
        let redirect = |location: &str| {
            let mut response = Response::new(Body::empty());
            response
                .headers_mut()
                .insert(header::LOCATION, HeaderValue::from_str(location).unwrap());
            sign_error_redirect(&mut response, key);
            response.headers()[header::LOCATION]
                .to_str()
                .unwrap()
                .to_owned()
        };
        // A Referer that carried its own banner (and signature): the client's are dropped.
        let signed = redirect(
            "http://evil.example/runs/1?step=2&__err=Q0xJRU5U&__sig=00&__path=%2Fx&__path=%2Fapi%2Fnrllm_tool_resume&__err=U0VSVkVS",
        );
        let query: Vec<(String, String)> =
            form_urlencoded::parse(signed.split_once('?').unwrap().1.as_bytes())
                .into_owned()
                .collect();
        assert!(signed.starts_with("/runs/1?"), "{signed}");
        let values = |name: &str| -> Vec<&str> {
            query
                .iter()
                .filter(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
                .collect()
        };
        assert_eq!(values("__err"), ["U0VSVkVS"]);
        assert_eq!(values("__path"), ["/api/nrllm_tool_resume"]);
        assert_eq!(values("step"), ["2"]);
        let sig = values("__sig");
        assert_eq!(sig.len(), 1);
        assert!(banner_signed(key, "U0VSVkVS", Some(sig[0])));
        assert!(!banner_signed(key, "Q0xJRU5U", Some(sig[0])));
        // A redirect that carries no error is left alone.
        assert_eq!(redirect("/runs/2"), "/runs/2");
        assert_eq!(site_path("//evil.example/x"), "/");
        assert_eq!(site_path("https://h.example"), "/");
    }

    #[test]
    fn host_names_are_compared_without_their_port() {
        assert_eq!(
            host_name(&headers(&[("host", "LocalHost:3000")])).as_deref(),
            Some("localhost")
        );
        assert_eq!(
            host_name(&headers(&[("host", "[::1]:3000")])).as_deref(),
            Some("::1")
        );
        assert_eq!(
            host_name(&headers(&[("host", "rebind.evil.example")])).as_deref(),
            Some("rebind.evil.example")
        );
    }

    #[test]
    fn only_this_site_may_post() {
        let host = "127.0.0.1";
        assert!(same_site(&headers(&[("host", "127.0.0.1:3000")]), host).is_ok());
        assert!(same_site(
            &headers(&[
                ("host", "127.0.0.1:3000"),
                ("sec-fetch-site", "same-origin"),
                ("origin", "http://127.0.0.1:3000")
            ]),
            host
        )
        .is_ok());
        assert_eq!(
            same_site(
                &headers(&[("host", "127.0.0.1:3000"), ("sec-fetch-site", "cross-site")]),
                host
            ),
            Err("sec-fetch-site")
        );
        assert_eq!(
            same_site(
                &headers(&[
                    ("host", "127.0.0.1:3000"),
                    ("origin", "https://evil.example")
                ]),
                host
            ),
            Err("origin")
        );
        assert_eq!(
            same_site(
                &headers(&[
                    ("host", "127.0.0.1:3000"),
                    ("origin", "http://127.0.0.1:3001")
                ]),
                host
            ),
            Err("origin"),
            "another port is another origin"
        );
    }

    #[test]
    fn cookies_are_found_by_name_and_set_strict_and_http_only() {
        let map = headers(&[("cookie", "a=1; nrllm_csrf=abc; nrllm_session=")]);
        assert_eq!(cookie_value(&map, CSRF_COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie_value(&map, SESSION_COOKIE), None, "empty is none");
        let set = set_cookie(SESSION_COOKIE, "s3cr3t", 60, true);
        let text = set.to_str().unwrap();
        for part in [
            "nrllm_session=s3cr3t",
            "HttpOnly",
            "SameSite=Strict",
            "Secure",
            "Path=/",
        ] {
            assert!(text.contains(part), "{text}");
        }
        assert!(!set_cookie(SESSION_COOKIE, "x", 60, false)
            .to_str()
            .unwrap()
            .contains("Secure"));
    }

    #[test]
    fn only_banners_this_server_signed_are_shown() {
        let key = b"key";
        let signature = hmac_hex(key, "eyJOb3RGb3VuZCI6IngifQ==");
        assert!(banner_signed(
            key,
            "eyJOb3RGb3VuZCI6IngifQ==",
            Some(&signature)
        ));
        assert!(!banner_signed(
            key,
            "eyJOb3RGb3VuZCI6InkifQ==",
            Some(&signature)
        ));
        assert!(!banner_signed(
            b"other",
            "eyJOb3RGb3VuZCI6IngifQ==",
            Some(&signature)
        ));
        assert!(!banner_signed(key, "eyJOb3RGb3VuZCI6IngifQ==", None));
        assert!(!banner_signed(key, "eyJOb3RGb3VuZCI6IngifQ==", Some("zz")));

        let mut response =
            Redirect::to("/runs/1?__err=eyJOb3RGb3VuZCI6IngifQ%3D%3D").into_response();
        sign_error_redirect(&mut response, key);
        let location = response.headers()[header::LOCATION].to_str().unwrap();
        assert!(
            location.ends_with(&format!("&__sig={signature}")),
            "{location}"
        );
        let mut plain = Redirect::to("/runs/1").into_response();
        sign_error_redirect(&mut plain, key);
        assert_eq!(plain.headers()[header::LOCATION], "/runs/1");
    }
}
