//! The approval forms' guard: it asks before a button drops text the operator typed, and gives
//! the panel its single-key shortcuts.

use leptos::prelude::*;

/// Guards the page's approval forms (`form[data-approval-form]`): before a button drops text the
/// operator typed — a reason for a call that is approved, edits of a call that is denied — it
/// asks, and says which; "Approve all" with edited arguments says that it runs the edits. With
/// `keys`, `a` approves all and `d` denies all (never while focus is in a text field).
#[island]
pub fn ApprovalGuard(keys: bool) -> impl IntoView {
    Effect::new(move |_| {
        #[cfg(feature = "hydrate")]
        browser::install(keys);
        #[cfg(not(feature = "hydrate"))]
        let _ = keys;
    });
}

/// The browser's storage key that turns the single-key shortcuts off (`off`).
#[cfg(feature = "hydrate")]
pub(crate) const KEYS_SETTING: &str = "nrllm.keys";

#[cfg(feature = "hydrate")]
pub(crate) mod browser {
    //! The browser side of [`super::ApprovalGuard`]. The server applies the same rules whatever
    //! the browser does; this only asks first, so that nothing the operator typed is dropped
    //! without them knowing.

    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    use web_sys::{Element, HtmlElement, HtmlFormElement, HtmlInputElement, HtmlTextAreaElement};

    pub(crate) fn elements(root: &Element, selector: &str) -> Vec<Element> {
        let Ok(list) = root.query_selector_all(selector) else {
            return Vec::new();
        };
        (0..list.length())
            .filter_map(|i| list.item(i))
            .filter_map(|node| node.dyn_into::<Element>().ok())
            .collect()
    }

    pub(crate) fn input_value(root: &Element, selector: &str) -> String {
        root.query_selector(selector)
            .ok()
            .flatten()
            .and_then(|el| el.dyn_into::<HtmlInputElement>().ok())
            .map(|input| input.value())
            .unwrap_or_default()
    }

    /// What pressing `action` would do with what the form holds: the confirmation to ask, if any.
    fn question(form: &Element, action: &str) -> (Option<String>, bool) {
        let mut edited_and_run = Vec::new();
        let mut dropped = Vec::new();
        let mut any_denied = false;
        for call in elements(form, "[data-testid=pending-call]") {
            let tool = call.get_attribute("data-tool").unwrap_or_default();
            let edited = call
                .query_selector("textarea[name$='[arguments]']")
                .ok()
                .flatten()
                .and_then(|el| el.dyn_into::<HtmlTextAreaElement>().ok())
                .is_some_and(|area| {
                    area.value().trim() != area.default_value().unwrap_or_default().trim()
                });
            let reason_typed = !input_value(&call, "input[name$='[reason]']")
                .trim()
                .is_empty();
            let result_typed = call
                .query_selector("textarea[name$='[result]']")
                .ok()
                .flatten()
                .and_then(|el| el.dyn_into::<HtmlTextAreaElement>().ok())
                .is_some_and(|area| !area.value().trim().is_empty());
            let choice = input_value(&call, "input[type=radio]:checked");
            if action == "per_call" && (choice == "respond" || choice == "failed") {
                // The call is answered without running; its text fields are what it uses.
                continue;
            }
            let denied = match action {
                "deny_all" => true,
                "approve_all" => false,
                _ => choice == "deny",
            };
            any_denied |= denied;
            if denied && edited {
                dropped.push(format!("your edits of {tool}"));
            }
            if !denied && reason_typed {
                dropped.push(format!("the reason you typed for {tool}"));
            }
            if result_typed {
                dropped.push(format!("the answer you wrote for {tool}"));
            }
            if !denied && edited {
                edited_and_run.push(tool);
            }
        }
        let shared_reason = !input_value(form, "input[name=reason]").trim().is_empty();
        if shared_reason && !any_denied {
            dropped.push("the reason you typed for the whole turn".to_owned());
        }
        let mut lines = Vec::new();
        if action == "approve_all" && !edited_and_run.is_empty() {
            lines.push(format!(
                "Approve all runs your edited arguments for {}.",
                edited_and_run.join(", ")
            ));
        }
        if !dropped.is_empty() {
            lines.push(format!("This drops {}.", dropped.join(" and ")));
        }
        if lines.is_empty() {
            (None, false)
        } else {
            lines.push("Go on?".to_owned());
            (Some(lines.join("\n")), !dropped.is_empty())
        }
    }

