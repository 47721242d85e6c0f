//! The interactive islands: the only parts of a page that ship to the browser as wasm. Everything
//! they do also works without them (a refresh link, plain form buttons).

use leptos::prelude::*;

use crate::page_data::{ConfigurationView, Forming, LimitView, ProgressView, StepView};

mod guard;
mod inbox;

pub use guard::ApprovalGuard;
pub use inbox::InboxDesk;

/// One row of the step list: a link to the step's detail (works without JavaScript).
#[component]
pub fn StepRow(run_id: String, step: StepView, #[prop(optional)] selected: bool) -> impl IntoView {
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
    let row_class = if selected {
        "flex items-baseline gap-2 rounded bg-indigo-50 px-1 py-1.5 text-sm dark:bg-indigo-950"
    } else {
        "flex items-baseline gap-2 rounded px-1 py-1.5 text-sm hover:bg-slate-50 dark:hover:bg-slate-800"
    };
    let kind = step.kind.clone();
    view! {
        <li data-testid="step" data-kind=kind class="border-b border-slate-100 last:border-0 dark:border-slate-800">
            <a href=format!("/runs/{run_id}?step={}#detail", step.sequence) class=row_class
                aria-current=selected.then_some("step")>
                <span class="w-32 shrink-0 font-mono text-xs text-slate-600 dark:text-slate-400">{step.kind}</span>
                <span class="grow" data-testid="step-title">{step.title}</span>
                <span class="shrink-0 text-xs text-slate-600 dark:text-slate-400">{meta}</span>
                <span class=format!("shrink-0 text-xs font-medium {marker_class}")>{marker}</span>
            </a>
        </li>
    }
}

/// The step list. The steps the page was rendered with are its children (server-rendered, sent
/// once); while the run is running, later steps arrive from the server's event stream and are
/// added here, and the page reloads when the run stops running (to show the answer or the
/// approval panel) — unless the operator is leaving the page: a reload would cancel their
/// navigation.
#[island]
pub fn LiveSteps(
    run_id: String,
    after: i64,
    live: bool,
    /// The run's budget as the page shows it: moved by what each live step uses.
    budget: Vec<LimitView>,
    children: Children,
) -> impl IntoView {
    let feed = Feed {
        added: RwSignal::new(Vec::new()),
        forming: RwSignal::new(None),
        progress: RwSignal::new(None),
        budget: StoredValue::new(budget),
    };
    if live {
        let run_id = run_id.clone();
        Effect::new(move |_| {
            #[cfg(feature = "hydrate")]
            listen(&run_id, after, feed);
            #[cfg(not(feature = "hydrate"))]
            let _ = (&run_id, after);
        });
    }
    // The steps it was rendered with are their own list (an island wraps its children in an
    // element of its own, which a list may not hold); later ones go in a second list below.
    view! {
        {children()}
        <ol data-testid="steps-live" class="divide-y divide-transparent">
            <For each=move || feed.added.get() key=|step| step.sequence let:step>
                <StepRow run_id=run_id.clone() step=step />
            </For>
            {move || feed.forming.get().filter(|f| !f.is_empty()).map(|forming| view! { <FormingRow forming /> })}
            {move || feed.progress.get().map(|progress| view! {
                <li data-testid="tool-progress" aria-live="polite" aria-busy="true" class="border-b border-slate-100 px-1 py-1.5 text-sm dark:border-slate-800">
                    <span class="font-mono text-xs text-slate-500">"running… "</span>{progress.text()}
                </li>
            })}
        </ol>
    }
}

/// What a live step list adds to the steps it was rendered with: later steps, and the response
/// the model is writing.
#[derive(Clone, Copy)]
struct Feed {
    added: RwSignal<Vec<StepView>>,
    forming: RwSignal<Option<Forming>>,
    /// How far the call running now has come, as its tool reports it (until its step lands).
    progress: RwSignal<Option<ProgressView>>,
    #[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
    budget: StoredValue<Vec<LimitView>>,
}

