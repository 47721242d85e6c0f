//! Signed banners and redirects that stay on this site.

use axum::http::{header, HeaderValue};
use axum::response::Response;

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
pub(super) fn sign_error_redirect(response: &mut Response, key: &[u8]) {
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
pub(super) fn site_path(target: &str) -> &str {
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
