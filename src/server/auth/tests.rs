use super::checks::*;
use super::signing::*;
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};

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
    // A decision link's page (no-referrer) posts with `Origin: null`: the browser's same-origin
    // Sec-Fetch-Site lets it through; without it, or from another site, it is refused.
    assert!(same_site(
        &headers(&[
            ("host", "127.0.0.1:3000"),
            ("sec-fetch-site", "same-origin"),
            ("origin", "null")
        ]),
        host
    )
    .is_ok());
    assert_eq!(
        same_site(
            &headers(&[("host", "127.0.0.1:3000"), ("origin", "null")]),
            host
        ),
        Err("origin")
    );
    assert_eq!(
        same_site(
            &headers(&[
                ("host", "127.0.0.1:3000"),
                ("sec-fetch-site", "cross-site"),
                ("origin", "null")
            ]),
            host
        ),
        Err("sec-fetch-site")
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

    let mut response = Redirect::to("/runs/1?__err=eyJOb3RGb3VuZCI6IngifQ%3D%3D").into_response();
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
