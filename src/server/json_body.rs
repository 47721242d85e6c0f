//! JSON for the server functions. Server functions take URL-encoded forms (so every page works
//! without JavaScript); this layer lets API clients send `application/json` with the same field
//! names by re-encoding the body as a form before the server function reads it.
//!
//! Kept by hand: server_fn picks one input encoding per function at compile time, and the forms
//! need URL encoding; no crate re-encodes a JSON body into the equivalent nested form.

use axum::body::{to_bytes, Body};
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// The largest JSON body this layer reads (the server's body size cap is usually lower).
const MAX_JSON_BYTES: usize = 64 * 1024 * 1024;

/// Drops `null` values: a missing field and a null field mean the same to a form.
fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

/// Re-encodes a JSON object as the form a browser would send.
pub fn json_to_form(bytes: &[u8]) -> Result<String, String> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|err| format!("the body is not valid JSON: {err}"))?;
    if !value.is_object() {
        return Err("the JSON body must be an object of named fields".into());
    }
    serde_qs::to_string(&without_nulls(value))
        .map_err(|err| format!("the JSON body cannot be read: {err}"))
}

fn bad_request(message: String) -> Response {
    let body = serde_json::json!({ "BadRequest": message }).to_string();
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// The middleware: `POST /api/…` with a JSON body becomes the form post a browser would send.
/// (Errors get their status where they are encoded, in `AppError`'s `FromServerFnError`.)
pub async fn accept_json(request: Request, next: Next) -> Response {
    let api_post = request.method() == Method::POST && request.uri().path().starts_with("/api/");
    if !api_post {
        return next.run(request).await;
    }
    convert_json(request, next).await
}

async fn convert_json(request: Request, next: Next) -> Response {
    let is_json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    // The body size cap (a layer outside this one) has already refused a body that says it is
    // too large; one that grows too large while it is read is refused here.
    let bytes = match to_bytes(body, MAX_JSON_BYTES).await {
        Ok(bytes) => bytes,
        Err(_) => {
            let body = serde_json::json!({
                "BadRequest": "the request body is larger than the server accepts"
            })
            .to_string();
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                [(header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response();
        }
    };
    let form = match json_to_form(&bytes) {
        Ok(form) => form,
        Err(message) => return bad_request(message),
    };
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    next.run(Request::from_parts(parts, Body::from(form))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_becomes_the_form_a_browser_would_send() {
        let form = json_to_form(
            br#"{"run_id":"r","decision":"per_call","reason":null,
            "calls":[{"call_id":"a","choice":"edit","arguments":"{\"x\":1}"}],"limit":5}"#,
        )
        .unwrap();
        #[derive(serde::Deserialize, Debug)]
        struct Call {
            call_id: String,
            arguments: Option<String>,
        }
        #[derive(serde::Deserialize, Debug)]
        struct Args {
            run_id: String,
            reason: Option<String>,
            calls: Vec<Call>,
            limit: u32,
        }
        let args: Args = serde_qs::Config::new(5, false)
            .deserialize_str(&form)
            .unwrap();
        assert_eq!(args.run_id, "r");
        assert_eq!(args.reason, None);
        assert_eq!(args.calls[0].call_id, "a");
        assert_eq!(args.calls[0].arguments.as_deref(), Some("{\"x\":1}"));
        assert_eq!(args.limit, 5);
        assert!(json_to_form(b"[1]").is_err());
        assert!(json_to_form(b"{nope").is_err());
    }
}
