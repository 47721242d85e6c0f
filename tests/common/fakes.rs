//! Local HTTP fakes of what the server calls out to (a webhook receiver, Slack's Web API, an MCP
//! server): serving a router on a free port, and keeping what each was sent.

use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

/// What a fake was sent, in order, each under a key (a path, an API method).
pub struct Recorded<T>(Arc<Mutex<Vec<(String, T)>>>);

impl<T> Clone for Recorded<T> {
    fn clone(&self) -> Self {
        Recorded(Arc::clone(&self.0))
    }
}

impl<T> Default for Recorded<T> {
    fn default() -> Self {
        Recorded(Arc::default())
    }
}

impl<T: Clone> Recorded<T> {
    /// Keeps `item` under `key`: how many `key` has now, this one included.
    pub fn record(&self, key: &str, item: T) -> usize {
        let mut all = self.0.lock().unwrap();
        all.push((key.to_owned(), item));
        all.iter().filter(|(k, _)| k == key).count()
    }

    /// What was sent under `key`, in order.
    pub fn on(&self, key: &str) -> Vec<T> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, item)| item.clone())
            .collect()
    }
}

/// Serves `app` on a free port of 127.0.0.1 for the rest of the test: its base URL.
pub async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

/// The webhook deliveries a receiver was sent, per path: headers and body.
pub type Received = Recorded<(HeaderMap, String)>;

/// A webhook receiver: `/flaky` answers 500 to its first two deliveries and 204 after; `/ok`
/// always 204; `/down` always 500.
pub async fn receiver() -> (String, Received) {
    let received = Received::default();
    async fn hook(
        State(received): State<Received>,
        Path(path): Path<String>,
        headers: HeaderMap,
        body: String,
    ) -> StatusCode {
        let seen = received.record(&path, (headers, body));
        match path.as_str() {
            "flaky" if seen > 2 => StatusCode::NO_CONTENT,
            "ok" => StatusCode::NO_CONTENT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
    let app = axum::Router::new()
        .route("/{path}", post(hook))
        .with_state(received.clone());
    (serve(app).await, received)
}
