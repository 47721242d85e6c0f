//! What a deployment plugs into the run service: how it builds loops, who listens to runs,
//! and where four-eyes holds.

use std::sync::Arc;

use uuid::Uuid;

use crate::provider::{Delta, Prices, Usage};
use crate::run_store::{RunConfiguration, RunStatus, SequencedEvent};
use crate::tool::Progress;
use crate::tool_loop::ToolLoopService;

/// Builds the loop for a run's configuration (its provider and model).
pub trait LoopFactory: Send + Sync {
    /// The loop to drive a run with, or a message an operator can act on (e.g. "no API key").
    fn tool_loop(
        &self,
        configuration: &RunConfiguration,
    ) -> Result<Arc<dyn ToolLoopService>, String>;

    /// The configuration's prices (none by default: no cost is shown, no cost limit applies).
    fn prices(&self, _configuration: &RunConfiguration) -> Prices {
        Prices::default()
    }

    /// The configuration's daily spend caps across runs (none by default).
    fn spend_caps(&self, _configuration: &RunConfiguration) -> crate::spend::SpendCaps {
        crate::spend::SpendCaps::default()
    }

    /// How many people must approve the configuration's turns (one by default).
    fn quorum(&self, _configuration: &RunConfiguration) -> crate::quorum::Quorum {
        crate::quorum::Quorum::default()
    }

    /// Estimated cost of `usage` under the configuration's prices, in millionths of a dollar.
    fn estimate_cost_micros(&self, configuration: &RunConfiguration, usage: Usage) -> Option<i64> {
        self.prices(configuration).cost_micros(&usage)
    }
}

/// A factory that uses one loop for every run.
pub struct SingleLoop(pub Arc<dyn ToolLoopService>);

impl LoopFactory for SingleLoop {
    fn tool_loop(
        &self,
        _configuration: &RunConfiguration,
    ) -> Result<Arc<dyn ToolLoopService>, String> {
        Ok(Arc::clone(&self.0))
    }
}

/// Sees a run's events and status changes as they happen.
pub trait RunListener: Send + Sync {
    fn event(&self, run_id: Uuid, event: &SequencedEvent);
    /// An event of a segment driven here, with the name of its run's configuration (for
    /// measures kept by configuration); by default told as [`RunListener::event`].
    fn segment_event(&self, _configuration: &str, run_id: Uuid, event: &SequencedEvent) {
        self.event(run_id, event);
    }
    fn status(&self, run_id: Uuid, status: RunStatus);
    /// A piece of round `round`'s response as the model writes it: never journaled (the
    /// response comes whole as an event once complete).
    fn delta(&self, _run_id: Uuid, _round: u32, _delta: &Delta) {}
    /// How far call `call_id` (of `tool`) has come, as its tool reports it while it runs:
    /// never journaled (its result comes as a step once it is done).
    fn progress(&self, _run_id: Uuid, (_call_id, _tool): (&str, &str), _progress: &Progress) {}
}

/// Several listeners as one, told in turn.
pub struct Listeners(pub Vec<Arc<dyn RunListener>>);

impl RunListener for Listeners {
    fn event(&self, run_id: Uuid, event: &SequencedEvent) {
        for listener in &self.0 {
            listener.event(run_id, event);
        }
    }

    fn segment_event(&self, configuration: &str, run_id: Uuid, event: &SequencedEvent) {
        for listener in &self.0 {
            listener.segment_event(configuration, run_id, event);
        }
    }

    fn delta(&self, run_id: Uuid, round: u32, delta: &Delta) {
        for listener in &self.0 {
            listener.delta(run_id, round, delta);
        }
    }

    fn status(&self, run_id: Uuid, status: RunStatus) {
        for listener in &self.0 {
            listener.status(run_id, status);
        }
    }

    fn progress(&self, run_id: Uuid, call: (&str, &str), progress: &Progress) {
        for listener in &self.0 {
            listener.progress(run_id, call, progress);
        }
    }
}

/// Whether four-eyes holds for the runs of a configuration (by its name; `None` when the run's
/// configuration cannot be read).
pub type FourEyes = dyn Fn(Option<&str>) -> bool + Send + Sync;
