//! Small pieces every page uses: the status badge, the error banner that shows what a form post
//! left in the URL, field errors, the page title, and the one way this app renders a `<textarea>`.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::error::AppError;
use crate::page_data::{status_classes, RunStatus};

/// A status as coloured text (the words carry the meaning; the colour only helps).
#[component]
pub fn StatusBadge(status: RunStatus) -> impl IntoView {
    let classes = format!(
        "inline-flex items-center gap-1 rounded-full px-2 py-0.5 text-xs font-medium ring-1 ring-inset {}",
        status_classes(status)
    );
    view! { <span class=classes data-testid="status">{status.label()}</span> }
}

/// The error a form post left in this page's URL (`__err`, signed by the server in `__sig`),
/// if any.
pub fn url_error() -> Option<AppError> {
    let query = use_query_map();
    let query = query.read_untracked();
    let encoded = query.get("__err")?;
    // Only errors this server signed: a link cannot put words in the app's mouth.
    #[cfg(feature = "ssr")]
    {
        let key = crate::server::request::state().ok()?.banner_key;
        if !crate::server::auth::banner_signed(&key, &encoded, query.get("__sig").as_deref()) {
            return None;
        }
    }
    AppError::from_url_query(&encoded)
}

/// A banner with the error of the last form post, if it was not about one field.
#[component]
pub fn ErrorBanner(error: Option<AppError>) -> impl IntoView {
    error.map(|error| {
        view! {
            <div role="alert" data-testid="error-banner"
                class="mb-4 rounded-md border border-rose-300 bg-rose-50 px-4 py-3 text-rose-900 dark:border-rose-800 dark:bg-rose-950 dark:text-rose-100">
                {error.to_string()}
            </div>
        }
    })
}

/// The message for `field`, if the last form post's error is about it.
#[component]
pub fn FieldError(error: Option<AppError>, field: &'static str) -> impl IntoView {
    error.and_then(|error| match error {
        AppError::Invalid { field: f, message } if f == field => Some(view! {
            <p class="mt-1 text-sm text-rose-700 dark:text-rose-300" role="alert" data-testid=format!("error-{field}")>
                {message}
            </p>
        }),
        _ => None,
    })
}

/// A card with a heading.
#[component]
pub fn Card(title: &'static str, children: Children) -> impl IntoView {
    view! {
        <section class="rounded-lg border border-slate-200 bg-white p-4 shadow-sm dark:border-slate-800 dark:bg-slate-900">
            <h2 class="mb-3 font-semibold">{title}</h2>
            {children()}
        </section>
    }
}

