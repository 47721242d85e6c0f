//! nrllm-store: runs and their events, durable, on an SQLite file (the embedded default) or
//! Postgres (several instances sharing one database) through sqlx (the hot path past it) — the [`SqlRunStore`] behind
//! `nrllm_core::run_store::RunStore`, the database with its migrations, and the tool settings.

pub mod accounts;
pub mod chain;
pub mod contacts;
pub mod db;
mod error;
pub mod mcp_gates;
pub mod notifications;
pub mod notify;
mod outbox;
mod postgres;
pub mod run_store;
mod secret;
mod sqlite;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tool_settings;
mod transition;
mod wal_writes;
pub mod webhooks;

pub use run_store::SqlRunStore;
pub use transition::{Cells, Row, Statement, Value};
