//! Model Context Protocol servers as tool sources (issue #21). The operator names servers in
//! `[[mcp_servers]]` ([`config`]); the [`hub`] connects each one (a stdio child process or a
//! Streamable HTTP endpoint, through the official `rmcp` SDK), and its tools join the registry
//! as [`tool::McpTool`]s named `<server>__<tool>`. Whether a call waits for an operator, and
//! whether a call a crash cut off runs again, follow the core's pure rules in
//! `nrllm_core::mcp`. The [`demo`] server makes the flow work offline.

mod call;
pub mod client;
pub mod config;
mod connect;
pub mod demo;
pub mod elicit;
pub mod gates;
pub mod held;
pub mod hub;
mod parked;
pub mod relist;
pub mod tool;
