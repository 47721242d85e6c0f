//! The middleware every request passes: host, origin and CSRF checks, the session or token, and
//! the answer when one fails.

use super::checks::*;
use super::limits::*;
use super::signing::*;
use crate::server::AppState;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use nrllm_store::accounts::Principal;
use std::net::SocketAddr;

pub(super) fn refuse(status: StatusCode, message: &str, wants_json: bool) -> Response {
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
    if path == crate::server::notify::slack::INTERACTIONS_PATH {
        // Slack's button presses: no session, cookie or Origin of ours; the handler checks
        // Slack's signature over the body (the body cap still holds, outside this guard).
        return next.run(request).await;
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .map(str::to_owned);
    let session = cookie_value(&headers, SESSION_COOKIE);
    let principal = match principal_of(auth, bearer.as_deref(), session.as_deref(), &path).await {
        Ok(principal) => principal,
        Err(response) => return response,
    };
    if principal.is_none() && !safe_method(request.method()) {
        // Nobody logged in: only the login pages answer, and their forms are small.
        if let Some(refusal) = too_large_anonymous(&request, &path, peer, json) {
            return refusal;
        }
        request =
            request.map(|body| Body::new(http_body_util::Limited::new(body, ANONYMOUS_BODY_BYTES)));
    }
    let existing_csrf = cookie_value(&headers, CSRF_COOKIE);
    if !safe_method(request.method()) && bearer.is_none() {
        let sent = Sent {
            host: &host,
            session: session.as_deref(),
            csrf: existing_csrf.as_deref(),
            path: &path,
            json,
        };
        request = match check_csrf(request, &sent).await {
            Ok(request) => request,
            Err(response) => return response,
        };
    }
    if principal.is_none() && bearer.is_none() && !public_path(&path) {
        return login_first(&request, json);
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
    let new_csrf = existing_csrf.is_none().then_some(csrf.as_str());
    finish(&mut response, auth.secure, new_csrf);
    response
}

/// HSTS behind https, and a new CSRF cookie for a browser that had none (unless the response
/// sets cookies of its own: a login sets a fresh one).
fn finish(response: &mut Response, secure: bool, new_csrf: Option<&str>) {
    if secure {
        response.headers_mut().insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    if let Some(csrf) = new_csrf.filter(|_| !response.headers().contains_key(header::SET_COOKIE)) {
        response.headers_mut().append(
            header::SET_COOKIE,
            set_cookie(CSRF_COOKIE, csrf, 400 * 24 * 3600, secure),
        );
    }
}

/// Who the request is from: the user of its API token (an unknown token is refused), else of its
/// session, else nobody.
async fn principal_of(
    auth: &AuthConfig,
    bearer: Option<&str>,
    session: Option<&str>,
    path: &str,
) -> Result<Option<Principal>, Response> {
    let now = nrllm_core::clock::now_ms();
    match (bearer, session) {
        (Some(token), _) => match auth.accounts.token(token, now).await {
            Ok(Some(principal)) => Ok(Some(principal)),
            Ok(None) => {
                tracing::warn!(%path, "refused: unknown API token");
                Err(refuse(
                    StatusCode::UNAUTHORIZED,
                    "The API token is not valid (revoked, or mistyped).",
                    true,
                ))
            }
            Err(err) => {
                tracing::error!(%err, "reading an API token failed");
                Err(StatusCode::INTERNAL_SERVER_ERROR.into_response())
            }
        },
        (None, Some(secret)) => auth.accounts.session(secret, now).await.map_err(|err| {
            tracing::error!(%err, "reading a session failed");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }),
        (None, None) => Ok(None),
    }
}

/// The refusal of a body from someone not logged in that is larger than they may send: it is
/// refused before any of it is read, so that nothing unauthenticated takes memory (a body
/// without a length is capped as it is read).
fn too_large_anonymous(
    request: &Request,
    path: &str,
    peer: Option<std::net::IpAddr>,
    json: bool,
) -> Option<Response> {
    let length = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if length.is_none_or(|n| n <= ANONYMOUS_BODY_BYTES as u64) {
        return None;
    }
    tracing::warn!(%path, ?length, ?peer, "refused: a large body from someone not logged in");
    Some(refuse(
        StatusCode::PAYLOAD_TOO_LARGE,
        "The request is too large (16 KB at most before logging in).",
        json,
    ))
}

/// What a state-changing request brought that the CSRF check weighs.
struct Sent<'a> {
    host: &'a str,
    session: Option<&'a str>,
    /// The CSRF cookie.
    csrf: Option<&'a str>,
    path: &'a str,
    json: bool,
}

/// A state-changing request from a browser: same site, and carrying the form's token. A JSON
/// request without a session cookie carries no ambient credential to forge, and a page of
/// another site cannot send JSON here (it would need CORS, which this server never grants):
/// scripts log in that way. Every form post and every request with a session cookie must carry
/// the token.
async fn check_csrf(request: Request, sent: &Sent<'_>) -> Result<Request, Response> {
    let headers = request.headers();
    if let Err(check) = same_site(headers, sent.host) {
        tracing::warn!(path = %sent.path, check, "refused: cross-site request");
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "Refused: a page of another site cannot change anything here.",
            sent.json,
        ));
    }
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let (token, rebuilt) = csrf_of(request).await?;
    let valid = (json_body && sent.session.is_none())
        || match (sent.csrf, &token) {
            (Some(expected), Some(token)) => {
                // Equal length hex strings; compare without an early exit.
                expected.len() == token.len()
                    && expected
                        .bytes()
                        .zip(token.bytes())
                        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                        == 0
            }
            _ => false,
        };
    if !valid {
        tracing::warn!(path = %sent.path, "refused: missing or wrong CSRF token");
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "The form's security token is missing or out of date: reload the page and try again.",
            sent.json,
        ));
    }
    Ok(rebuilt)
}

/// Nobody logged in and the path is not public: a browser goes to the login page (and back
/// here after), anyone else is told to log in.
fn login_first(request: &Request, json: bool) -> Response {
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
    refuse(
        StatusCode::UNAUTHORIZED,
        "Log in first (or send an API token: Authorization: Bearer …).",
        json,
    )
}
