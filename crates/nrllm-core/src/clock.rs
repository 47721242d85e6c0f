//! Time, for everything that records when: the [`Clock`] the run service reads (a test can fix
//! it), the system clock's milliseconds, and the one way times are written for people.

use std::time::Duration;

use async_trait::async_trait;

/// Where the run service gets the time from, and how it waits.
#[async_trait]
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// Waits `duration`: the only way the core waits (for a preview's time limit).
    async fn sleep(&self, duration: Duration);
}

/// The system clock, waiting with tokio's timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

#[async_trait]
impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        now_ms()
    }

    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}

/// Milliseconds since the Unix epoch, now, by the system clock.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

/// `2026-11-30 06:41:29 UTC` for a Unix-millisecond time (the epoch for one out of range).
pub fn format_utc(ms: i64) -> String {
    let format =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
        .format(&format)
        .unwrap_or_default()
}

/// The first millisecond of day `text` (`2026-12-04`) in UTC, if it is a date.
pub fn parse_day(text: &str) -> Option<i64> {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let date = time::Date::parse(text.trim(), &format).ok()?;
    Some(date.midnight().assume_utc().unix_timestamp() * 1000)
}

const DAY_MS: i64 = 86_400_000;

/// The UTC day of a Unix-millisecond time, counted from the epoch.
pub fn utc_day(ms: i64) -> i64 {
    ms.div_euclid(DAY_MS)
}

/// `2026-12-04` for a day counted from the epoch.
pub fn show_day(day: i64) -> String {
    format_utc(day.saturating_mul(DAY_MS))
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times_are_formatted_like_a_calendar() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_utc(1_796_020_889_000), "2026-11-30 06:41:29 UTC");
        assert_eq!(format_utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(format_utc(-1), "1969-12-31 23:59:59 UTC");
    }

    #[test]
    fn a_day_reads_as_its_first_millisecond_in_utc() {
        assert_eq!(
            parse_day("2026-11-30"),
            Some(1_796_020_889_000 - 24_089_000)
        );
        assert_eq!(parse_day(" 2000-02-29 "), Some(951_782_400_000));
        assert_eq!(parse_day("2001-02-29"), None);
        assert_eq!(parse_day("30.11.2026"), None);
    }
}
