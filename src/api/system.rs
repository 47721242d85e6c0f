//! The server functions of the playground's options and the system page.

// A server function's arguments are its form fields, one per field; the client stubs the macro
// generates for them cannot carry an attribute of their own.
#![allow(clippy::too_many_arguments)]

use leptos::prelude::*;

use crate::error::AppError;
use crate::page_data::{PlaygroundOptions, SystemView};

/// What the playground form offers: configurations, tools, example prompts.
#[server(endpoint = "nrllm_playground_options")]
pub async fn nrllm_playground_options() -> Result<PlaygroundOptions, AppError> {
    crate::server::request::require(nrllm_types::Role::Viewer)?;
    let state = crate::server::request::state()?;
    Ok(PlaygroundOptions {
        configurations: state.configurations.views(),
        tools: crate::server::present::tool_views(&state.registry),
        example_prompts: nrllm_demo::demo::DEMO_PROMPTS
            .iter()
            .map(|p| (*p).to_owned())
            .collect(),
    })
}

/// The state of the pieces under the playground: version, database, configurations, tools and
/// live streams.
#[server(endpoint = "nrllm_system_status")]
pub async fn nrllm_system_status() -> Result<SystemView, AppError> {
    let who = crate::server::request::require(nrllm_types::Role::Viewer)?;
    let state = crate::server::request::state()?;
    let migrations: Result<(i64,), _> =
        sqlx::query_as("SELECT COUNT(*) FROM _sqlx_migrations WHERE success")
            .fetch_one(state.db.pool())
            .await;
    if let Err(err) = &migrations {
        tracing::error!(%err, "the system page cannot read the database");
    }
    let live = state.live.stats();
    let tools = state.registry.specs();
    let admin = who.role.allows(nrllm_types::Role::Admin);
    Ok(SystemView {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        database: match state.db.backend() {
            nrllm_store::db::Backend::Sqlite => "SQLite".to_owned(),
            nrllm_store::db::Backend::Postgres => "Postgres".to_owned(),
        },
        database_ok: migrations.is_ok(),
        migrations: migrations.map(|(n,)| n).unwrap_or_default(),
        configurations: state.configurations.views(),
        tools_enabled: tools
            .iter()
            .filter(|spec| state.registry.is_enabled(&spec.name))
            .count(),
        tools_total: tools.len(),
        running_here: live.runs,
        live_streams: live.subscribers,
        mcp_servers: state
            .mcp
            .statuses()
            .into_iter()
            .map(|status| crate::server::present::mcp_server_view(status, admin))
            .collect(),
        can_reconnect: admin,
    })
}

/// Connects an MCP server again now, listing its tools again (administrators).
#[server(endpoint = "nrllm_mcp_reconnect")]
pub async fn nrllm_mcp_reconnect(name: String) -> Result<(), AppError> {
    let who = crate::server::request::require(nrllm_types::Role::Admin)?;
    let state = crate::server::request::state()?;
    if !state.mcp.reconnect(&name) {
        return Err(AppError::invalid(
            "name",
            format!(
                "there is no MCP server named {}",
                name.chars().take(40).collect::<String>()
            ),
        ));
    }
    tracing::info!(by = %who.name, server = %name, "MCP server reconnect asked for");
    if crate::server::wants_html() {
        leptos_axum::redirect("/system");
    }
    Ok(())
}
