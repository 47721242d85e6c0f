//! The interactive islands: the only parts of a page that ship to the browser as wasm. Everything
//! they do also works without them (a refresh link, plain form buttons).

use leptos::prelude::*;

use crate::model::StepView;

/// A counter that only counts once the wasm bundle runs: proof that the page hydrated.
#[island]
pub fn ClickCounter() -> impl IntoView {
    let clicks = RwSignal::new(0u32);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    view! {
        <p class="mt-1" data-testid="hydration-state">
            {move || if hydrated.get() { "interactive" } else { "server-rendered" }}
        </p>
        <button
            type="button"
            data-testid="click-counter"
            class=crate::components::BUTTON_SECONDARY
            on:click=move |_| clicks.update(|n| *n += 1)
        >
            "Clicks: "
            {move || clicks.get()}
        </button>
    }
}

/// Pings the database. Without JavaScript the form posts and the server redirects back; with it,
/// the island posts in the background and updates the count in place.
#[island]
pub fn PingPanel(initial: i64) -> impl IntoView {
    let ping = ServerAction::<crate::app::NrllmPing>::new();
    let total = move || match ping.value().get() {
        Some(Ok(total)) => total,
        _ => initial,
    };
    let error = move || match ping.value().get() {
        Some(Err(err)) => Some(err.to_string()),
        _ => None,
    };
    view! {
        <p>"Pings recorded: " <output data-testid="ping-count">{total}</output></p>
        <ActionForm action=ping>
            <button type="submit" class=format!("mt-3 {}", crate::components::BUTTON_PRIMARY)>
                "Ping the database"
            </button>
        </ActionForm>
        {move || error().map(|message| view! { <p role="alert" class="mt-2 text-rose-700">{message}</p> })}
    }
}

/// One row of the step list: a summary line that opens to the step's detail tabs.
#[component]
pub fn StepRow(step: StepView) -> impl IntoView {
    let marker = if step.ok { "ok" } else { "error" };
    let marker_class = if step.ok {
        "text-emerald-700 dark:text-emerald-300"
    } else {
        "text-rose-700 dark:text-rose-300"
    };
    let meta = [
        step.round.map(|r| format!("round {r}")),
        step.duration_ms.map(|ms| format!("{ms} ms")),
        step.tokens.map(|t| format!("{t} tokens")),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" · ");
    let group = format!("step-{}", step.sequence);
    let kind = step.kind.clone();
    let tabs = step
        .tabs
        .into_iter()
        .enumerate()
        .map(|(i, (label, text))| {
            let id = format!("{group}-tab-{i}");
            view! {
                <div class="tab">
                    <input type="radio" class="peer sr-only" name=group.clone() id=id.clone() checked={i == 0} />
                    <label for=id class="cursor-pointer rounded px-2 py-1 text-xs font-medium text-slate-600 peer-checked:bg-indigo-100 peer-checked:text-indigo-900 peer-focus-visible:ring-2 peer-focus-visible:ring-indigo-400 dark:text-slate-300 dark:peer-checked:bg-indigo-900 dark:peer-checked:text-indigo-100">
                        {label}
                    </label>
                    <pre class="tab-panel mt-2 hidden max-h-96 overflow-auto whitespace-pre-wrap break-words rounded bg-slate-50 p-2 text-xs peer-checked:block dark:bg-slate-950">
                        {text}
                    </pre>
                </div>
            }
        })
        .collect_view();
    view! {
        <li data-testid="step" data-kind=kind class="border-b border-slate-100 last:border-0 dark:border-slate-800">
            <details class="group py-1.5">
                <summary class="flex cursor-pointer list-none items-baseline gap-2 rounded px-1 text-sm hover:bg-slate-50 focus:outline-none focus-visible:ring-2 focus-visible:ring-indigo-400 dark:hover:bg-slate-800">
                    <span class="w-32 shrink-0 font-mono text-xs text-slate-500">{step.kind}</span>
                    <span class="grow" data-testid="step-title">{step.title}</span>
                    <span class="shrink-0 text-xs text-slate-500">{meta}</span>
                    <span class=format!("shrink-0 text-xs font-medium {marker_class}")>{marker}</span>
                </summary>
                <div class="tabs flex flex-wrap gap-1 px-1 pt-2">{tabs}</div>
            </details>
        </li>
    }
}

