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
