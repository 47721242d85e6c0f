//! The inbox's desk: one row's panel open in place at a time (fetched as it opens, so that rows
//! compute no previews), the triage keys, and bulk decisions over the rows whose panels were
//! opened on this page. Without JavaScript a row's link opens its panel by loading the inbox
//! again, and each decision is its panel's own buttons.

use leptos::prelude::*;

/// Installs the inbox's behaviour on the page's rows (`[data-inbox-row]`): their toggles
/// (`[data-panel-toggle]`, an `aria-expanded` disclosure of `[data-panel]`), the keys `j`/`k`
/// (next and previous row), `e` (edit the first call's arguments), `r` (the reason), `?` (the
/// keys' list) and Escape (from a field of the open panel back to the panel), the switch that
/// turns single-key shortcuts off, and the bulk bar (`[data-bulk]`).
#[island]
pub fn InboxDesk() -> impl IntoView {
    Effect::new(move |_| {
        #[cfg(feature = "hydrate")]
        desk::install();
    });
}

#[cfg(feature = "hydrate")]
mod desk {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::{JsCast, JsValue};
    use wasm_bindgen_futures::JsFuture;
    use web_sys::{Document, Element, HtmlElement, HtmlInputElement};

    use super::super::guard::browser::{elements, input_value, is_shortcut, keys_enabled};
    use super::super::guard::KEYS_SETTING;
    use crate::error::AppError;
    use crate::page_data::inbox::BulkOutcome;

    const UNREACHABLE: &str =
        "The server could not be reached; check the connection and try again.";

    fn document() -> Option<Document> {
        web_sys::window()?.document()
    }

    fn find(root: &Element, selector: &str) -> Option<Element> {
        root.query_selector(selector).ok().flatten()
    }

    fn rows(document: &Document) -> Vec<Element> {
        document
            .document_element()
            .map(|root| elements(&root, "[data-inbox-row]"))
            .unwrap_or_default()
    }

    fn is_open(row: &Element) -> bool {
        find(row, "[data-panel-toggle]")
            .and_then(|toggle| toggle.get_attribute("aria-expanded"))
            .as_deref()
            == Some("true")
    }

    fn open_row(document: &Document) -> Option<Element> {
        rows(document).into_iter().find(is_open)
    }

    fn focus(element: &Element) {
        if let Ok(element) = element.clone().dyn_into::<HtmlElement>() {
            let _ = element.focus();
        }
    }

    /// A request that asks for JSON (a form body when it posts).
    fn json_request(method: &str, body: Option<&str>) -> web_sys::RequestInit {
        let init = web_sys::RequestInit::new();
        init.set_method(method);
        if let Ok(headers) = web_sys::Headers::new() {
            let _ = headers.set("Accept", "application/json");
            if body.is_some() {
                let _ = headers.set("Content-Type", "application/x-www-form-urlencoded");
            }
            init.set_headers(&headers);
        }
        if let Some(body) = body {
            init.set_body(&JsValue::from_str(body));
        }
        init
    }

    /// The body the server answered, or what it said went wrong (in its own words).
    async fn fetch_text(url: &str, init: &web_sys::RequestInit) -> Result<String, String> {
        let window = web_sys::window().ok_or(UNREACHABLE)?;
        let unreachable = |_| UNREACHABLE.to_owned();
        let response: web_sys::Response = JsFuture::from(window.fetch_with_str_and_init(url, init))
            .await
            .map_err(unreachable)?
            .dyn_into()
            .map_err(unreachable)?;
        let text = JsFuture::from(response.text().map_err(unreachable)?)
            .await
            .map_err(unreachable)?
            .as_string()
            .unwrap_or_default();
        if response.ok() {
            return Ok(text);
        }
        Err(serde_json::from_str::<AppError>(&text)
            .map(|err| err.to_string())
            .unwrap_or_else(|_| format!("The server answered {}.", response.status())))
    }

