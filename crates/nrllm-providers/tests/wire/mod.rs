//! The provider a wire test talks to: wiremock on 127.0.0.1, answering each request with the next
//! scripted reply and keeping every request (path, headers, JSON body), so tests assert on the
//! exact bytes an adapter sends. (Tests that need malformed bytes — a truncated body, a server
//! that never answers — use the hand-written `mock_http` instead.)

#![allow(dead_code)]

use wiremock::{Mock, MockServer, ResponseTemplate};

/// One scripted reply.
#[derive(Debug, Clone)]
pub struct Reply {
    status: u16,
    body: String,
}

impl Reply {
    pub fn ok(body: serde_json::Value) -> Reply {
        Reply {
            status: 200,
            body: body.to_string(),
        }
    }

    pub fn status(status: u16, body: &str) -> Reply {
        Reply {
            status,
            body: body.to_owned(),
        }
    }
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: serde_json::Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The running server.
pub struct WireServer {
    pub base_url: String,
    server: MockServer,
}

impl WireServer {
    /// A server that answers the requests, in order, with `replies`.
    pub async fn start(replies: Vec<Reply>) -> WireServer {
        let server = MockServer::start().await;
        for reply in replies {
            // Each reply answers once; the next one mounted answers the request after.
            Mock::given(wiremock::matchers::any())
                .respond_with(
                    ResponseTemplate::new(reply.status)
                        .insert_header("content-type", "application/json")
                        .set_body_string(reply.body),
                )
                .up_to_n_times(1)
                .mount(&server)
                .await;
        }
        WireServer {
            base_url: server.uri(),
            server,
        }
    }

    /// Every request received so far.
    pub async fn requests(&self) -> Vec<Recorded> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|request| Recorded {
                path: request.url.path().to_owned(),
                headers: request
                    .headers
                    .iter()
                    .map(|(name, value)| {
                        (
                            name.as_str().to_owned(),
                            value.to_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect(),
                body: serde_json::from_slice(&request.body).unwrap_or_default(),
            })
            .collect()
    }
}