/// The response the model is writing, under the step list until its step lands: its thinking,
/// its text, and each call with its arguments so far (marked as not complete). The model's text,
/// shown as text.
#[component]
fn FormingRow(forming: Forming) -> impl IntoView {
    let calls = forming
        .calls
        .into_iter()
        .map(|call| {
            let name = call.name.unwrap_or_else(|| "a tool".to_owned());
            view! {
                <p data-testid="forming-call" class="font-mono text-xs">
                    {name}" " <span class="text-slate-500">{call.arguments}</span>
                    <span class="ml-1 text-amber-700 dark:text-amber-300">"(still being written)"</span>
                </p>
            }
        })
        .collect_view();
    view! {
        <li data-testid="forming" aria-live="polite" aria-busy="true" class="border-b border-slate-100 px-1 py-1.5 text-sm dark:border-slate-800">
            <span class="font-mono text-xs text-slate-500">"the model is writing…"</span>
            {(!forming.thinking.is_empty()).then(|| view! {
                <p data-testid="forming-thinking" class="whitespace-pre-wrap text-xs italic text-slate-500">{forming.thinking}</p>
            })}
            {(!forming.text.is_empty()).then(|| view! {
                <p data-testid="forming-text" class="whitespace-pre-wrap">{forming.text}</p>
            })}
            {calls}
            {forming.cut.then(|| view! { <p class="text-xs text-slate-500">"(more than fits here: the step will show all of it)"</p> })}
        </li>
    }
}

/// Calls `handle` with each event `name` of `source` whose data reads as a `T` (JSON); others
/// are ignored.
#[cfg(feature = "hydrate")]
fn on_json<T: serde::de::DeserializeOwned + 'static>(
    source: &web_sys::EventSource,
    name: &str,
    mut handle: impl FnMut(T) + 'static,
) {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    let listener =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
            if let Some(value) = event
                .data()
                .as_string()
                .and_then(|text| serde_json::from_str::<T>(&text).ok())
            {
                handle(value);
            }
        });
    let _ = source.add_event_listener_with_callback(name, listener.as_ref().unchecked_ref());
    listener.forget();
}

/// Moves the page's budget strip (outside this island) by what a live step used: each limit's
/// text, as the strip writes it, and whether it is reached.
#[cfg(feature = "hydrate")]
fn show_spent(budget: &mut [LimitView], spent: &crate::page_data::StepSpent) {
    let Some(document) = web_sys::window().and_then(|window| window.document()) else {
        return;
    };
    for limit in budget.iter_mut() {
        limit.add(spent);
        let selector = format!(
            "[data-testid=\"limit\"][data-kind=\"{}\"]",
            limit.kind.key()
        );
        if let Ok(Some(shown)) = document.query_selector(&selector) {
            shown.set_text_content(Some(&limit.text()));
            let _ = shown.set_attribute("data-reached", &limit.reached.to_string());
            let class = if limit.reached {
                crate::budget::REACHED
            } else {
                ""
            };
            let _ = shown.set_attribute("class", class);
        }
    }
}

#[cfg(feature = "hydrate")]
fn listen(run_id: &str, after: i64, feed: Feed) {
    use std::cell::Cell;
    use std::rc::Rc;
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;

    let Some(window) = web_sys::window() else {
        return;
    };
    let Ok(source) = web_sys::EventSource::new(&format!("/api/runs/{run_id}/events?after={after}"))
    else {
        return;
    };
    // Set once the operator leaves the page: from then on nothing here reloads it, since a reload
    // would cancel the navigation they started.
    let leaving = Rc::new(Cell::new(false));
    let on_step =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
            let Some(text) = event.data().as_string() else {
                return;
            };
            let Ok(step) = serde_json::from_str::<StepView>(&text) else {
                return;
            };
            // The response's step replaces what was shown of it being written; a call's step,
            // what was shown of its progress.
            if matches!(step.kind.as_str(), "llm" | "llm_failed") {
                feed.forming.set(None);
            }
            if step.kind == "tool" {
                feed.progress.set(None);
            }
            let spent = step.spent;
            let mut fresh = false;
            feed.added.update(|list| {
                let last = list.last().map(|s| s.sequence).unwrap_or(after);
                if last < step.sequence {
                    list.push(step);
                    fresh = true;
                }
            });
            if let (true, Some(spent)) = (fresh, spent) {
                feed.budget
                    .update_value(|budget| show_spent(budget, &spent));
            }
        });
    let _ = source.add_event_listener_with_callback("step", on_step.as_ref().unchecked_ref());
    on_step.forget();
    on_json(&source, "delta", move |more: Forming| {
        feed.forming.update(|shown| match shown {
            Some(shown) if !more.reset && shown.round == more.round => shown.extend(&more),
            _ => *shown = Some(more),
        });
    });
    on_json(&source, "progress", move |progress: ProgressView| {
        feed.progress.set(Some(progress));
    });
    let reload = {
        let leaving = Rc::clone(&leaving);
        move || {
            if leaving.get() {
                return;
            }
            if let Some(window) = web_sys::window() {
                let _ = window.location().reload();
            }
        }
    };
    let on_status = Closure::<dyn FnMut(web_sys::MessageEvent)>::new({
        let reload = reload.clone();
        move |_event: web_sys::MessageEvent| reload()
    });
    let _ = source.add_event_listener_with_callback("status", on_status.as_ref().unchecked_ref());
    on_status.forget();
    poll_when_refused(&source, reload);
    listen_again_if_kept(&window, source, leaving, run_id, (after, feed));
}

