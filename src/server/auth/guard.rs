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
