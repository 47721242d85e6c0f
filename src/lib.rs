//! The nrllm playground web app: Leptos pages and components, their server functions, and (with
//! the `ssr` feature) the server-side state, settings and error handling.

pub mod app;
pub mod error;
#[cfg(feature = "ssr")]
pub mod server;
#[cfg(feature = "ssr")]
pub mod settings;

/// Entry point of the wasm bundle: hydrates the interactive islands of a server-rendered page.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_islands();
}