    fn close(row: &Element) {
        if let Some(toggle) = find(row, "[data-panel-toggle]") {
            let _ = toggle.set_attribute("aria-expanded", "false");
        }
        if let Some(panel) = find(row, "[data-panel]") {
            panel.set_text_content(None);
        }
    }

    /// Opens `row`'s panel (closing any other): fetched now, with its previews and digest.
    fn open(row: Element) {
        let Some(document) = document() else { return };
        for other in rows(&document) {
            if other != row && is_open(&other) {
                close(&other);
            }
        }
        let (Some(toggle), Some(panel), Some(id)) = (
            find(&row, "[data-panel-toggle]"),
            find(&row, "[data-panel]"),
            row.get_attribute("data-run-id"),
        ) else {
            return;
        };
        let _ = toggle.set_attribute("aria-expanded", "true");
        panel.set_text_content(Some("Opening…"));
        // A reload (or a link copied now) opens the same panel.
        if let (Some(href), Some(history)) = (
            toggle.get_attribute("href"),
            web_sys::window().and_then(|w| w.history().ok()),
        ) {
            let _ = history.replace_state_with_url(&JsValue::NULL, "", Some(&href));
        }
        row.scroll_into_view_with_bool(true);
        // The inbox's filters go with it: a decision in the panel goes on within them.
        let filters = web_sys::window()
            .and_then(|w| w.location().search().ok())
            .unwrap_or_default();
        let url = format!(
            "/api/nrllm_approval_panel?run_id={}&inbox={}",
            encode(&id),
            encode(filters.trim_start_matches('?'))
        );
        leptos::task::spawn_local(async move {
            let answer = fetch_text(&url, &json_request("GET", None)).await;
            if !is_open(&row) {
                return;
            }
            let html = answer.and_then(|text| {
                serde_json::from_str::<String>(&text)
                    .map_err(|_| "the server's answer could not be read.".to_owned())
            });
            match html {
                Ok(html) => {
                    crate::components::show_server_fragment(&panel, &html);
                    seen(&row);
                    if let Some(heading) = find(&panel, "[data-panel-heading]") {
                        focus(&heading);
                    }
                }
                Err(message) => panel.set_text_content(Some(&format!(
                    "This run's panel could not be opened: {message}"
                ))),
            }
        });
    }

    /// `row`'s panel was seen: its digest is known, so it may be picked for a bulk decision.
    fn seen(row: &Element) {
        let digest = find(
            row,
            "[data-panel] form[data-approval-form] input[name=digest]",
        )
        .and_then(|el| el.dyn_into::<HtmlInputElement>().ok())
        .map(|input| input.value());
        let (Some(digest), Some(pick)) = (digest, find(row, "input[data-pick]")) else {
            return;
        };
        let _ = pick.set_attribute("data-digest", &digest);
        let _ = pick.remove_attribute("disabled");
    }

    /// Opens the row `by` rows from the open one (the first when none is open).
    fn step(document: &Document, by: isize) -> bool {
        let rows = rows(document);
        if rows.is_empty() {
            return false;
        }
        let current = rows.iter().position(is_open);
        let next = match current {
            None => 0,
            Some(at) => at.saturating_add_signed(by).min(rows.len() - 1),
        };
        if Some(next) != current {
            open(rows[next].clone());
        }
        true
    }

    /// Focuses `selector` in the open panel, unfolding what folds it.
    fn focus_in_open(document: &Document, selector: &str) -> bool {
        let Some(row) = open_row(document) else {
            return false;
        };
        let Some(target) = find(&row, selector) else {
            return false;
        };
        let mut node = target.parent_element();
        while let Some(element) = node {
            if element.tag_name() == "DETAILS" {
                let _ = element.set_attribute("open", "");
            }
            if element == row {
                break;
            }
            node = element.parent_element();
        }
        focus(&target);
        true
    }