    fn on_submit(event: web_sys::SubmitEvent) {
        // One listener for the whole page: panels opened later (the inbox's) are guarded too.
        let Some(form) = event
            .target()
            .and_then(|t| t.dyn_into::<HtmlFormElement>().ok())
            .filter(|form| form.has_attribute("data-approval-form"))
        else {
            return;
        };
        let action = event
            .submitter()
            .and_then(|b| b.get_attribute("value"))
            .unwrap_or_default();
        let (Some(message), drops) = question(&form, &action) else {
            return;
        };
        let confirmed = web_sys::window()
            .and_then(|w| w.confirm_with_message(&message).ok())
            .unwrap_or(false);
        if !confirmed {
            event.prevent_default();
            return;
        }
        if drops {
            if let Some(flag) = form
                .query_selector("input[name=acknowledge_discard]")
                .ok()
                .flatten()
                .and_then(|el| el.dyn_into::<HtmlInputElement>().ok())
            {
                flag.set_value("1");
            }
        }
    }

    /// Whether the single-key shortcuts are on (they are unless turned off in this browser).
    pub(crate) fn keys_enabled() -> bool {
        let setting = web_sys::window()
            .and_then(|w| w.local_storage().ok().flatten())
            .and_then(|storage| storage.get_item(super::KEYS_SETTING).ok().flatten());
        setting.as_deref() != Some("off")
    }

    /// Whether a key pressed on `event`'s target is typed text (a field, a select, an editable
    /// element) or a shortcut, with no modifier held.
    pub(crate) fn is_shortcut(event: &web_sys::KeyboardEvent) -> bool {
        if event.ctrl_key() || event.meta_key() || event.alt_key() || !keys_enabled() {
            return false;
        }
        let typing = event
            .target()
            .and_then(|t| t.dyn_into::<Element>().ok())
            .is_some_and(|el| {
                let kind = el.get_attribute("type").unwrap_or_default();
                let text_input = el.tag_name() == "INPUT"
                    && !matches!(kind.as_str(), "checkbox" | "radio" | "button" | "submit");
                text_input
                    || matches!(el.tag_name().as_str(), "TEXTAREA" | "SELECT")
                    || el.closest("[contenteditable]").ok().flatten().is_some()
            });
        !typing
    }

    fn on_key(event: web_sys::KeyboardEvent) {
        if !is_shortcut(&event) {
            return;
        }
        let button = match event.key().as_str() {
            "a" => "approve-all",
            "d" => "deny-all",
            _ => return,
        };
        if let Some(button) = web_sys::window()
            .and_then(|w| w.document())
            .and_then(|d| d.get_element_by_id(button))
            .and_then(|el| el.dyn_into::<HtmlElement>().ok())
        {
            event.prevent_default();
            button.click();
        }
    }

    pub fn install(keys: bool) {
        let Some(document) = web_sys::window().and_then(|w| w.document()) else {
            return;
        };
        let submit = Closure::<dyn FnMut(web_sys::SubmitEvent)>::new(on_submit);
        let _ =
            document.add_event_listener_with_callback("submit", submit.as_ref().unchecked_ref());
        submit.forget();
        if keys {
            let key = Closure::<dyn FnMut(web_sys::KeyboardEvent)>::new(on_key);
            let _ =
                document.add_event_listener_with_callback("keydown", key.as_ref().unchecked_ref());
            key.forget();
        }
    }
}
