//! Forms tied to their server functions when the code compiles: a form's `action` is its server
//! function's own path, and every field name is checked against the function's arguments (a
//! renamed or removed argument is a compile error here, not a form that silently posts nothing).
//! The forms stay plain HTML forms, so they work with JavaScript off.

/// The hidden field with this page's CSRF token, which every form that posts carries (checked by
/// the server's auth middleware against the `nrllm_csrf` cookie).
#[leptos::component]
pub fn CsrfField() -> impl leptos::IntoView {
    use leptos::prelude::*;
    #[cfg(feature = "ssr")]
    let token = crate::server::request::caller()
        .map(|c| c.csrf)
        .unwrap_or_default();
    #[cfg(not(feature = "ssr"))]
    let token = String::new();
    view! { <input type="hidden" name="csrf" value=token /> }
}

/// The path a form posts to: the server function's own endpoint.
pub fn action<F: leptos::server_fn::ServerFn>() -> &'static str {
    F::PATH
}

/// The name of field `$field` of the form for `$args` (a server function's arguments type, or a
/// type nested in them), checked when this compiles.
#[macro_export]
macro_rules! field {
    ($args:ty, $field:ident) => {{
        #[allow(unused)]
        fn check(args: &$args) {
            let _ = &args.$field;
        }
        stringify!($field)
    }};
}

/// `calls[2][reason]`: the name of field `field` of the `index`-th entry of a list argument.
pub fn list_field(list: &str, index: usize, field: &str) -> String {
    format!("{list}[{index}][{field}]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NrllmToolResume, NrllmToolRun, SubmittedCall};

    #[test]
    fn forms_post_to_their_server_functions_with_their_argument_names() {
        assert_eq!(action::<NrllmToolRun>(), "/api/nrllm_tool_run");
        assert_eq!(action::<NrllmToolResume>(), "/api/nrllm_tool_resume");
        assert_eq!(field!(NrllmToolRun, system_prompt), "system_prompt");
        assert_eq!(
            list_field(
                field!(NrllmToolResume, calls),
                2,
                field!(SubmittedCall, reason)
            ),
            "calls[2][reason]"
        );
    }
}
