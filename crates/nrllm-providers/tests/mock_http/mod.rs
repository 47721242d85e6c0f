//! A tiny HTTP/1.1 server for provider tests: it answers each request with the next scripted reply
//! and records every request (path, headers, JSON body), so tests assert on the exact bytes a
//! provider adapter sends. It only listens on 127.0.0.1.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the server does with one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Status, extra headers, body.
    Json(u16, Vec<(String, String)>, String),
    /// Never answers (for timeouts).
    Hang,
    /// Promises more bytes than it sends, then closes.
    Truncated(String),
    /// A `text/event-stream` body written piece by piece (each piece flushed, then a pause), then
    /// the connection closed.
    Stream(Vec<Vec<u8>>),
    /// [`Reply::Stream`] with this pause after each piece.
    Paced(Vec<Vec<u8>>, Duration),
}

impl Reply {
    pub fn ok(body: serde_json::Value) -> Reply {
        Reply::Json(200, Vec::new(), body.to_string())
    }

    pub fn status(status: u16, body: &str) -> Reply {
        Reply::Json(status, Vec::new(), body.to_owned())
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
pub struct MockServer {
    pub base_url: String,
    replies: Arc<Mutex<VecDeque<Reply>>>,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl MockServer {
    pub async fn start(replies: Vec<Reply>) -> MockServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a local port");
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (queue, log) = (Arc::clone(&replies), Arc::clone(&requests));
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let (queue, log) = (Arc::clone(&queue), Arc::clone(&log));
                tokio::spawn(async move {
                    let mut buffer = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let header_end = loop {
                        let Ok(n) = socket.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buffer.extend_from_slice(&chunk[..n]);
                        if let Some(pos) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                            break pos + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&buffer[..header_end]).to_string();
                    let mut lines = head.split("\r\n");
                    let path = lines
                        .next()
                        .unwrap_or_default()
                        .split(' ')
                        .nth(1)
                        .unwrap_or_default()
                        .to_owned();
                    let headers: Vec<(String, String)> = lines
                        .filter_map(|l| l.split_once(':'))
                        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
                        .collect();
                    let length = headers
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                        .and_then(|(_, v)| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    while buffer.len() < header_end + length {
                        let Ok(n) = socket.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            break;
                        }
                        buffer.extend_from_slice(&chunk[..n]);
                    }
                    let body = serde_json::from_slice(&buffer[header_end..])
                        .unwrap_or(serde_json::Value::Null);
                    log.lock().unwrap().push(Recorded {
                        path,
                        headers,
                        body,
                    });
                    let reply = queue
                        .lock()
                        .unwrap()
                        .pop_front()
                        .unwrap_or(Reply::status(500, "no reply scripted"));
                    let reply = match reply {
                        Reply::Stream(pieces) => Reply::Paced(pieces, Duration::from_millis(2)),
                        other => other,
                    };
                    match reply {
                        Reply::Json(status, extra, body) => {
                            let mut response = format!(
                                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                                body.len()
                            );
                            for (name, value) in extra {
                                response.push_str(&format!("{name}: {value}\r\n"));
                            }
                            response.push_str("\r\n");
                            response.push_str(&body);
                            let _ = socket.write_all(response.as_bytes()).await;
                        }
                        Reply::Hang => tokio::time::sleep(Duration::from_secs(30)).await,
                        Reply::Stream(_) => unreachable!("read as paced"),
                        Reply::Paced(pieces, pause) => {
                            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
                            let _ = socket.write_all(head.as_bytes()).await;
                            for piece in pieces {
                                if socket.write_all(&piece).await.is_err() {
                                    break;
                                }
                                let _ = socket.flush().await;
                                tokio::time::sleep(pause).await;
                            }
                        }
                        Reply::Truncated(body) => {
                            let response = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                                body.len() + 100
                            );
                            let _ = socket.write_all(response.as_bytes()).await;
                        }
                    }
                    let _ = socket.shutdown().await;
                });
            }
        });
        MockServer {
            base_url,
            replies,
            requests,
        }
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

/// A configuration reaching this server: `name` and `model`, the API under `path` (`/v1`), a
/// test key, and [`quick`] settings with `retries`.
pub fn config(
    server: &MockServer,
    (name, path, model): (&str, &str, &str),
    retries: u32,
) -> nrllm_providers::ProviderConfig {
    nrllm_providers::ProviderConfig {
        name: name.into(),
        base_url: format!("{}{path}", server.base_url),
        model: model.into(),
        api_key: Some(format!("{name}-test-secret-key").into()),
        http: quick(retries),
    }
}

/// Timeouts short enough for tests, and `retries` retries 10 ms apart (50 ms at most).
pub fn quick(retries: u32) -> nrllm_providers::http::HttpSettings {
    use nrllm_providers::http::{HttpSettings, RetryPolicy};
    HttpSettings {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(10),
        retry: RetryPolicy {
            max_retries: retries,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(50),
        },
    }
}

/// What a step journals of a response (its raw body aside).
pub fn journaled(
    response: &nrllm_core::provider::ChatResponse,
) -> nrllm_core::provider::ChatResponse {
    nrllm_core::provider::ChatResponse {
        raw: None,
        ..response.clone()
    }
}

/// `body` cut into pieces of `size` bytes, whatever they cut through: inside a line, a JSON
/// string, a UTF-8 character.
pub fn pieces(body: &str, size: usize) -> Vec<Vec<u8>> {
    body.as_bytes().chunks(size).map(<[u8]>::to_vec).collect()
}

/// Server-sent events, one `data:` line each, with a comment between them (as servers send
/// keep-alives).
pub fn events<'a>(data: impl IntoIterator<Item = &'a str>) -> String {
    data.into_iter()
        .map(|data| format!("data: {data}\n\n: keep-alive\n\n"))
        .collect()
}
