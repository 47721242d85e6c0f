//! The app's settings: `Leptos.toml` (or the file named by `NRLLM_CONFIG`), then environment
//! overrides. A bad value is reported with the setting's name and where it came from, and start-up
//! stops; nothing here panics.
//!
//! Most settings are one row of a table (`table.rs`): key, environment variable, and how the value
//! is checked. The layering is ours rather than `figment`'s: each setting is checked with its own
//! range and message naming the exact source (`environment variable NRLLM_…` or the file), and the
//! file refuses unknown keys; figment would merge the sources, but these messages and checks
//! would still be ours, so it would add a dependency without removing code.

mod checks;
mod file;
pub mod notify;
mod parse;
mod table;
#[cfg(test)]
mod tests;
mod values;
mod written;

pub use file::DEFAULT_SETTINGS_FILE;
pub use parse::parse_timeout;
pub use values::{ModelConfiguration, ProviderKind, Settings, SettingsError};
