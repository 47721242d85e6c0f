//! Counters the run service feeds as runs move (a [`RunListener`]).

use nrllm_core::events::Event;
use nrllm_core::run_service::RunListener;
use nrllm_core::run_store::{RunStatus, SequencedEvent};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use uuid::Uuid;

/// Waiting runs looked at per scrape for the age histogram (the oldest first are counted all
/// the same in the status gauge).
pub(super) const MAX_WAITING_SAMPLED: i64 = 50_000;

/// A measure kept per run configuration.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub(super) struct ConfigurationLabel {
    pub(super) configuration: String,
}

/// Times to first token: 25 ms … ~50 s.
fn first_token_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.025, 2.0, 12))
}

/// What this instance counts as its runs go.
#[derive(Debug)]
pub struct Counters {
    pub(super) decisions: Counter,
    pub(super) model_calls: Counter,
    pub(super) model_failures: Counter,
    pub(super) provider_retries: Counter,
    pub(super) model_latency: Histogram,
    /// From a streamed request to its first token, by configuration.
    pub(super) first_token: Family<ConfigurationLabel, Histogram, fn() -> Histogram>,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            decisions: Counter::default(),
            model_calls: Counter::default(),
            model_failures: Counter::default(),
            provider_retries: Counter::default(),
            // 50 ms … ~100 s.
            model_latency: Histogram::new(exponential_buckets(0.05, 2.0, 12)),
            first_token: Family::new_with_constructor(first_token_histogram),
        }
    }
}

impl Counters {
    /// Counts `event`, of a run of `configuration` when it is known.
    fn count(&self, configuration: Option<&str>, event: &SequencedEvent) {
        match &event.event {
            Event::ApprovalDecided { .. } => {
                self.decisions.inc();
            }
            Event::Llm {
                duration_ms,
                first_token_ms,
                ..
            } => {
                self.model_calls.inc();
                self.model_latency.observe(*duration_ms as f64 / 1000.0);
                if let (Some(first), Some(configuration)) = (first_token_ms, configuration) {
                    let label = ConfigurationLabel {
                        configuration: configuration.to_owned(),
                    };
                    self.first_token
                        .get_or_create(&label)
                        .observe(*first as f64 / 1000.0);
                }
            }
            Event::LlmFailed { .. } => {
                self.model_failures.inc();
            }
            Event::ProviderRetry { .. } => {
                self.provider_retries.inc();
            }
            _ => {}
        }
    }
}

impl RunListener for Counters {
    fn event(&self, _run_id: Uuid, event: &SequencedEvent) {
        self.count(None, event);
    }

    fn segment_event(&self, configuration: &str, _run_id: Uuid, event: &SequencedEvent) {
        self.count(Some(configuration), event);
    }

    fn status(&self, _run_id: Uuid, _status: RunStatus) {}
}
