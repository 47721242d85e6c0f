//! The loop over one provider and one tool registry, and how it is built.

use crate::clock::{Clock, SystemClock};
use crate::provider::Provider;
use crate::registry::{Gate, ToolRegistry};
use crate::state::RunSettings;
use std::sync::Arc;

/// The loop over one provider and one tool registry.
pub struct ToolLoop {
    pub(super) provider: Arc<dyn Provider>,
    pub(super) registry: Arc<ToolRegistry>,
    pub(super) clock: Arc<dyn Clock>,
}

impl ToolLoop {
    /// A loop asking `provider` and calling tools from `registry`.
    pub fn new(provider: Arc<dyn Provider>, registry: Arc<ToolRegistry>) -> ToolLoop {
        ToolLoop {
            provider,
            registry,
            clock: Arc::new(SystemClock),
        }
    }

    /// Times previews with `clock` (the system clock unless a test says otherwise).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> ToolLoop {
        self.clock = clock;
        self
    }

    pub(super) fn gate(&self, settings: &RunSettings) -> Gate {
        self.registry.gate(&settings.allow_list, settings.admin)
    }
}
