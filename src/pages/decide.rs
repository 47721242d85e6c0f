//! `/decide?token=…`: the page a mailed *Approve* or *Deny* opens. A GET only shows what the link
//! would decide (mail scanners fetch links); one press of its button decides, as the person the
//! mail was sent to (after login, if the browser had no session). A plain form, so it works
//! without JavaScript. It is sent with `Referrer-Policy: no-referrer`: the token in its URL
//! never leaves in a Referer.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::api::links::{nrllm_link_get, NrllmLinkDecide};
use crate::components::{url_error, ErrorBanner, BUTTON_PRIMARY, BUTTON_SECONDARY};
use crate::field;
use crate::forms::{action, CsrfField};
use crate::page_data::LinkView;

#[component]
pub fn DecidePage() -> impl IntoView {
    let token = use_query_map()
        .read_untracked()
        .get("token")
        .unwrap_or_default();
    #[cfg(feature = "ssr")]
    crate::server::security::set_no_referrer();
    let link = Resource::new(move || token.clone(), nrllm_link_get);
    view! {
        <Title text="Decide — nrllm playground" />
        <div class="mx-auto max-w-2xl">
            <h1 class="text-2xl font-semibold">"A decision from a mail"</h1>
            <ErrorBanner error=url_error() />
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match link.await {
                        Ok(view) => view! { <LinkPanel view /> }.into_any(),
                        Err(err) => view! {
                            <p role="alert" data-testid="link-error" class="mt-4 text-rose-800 dark:text-rose-300">{err.to_string()}</p>
                        }.into_any(),
                    }
                })}
            </Suspense>
        </div>
    }
}

#[component]
fn LinkPanel(view: LinkView) -> impl IntoView {
    let short = view.run_id.chars().take(8).collect::<String>();
    let verb = if view.approve { "Approve" } else { "Deny" };
    let what = if view.approve {
        "approves every call of the turn below: the calls that wait for approval run"
    } else {
        "denies the turn below: none of its calls that wait for approval run, and the model reads that they were denied"
    };
    let run_href = format!("/runs/{}", view.run_id);
    view! {
        <p class="mt-2" data-testid="link-summary">
            {format!("This link {what}, on run {short}. It was sent to {}; you are logged in as {}. It counts until {}.", view.sent_to, view.you, view.expires)}
        </p>
        <ul class="mt-3 space-y-2" data-testid="link-calls">
            {view.calls.into_iter().map(|call| view! {
                <li class="rounded border border-slate-200 p-2 dark:border-slate-800" data-testid="link-call">
                    <span class="font-mono font-semibold">{call.tool}</span>
                    <span class="ml-2 text-xs text-slate-500">{if call.gated { "waits for approval" } else { "runs with the turn" }}</span>
                    <pre class="mt-1 whitespace-pre-wrap break-all text-xs">{call.arguments}</pre>
                    {call.preview.map(|p| view! { <p class="mt-1 text-sm">{format!("Preview: {p}")}</p> })}
                </li>
            }).collect_view()}
        </ul>
        {match view.blocked {
            Some(reason) => view! {
                <p role="alert" data-testid="link-blocked" class="mt-4 rounded-md border border-amber-300 bg-amber-50 px-4 py-3 text-amber-900 dark:border-amber-800 dark:bg-amber-950 dark:text-amber-100">{reason}</p>
                <a href=run_href.clone() class=BUTTON_SECONDARY data-testid="link-open">"Open the run"</a>
            }.into_any(),
            None => view! {
                <form method="post" action={action::<NrllmLinkDecide>()} class="mt-4 flex gap-2" data-testid="link-form">
                    <CsrfField />
                    <input type="hidden" name=field!(NrllmLinkDecide, token) value=view.token />
                    <button type="submit" class=BUTTON_PRIMARY data-testid="link-confirm">{format!("{verb} run {short}")}</button>
                    <a href=run_href.clone() class=BUTTON_SECONDARY data-testid="link-open">"Open the run instead"</a>
                </form>
            }.into_any(),
        }}
    }
}
