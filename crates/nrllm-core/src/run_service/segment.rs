//! A segment of a run: what one instance drives between two durable transitions, and the sink
//! that numbers its events until the transition commits them.

use std::sync::{Arc, Mutex};

use uuid::Uuid;

use crate::clock::Clock;
use crate::events::{Event, EventSink};
use crate::provider::Delta;
use crate::run_store::{RunConfiguration, SequencedEvent, Verdict};
use crate::state::Counters;
use crate::tool_loop::ToolLoopService;

use super::hooks::RunListener;
use super::RunService;

/// A segment being driven: the run at the version this instance holds, and where its events go.
#[derive(Clone, Copy)]
pub(super) struct Segment<'a> {
    pub(super) id: Uuid,
    pub(super) version: i64,
    pub(super) configuration: &'a RunConfiguration,
    pub(super) requested_by: &'a str,
    /// The run's counters as the segment began (what a cancelled segment keeps).
    pub(super) counters: Counters,
    pub(super) sink: &'a SegmentSink,
    pub(super) verdict: Option<Verdict>,
    /// The loop driving it (none when the configuration cannot be driven).
    pub(super) tool_loop: Option<&'a Arc<dyn ToolLoopService>>,
}

/// Numbers a segment's events and keeps them until the segment's transition commits.
pub(super) struct SegmentSink {
    run_id: Uuid,
    /// The name of the run's configuration, for the listener.
    configuration: String,
    inner: Mutex<(i64, Vec<SequencedEvent>)>,
    listener: Option<Arc<dyn RunListener>>,
    clock: Arc<dyn Clock>,
}

impl SegmentSink {
    pub(super) fn new(
        service: &RunService,
        run_id: Uuid,
        last_sequence: i64,
        configuration: &RunConfiguration,
    ) -> SegmentSink {
        SegmentSink {
            run_id,
            configuration: configuration.provider.clone(),
            inner: Mutex::new((last_sequence, Vec::new())),
            listener: service.listener.clone(),
            clock: Arc::clone(&service.clock),
        }
    }

    pub(super) fn take(&self) -> Vec<SequencedEvent> {
        self.inner
            .lock()
            .map(|mut inner| std::mem::take(&mut inner.1))
            .unwrap_or_default()
    }
}

impl EventSink for SegmentSink {
    fn emit(&self, event: Event) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        inner.0 += 1;
        let sequenced = SequencedEvent {
            sequence: inner.0,
            event,
            created_at_ms: self.clock.now_ms(),
        };
        if let Some(listener) = &self.listener {
            listener.segment_event(&self.configuration, self.run_id, &sequenced);
        }
        inner.1.push(sequenced);
    }

    fn delta(&self, round: u32, delta: Delta) {
        if let Some(listener) = &self.listener {
            listener.delta(self.run_id, round, &delta);
        }
    }
}
