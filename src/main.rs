//! The playground server: settings, database, routes, serve.

// Leptos views are deeply nested types; the run page needs more than the default depth.
#![recursion_limit = "256"]

/// mimalloc rather than the system's allocator: the approve cycle allocates and frees many small
/// strings and rows, and the cycle was ~10 % faster with it (BENCHMARKS.md, issue #19).
#[cfg(feature = "ssr")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The playground's server: serves the pages and the API, or runs one maintenance task.
#[cfg(feature = "ssr")]
#[derive(clap::Parser)]
#[command(
    name = "nrllm-playground",
    version,
    about = "An LLM agent loop whose side-effecting tool calls wait for a human's approval.",
    long_about = "An LLM agent loop whose side-effecting tool calls wait for a human's approval.\n\n\
        Settings come from Leptos.toml in the working directory (or the file named by \
        NRLLM_CONFIG), each overridable by its NRLLM_* environment variable (see README)."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[cfg(feature = "ssr")]
#[derive(clap::Subcommand)]
enum Command {
    /// Serve the playground (the default).
    Serve,
    /// Delete runs older than the retention windows, with their events, then exit.
    Purge,
    /// Print a one-time login link for a user (valid 24 hours), for a first admin who lost the
    /// first start's link or a user who forgot their password.
    LoginLink {
        /// The user's name.
        user: String,
    },
    /// Check every run's log against its chain under the audit key; name the first broken link
    /// of each run whose log does not hold (the exit status is then 2).
    Verify,
    /// Serve the demo MCP server (a notebook with `read_note`, `write_note` and `count_words`) on stdin and
    /// stdout, or over Streamable HTTP with `--http`. Connect it with `[[mcp_servers]]`.
    McpDemo {
        /// Keep the notebook in this JSON file (in memory if absent).
        #[arg(long)]
        data: Option<std::path::PathBuf>,
        /// Serve Streamable HTTP at this address (path `/mcp`) instead of stdio.
        #[arg(long)]
        http: Option<String>,
        /// `2025-11-25`: speak only the MCP versions before 2026-07-28, and ask for a note's
        /// name inside the open call.
        #[arg(long)]
        protocol: Option<String>,
    },
}

