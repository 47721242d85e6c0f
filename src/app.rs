//! The app's shell, header and routes.

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Title};
use leptos_router::components::{Route, Router, Routes};
use leptos_router::{path, SsrMode};

use crate::api::accounts::{nrllm_me, NrllmLogout};
use crate::forms::{action, CsrfField};
use crate::pages::account::{AccountPage, AdminPage, LoginOncePage, LoginPage};
use crate::pages::approvals::ApprovalsPage;
use crate::pages::decide::DecidePage;
use crate::pages::playground::PlaygroundPage;
use crate::pages::rules::RulesPage;
use crate::pages::run::RunPage;
use crate::pages::runs::RunsPage;
use crate::pages::system::SystemPage;
use crate::pages::NotFound;

/// The HTML document around every page. On the server it also sets the page's
/// Content-Security-Policy, with the nonce its hydration script carries.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    #[cfg(feature = "ssr")]
    crate::server::security::set_page_policy();
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <meta name="color-scheme" content="light dark" />
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
    let link = "rounded px-2 py-1 hover:bg-slate-100 focus:outline-none focus-visible:ring-2 focus-visible:ring-indigo-400 dark:hover:bg-slate-800";
    view! {
        <Title text="nrllm playground" />
        <Router>
            <header class="border-b border-slate-200 bg-white dark:border-slate-800 dark:bg-slate-900">
                <nav class="mx-auto flex max-w-6xl flex-wrap items-center gap-2 px-4 py-3" aria-label="Main">
                    <a href="/" class="mr-4 font-semibold tracking-tight">"nrllm playground"</a>
                    <a href="/" class=link>"Playground"</a>
                    <a href="/runs" class=link>"Runs"</a>
                    <a href="/approvals" class=link>"Approvals"</a>
                    <a href="/rules" class=link>"Rules"</a>
                    <a href="/system" class=link>"System"</a>
                    <Who link />
                </nav>
            </header>
            <main class="mx-auto max-w-6xl px-4 py-6">
                <Routes fallback=|| view! { <NotFound message="There is no page at this address." /> }>
                    <Route path=path!("/") view=PlaygroundPage ssr=SsrMode::Async />
                    <Route path=path!("/runs") view=RunsPage ssr=SsrMode::Async />
                    <Route path=path!("/runs/:id") view=RunPage ssr=SsrMode::Async />
                    <Route path=path!("/approvals") view=ApprovalsPage ssr=SsrMode::Async />
                    <Route path=path!("/rules") view=RulesPage ssr=SsrMode::Async />
                    <Route path=path!("/system") view=SystemPage ssr=SsrMode::Async />
                    <Route path=path!("/decide") view=DecidePage ssr=SsrMode::Async />
                    <Route path=path!("/login") view=LoginPage ssr=SsrMode::Async />
                    <Route path=path!("/login/once") view=LoginOncePage ssr=SsrMode::Async />
                    <Route path=path!("/account") view=AccountPage ssr=SsrMode::Async />
                    <Route path=path!("/admin") view=AdminPage ssr=SsrMode::Async />
                </Routes>
            </main>
            <crate::times::LocalTimes />
        </Router>
    }
}

/// Who is logged in, with the admin page's link for admins and a logout button.
#[component]
fn Who(link: &'static str) -> impl IntoView {
    let me = Resource::new(|| (), |_| nrllm_me());
    view! {
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                me.await.ok().flatten().map(|me| view! {
                    <div class="ml-auto flex items-center gap-2 text-sm">
                        {me.is_admin.then(|| view! { <a href="/admin" class=link>"Admin"</a> })}
                        <a href="/account" class=link data-testid="who">{format!("{} ({})", me.name, me.role)}</a>
                        <form method="post" action={action::<NrllmLogout>()}>
                            <CsrfField />
                            <button type="submit" class=link data-testid="log-out">"Log out"</button>
                        </form>
                    </div>
                })
            })}
        </Suspense>
    }
}
