//! JSON shown to operators: pretty-printed, as given when it is not JSON.

pub(super) fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// Pretty JSON for a call's raw argument text (as given if it is not JSON).
pub fn pretty_arguments(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .map(|value| pretty(&value))
        .unwrap_or_else(|_| arguments.to_owned())
}

/// A detail tab of a step.
pub(super) fn tab(key: &str, label: &str, text: String) -> crate::page_data::StepTab {
    crate::page_data::StepTab {
        key: key.to_owned(),
        label: label.to_owned(),
        text,
    }
}
