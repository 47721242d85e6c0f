//! The server functions of the playground's options and the system page.

// A server function's arguments are its form fields, one per field; the client stubs the macro
// generates for them cannot carry an attribute of their own.
#![allow(clippy::too_many_arguments)]

use leptos::prelude::*;

use crate::error::AppError;
use crate::page_data::system::SystemView;
use crate::page_data::PlaygroundOptions;

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
        spend: spend_today(&state, admin).await,
        notifications: outbox(&state).await,
    })
}

/// How the notification outbox stands over the last day (none when nobody is notified, or when
/// it cannot be read: the log says why).
#[cfg(feature = "ssr")]
async fn outbox(state: &crate::server::AppState) -> Option<crate::page_data::system::OutboxView> {
    state.notify.sender.as_ref()?;
    let since = nrllm_core::clock::now_ms() - 24 * 3_600_000;
    match state.notify.store.health(since).await {
        Ok(health) => Some(crate::page_data::system::OutboxView {
            pending: health.pending,
            retrying: health.retrying,
            failed: health.failed,
            delivered: health.delivered,
            last_error: health
                .last_error
                .map(|(error, at)| format!("{error} ({})", nrllm_core::clock::format_utc(at))),
        }),
        Err(err) => {
            tracing::error!(%err, "the system page cannot read the notification outbox");
            None
        }
    }
}

/// Today's spend against the caps (a count that cannot be read shows none; the log says why).
#[cfg(feature = "ssr")]
async fn spend_today(
    state: &crate::server::AppState,
    admin: bool,
) -> crate::page_data::system::SpendToday {
    use nrllm_core::spend::{utc_day, SpendLedger as _};
    let day = utc_day(nrllm_core::clock::now_ms());
    let counted = match state.sql_store.spend_of_day(day, 500).await {
        Ok(counted) => counted,
        Err(err) => {
            tracing::error!(%err, "the system page cannot read today's spend");
            Vec::new()
        }
    };
    crate::server::present::spend_today(day, &state.configurations.all_spend_caps(), counted, admin)
}

/// Raises today's daily spend cap of a configuration or a user (`scope`, `name`) by `raise_by`
/// US dollars (administrators); the runs waiting at it go on if it has room now.
#[server(endpoint = "nrllm_spend_cap_raise")]
pub async fn nrllm_spend_cap_raise(
    scope: String,
    name: String,
    raise_by: String,
) -> Result<(), AppError> {
    use nrllm_core::run_service::RaiseCapError;
    use nrllm_core::spend::{CapScope, SpendKey};
    let who = crate::server::request::require(nrllm_types::Role::Viewer)?;
    let state = crate::server::request::state()?;
    let scope = CapScope::parse(&scope).ok_or_else(|| {
        AppError::invalid("scope", "a daily cap is a configuration's or a user's")
    })?;
    let name = name.trim().to_owned();
    let known = match scope {
        CapScope::Configuration => state.configurations.names().contains(&name),
        CapScope::User => !name.is_empty() && name.chars().count() <= 64,
    };
    if !known {
        return Err(AppError::invalid(
            "name",
            format!(
                "there is no {} named {}",
                scope.as_str(),
                name.chars().take(40).collect::<String>()
            ),
        ));
    }
    let micros = nrllm_core::state::LimitKind::CostMicros
        .parse(&raise_by)
        .ok_or_else(|| AppError::invalid("raise_by", "write US dollars above 0"))?;
    let key = SpendKey { scope, name };
    match state.runs.raise_spend_cap(&who, &key, micros).await {
        Ok((_, went_on)) => {
            if went_on > 0 {
                state.queue.wake();
            }
        }
        Err(RaiseCapError::Refused(refusal)) => return Err(refusal.into()),
        Err(err) => return Err(AppError::internal("raising a daily spend cap", err)),
    }
    if crate::server::wants_html() {
        leptos_axum::redirect("/system");
    }
    Ok(())
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

/// Accepts the looser hints of an MCP server's tools that kept their old gate after its tool
/// list changed (administrators): their calls go ahead as the server's hints say from the next
/// turn.
#[server(endpoint = "nrllm_mcp_accept_hints")]
pub async fn nrllm_mcp_accept_hints(name: String) -> Result<usize, AppError> {
    let who = crate::server::request::require(nrllm_types::Role::Admin)?;
    let state = crate::server::request::state()?;
    let Some(released) = state.mcp.accept_hints(&name) else {
        return Err(AppError::invalid(
            "name",
            format!(
                "there is no MCP server named {}",
                name.chars().take(40).collect::<String>()
            ),
        ));
    };
    tracing::info!(by = %who.name, server = %name, released, "an MCP server's looser hints accepted");
    if crate::server::wants_html() {
        leptos_axum::redirect("/system");
    }
    Ok(released)
}
