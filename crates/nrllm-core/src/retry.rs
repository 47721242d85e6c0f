//! The one retry delay: providers' retries, webhook deliveries and MCP reconnects all wait by it.
//! A pure function of the attempt and a seed the caller gives, so that a durable schedule (a
//! webhook's next attempt, stored) is the same whoever computes it.

use std::time::Duration;

/// The wait before retry `attempt` (0: the first retry): `first` doubled once per attempt, up to
/// `max`, then spread over 80–120 % by `seed` (so that many clients do not retry in step), and
/// never above `max`.
pub fn retry_delay(first: Duration, attempt: u32, max: Duration, seed: u64) -> Duration {
    let base = first.saturating_mul(1u32 << attempt.min(20)).min(max);
    // 800 ‰ to 1,200 ‰ of the base.
    let spread = 800 + seed % 401;
    let nanos = base.as_nanos().saturating_mul(u128::from(spread)) / 1000;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_delay_doubles_each_attempt_up_to_its_cap() {
        let middle = 200; // 1,000 ‰: no spread
        let delays: Vec<_> = (0..8)
            .map(|attempt| retry_delay(MS * 500, attempt, MS * 60_000, middle))
            .collect();
        assert_eq!(
            delays,
            [500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000].map(|ms| MS * ms)
        );
        assert_eq!(
            retry_delay(MS * 500, u32::MAX, MS * 60_000, middle),
            MS * 60_000,
            "no overflow, however many attempts"
        );
    }

    #[test]
    fn the_seed_spreads_it_over_80_to_120_percent_and_the_same_seed_gives_the_same_wait() {
        let at = |seed| retry_delay(MS * 1_000, 0, MS * 60_000, seed);
        assert_eq!(at(0), MS * 800);
        assert_eq!(at(400), MS * 1_200);
        assert_eq!(at(401), MS * 800, "the seed wraps");
        assert_eq!(at(12_345), at(12_345));
        let spread: std::collections::BTreeSet<_> = (0..1_000u64).map(at).collect();
        assert!(
            spread.len() > 300,
            "seeds spread the waits: {}",
            spread.len()
        );
        assert!(spread.iter().all(|d| *d >= MS * 800 && *d <= MS * 1_200));
        // Spread upwards, a delay at the cap stays at the cap.
        assert_eq!(retry_delay(MS * 1_000, 10, MS * 5_000, 400), MS * 5_000);
    }
}