/// Milliseconds as `0.4 s` or `12 ms`.
pub fn duration_text(ms: i64) -> String {
    if ms >= 1000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

/// Classes shared by text inputs.
pub const INPUT: &str = "mt-1 block w-full rounded-md border border-slate-300 bg-white px-3 py-2 text-sm shadow-sm focus:border-indigo-500 focus:outline-none focus-visible:ring-2 focus-visible:ring-indigo-400 dark:border-slate-700 dark:bg-slate-950";
/// Classes of the main action button.
pub const BUTTON_PRIMARY: &str = "rounded-md bg-indigo-600 px-3 py-1.5 text-sm font-medium text-white hover:bg-indigo-500 focus:outline-none focus-visible:ring-2 focus-visible:ring-indigo-400 focus-visible:ring-offset-2";
/// Classes of an approving button.
pub const BUTTON_APPROVE: &str = "rounded-md bg-emerald-700 px-3 py-1.5 text-sm font-medium text-white hover:bg-emerald-600 focus:outline-none focus-visible:ring-2 focus-visible:ring-emerald-400 focus-visible:ring-offset-2";
/// Classes of a denying button.
pub const BUTTON_DENY: &str = "rounded-md bg-rose-600 px-3 py-1.5 text-sm font-medium text-white hover:bg-rose-500 focus:outline-none focus-visible:ring-2 focus-visible:ring-rose-400 focus-visible:ring-offset-2";
/// Classes of a secondary button.
pub const BUTTON_SECONDARY: &str = "rounded-md border border-slate-300 px-3 py-1.5 text-sm hover:bg-slate-100 focus:outline-none focus-visible:ring-2 focus-visible:ring-indigo-400 dark:border-slate-700 dark:hover:bg-slate-800";

/// The text of a `<textarea>` or `<title>` as HTML: `&`, `<` and `>` escaped. Both elements hold
/// "escapable raw text": the parser decodes entities in them, but the first `</textarea>` or
/// `</title>` ends them whatever came before. Leptos writes a textarea's children and the
/// `<Title>` text into the page as they are, so text from a run must pass through here first.
pub fn raw_text_html(text: &str) -> String {
    let escaped = html_escape::encode_text(text);
    // The parser drops one newline right after `<textarea>`; a value that starts with one keeps
    // it only if another comes first.
    if text.starts_with('\n') || text.starts_with('\r') {
        format!("\n{escaped}")
    } else {
        escaped.into_owned()
    }
}

/// A multi-line text field whose initial text is `value`, shown exactly as given: the text is
/// escaped and written as the element's inner HTML (see [`raw_text_html`]), never as a raw child.
/// Every textarea of the app is this component.
#[component]
pub fn TextArea(
    /// The field's id (its label's `for`).
    #[prop(into)]
    id: String,
    /// The form field's name.
    #[prop(into)]
    name: String,
    /// The initial text.
    #[prop(into, optional)]
    value: String,
    #[prop(optional)] rows: Option<u32>,
    #[prop(into, optional)] class: String,
    #[prop(into, optional)] placeholder: Option<String>,
    #[prop(optional)] required: bool,
    /// The longest text the browser lets the operator type, in characters.
    #[prop(optional)]
    maxlength: Option<usize>,
) -> impl IntoView {
    view! {
        <textarea id=id name=name rows=rows.unwrap_or(3) class=class placeholder=placeholder
            required=required maxlength=maxlength inner_html=raw_text_html(&value)></textarea>
    }
}

/// The document title for a page about `subject` (text from a run, escaped for `<title>`).
pub fn page_title(subject: &str) -> String {
    const MAX_CHARS: usize = 60;
    let mut short: String = subject.chars().take(MAX_CHARS).collect();
    if subject.chars().count() > MAX_CHARS {
        short.push('…');
    }
    raw_text_html(&format!("{short} · nrllm playground"))
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    const PAYLOAD: &str =
        "</textarea><img src=x onerror=alert(1)></title><script>alert(1)</script>";

    #[test]
    fn a_textarea_shows_its_value_as_text_and_cannot_be_closed_by_it() {
        let html = view! { <TextArea id="args" name="args" value=PAYLOAD /> }.to_html();
        assert_eq!(html.matches("</textarea>").count(), 1, "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<script"), "{html}");
        assert!(
            html.contains("&lt;/textarea&gt;&lt;img src=x onerror=alert(1)&gt;"),
            "{html}"
        );
    }

    #[test]
    fn raw_text_keeps_a_leading_newline_and_escapes_markup() {
        assert_eq!(raw_text_html("a < b & c > d"), "a &lt; b &amp; c &gt; d");
        assert_eq!(raw_text_html("\nfirst line"), "\n\nfirst line");
        assert_eq!(raw_text_html(""), "");
    }

    #[test]
    fn a_page_title_is_escaped_and_short() {
        let title = page_title(PAYLOAD);
        assert!(!title.contains('<'), "{title}");
        assert!(title.starts_with("&lt;/textarea&gt;"), "{title}");
        assert!(title.ends_with("… · nrllm playground"), "{title}");
        assert_eq!(page_title("Runs"), "Runs · nrllm playground");
    }
}

/// Shows in `element` a fragment the server rendered for it (the inbox's panel, from
/// `nrllm_approval_panel`): Leptos escaped every run-supplied string in it on the server, as in
/// any page, so it goes in as HTML. The one place a script writes markup into a page.
#[cfg(feature = "hydrate")]
pub fn show_server_fragment(element: &web_sys::Element, fragment: &str) {
    element.set_inner_html(fragment);
}

/// The operators a condition can use, with their words.
const OPS: [(&str, &str); 4] = [
    ("ends_with", "ends with"),
    ("starts_with", "starts with"),
    ("equals", "is"),
    ("contains", "contains"),
];

/// `<option>`s of the condition operators.
pub fn op_options() -> impl IntoView {
    OPS.iter()
        .map(|(value, words)| view! { <option value=*value>{*words}</option> })
        .collect_view()
}
