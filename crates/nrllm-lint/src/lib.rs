//! The workspace's structure rules, read from the source with `syn` (nothing is compiled):
//!
//! - a source file holds at most [`MAX_FILE_LINES`] lines outside `#[cfg(test)]` items;
//! - a function holds at most [`MAX_FN_LINES`] lines, from its `fn` keyword to its closing brace.
//!   Every line counts, blank lines and comments too, and so does every line of a macro call such
//!   as Leptos's `view!`: a component whose markup is long is split into smaller components;
//! - no two modules of one crate import each other, directly or round a loop (a module is a file;
//!   a `mod name { … }` block belongs to its file);
//! - no module of the app imports from its pages or components, which sit above everything else.
//!
//! Tests (`#[cfg(test)]` items and the `tests/` folders) are not held to these rules.

pub mod cfg;
pub mod circles;
#[cfg(test)]
mod fixture;
pub mod modules;
pub mod sizes;

/// The most lines a source file may hold outside its tests.
pub const MAX_FILE_LINES: usize = 600;
/// The most lines a function may span.
pub const MAX_FN_LINES: usize = 80;