    fn toggle_help(document: &Document) -> bool {
        let Some(help) = document.get_element_by_id("key-help") else {
            return false;
        };
        if help.has_attribute("open") {
            let _ = help.remove_attribute("open");
        } else {
            let _ = help.set_attribute("open", "");
            if let Some(summary) = find(&help, "summary") {
                focus(&summary);
            }
        }
        true
    }

    /// Escape in a field of the open panel goes back to the panel (where the keys work again).
    fn leave_field(document: &Document, event: &web_sys::KeyboardEvent) -> bool {
        let Some(row) = open_row(document) else {
            return false;
        };
        let in_panel = event
            .target()
            .and_then(|t| t.dyn_into::<Element>().ok())
            .filter(|el| matches!(el.tag_name().as_str(), "INPUT" | "TEXTAREA" | "SELECT"))
            .is_some_and(|el| row.contains(Some(&el)));
        match (in_panel, find(&row, "[data-panel-heading]")) {
            (true, Some(heading)) => {
                focus(&heading);
                true
            }
            _ => false,
        }
    }

    fn on_key(event: web_sys::KeyboardEvent) {
        let Some(document) = document() else { return };
        if event.key() == "Escape" && leave_field(&document, &event) {
            event.prevent_default();
            return;
        }
        if !is_shortcut(&event) {
            return;
        }
        let handled = match event.key().as_str() {
            "j" => step(&document, 1),
            "k" => step(&document, -1),
            "e" => focus_in_open(&document, "textarea[name$='[arguments]']"),
            "r" => focus_in_open(&document, "input[name=reason]"),
            "?" => toggle_help(&document),
            _ => false,
        };
        if handled {
            event.prevent_default();
        }
    }

    fn on_click(event: web_sys::MouseEvent) {
        let Some(target) = event.target().and_then(|t| t.dyn_into::<Element>().ok()) else {
            return;
        };
        if let Some(toggle) = target.closest("[data-panel-toggle]").ok().flatten() {
            // With a modifier the link opens the panel as a page (a new tab, a window).
            if event.button() != 0
                || event.ctrl_key()
                || event.meta_key()
                || event.shift_key()
                || event.alt_key()
            {
                return;
            }
            event.prevent_default();
            if let Some(row) = toggle.closest("[data-inbox-row]").ok().flatten() {
                match is_open(&row) {
                    true => close(&row),
                    false => open(row),
                }
            }
        } else if let Some(button) = target.closest("[data-bulk-decision]").ok().flatten() {
            event.prevent_default();
            bulk(
                &button
                    .get_attribute("data-bulk-decision")
                    .unwrap_or_default(),
            );
        }
    }

    fn encode(text: &str) -> String {
        js_sys::encode_uri_component(text).into()
    }

    /// Decides every picked row as `decision` (`approve_all` or `deny_all`), each run with the
    /// digest its panel showed, and lists what happened to each.
    fn bulk(decision: &str) {
        let Some(document) = document() else { return };
        let Some(bar) = document.query_selector("[data-bulk]").ok().flatten() else {
            return;
        };
        let Some(results) = find(&bar, "[data-bulk-results]") else {
            return;
        };
        let picks: Vec<(String, String)> = rows(&document)
            .iter()
            .filter_map(|row| {
                let pick = find(row, "input[data-pick]")?
                    .dyn_into::<HtmlInputElement>()
                    .ok()?;
                if !pick.checked() || pick.disabled() {
                    return None;
                }
                Some((
                    row.get_attribute("data-run-id")?,
                    pick.get_attribute("data-digest")?,
                ))
            })
            .collect();
        if picks.is_empty() {
            results.set_text_content(Some(
                "Tick the runs to decide first: a run can be ticked once its panel was opened on this page.",
            ));
            return;
        }
        let mut body = format!(
            "decision={}&csrf={}&reason={}",
            encode(decision),
            encode(&input_value(&bar, "input[name=csrf]")),
            encode(&input_value(&bar, "#bulk-reason")),
        );
        for (index, (id, digest)) in picks.iter().enumerate() {
            body.push_str(&format!(
                "&runs[{index}][run_id]={}&runs[{index}][digest]={}",
                encode(id),
                encode(digest)
            ));
        }
        results.set_text_content(Some("Deciding…"));
        leptos::task::spawn_local(async move {
            let answer = fetch_text("/api/nrllm_bulk_decide", &json_request("POST", Some(&body)))
                .await
                .and_then(|text| {
                    serde_json::from_str::<BulkOutcome>(&text)
                        .map_err(|_| "the server's answer could not be read.".to_owned())
                });
            match answer {
                Ok(outcome) => show_outcome(&document, &results, outcome),
                Err(message) => results
                    .set_text_content(Some(&format!("The bulk decision was not made: {message}"))),
            }
        });
    }

