//! Spend across runs: caps per configuration and per user (the run's requester) for each UTC day.
//!
//! The store counts each day's spend in the database ([`SpendLedger`]): every model response's
//! cost under a cap is added the moment it arrives, by one atomic increment, so runs on many
//! instances see one count. Before each model request a run reads its two counts; when one has reached its cap
//! (what was spent ≥ the cap plus what an administrator raised it by for the day) the run waits
//! at its budget, `waiting_for_budget`, with the cap named ([`DailyCap`]). A run in flight when
//! the cap is crossed overshoots it by at most the response it is waiting for. Such a run goes on
//! by itself once its cap has room again — an administrator raised it for the day, or the next
//! UTC day began — through the one authority like every other way a run moves on
//! ([`crate::moves::TurnMove::Allowance`]), or it stops at its deadline or by a person's hand.

use std::sync::Arc;

use async_trait::async_trait;

use crate::clock::Clock;
pub use crate::clock::{show_day, utc_day};
pub use crate::daily_cap::{CapScope, DailyCap};
use crate::run_store::StoreError;
use crate::state::{BudgetStop, LimitKind, NextAction};

/// One count of a day's spend.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpendKey {
    pub scope: CapScope,
    /// The configuration's name, or the user's.
    pub name: String,
}

/// A day's spend of one key, and what an administrator raised its cap by for that day.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DaySpend {
    pub spent_micros: u64,
    pub raised_micros: u64,
}

/// The caps, in millionths of a dollar per UTC day (none: no cap).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpendCaps {
    pub per_configuration: Option<u64>,
    pub per_user: Option<u64>,
}

impl SpendCaps {
    pub fn is_empty(&self) -> bool {
        self.per_configuration.is_none() && self.per_user.is_none()
    }

    pub fn get(&self, scope: CapScope) -> Option<u64> {
        match scope {
            CapScope::Configuration => self.per_configuration,
            CapScope::User => self.per_user,
        }
    }

    /// The first cap `spent` has reached on `day` (`spent` gives each scope's count), with
    /// what was spent and the cap as raised for the day.
    pub fn reached(
        &self,
        day: i64,
        spent: impl Fn(CapScope) -> DaySpend,
    ) -> Option<(DailyCap, u64, u64)> {
        [CapScope::Configuration, CapScope::User]
            .into_iter()
            .find_map(|scope| {
                let cap = self.get(scope)?;
                let count = spent(scope);
                let cap = cap.saturating_add(count.raised_micros);
                (count.spent_micros >= cap).then_some((
                    DailyCap { scope, day },
                    count.spent_micros,
                    cap,
                ))
            })
    }
}

/// Each day's spend, counted in the database.
#[async_trait]
pub trait SpendLedger: Send + Sync {
    /// Adds `micros` to day `day`'s count of every key, atomically (many instances add at once).
    async fn add_spend(&self, day: i64, keys: &[SpendKey], micros: u64) -> Result<(), StoreError>;
    /// Day `day`'s count of each key (zero for a key with none), in the order asked.
    async fn day_spend(&self, day: i64, keys: &[SpendKey]) -> Result<Vec<DaySpend>, StoreError>;
    /// Raises day `day`'s cap of `key` by `micros` more, by administrator `by`; the count as it
    /// now is.
    async fn raise_cap(
        &self,
        day: i64,
        key: &SpendKey,
        micros: u64,
        by: &str,
    ) -> Result<DaySpend, StoreError>;
    /// Day `day`'s counts, every key with spend or a raise, at most `limit`.
    async fn spend_of_day(
        &self,
        day: i64,
        limit: u32,
    ) -> Result<Vec<(SpendKey, DaySpend)>, StoreError>;
}

/// What one run's loop checks its spend against: the caps of its configuration, its two keys,
/// the ledger and the clock.
#[derive(Clone)]
pub struct SpendWatch {
    pub caps: SpendCaps,
    pub configuration: String,
    pub requester: String,
    pub ledger: Arc<dyn SpendLedger>,
    pub clock: Arc<dyn Clock>,
}

impl SpendWatch {
    fn keys(&self) -> [SpendKey; 2] {
        [
            SpendKey {
                scope: CapScope::Configuration,
                name: self.configuration.clone(),
            },
            SpendKey {
                scope: CapScope::User,
                name: self.requester.clone(),
            },
        ]
    }

