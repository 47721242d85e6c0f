//! nrllm-core: the agent loop with human approval, as data and rules — no I/O.
//!
//! The canonical transcript, tools and the gate, the loop with suspend and resume as values,
//! decisions, events, the provider trait, run records and the [`run_store::RunStore`] trait, the run
//! service that ties them together, and a clock. Nothing here opens a socket, a file or a
//! database: the store (`nrllm-store`), the HTTP providers (`nrllm-providers`) and the demo
//! (`nrllm-demo`) are crates of their own, on top of this one, and the compiler keeps it so.

pub mod assembly;
pub mod authority;
pub mod choice;
pub mod clock;
pub mod daily_cap;
pub mod decision;
pub mod elicit;
pub mod events;
pub mod failpoint;
pub mod hash;
mod interrupt;
pub mod lease;
pub mod listing;
pub mod mcp;
pub mod moves;
pub mod offer;
pub mod preview;
pub mod provider;
pub mod question;
pub mod quorum;
pub mod registry;
pub mod retry;
pub mod rules;
pub mod run_service;
pub mod run_store;
pub mod spans;
pub mod spend;
pub mod state;
pub mod step_machine;
pub mod submit;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tool;
pub mod tool_loop;
pub mod trace;
pub mod transcript;
pub mod turn_verdict;

pub use decision::{CallDecision, Choice, Decision};
pub use state::{RunSettings, SuspendedState};
pub use tool_loop::{
    Completed, LoopError, LoopOutcome, RunContext, RunInput, ToolLoop, ToolLoopService,
};
