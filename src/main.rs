//! The playground server: settings, database, routes, serve.

#[cfg(feature = "ssr")]
#[tokio::main]
async fn main() -> std::process::ExitCode {
    match serve().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("nrllm-playground: {message}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Starts the server; an `Err` is a message for the operator who started it.
#[cfg(feature = "ssr")]
async fn serve() -> Result<(), String> {
    use axum::Router;
    use leptos::prelude::*;
    use leptos_axum::{generate_route_list, LeptosRoutes};
    use nrllm_playground::app::{shell, App};
    use nrllm_playground::server::AppState;
    use nrllm_playground::settings::Settings;
    use nrllm_runtime::db::Database;

    let settings = Settings::load().map_err(|err| err.to_string())?;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&settings.log_level))
        .init();

    let conf = get_configuration(None).map_err(|err| format!("Leptos configuration: {err}"))?;
    let mut leptos_options = conf.leptos_options;
    leptos_options.site_addr = settings.site_addr;

    let db = Database::connect(&settings.database_url)
        .await
        .map_err(|err| format!("setting `database_url`: {err}"))?;
    let state = AppState {
        leptos_options: leptos_options.clone(),
        db,
    };

    let routes = generate_route_list(App);
    let app = Router::new()
        .leptos_routes(&state, routes, {
            let options = leptos_options.clone();
            move || shell(options.clone())
        })
        .fallback(leptos_axum::file_and_error_handler::<AppState, _>(shell))
        .with_state(state);

    let listener = tokio::net::TcpListener::bind(settings.site_addr)
        .await
        .map_err(|err| {
            format!(
                "setting `site_addr`: cannot listen on {}: {err}",
                settings.site_addr
            )
        })?;
    tracing::info!("listening on http://{}", settings.site_addr);
    axum::serve(listener, app.into_make_service())
        .await
        .map_err(|err| format!("server stopped: {err}"))
}

#[cfg(not(feature = "ssr"))]
fn main() {
    // The binary is built with the `ssr` feature; the wasm bundle's entry point is `hydrate()`.
}
