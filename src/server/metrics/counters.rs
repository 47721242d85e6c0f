//! Counters the run service feeds as runs move (a [`RunListener`]).

use std::collections::HashMap;

use nrllm_core::events::Event;
use nrllm_core::provider::{Prices, Usage};
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

/// Tokens counted per configuration and part ([`TOKEN_KINDS`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub(super) struct TokenLabel {
    pub(super) configuration: String,
    pub(super) kind: &'static str,
}

/// The parts of a usage the token counter keeps apart: prompt and completion tokens, and the
/// parts of them priced apart (inside those two).
const TOKEN_KINDS: [&str; 5] = [
    "input",
    "output",
    "cached_input",
    "cache_write",
    "reasoning",
];

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
    /// Tokens the models used (every step that reports usage, retried attempts included).
    pub(super) tokens: Family<TokenLabel, Counter>,
    /// What they cost in US dollars, for configurations with prices.
    pub(super) spend: Family<ConfigurationLabel, Counter<f64, std::sync::atomic::AtomicU64>>,
    /// Each configuration's prices, by name.
    prices: HashMap<String, Prices>,
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
            tokens: Family::default(),
            spend: Family::default(),
            prices: HashMap::new(),
        }
    }
}

impl Counters {
    /// Counters that price what runs spend by each configuration's `prices`.
    pub fn with_prices(prices: HashMap<String, Prices>) -> Counters {
        Counters {
            prices,
            ..Counters::default()
        }
    }

    /// Counts the tokens a step of a run of `configuration` used, and what they cost.
    fn spent(&self, configuration: &str, usage: &Usage) {
        let parts = [
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_input_tokens,
            usage.cache_write_tokens,
            usage.reasoning_tokens,
        ];
        for (kind, count) in TOKEN_KINDS.into_iter().zip(parts) {
            if count > 0 {
                let label = TokenLabel {
                    configuration: configuration.to_owned(),
                    kind,
                };
                self.tokens.get_or_create(&label).inc_by(count);
            }
        }
        let cost = self
            .prices
            .get(configuration)
            .and_then(|prices| prices.cost_micros(usage));
        if let Some(micros) = cost {
            let label = ConfigurationLabel {
                configuration: configuration.to_owned(),
            };
            self.spend
                .get_or_create(&label)
                .inc_by(micros as f64 / 1_000_000.0);
        }
    }

    /// Counts `event`, of a run of `configuration` when it is known.
    fn count(&self, configuration: Option<&str>, event: &SequencedEvent) {
        if let Some(configuration) = configuration {
            let usage = match &event.event {
                Event::Llm { usage, .. } => Some(usage),
                Event::LlmFailed { usage, .. } | Event::ProviderRetry { usage, .. } => {
                    usage.as_ref()
                }
                _ => None,
            };
            if let Some(usage) = usage {
                self.spent(configuration, usage);
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    fn step(event: Event) -> SequencedEvent {
        SequencedEvent {
            sequence: 1,
            event,
            created_at_ms: 0,
        }
    }

    #[test]
    fn tokens_and_spend_are_counted_per_configuration_from_every_step_that_used_them() {
        let prices = Prices {
            input: Some(2.0),
            output: Some(8.0),
            ..Prices::default()
        };
        let counters = Counters::with_prices(HashMap::from([("cloud".to_owned(), prices)]));
        let answer = |usage| Event::Llm {
            round: 1,
            content: None,
            tool_calls: Vec::new(),
            usage,
            finish_reason: nrllm_core::provider::FinishReason::Stop,
            duration_ms: 10,
            first_token_ms: None,
            raw: None,
        };
        let cached = Usage {
            cached_input_tokens: 400,
            ..Usage::tokens(1_000, 100)
        };
        counters.segment_event("cloud", Uuid::nil(), &step(answer(cached)));
        // A broken attempt's usage counts too; a run of an unpriced configuration has no spend.
        let broken = Event::ProviderRetry {
            round: 2,
            retry: 1,
            wait_ms: 5,
            reason: "cut".into(),
            hint: None,
            usage: Some(Usage::tokens(500, 0)),
        };
        counters.segment_event("cloud", Uuid::nil(), &step(broken));
        counters.segment_event("demo", Uuid::nil(), &step(answer(Usage::tokens(7, 3))));
        let mut registry = Registry::with_prefix("nrllm");
        registry.register("tokens", "Tokens", counters.tokens.clone());
        registry.register("spend_dollars", "Spend", counters.spend.clone());
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            "nrllm_tokens_total{configuration=\"cloud\",kind=\"input\"} 1500",
            "nrllm_tokens_total{configuration=\"cloud\",kind=\"cached_input\"} 400",
            "nrllm_tokens_total{configuration=\"cloud\",kind=\"output\"} 100",
            "nrllm_tokens_total{configuration=\"demo\",kind=\"input\"} 7",
            // (1,000 + 500) × $2 + 100 × $8 per million.
            "nrllm_spend_dollars_total{configuration=\"cloud\"} 0.0038",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(
            !text.contains("spend_dollars_total{configuration=\"demo\"}"),
            "{text}"
        );
    }
}
