//! The nrllm playground web app: Leptos pages and components, their server functions, and (with
//! the `ssr` feature) the server-side state, settings, live event stream and error handling.

// Leptos views are deeply nested types; the run page needs more than the default depth.
#![recursion_limit = "256"]

pub mod api;
pub mod app;
pub mod approval;
pub mod approval_count;
pub mod budget;
pub mod components;
pub mod error;
pub mod forms;
pub mod islands;
pub mod page_data;
pub mod pages;
pub mod question;
#[cfg(feature = "ssr")]
pub mod server;
#[cfg(feature = "ssr")]
pub mod settings;
pub mod times;

/// Entry point of the wasm bundle: hydrates the interactive islands of a server-rendered page.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_islands();
}
