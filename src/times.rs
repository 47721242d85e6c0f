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
}