#[cfg(feature = "ssr")]
#[tokio::main]
async fn main() -> std::process::ExitCode {
    use clap::Parser;
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => serve().await,
        Command::Purge => purge().await,
        Command::Verify => verify().await,
        Command::LoginLink { user } => login_link(&user).await,
        Command::McpDemo {
            data,
            http,
            protocol,
        } => mcp_demo(data, http, protocol).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("nrllm-playground: {message}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Settings and logging, shared by every command.
#[cfg(feature = "ssr")]
fn load_settings() -> Result<nrllm_playground::settings::Settings, String> {
    Ok(load_traced(false)?.0)
}

/// Settings and logging, and for the server (`export`) the spans' export over OTLP when the
/// settings or OpenTelemetry's variables name an endpoint.
#[cfg(feature = "ssr")]
fn load_traced(
    export: bool,
) -> Result<
    (
        nrllm_playground::settings::Settings,
        Option<nrllm_telemetry::Telemetry>,
    ),
    String,
> {
    let settings = nrllm_playground::settings::Settings::load().map_err(|err| err.to_string())?;
    let telemetry = match export {
        true => nrllm_telemetry::Telemetry::install(&nrllm_telemetry::Config {
            endpoint: settings.otlp_endpoint.clone(),
            protocol: settings.otlp_protocol,
            message_contents: settings.trace_message_contents,
            service_name: "nrllm-playground".to_owned(),
        })
        .map_err(|err| format!("the OTLP export (`otlp_endpoint`, OTEL_*): {err}"))?,
        false => None,
    };
    // Colours for a terminal; plain text for a file or a log collector.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&settings.log_level))
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    Ok((settings, telemetry))
}

/// `nrllm-playground mcp-demo`: the demo MCP server. Its log goes to stderr (stdout carries the
/// protocol).
#[cfg(feature = "ssr")]
async fn mcp_demo(
    data: Option<std::path::PathBuf>,
    http: Option<String>,
    protocol: Option<String>,
) -> Result<(), String> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .init();
    let server = nrllm_mcp::demo::serving::speaking(data, protocol.as_deref())?;
    nrllm_mcp::demo::serving::serve(server, http.as_deref()).await
}

/// Opens the database named by the settings.
#[cfg(feature = "ssr")]
async fn open_database(
    settings: &nrllm_playground::settings::Settings,
) -> Result<nrllm_store::db::Database, String> {
    let options = nrllm_store::db::DbOptions {
        sqlite_sync: settings.sqlite_synchronous,
        max_connections: None,
        audit_key: nrllm_playground::server::audit::audit_key(settings, |name| {
            std::env::var(name).ok()
        })?,
    };
    nrllm_store::db::Database::connect_with(&settings.database_url, options)
        .await
        .map_err(|err| format!("setting `database_url`: {err}"))
}

/// `nrllm-playground purge`: one purge with the configured windows.
#[cfg(feature = "ssr")]
async fn purge() -> Result<(), String> {
    use nrllm_store::SqlRunStore;
    let settings = load_settings()?;
    let db = open_database(&settings).await?;
    let store = SqlRunStore::new(db.clone());
    let report = nrllm_playground::server::retention::purge_once(&store, &settings)
        .await
        .map_err(|err| format!("the purge failed: {err}"))?;
    let (sessions, links) = nrllm_store::accounts::AccountStore::new(db)
        .purge_expired(nrllm_core::clock::now_ms())
        .await
        .map_err(|err| format!("the purge failed: {err}"))?;
    println!(
        "purged {} runs and {} events (finished more than {} days ago, or waiting more than {} days), {sessions} expired sessions and {links} expired login links",
        report.runs, report.events, settings.retention_terminal_days, settings.retention_waiting_days
    );
    Ok(())
}

/// `nrllm-playground login-link <user>`: a one-time login link.
#[cfg(feature = "ssr")]
async fn login_link(user: &str) -> Result<(), String> {
    use nrllm_store::accounts::AccountStore;
    let settings = load_settings()?;
    let accounts = AccountStore::new(open_database(&settings).await?);
    let known = accounts
        .users()
        .await
        .map_err(|err| format!("reading the users failed: {err}"))?
        .iter()
        .any(|u| u.name == user);
    if !known {
        return Err(format!("there is no user {user}"));
    }
    let link =
        nrllm_playground::server::auth::login_link(&accounts, &settings.public_url, user).await?;
    println!("{link}");
    Ok(())
}

/// `nrllm-playground verify`: every run's log against its chain under the audit key.
#[cfg(feature = "ssr")]
async fn verify() -> Result<(), String> {
    use nrllm_store::chain::ChainVerdict;
    use nrllm_store::SqlRunStore;
    let settings = load_settings()?;
    let store = SqlRunStore::new(open_database(&settings).await?);
    let key = store.database().audit_key().id().to_owned();
    let (mut failed, mut verified, mut unkeyed, mut unchained) = (0usize, 0usize, 0usize, 0usize);
    let mut keyed_steps = false;
    let checked = store
        .verify_all(200, |id, verdict| match verdict {
            ChainVerdict::Verified { events } => {
                verified += 1;
                keyed_steps |= *events > 0;
            }
            ChainVerdict::Unkeyed { .. } => unkeyed += 1,
            ChainVerdict::Unchained { .. } => unchained += 1,
            other => {
                failed += 1;
                println!("run {id}: {}", other.describe());
            }
        })
        .await
        .map_err(|err| format!("reading the runs failed: {err}"))?;
    let anchored = store
        .audit_since()
        .await
        .map_err(|err| format!("reading the audit key's anchor failed: {err}"))?
        .is_some();
    println!(
        "{checked} runs checked with audit key {key}: {verified} verified, {failed} broken, \
         {unkeyed} chained before the audit key (checked by the older, unkeyed rule), \
         {unchained} written before the log was chained"
    );
    if keyed_steps && !anchored {
        println!(
            "the audit key's anchor is missing or does not hold: runs in the older forms cannot \
             be told from rewritten ones"
        );
        failed += 1;
    }
    if failed > 0 {
        return Err(format!("{failed} run logs do not verify (listed above)"));
    }
    Ok(())
}

/// Starts the server; an `Err` is a message for the operator who started it.
#[cfg(feature = "ssr")]
async fn serve() -> Result<(), String> {
    use leptos::prelude::*;
    use nrllm_playground::server::{retention, routes, AppState};

    let (settings, telemetry) = load_traced(true)?;
    install_failpoint();

    let conf = get_configuration(None).map_err(|err| format!("Leptos configuration: {err}"))?;
    let mut leptos_options = conf.leptos_options;
    leptos_options.site_addr = settings.site_addr;

    let db = open_database(&settings).await?;
    let state = AppState::open(leptos_options, db, &settings).await?;
    retention::spawn_hourly(
        state.store.clone(),
        state.accounts.clone(),
        settings.clone(),
    );
    state.start_background();

    let app = routes::router(state.clone(), &settings);

    let listener = routes::listen(settings.site_addr).await.map_err(|err| {
        format!(
            "setting `site_addr`: cannot listen on {}: {err}",
            settings.site_addr
        )
    })?;
    tracing::info!("listening on http://{}", settings.site_addr);
    let shutdown = state.shutdown.clone();
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        stop_signal().await;
        tracing::info!("stopping: no new runs or decisions; live streams end");
        shutdown.cancel();
    })
    .await
    .map_err(|err| format!("server stopped: {err}"));
    // Let running segments reach their next journaled step; a run still mid-step is recovered
    // at the next start.
    state.tasks.close();
    let grace = std::time::Duration::from_secs(u64::from(settings.shutdown_grace_secs));
    if tokio::time::timeout(grace, state.tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            runs = state.tasks.len(),
            "runs still running after the grace period; they go on at the next start"
        );
    }
    if let Some(telemetry) = telemetry {
        let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    }
    served
}

/// SIGTERM or Ctrl-C (SIGINT).
#[cfg(feature = "ssr")]
async fn stop_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::error!(%err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}

/// With `NRLLM_FAILPOINT=<point>` (crash tests only), the process stops the first time a run
/// reaches that point — `<point>@<n>`: the n-th time — says so on stderr, and never goes on, so
/// that a harness can kill it there with SIGKILL.
#[cfg(feature = "ssr")]
fn install_failpoint() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let Ok(wanted) = std::env::var("NRLLM_FAILPOINT") else {
        return;
    };
    let (point, nth) = match wanted.split_once('@') {
        Some((point, n)) => (point.to_owned(), n.parse::<usize>().unwrap_or(1).max(1)),
        None => (wanted.clone(), 1),
    };
    tracing::warn!(%point, nth, "failpoint armed: the process will stop there");
    let seen = AtomicUsize::new(0);
    nrllm_core::failpoint::install(move |reached| {
        if reached == point && seen.fetch_add(1, Ordering::SeqCst) + 1 == nth {
            eprintln!("failpoint reached: {reached}");
            loop {
                std::thread::park();
            }
        }
    });
}

#[cfg(not(feature = "ssr"))]
fn main() {
    // The binary is built with the `ssr` feature; the wasm bundle's entry point is `hydrate()`.
}
