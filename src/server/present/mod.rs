//! Turns stored runs and events into the page data of `crate::page_data`: one module per thing a
//! page shows.

mod asked;
mod inbox;
mod json;
mod pending;
mod runs;
mod steps;
mod system;
#[cfg(test)]
mod tests;

pub use inbox::*;
pub use json::*;
pub use pending::*;
pub use runs::*;
pub use steps::*;
pub use system::*;
