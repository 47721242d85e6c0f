//! `GET /metrics` in the Prometheus text format, for a scraper with an API token (any role):
//! - from the database, as they are at the scrape: runs by status, and the ages of the runs
//!   waiting for a person — a decision or an answer (a histogram);
//! - counted by this instance since it started, from the steps its runs emit: decisions, model
//!   calls with their latency, provider retries, failed model calls; and runs its reaper took
//!   over;
//! - live streams open and runs this instance drives.
//!
//! The counters are kept by a [`RunListener`] beside the live hub; each scrape builds a fresh
//! registry around them and the values read at that moment.

mod counters;
mod page;

pub use counters::*;
pub use page::*;
