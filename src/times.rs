//! Moments on the pages: the server writes them in UTC (what a page shows without JavaScript);
//! in the browser, [`LocalTimes`] shows each in the browser's time zone and relative to now
//! ("3 h ago", "in 20 min"), with the UTC time on hover.

use leptos::prelude::*;

/// A moment, `ms` milliseconds since the epoch, written `utc` (`2026-11-30 06:41:29 UTC`).
#[component]
pub fn Moment(ms: i64, utc: String) -> impl IntoView {
    // `2026-11-30 06:41:29 UTC` → `2026-11-30T06:41:29Z`, the machine-readable form.
    let datetime = utc.trim_end_matches(" UTC").replacen(' ', "T", 1) + "Z";
    let title = utc.clone();
    view! {
        <time datetime=datetime title=title data-local-time=ms.to_string()>{utc}</time>
    }
}

/// `text` with the moment written in it (`utc`, at `ms`) shown as a [`Moment`]: "Decide by
/// <time>…</time> (2 h left)". Text without it stays as it is.
#[component]
pub fn WithMoment(text: String, ms: i64, utc: String) -> impl IntoView {
    match text.split_once(&utc) {
        Some((before, after)) => view! {
            {before.to_owned()}
            <Moment ms utc=utc.clone() />
            {after.to_owned()}
        }
        .into_any(),
        None => text.into_any(),
    }
}

/// How long ago `ms` was from `now_ms` (or how long until it), in words.
pub fn relative(ms: i64, now_ms: i64) -> String {
    let seconds = (now_ms - ms) / 1000;
    let (amount, future) = (seconds.unsigned_abs(), seconds < 0);
    let words = match amount {
        0..=44 => return "just now".to_owned(),
        45..=3_599 => format!("{} min", (amount + 30) / 60),
        3_600..=86_399 => format!("{} h", (amount + 1_800) / 3_600),
        _ => format!("{} d", (amount + 43_200) / 86_400),
    };
    match future {
        true => format!("in {words}"),
        false => format!("{words} ago"),
    }
}

/// Shows every moment of the page ([`Moment`]) in the browser's time zone and relative to now.
#[island]
pub fn LocalTimes() -> impl IntoView {
    Effect::new(move |_| {
        #[cfg(feature = "hydrate")]
        local::show_all();
    });
}

#[cfg(feature = "hydrate")]
mod local {
    use wasm_bindgen::JsCast;
    use web_sys::Element;

    pub(super) fn show_all() {
        let Some(document) = web_sys::window().and_then(|w| w.document()) else {
            return;
        };
        let Ok(list) = document.query_selector_all("time[data-local-time]") else {
            return;
        };
        let now = js_sys::Date::now() as i64;
        for node in (0..list.length()).filter_map(|i| list.item(i)) {
            let Ok(element) = node.dyn_into::<Element>() else {
                continue;
            };
            let Some(ms) = element
                .get_attribute("data-local-time")
                .and_then(|v| v.parse::<i64>().ok())
            else {
                continue;
            };
            let date = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(ms as f64));
            let local: String = date
                .to_locale_string("default", &wasm_bindgen::JsValue::UNDEFINED)
                .into();
            element.set_text_content(Some(&format!("{local} ({})", super::relative(ms, now))));
        }
    }
}

/// By when the turn must be decided (the moment in the browser's time zone, with JavaScript).
pub(crate) fn deadline_line(run: &crate::page_data::RunView) -> Option<impl IntoView> {
    let text = run.summary.deadline.clone()?;
    let moment = match run.summary.deadline_at.clone() {
        Some((ms, utc)) => view! { <WithMoment text ms utc /> }.into_any(),
        None => text.into_any(),
    };
    Some(view! { <p class="mt-1 text-sm" data-testid="deadline">{moment}</p> })
}

#[cfg(test)]
mod tests {
    use super::relative;

    #[test]
    fn moments_read_as_how_long_ago_or_until() {
        let now = 1_000_000_000;
        assert_eq!(relative(now - 10_000, now), "just now");
        assert_eq!(relative(now - 5 * 60_000, now), "5 min ago");
        assert_eq!(relative(now - 3 * 3_600_000, now), "3 h ago");
        assert_eq!(relative(now - 2 * 86_400_000, now), "2 d ago");
        assert_eq!(relative(now + 20 * 60_000, now), "in 20 min");
    }

    #[cfg(feature = "ssr")]
    #[test]
    fn a_moment_in_a_sentence_becomes_a_time_element_and_the_rest_stays_text() {
        use leptos::prelude::*;
        let utc = "2026-12-04 07:00:00 UTC".to_owned();
        let text = format!("Decide by {utc} (2 h left) <b>");
        let html =
            view! { <super::WithMoment text ms=1_796_367_600_000 utc=utc.clone() /> }.to_html();
        assert!(
            html.starts_with("Decide by <time datetime=\"2026-12-04T07:00:00Z\""),
            "{html}"
        );
        assert!(html.contains("data-local-time=\"1796367600000\""), "{html}");
        assert!(html.contains("</time> (2 h left) &lt;b&gt;"), "{html}");
        let plain =
            view! { <super::WithMoment text="no moment here".to_owned() ms=0 utc=utc /> }.to_html();
        assert_eq!(plain, "no moment here");
    }
}