/// A stream the server refused (503: too many streams) is closed for good: poll by reloading
/// the page every few seconds instead. A stream that merely ended reconnects by itself.
#[cfg(feature = "hydrate")]
fn poll_when_refused(source: &web_sys::EventSource, reload: impl Fn() + Clone + 'static) {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;

    let watched = source.clone();
    let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(move |_event: web_sys::Event| {
        if watched.ready_state() != web_sys::EventSource::CLOSED {
            return;
        }
        let Some(window) = web_sys::window() else {
            return;
        };
        let reload = Closure::<dyn FnMut()>::new(reload.clone());
        let _ = window.set_timeout_with_callback_and_timeout_and_arguments_0(
            reload.as_ref().unchecked_ref(),
            3_000,
        );
        reload.forget();
    });
    source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    on_error.forget();
}

/// Leaving the page: stop listening at once. The page stays up until the next one arrives,
/// and a status in between must not reload it. If it stays after all (the navigation was
/// cancelled, or answered with a download), listen again from the last step it shows.
#[cfg(feature = "hydrate")]
fn listen_again_if_kept(
    window: &web_sys::Window,
    source: web_sys::EventSource,
    leaving: std::rc::Rc<std::cell::Cell<bool>>,
    run_id: &str,
    (after, feed): (i64, Feed),
) {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;

    let run_id = run_id.to_owned();
    let on_leave = Closure::<dyn FnMut(web_sys::Event)>::new({
        let window = window.clone();
        move |_event: web_sys::Event| {
            leaving.set(true);
            source.close();
            let run_id = run_id.clone();
            let again = Closure::<dyn FnMut()>::new(move || {
                let last = feed
                    .added
                    .with_untracked(|list| list.last().map(|s| s.sequence));
                listen(&run_id, last.unwrap_or(after), feed);
            });
            let _ = window.set_timeout_with_callback_and_timeout_and_arguments_0(
                again.as_ref().unchecked_ref(),
                STAY_AFTER_LEAVING_MS,
            );
            again.forget();
        }
    });
    let once = web_sys::AddEventListenerOptions::new();
    once.set_once(true);
    let _ = window.add_event_listener_with_callback_and_add_event_listener_options(
        "beforeunload",
        on_leave.as_ref().unchecked_ref(),
        &once,
    );
    on_leave.forget();
}

/// How long a page whose navigation away did not happen waits before it listens again.
#[cfg(feature = "hydrate")]
const STAY_AFTER_LEAVING_MS: i32 = 10_000;

