//! The built assets and the not-found page, against the real server binary: an asset answered
//! while pages render beside it takes nothing of theirs (their Content-Security-Policy stays
//! theirs, with the nonce their scripts carry), nothing outside the site's folder is served, and
//! an address nothing answers is the app's 404 page.

#![cfg(feature = "ssr")]

mod common;

use common::{client, log_in, start as start_server, ADMIN_PASSWORD};
use reqwest::header::{CONTENT_SECURITY_POLICY, COOKIE, SET_COOKIE};
use reqwest::StatusCode;

const FAVICON: &[u8] = b"\0\0\x01\0 an icon of the test's own";
const STYLES: &str = "body { color: teal }";

/// A site folder holding the favicon and a stylesheet, with a file beside it (not in it).
fn site() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    std::fs::create_dir_all(root.join("pkg")).unwrap();
    std::fs::write(root.join("favicon.ico"), FAVICON).unwrap();
    std::fs::write(root.join("pkg/styles.css"), STYLES).unwrap();
    std::fs::write(dir.path().join("beside.txt"), "not the site's").unwrap();
    dir
}

/// The nonce a page's policy allows scripts by.
fn policy_nonce(policy: &str) -> Option<&str> {
    let from = policy.find("'nonce-")? + "'nonce-".len();
    let to = from + policy[from..].find('\'')?;
    Some(&policy[from..to])
}

#[tokio::test]
async fn assets_served_beside_rendering_pages_leave_the_pages_their_headers() {
    let dir = site();
    let root = dir.path().join("site");
    let server = start_server("", &[("LEPTOS_SITE_ROOT", root.to_str().unwrap())]).await;
    let admin = log_in(&server, "admin", ADMIN_PASSWORD).await;

    let (base, cookies) = (server.base.as_str(), admin.cookies.as_str());
    let page = move || async move {
        let response = client()
            .get(format!("{base}/runs"))
            .header(COOKIE, cookies)
            .header("accept", "text/html")
            .send()
            .await
            .unwrap();
        let status = response.status();
        let policy = response
            .headers()
            .get(CONTENT_SECURITY_POLICY)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (status, policy, response.text().await.unwrap())
    };
    let asset = move |path: &'static str| async move {
        let response = client()
            .get(format!("{base}{path}"))
            .header(COOKIE, cookies)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        (status, headers, response.bytes().await.unwrap())
    };

    // Many pages, each waiting on the database while the assets are answered on the same threads.
    for _ in 0..25 {
        let pages = futures::future::join_all((0..6).map(|_| page()));
        let icons = futures::future::join_all((0..6).map(|_| asset("/favicon.ico")));
        let styles = futures::future::join_all((0..6).map(|_| asset("/pkg/styles.css")));
        let (pages, icons, styles) = tokio::join!(pages, icons, styles);
        for (status, policy, body) in pages {
            assert_eq!(status, StatusCode::OK);
            let nonce = policy_nonce(&policy)
                .unwrap_or_else(|| panic!("a page went out without its script policy: {policy:?}"));
            assert!(
                body.contains(&format!("nonce=\"{nonce}\"")),
                "the page's scripts carry another nonce than its policy"
            );
        }
        let answered = icons.into_iter().map(|a| (a, FAVICON));
        let answered = answered.chain(styles.into_iter().map(|a| (a, STYLES.as_bytes())));
        for ((status, headers, body), file) in answered {
            assert_eq!(status, StatusCode::OK);
            assert_eq!(body.as_ref(), file, "an asset's body is its file's");
            for taken in [CONTENT_SECURITY_POLICY, SET_COOKIE] {
                assert!(
                    headers.get(&taken).is_none(),
                    "an asset went out with a page's {taken}: {headers:?}"
                );
            }
        }
    }

    // Nothing outside the folder, however the path is written.
    for path in [
        "/pkg/%2e%2e/%2e%2e/beside.txt",
        "/..%2fbeside.txt",
        "/%2e%2e/beside.txt",
    ] {
        let response = client()
            .get(format!("{}{path}", server.base))
            .header(COOKIE, &admin.cookies)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        assert!(
            !response.text().await.unwrap().contains("not the site's"),
            "{path}"
        );
    }

    // An address nothing answers: the app's not-found page, with its own script policy, for a
    // post too (one the CSRF check lets through).
    let missing = format!("{}/no/such/page", server.base);
    for response in [
        client()
            .get(&missing)
            .header(COOKIE, &admin.cookies)
            .send()
            .await
            .unwrap(),
        client()
            .post(&missing)
            .header(COOKIE, &admin.cookies)
            .header("x-csrf-token", &admin.csrf)
            .send()
            .await
            .unwrap(),
    ] {
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let policy = response.headers()[CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .to_owned();
        let body = response.text().await.unwrap();
        let nonce = policy_nonce(&policy).expect("the 404 page allows its own scripts");
        assert!(body.contains(&format!("nonce=\"{nonce}\"")));
        assert!(body.contains("data-testid=\"not-found\""), "{body}");
    }
}