/// The step list. While the run is running it grows live from the server's event stream and the
/// page reloads when the run stops running (to show the answer or the approval panel).
#[island]
pub fn LiveSteps(run_id: String, steps: Vec<StepView>, live: bool) -> impl IntoView {
    let steps = RwSignal::new(steps);
    if live {
        Effect::new(move |_| {
            #[cfg(feature = "hydrate")]
            listen(&run_id, steps);
            #[cfg(not(feature = "hydrate"))]
            let _ = &run_id;
        });
    }
    view! {
        <ol data-testid="steps" class="divide-y divide-transparent">
            <For each=move || steps.get() key=|step| step.sequence let:step>
                <StepRow step=step />
            </For>
        </ol>
    }
}

#[cfg(feature = "hydrate")]
fn listen(run_id: &str, steps: RwSignal<Vec<StepView>>) {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;

    let after = steps.with_untracked(|list| list.last().map(|s| s.sequence).unwrap_or(0));
    let Ok(source) = web_sys::EventSource::new(&format!("/api/runs/{run_id}/events?after={after}"))
    else {
        return;
    };
    let on_step =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
            let Some(text) = event.data().as_string() else {
                return;
            };
            let Ok(step) = serde_json::from_str::<StepView>(&text) else {
                return;
            };
            steps.update(|list| {
                if list.last().is_none_or(|last| last.sequence < step.sequence) {
                    list.push(step);
                }
            });
        });
    let _ = source.add_event_listener_with_callback("step", on_step.as_ref().unchecked_ref());
    on_step.forget();
    let on_status =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |_event: web_sys::MessageEvent| {
            if let Some(window) = web_sys::window() {
                let _ = window.location().reload();
            }
        });
    let _ = source.add_event_listener_with_callback("status", on_status.as_ref().unchecked_ref());
    on_status.forget();
}

/// Keyboard shortcuts of the approval panel: `a` approves all, `d` denies all (not while typing).
#[island]
pub fn DecisionShortcuts() -> impl IntoView {
    Effect::new(move |_| {
        #[cfg(feature = "hydrate")]
        install_shortcuts();
    });
    view! {
        <p class="text-xs text-slate-500">
            "Keyboard: " <kbd class="rounded border px-1">"a"</kbd> " approve all, "
            <kbd class="rounded border px-1">"d"</kbd> " deny all"
        </p>
    }
}

#[cfg(feature = "hydrate")]
fn install_shortcuts() {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;

    let Some(window) = web_sys::window() else {
        return;
    };
    let handler =
        Closure::<dyn FnMut(web_sys::KeyboardEvent)>::new(move |event: web_sys::KeyboardEvent| {
            if event.ctrl_key() || event.meta_key() || event.alt_key() {
                return;
            }
            let typing = event
                .target()
                .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
                .is_some_and(|el| {
                    matches!(el.tag_name().as_str(), "INPUT" | "TEXTAREA" | "SELECT")
                });
            if typing {
                return;
            }
            let button = match event.key().as_str() {
                "a" => "approve-all",
                "d" => "deny-all",
                _ => return,
            };
            let Some(document) = web_sys::window().and_then(|w| w.document()) else {
                return;
            };
            if let Some(button) = document
                .get_element_by_id(button)
                .and_then(|el| el.dyn_into::<web_sys::HtmlElement>().ok())
            {
                event.prevent_default();
                button.click();
            }
        });
    let _ = window.add_event_listener_with_callback("keydown", handler.as_ref().unchecked_ref());
    handler.forget();
}