    /// Lists what the bulk decision did to each run (as text); decided runs leave the list.
    fn show_outcome(document: &Document, results: &Element, outcome: BulkOutcome) {
        results.set_text_content(None);
        for result in outcome.results {
            let row = document.get_element_by_id(&format!("row-{}", result.run_id));
            let prompt = row
                .as_ref()
                .and_then(|row| find(row, "[data-panel-toggle]"))
                .and_then(|toggle| toggle.text_content())
                .unwrap_or_else(|| result.run_id.clone());
            let Ok(item) = document.create_element("li") else {
                continue;
            };
            let verdict = match result.decided {
                true => "Decided",
                false => "Refused",
            };
            item.set_text_content(Some(&format!("{verdict}: {prompt} — {}", result.message)));
            let _ = item.set_attribute("data-testid", "bulk-result");
            let _ = item.set_attribute("data-decided", &result.decided.to_string());
            let _ = results.append_child(&item);
            if let (true, Some(row)) = (result.decided, row) {
                row.remove();
            }
        }
        focus(results);
    }

    /// The switch that turns single-key shortcuts off in this browser (WCAG 2.1.4).
    fn keys_switch(document: &Document) {
        let Some(input) = document
            .get_element_by_id("keys-on")
            .and_then(|el| el.dyn_into::<HtmlInputElement>().ok())
        else {
            return;
        };
        input.set_checked(keys_enabled());
        let changed = Closure::<dyn FnMut(web_sys::Event)>::new(|event: web_sys::Event| {
            let on = event
                .target()
                .and_then(|t| t.dyn_into::<HtmlInputElement>().ok())
                .is_some_and(|input| input.checked());
            if let Some(storage) = web_sys::window().and_then(|w| w.local_storage().ok().flatten())
            {
                let _ = match on {
                    true => storage.remove_item(KEYS_SETTING),
                    false => storage.set_item(KEYS_SETTING, "off"),
                };
            }
        });
        let _ = input.add_event_listener_with_callback("change", changed.as_ref().unchecked_ref());
        changed.forget();
    }

    pub fn install() {
        let Some(document) = document() else { return };
        let Some(root) = document.document_element() else {
            return;
        };
        // What needs JavaScript shows only with it.
        for element in elements(&root, "[data-needs-script]") {
            let _ = element.remove_attribute("hidden");
        }
        keys_switch(&document);
        if let Some(row) = open_row(&document) {
            seen(&row);
            if let Some(heading) = find(&row, "[data-panel-heading]") {
                focus(&heading);
            }
        }
        let click = Closure::<dyn FnMut(web_sys::MouseEvent)>::new(on_click);
        let _ = document.add_event_listener_with_callback("click", click.as_ref().unchecked_ref());
        click.forget();
        let key = Closure::<dyn FnMut(web_sys::KeyboardEvent)>::new(on_key);
        let _ = document.add_event_listener_with_callback("keydown", key.as_ref().unchecked_ref());
        key.forget();
    }
}
