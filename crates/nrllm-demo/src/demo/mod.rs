//! The `demo` provider: an offline, deterministic stand-in for a model, selected by default, so the
//! whole approve/deny flow runs with no network and no key. It reads the task from the last user
//! message and the tool results so far, and acts like a careful agent: it looks before it writes,
//! puts two calls in one turn when a task has two independent effects, explains a denial it
//! received, and answers a prompt it does not understand with the list of things it can do.
//! Token usage is estimated from text length (about four characters a token).

mod provider;
mod script;
mod tasks;
#[cfg(test)]
mod tests;

pub use provider::*;
pub use tasks::DEMO_PROMPTS;
