//! The agent loop (ADR-084's `ToolLoopService`). `run` assembles a transcript and asks the model in
//! rounds; a turn that holds a call to an offered tool requiring approval suspends the run
//! **before any call of that turn runs**, returned as [`LoopOutcome::Suspended`] — a value, never
//! an error. `resume` applies an operator's decision to the pending turn and continues without
//! re-assembly; counters carry on, so totals span the whole run, and a resumed run may suspend again.
//!
//! `service.rs` says what the loop is given and gives back; `drive.rs` asks the model round by
//! round; `answer.rs` answers a turn's calls; `automatic.rs` decides what rules decide;
//! `turn.rs` reads a turn out of a transcript (for forks).

mod answer;
mod automatic;
mod base;
mod drive;
mod service;
mod turn;

pub use answer::*;
pub use automatic::*;
pub use base::*;
pub use service::*;
pub use turn::*;
