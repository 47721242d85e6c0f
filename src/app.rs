//! The app's shell, router and pages.

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Title};
use leptos_router::components::{Route, Router, Routes};
use leptos_router::{SsrMode, StaticSegment};

use crate::error::AppError;

/// The HTML document around every page.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <AutoReload options=options.clone() />
                <HydrationScripts options islands=true />
                <link rel="stylesheet" id="leptos" href="/pkg/nrllm-playground.css" />
                <MetaTags />
            </head>
            <body class="min-h-screen bg-slate-50 text-slate-900 dark:bg-slate-950 dark:text-slate-100">
                <App />
            </body>
        </html>
    }
}

/// The app: header and routes. Every route renders completely on the server (`SsrMode::Async`)
/// so that pages are whole and usable with JavaScript off.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Title text="nrllm playground" />
        <Router>
            <header class="border-b border-slate-200 bg-white dark:border-slate-800 dark:bg-slate-900">
                <nav class="mx-auto flex max-w-6xl items-center gap-6 px-4 py-3">
                    <a href="/" class="font-semibold tracking-tight">"nrllm playground"</a>
                </nav>
            </header>
            <main class="mx-auto max-w-6xl px-4 py-6">
                <Routes fallback=|| view! { <p>"Page not found."</p> }>
                    <Route path=StaticSegment("") view=HomePage ssr=SsrMode::Async />
                </Routes>
            </main>
        </Router>
    }
}

/// How many times the database was pinged.
#[server(endpoint = "nrllm_ping_count")]
pub async fn nrllm_ping_count() -> Result<i64, AppError> {
    let state = crate::server::state()?;
    state.ping_count().await
}

/// Records one ping in the database and returns the new total: a write-then-read health check.
#[server(endpoint = "nrllm_ping")]
pub async fn nrllm_ping() -> Result<i64, AppError> {
    let state = crate::server::state()?;
    state.record_ping().await
}

#[component]
fn HomePage() -> impl IntoView {
    let count = Resource::new(|| (), |_| nrllm_ping_count());
    view! {
        <h1 class="text-2xl font-semibold">"nrllm playground"</h1>
        <p class="mt-2 max-w-prose text-slate-600 dark:text-slate-400">
            "An agent loop whose side-effecting tool calls wait for your approval."
        </p>
        <section class="mt-6 grid gap-4 sm:grid-cols-2">
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match count.await {
                        Ok(total) => view! { <PingPanel initial=total /> }.into_any(),
                        Err(err) => view! { <p role="alert" class="text-red-700">{err.to_string()}</p> }.into_any(),
                    }
                })}
            </Suspense>
            <ClickCounter />
        </section>
    }
}

/// Pings the database. Without JavaScript the form posts and the server redirects back; with it,
/// the island posts in the background and updates the count in place.
#[island]
fn PingPanel(initial: i64) -> impl IntoView {
    let ping = ServerAction::<NrllmPing>::new();
    let total = move || match ping.value().get() {
        Some(Ok(total)) => total,
        _ => initial,
    };
    let error = move || match ping.value().get() {
        Some(Err(err)) => Some(err.to_string()),
        _ => None,
    };
    view! {
        <div class="rounded-lg border border-slate-200 bg-white p-4 dark:border-slate-800 dark:bg-slate-900">
            <h2 class="font-medium">"Database"</h2>
            <p class="mt-1">"Pings recorded: " <output data-testid="ping-count">{total}</output></p>
            <ActionForm action=ping>
                <button type="submit" class="mt-3 rounded-md bg-indigo-600 px-3 py-1.5 text-white hover:bg-indigo-500 focus:outline-none focus-visible:ring-2 focus-visible:ring-indigo-400">
                    "Ping the database"
                </button>
            </ActionForm>
            {move || error().map(|message| view! { <p role="alert" class="mt-2 text-red-700">{message}</p> })}
        </div>
    }
}

/// A counter that only counts once the wasm bundle runs: proof that the page hydrated.
#[island]
fn ClickCounter() -> impl IntoView {
    let clicks = RwSignal::new(0u32);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    view! {
        <div class="rounded-lg border border-slate-200 bg-white p-4 dark:border-slate-800 dark:bg-slate-900">
            <h2 class="font-medium">"Browser"</h2>
            <p class="mt-1" data-testid="hydration-state">
                {move || if hydrated.get() { "interactive" } else { "server-rendered" }}
            </p>
            <button
                type="button"
                data-testid="click-counter"
                class="mt-3 rounded-md border border-slate-300 px-3 py-1.5 hover:bg-slate-100 focus:outline-none focus-visible:ring-2 focus-visible:ring-indigo-400 dark:border-slate-700 dark:hover:bg-slate-800"
                on:click=move |_| clicks.update(|n| *n += 1)
            >
                "Clicks: " {move || clicks.get()}
            </button>
        </div>
    }
}
