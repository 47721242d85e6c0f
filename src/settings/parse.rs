//! Values as the settings write them: durations, web addresses.

/// An approval timeout: a duration such as `24h`, `90m` or `2s` (at least a second, at most a
/// year), or `none` (a turn waits until decided). In milliseconds.
pub fn parse_timeout(value: &str) -> Result<Option<u64>, String> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    humantime::parse_duration(value)
        .ok()
        .filter(|d| (1..=365 * 24 * 3600).contains(&d.as_secs()))
        .map(|d| Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
        .ok_or_else(|| {
            format!("`{value}` is not a duration such as \"24h\", \"90m\" or \"2s\" (1 s to a year), or \"none\"")
        })
}

/// A webhook address: `http://` or `https://` with a host.
pub(super) fn web_url(value: &str) -> Result<String, String> {
    let rest = value
        .strip_prefix("https://")
        .or_else(|| value.strip_prefix("http://"));
    match rest {
        Some(rest)
            if !rest.is_empty()
                && !rest.starts_with('/')
                && !value.contains(char::is_whitespace) =>
        {
            Ok(value.to_owned())
        }
        _ => Err("a webhook URL starts with http:// or https:// and names a host".to_owned()),
    }
}
