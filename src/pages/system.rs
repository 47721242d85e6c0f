//! `/system`: is the database writable, did the page hydrate.

use leptos::prelude::*;

use crate::app::nrllm_ping_count;
use crate::components::Card;
use crate::islands::{ClickCounter, PingPanel};

/// Health of the pieces under the playground.
#[component]
pub fn SystemPage() -> impl IntoView {
    let count = Resource::new(|| (), |_| nrllm_ping_count());
    view! {
        <h1 class="text-2xl font-semibold">"System"</h1>
        <div class="mt-4 grid gap-4 sm:grid-cols-2">
            <Card title="Database">
                <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                    {move || Suspend::new(async move {
                        match count.await {
                            Ok(total) => view! { <PingPanel initial=total /> }.into_any(),
                            Err(err) => view! { <p role="alert" class="text-rose-700">{err.to_string()}</p> }.into_any(),
                        }
                    })}
                </Suspense>
            </Card>
            <Card title="Browser">
                <ClickCounter />
            </Card>
        </div>
    }
}
