//! The server functions: the app's API, each at a fixed endpoint under `/api/` (DESIGN §6). They
//! take form posts (answered with a redirect, errors carried back in the URL) and JSON (answered
//! with JSON and a status code). They are thin: validation, then the run service. Whether the
//! caller may decide, answer, fork, retry or cancel a run is the core's authority to say (the run
//! service asks it, `nrllm_core::authority`); here a caller only has to be logged in.
//!
//! One module per resource; the checks and form readers they share sit beside them.

pub mod accounts;
#[cfg(feature = "ssr")]
pub(crate) mod checks;
pub mod contacts;
pub mod decisions;
pub mod inbox;
pub mod links;
#[cfg(feature = "ssr")]
pub(crate) mod quorum;
pub mod rules;
#[cfg(feature = "ssr")]
mod run_form;
pub mod run_list;
pub mod runs;
pub mod system;
#[cfg(feature = "ssr")]
pub(crate) mod waiting;

pub use decisions::*;
pub use inbox::*;
pub use nrllm_types::submission::SubmittedCall;
pub use run_list::*;
pub use runs::*;
pub use system::*;
