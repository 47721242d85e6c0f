//! nrllm-runtime: the shared agent-loop runtime.
//!
//! Everything a consumer needs to run an LLM agent loop whose side-effecting tool calls wait for a
//! human's approval: the canonical transcript, tools and the gate, the loop with suspend and resume
//! as values, decisions, events, providers and run stores. This crate knows nothing of HTTP, HTML
//! or Leptos; the playground (and any headless program) drives it through its public API.

pub mod agent;
pub mod assembly;
pub mod db;
pub mod decision;
pub mod demo;
pub mod events;
pub mod hash;
pub mod preview;
pub mod provider;
pub mod providers;
pub mod registry;
pub mod service;
pub mod site;
pub mod state;
pub mod store;
pub mod testing;
pub mod tool;
pub mod tool_settings;
pub mod tools;
pub mod transcript;

pub use agent::{
    Completed, LoopError, LoopOutcome, RunContext, RunInput, ToolLoop, ToolLoopService,
};
pub use decision::{CallDecision, Choice, Decision};
pub use state::{RunSettings, SuspendedState};