/// The playground form's model configuration and options. The temperature and token fields are
/// empty — empty means "the configuration's default" — and show the chosen configuration's
/// defaults as their placeholders, following the choice as it changes (with JavaScript; without
/// it they show the first usable configuration's). A value typed in wins.
#[island]
pub fn ModelFields(configurations: Vec<ConfigurationView>) -> impl IntoView {
    use crate::components::INPUT;

    let first = configurations
        .iter()
        .find(|c| c.available)
        .or(configurations.first())
        .map(|c| c.name.clone())
        .unwrap_or_default();
    let chosen = RwSignal::new(first.clone());
    let list = StoredValue::new(configurations.clone());
    let current =
        move || list.with_value(|list| list.iter().find(|c| c.name == chosen.get()).cloned());
    let temperature_hint = move || match current().and_then(|c| c.temperature) {
        Some(t) => format!("{t} (its default)"),
        None => "the provider's default".to_owned(),
    };
    let tokens_hint = move || match current().and_then(|c| c.max_tokens) {
        Some(n) => format!("{n} (its default)"),
        None => "the provider's default".to_owned(),
    };
    let options = configurations
        .into_iter()
        .map(|c| {
            let label = match &c.reason {
                Some(reason) if !c.available => {
                    format!("{} ({}) — unavailable: {reason}", c.name, c.model)
                }
                _ => format!("{} ({})", c.name, c.model),
            };
            let selected = c.name == first;
            view! { <option value={c.name.clone()} disabled={!c.available} selected=selected>{label}</option> }
        })
        .collect_view();
    view! {
        <div>
            <label for="configuration" class="text-sm font-medium">"Model configuration"</label>
            <select id="configuration" name=crate::field!(crate::api::NrllmToolRun, configuration) class=INPUT
                on:change=move |ev| chosen.set(event_target_value(&ev))>{options}</select>
        </div>
        <div class="grid grid-cols-3 gap-2">
            <div>
                <label for="max_rounds" class="text-sm font-medium">"Max rounds"</label>
                <input id="max_rounds" name=crate::field!(crate::api::NrllmToolRun, max_rounds) inputmode="numeric" value="5" class=INPUT />
            </div>
            <div>
                <label for="temperature" class="text-sm font-medium">"Temperature"</label>
                <input id="temperature" name=crate::field!(crate::api::NrllmToolRun, temperature) inputmode="decimal" value=""
                    placeholder=temperature_hint class=INPUT data-testid="temperature" />
            </div>
            <div>
                <label for="max_tokens" class="text-sm font-medium">"Max tokens"</label>
                <input id="max_tokens" name=crate::field!(crate::api::NrllmToolRun, max_tokens) inputmode="numeric" value=""
                    placeholder=tokens_hint class=INPUT data-testid="max-tokens" />
            </div>
        </div>
        <p class="text-xs text-slate-500">"Empty: the configuration's default. A value you type wins."</p>
        <BudgetFields />
    }
}

/// The run's budget: where it waits for a person to raise a limit or stop it.
#[component]
fn BudgetFields() -> impl IntoView {
    use crate::api::NrllmToolRun as Run;
    use crate::components::INPUT;
    let fields = [
        (
            "limit_requests",
            crate::field!(Run, limit_requests),
            "Model requests",
        ),
        (
            "limit_tool_calls",
            crate::field!(Run, limit_tool_calls),
            "Tool calls",
        ),
        (
            "limit_cost_usd",
            crate::field!(Run, limit_cost_usd),
            "Cost (US $)",
        ),
        (
            "limit_input_tokens",
            crate::field!(Run, limit_input_tokens),
            "Input tokens",
        ),
        (
            "limit_output_tokens",
            crate::field!(Run, limit_output_tokens),
            "Output tokens",
        ),
        (
            "limit_seconds",
            crate::field!(Run, limit_seconds),
            "Running time (s)",
        ),
    ];
    view! {
        <details class="rounded border border-slate-200 p-2 dark:border-slate-700" data-testid="budget-fields">
            <summary class="cursor-pointer text-sm font-medium">"Budget"</summary>
            <div class="mt-2 grid grid-cols-3 gap-2">
                {fields.into_iter().map(|(id, name, label)| view! {
                    <div>
                        <label for=id class="text-sm">{label}</label>
                        <input id=id name=name inputmode="decimal" value="" class=INPUT />
                    </div>
                }).collect_view()}
            </div>
            <p class="mt-1 text-xs text-slate-500">
                "At a limit the run waits for a person to raise it or stop the run. Empty: the configuration's limit (none unless Leptos.toml sets one); none: no limit."
            </p>
        </details>
    }
}
