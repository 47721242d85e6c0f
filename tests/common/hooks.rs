//! A local webhook receiver: what the server delivered, per path, headers and body kept.

use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

/// What the receiver was sent, per path.
#[derive(Clone, Default)]
pub struct Received(Arc<Mutex<Vec<(String, HeaderMap, String)>>>);

impl Received {
    pub fn on(&self, path: &str) -> Vec<(HeaderMap, String)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _, _)| p == path)
            .map(|(_, h, b)| (h.clone(), b.clone()))
            .collect()
    }
}

/// `/flaky` answers 500 to its first two deliveries and 204 after; `/ok` always 204; `/down`
/// always 500.
pub async fn receiver() -> (String, Received) {
    let received = Received::default();
    async fn hook(
        State(received): State<Received>,
        Path(path): Path<String>,
        headers: HeaderMap,
        body: String,
    ) -> StatusCode {
        let mut all = received.0.lock().unwrap();
        all.push((path.clone(), headers, body));
        let seen = all.iter().filter(|(p, _, _)| *p == path).count();
        match path.as_str() {
            "flaky" if seen > 2 => StatusCode::NO_CONTENT,
            "ok" => StatusCode::NO_CONTENT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
    let app = axum::Router::new()
        .route("/{path}", post(hook))
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), received)
}
