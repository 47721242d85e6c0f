//! How the demo server is served: on stdio, or over Streamable HTTP at `/mcp`, from its
//! command line.

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::ServiceExt;

use super::DemoServer;

/// Serves `server` on this process's stdin and stdout until the client goes away.
pub async fn serve_stdio(server: DemoServer) -> Result<(), String> {
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|err| format!("the MCP handshake failed: {err}"))?;
    running
        .waiting()
        .await
        .map_err(|err| format!("the server stopped: {err}"))?;
    Ok(())
}

/// The server over Streamable HTTP, at `/mcp`.
pub fn router(server: DemoServer) -> axum::Router {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    axum::Router::new().nest_service("/mcp", service)
}

/// The command line of `mcp-demo`: `[--data FILE] [--http ADDR]`.
pub async fn main_with_args(args: &[String]) -> Result<(), String> {
    let mut data = None;
    let mut http = None;
    let mut protocol = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--data" => data = Some(PathBuf::from(args.next().ok_or("--data needs a file")?)),
            "--http" => http = Some(args.next().ok_or("--http needs an address")?.clone()),
            "--protocol" => protocol = Some(args.next().ok_or("--protocol needs a version")?),
            other => {
                return Err(format!(
                    "unknown argument `{other}` (use --data FILE, --http ADDR, --protocol VERSION)"
                ))
            }
        }
    }
    serve(
        speaking(data, protocol.map(String::as_str))?,
        http.as_deref(),
    )
    .await
}

/// The server over the notebook in `data`, speaking `protocol`: `2026-07-28` (the default, and
/// the versions before) or `2025-11-25` (only the versions before 2026-07-28).
pub fn speaking(data: Option<PathBuf>, protocol: Option<&str>) -> Result<DemoServer, String> {
    let server = DemoServer::open(data)?;
    match protocol {
        None | Some("2026-07-28") => Ok(server),
        Some("2025-11-25") => Ok(server.older()),
        Some(_) => Err("--protocol is 2026-07-28 (the default) or 2025-11-25".to_owned()),
    }
}

/// Serves `server` on stdio, or over Streamable HTTP at `http` when given.
pub async fn serve(server: DemoServer, http: Option<&str>) -> Result<(), String> {
    match http {
        None => serve_stdio(server).await,
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|err| format!("cannot listen on {addr}: {err}"))?;
            eprintln!(
                "nrllm-notes MCP server at http://{}/mcp",
                listener.local_addr().map_err(|e| e.to_string())?
            );
            axum::serve(listener, router(server))
                .await
                .map_err(|err| format!("the server stopped: {err}"))
        }
    }
}
