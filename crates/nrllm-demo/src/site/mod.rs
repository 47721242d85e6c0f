//! The demo site: a small content store in the run database that the built-in tools read and
//! change, so an operator can see exactly what an approved write did. Every page change commits
//! together with its history row; messages go to an outbox and never leave the machine.

mod effects;
mod records;
mod store;

pub use records::*;
pub use store::*;
