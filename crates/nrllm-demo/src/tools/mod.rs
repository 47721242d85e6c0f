//! The demo's built-in tools, grouped by what they act on: the site's pages (reading and
//! writing), messages, and the system itself; `registry.rs` puts them together.

mod common;
mod messages;
mod read_pages;
mod registry;
mod system;
mod write_pages;

pub use common::*;
pub use messages::*;
pub use read_pages::*;
pub use registry::*;
pub use system::*;
pub use write_pages::*;
