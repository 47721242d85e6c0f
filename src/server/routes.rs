//! The server's routes and the layers around them: the pages and server functions (Leptos), the
//! live step stream, the downloads; JSON bodies for server functions, a body size cap, the
//! security headers, gzip.

use axum::Router;
use leptos_axum::{generate_route_list, LeptosRoutes};

use super::{auth, export, health, json_body, list_export, live, metrics, security, AppState};
use crate::app::{shell, App};
use crate::settings::Settings;

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
        .fallback(leptos_axum::file_and_error_handler::<AppState, _>(shell))
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
