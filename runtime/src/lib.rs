//! nrllm-runtime: the shared agent-loop runtime.
//!
//! Everything a consumer needs to run an LLM agent loop whose side-effecting tool calls wait for a
//! human's approval: the canonical transcript, tools and the gate, the loop with suspend and resume
//! as values, decisions, events, providers and run stores. This crate knows nothing of HTTP, HTML
//! or Leptos; the playground (and any headless program) drives it through its public API.

pub mod db;
pub mod transcript;
