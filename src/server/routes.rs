//! The server's routes and the layers around them: the pages and server functions (Leptos), the
//! live step stream, the downloads, the built assets and the not-found page; JSON bodies for
//! server functions, a body size cap, the security headers, gzip. And the listener they are
//! served on.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::MethodRouter;
use axum::serve::{ListenerExt, TapIo};
use axum::Router;
use leptos::prelude::provide_context;
use leptos_axum::{generate_route_list, LeptosRoutes};
use tower_http::services::ServeDir;

use super::{
    auth, export, health, json_body, list_export, live, metrics, owner, security, AppState,
};
use crate::app::{shell, App};
use crate::settings::Settings;

/// The listener the server answers on at `addr`, sending each connection's writes at once
/// (`TCP_NODELAY`). Without it a live stream's event written while the one before is not yet
/// acknowledged waits for the browser's delayed acknowledgement: 40 ms on Linux, on every
/// status and step that follows another (`benches/mix.rs` saw every run's end 40 ms late).
pub async fn listen(
    addr: std::net::SocketAddr,
) -> std::io::Result<TapIo<tokio::net::TcpListener, fn(&mut tokio::net::TcpStream)>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    Ok(listener.tap_io(no_delay as fn(&mut tokio::net::TcpStream)))
}

fn no_delay(connection: &mut tokio::net::TcpStream) {
    if let Err(err) = connection.set_nodelay(true) {
        tracing::debug!(%err, "a connection's writes could not be set to go out at once");
    }
}

/// Every route of the playground, over `state`.
pub fn router(state: AppState, settings: &Settings) -> Router {
    let routes = generate_route_list(App);
    let options = state.leptos_options.clone();
    Router::new()
        .route(
            "/api/runs/{id}/events",
            axum::routing::get(live::run_events),
        )
        .route("/metrics", axum::routing::get(metrics::metrics))
        .route(
            super::notify::slack::INTERACTIONS_PATH,
            axum::routing::post(super::notify::hooks::slack_interactions),
        )
        .route(
            "/runs/export.csv",
            axum::routing::get(list_export::export_csv),
        )
        .route(
            "/runs/export.json",
            axum::routing::get(list_export::export_json),
        )
        .route(
            "/runs/{id}/export.json",
            axum::routing::get(export::run_export),
        )
        .route(
            "/runs/{id}/calls/{call_id}/preview.diff",
            axum::routing::get(export::preview_diff),
        )
        .leptos_routes(&state, routes, move || shell(options.clone()))
        .fallback_service(site_files(state.clone()))
        // Each request under a reactive owner of its own, never under another's (owner.rs).
        .layer(axum::middleware::from_fn(owner::own_owner))
        .layer(axum::middleware::from_fn(json_body::accept_json))
        // Who is asking, from which site, with which token (auth.rs); inside the body cap.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::guard,
        ))
        // Probes: no login, any host (health.rs).
        .route("/healthz", axum::routing::get(health::healthz))
        .route("/readyz", axum::routing::get(health::readyz))
        // A body over the cap is refused with 413 before it is read (by its Content-Length) or
        // as soon as it grows past the cap.
        .layer(tower_http::limit::RequestBodyLimitLayer::new(
            settings.max_body_bytes as usize,
        ))
        .layer(axum::middleware::from_fn(security::security_headers))
        // One log line per request: method, path (never the query: a login link carries its
        // token there), status and time.
        .layer(
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(|request: &axum::http::Request<_>| {
                    tracing::info_span!(
                        "request",
                        method = %request.method(),
                        path = %request.uri().path()
                    )
                })
                .on_request(())
                .on_response(
                    tower_http::trace::DefaultOnResponse::new()
                        .level(tracing::Level::INFO)
                        .latency_unit(tower_http::LatencyUnit::Millis),
                ),
        )
        // gzip for clients that accept it: the wasm bundle shrinks to well under half. The
        // default predicate leaves the live step stream (text/event-stream) uncompressed.
        .layer(tower_http::compression::CompressionLayer::new())
        .with_state(state)
}

/// Everything the routes do not name: the built asset under the site's folder that the path
/// names (`GET` and `HEAD`; never outside the folder), else the app's not-found page.
/// Compression is the router's.
///
/// Not `leptos_axum::file_and_error_handler`: it answers an asset inside a reactive owner it
/// makes as a child of the thread's current one, and a page rendering on that thread leaves its
/// own there while it waits. The asset then found the page's `ResponseOptions` and took its
/// headers: the page went out without its Content-Security-Policy (so its script was refused)
/// or its cookies, and the asset went out with them. Here an asset is a plain file answer that
/// never looks at any page's context (`tests/assets.rs`).
fn site_files(state: AppState) -> ServeDir<MethodRouter> {
    ServeDir::new(&*state.leptos_options.site_root)
        .call_fallback_on_method_not_allowed(true)
        .fallback(axum::routing::any(not_found).with_state(state))
}

/// The app's page for an address nothing answers: 404, unless the page set its own status.
async fn not_found(State(state): State<AppState>, request: Request) -> Response {
    let options = state.leptos_options.clone();
    let render = leptos_axum::render_app_async_with_context(
        move || provide_context(state.clone()),
        move || shell(options.clone()),
    );
    let mut response = render(request).await;
    if response.status() == StatusCode::OK {
        *response.status_mut() = StatusCode::NOT_FOUND;
    }
    response
}

#[cfg(test)]
mod tests {
    use axum::serve::Listener;

    #[tokio::test]
    async fn every_connection_the_listener_accepts_sends_its_writes_at_once() {
        let mut listener = super::listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        for _ in 0..2 {
            let client = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (accepted, from) = listener.accept().await;
            assert_eq!(from, client.local_addr().unwrap());
            assert!(accepted.nodelay().unwrap(), "TCP_NODELAY is off");
        }
    }
}