    /// Counts `micros` more spent today: nothing for nothing, and nothing where no cap holds
    /// (a write per response on the loop's path only where a cap needs the count).
    pub async fn add(&self, micros: u64) {
        if micros == 0 || self.caps.is_empty() {
            return;
        }
        let day = utc_day(self.clock.now_ms());
        if let Err(err) = self.ledger.add_spend(day, &self.keys(), micros).await {
            tracing::error!(%err, configuration = %self.configuration, "counting a day's spend failed");
        }
    }

    /// The cap today's spend of the configuration or the requester has reached, if any, with
    /// what was spent and the cap as raised for the day.
    async fn reached_now(&self) -> Result<Option<(DailyCap, u64, u64)>, StoreError> {
        if self.caps.is_empty() {
            return Ok(None);
        }
        let day = utc_day(self.clock.now_ms());
        let counts = self.ledger.day_spend(day, &self.keys()).await?;
        Ok(self.caps.reached(day, |scope| {
            let index = usize::from(scope == CapScope::User);
            counts.get(index).cloned().unwrap_or_default()
        }))
    }

    /// Before model request `round`: the stop when today's spend of the configuration or the
    /// requester has reached its cap. A count that cannot be read stops nothing (the run's own
    /// commits fail next if the database is gone).
    pub async fn stop_before(&self, round: u32) -> Option<BudgetStop> {
        let (daily, used, cap) = match self.reached_now().await {
            Ok(reached) => reached?,
            Err(err) => {
                tracing::error!(%err, "reading a day's spend failed; no cap is checked now");
                return None;
            }
        };
        Some(BudgetStop {
            limit: LimitKind::CostMicros,
            used,
            cap,
            next: NextAction::ModelRequest { round },
            daily: Some(daily),
        })
    }

    /// Whether a run stopped at a daily cap may go on now: no cap is reached today (its own was
    /// raised, or a new day began).
    pub async fn has_room(&self) -> Result<bool, StoreError> {
        Ok(self.reached_now().await?.is_none())
    }
}

impl std::fmt::Debug for SpendWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpendWatch")
            .field("caps", &self.caps)
            .field("configuration", &self.configuration)
            .field("requester", &self.requester)
            .finish_non_exhaustive()
    }
}

impl PartialEq for SpendWatch {
    fn eq(&self, other: &SpendWatch) -> bool {
        self.caps == other.caps
            && self.configuration == other.configuration
            && self.requester == other.requester
            && Arc::ptr_eq(&self.ledger, &other.ledger)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_utc_days_counted_from_the_epoch() {
        assert_eq!(utc_day(0), 0);
        assert_eq!(utc_day(86_399_999), 0);
        assert_eq!(utc_day(86_400_000), 1);
        assert_eq!(utc_day(-1), -1);
        let day = utc_day(crate::clock::parse_day("2026-12-04").unwrap() + 5_000);
        assert_eq!(show_day(day), "2026-12-04");
    }

    #[test]
    fn a_cap_is_reached_at_what_it_allows_plus_the_days_raise() {
        let caps = SpendCaps {
            per_configuration: Some(1_000),
            per_user: Some(500),
        };
        let count = |configuration: u64, user: u64, raised: u64| {
            move |scope: CapScope| DaySpend {
                spent_micros: match scope {
                    CapScope::Configuration => configuration,
                    CapScope::User => user,
                },
                raised_micros: if scope == CapScope::User { raised } else { 0 },
            }
        };
        assert_eq!(caps.reached(7, count(999, 499, 0)), None);
        assert_eq!(
            caps.reached(7, count(1_000, 10, 0)),
            Some((
                DailyCap {
                    scope: CapScope::Configuration,
                    day: 7
                },
                1_000,
                1_000
            ))
        );
        let user = caps.reached(7, count(10, 500, 0)).unwrap();
        assert_eq!((user.0.scope, user.1, user.2), (CapScope::User, 500, 500));
        // Raised by 300 for the day: 500 spent is under 800.
        assert_eq!(caps.reached(7, count(10, 500, 300)), None);
        assert_eq!(caps.reached(7, count(10, 800, 300)).map(|r| r.2), Some(800));
        assert_eq!(
            SpendCaps::default().reached(7, count(u64::MAX, u64::MAX, 0)),
            None
        );
    }

    #[test]
    fn a_daily_cap_names_its_scope_and_day() {
        let cap = DailyCap {
            scope: CapScope::User,
            day: utc_day(crate::clock::parse_day("2026-12-04").unwrap()),
        };
        assert_eq!(cap.describe(), "the user's daily spend cap for 2026-12-04");
        assert_eq!(
            CapScope::parse("configuration"),
            Some(CapScope::Configuration)
        );
        assert_eq!(CapScope::parse("team"), None);
    }
}
