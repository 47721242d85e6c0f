//! New runs: created, queued, taken by a worker and driven from their first round.

use uuid::Uuid;

use super::claimed::decision_on_record;
use super::claimed::{ClaimedRun, Work};
use super::errors::ServiceError;
use super::segment::{Segment, SegmentSink};
use super::{unavailable, RunService};
use crate::events::{Event, EventSink};
use crate::run_store::{
    NewRun, RunConfiguration, RunRecord, RunStatus, SequencedEvent, StoreError,
};
use crate::state::{Counters, SuspendedState};
use crate::tool_loop::{RunContext, RunInput};
use crate::trace::RunTrace;
use crate::transcript::Message;

impl RunService {
    /// Records a new run, `queued` for a worker of any instance ([`RunService::take_next`]).
    pub async fn create(
        &self,
        configuration: RunConfiguration,
        requested_by: &str,
    ) -> Result<RunRecord, ServiceError> {
        self.create_traced(configuration, requested_by, RunTrace::start(None))
            .await
    }

    /// [`RunService::create`] in trace `trace` (a caller's, joined; or a parent run's, linked).
    pub async fn create_traced(
        &self,
        configuration: RunConfiguration,
        requested_by: &str,
        trace: RunTrace,
    ) -> Result<RunRecord, ServiceError> {
        self.insert_copying(configuration, (requested_by, trace), false, Vec::new())
            .await
    }

    pub(super) async fn insert(
        &self,
        configuration: RunConfiguration,
        requested_by: &str,
        drive_here: bool,
    ) -> Result<RunRecord, ServiceError> {
        let origin = (requested_by, RunTrace::start(None));
        self.insert_copying(configuration, origin, drive_here, Vec::new())
            .await
    }

    /// Stores a new run asked for by `requested_by`, in trace `trace`, with the steps `copied`
    /// from the run it goes on from.
    pub(super) async fn insert_copying(
        &self,
        configuration: RunConfiguration,
        (requested_by, trace): (&str, RunTrace),
        drive_here: bool,
        copied: Vec<SequencedEvent>,
    ) -> Result<RunRecord, ServiceError> {
        // Refuse a configuration that cannot be driven before anything is stored.
        self.loops
            .tool_loop(&configuration)
            .map_err(ServiceError::Configuration)?;
        let run = NewRun {
            id: Uuid::now_v7(),
            configuration,
            requested_by: requested_by.to_owned(),
            copied,
            trace,
        };
        Ok(self
            .store
            .create(&run, self.clock.now_ms(), drive_here)
            .await?)
    }

    /// Creates a run and drives it here, at once, until it completes or suspends (headless
    /// programs and tests; the app queues its runs).
    pub async fn start(
        &self,
        configuration: RunConfiguration,
        requested_by: &str,
    ) -> Result<RunRecord, ServiceError> {
        let run = self.insert(configuration, requested_by, true).await?;
        self.drive(run).await
    }

    /// Takes up to `limit` queued runs for this instance, oldest first: new runs to drive and
    /// claimed decisions to carry out ([`RunService::work`]).
    pub async fn take_next(&self, limit: u32) -> Result<Vec<Work>, StoreError> {
        let taken = self.store.take_queued(self.clock.now_ms(), limit).await?;
        self.work_taken(taken).await
    }

    /// [`RunService::take_next`] of only the runs held for this instance: answered through a
    /// call it holds open, each has its running slot already (the held call's).
    pub async fn take_held(&self, limit: u32) -> Result<Vec<Work>, StoreError> {
        let taken = self.store.take_held(self.clock.now_ms(), limit).await?;
        self.work_taken(taken).await
    }

    async fn work_taken(&self, taken: Vec<RunRecord>) -> Result<Vec<Work>, StoreError> {
        let mut work = Vec::with_capacity(taken.len());
        for run in taken {
            self.notify_status(run.id, RunStatus::Running);
            if let Some(item) = self.work_of(run).await? {
                work.push(item);
            }
        }
        Ok(work)
    }

    /// What a run just taken from the queue asks for; `None` if it could not be read (it was
    /// failed, kept for inspection).
    pub(super) async fn work_of(&self, run: RunRecord) -> Result<Option<Work>, StoreError> {
        let Some(decision) = decision_on_record(&run) else {
            return Ok(Some(Work::Start(Box::new(run))));
        };
        let state = SuspendedState::from_json(run.suspended_state.as_deref().unwrap_or_default());
        let (Some(configuration), Ok(state)) = (run.configuration.clone(), state) else {
            tracing::error!(run_id = %run.id, "a claimed run's state or configuration cannot be read");
            self.fail_corrupted(
                &run,
                "The run's saved state could not be read; it is kept for inspection.",
            )
            .await?;
            return Ok(None);
        };
        let tool_loop = match self.loops.tool_loop(&configuration) {
            Ok(tool_loop) => tool_loop,
            // Its model cannot be reached now (say, its key was removed): it fails with the
            // reason, as a new run would.
            Err(message) => {
                let sink = SegmentSink::new(self, run.id, run.last_sequence, &configuration);
                let segment = Segment {
                    id: run.id,
                    version: run.version,
                    configuration: &configuration,
                    requested_by: &run.requested_by,
                    counters: state.counters,
                    sink: &sink,
                    verdict: None,
                    tool_loop: None,
                };
                self.persist(&segment, Err(unavailable(message, state.counters)), None)
                    .await?;
                return Ok(None);
            }
        };
        Ok(Some(Work::Decided(Box::new(ClaimedRun::from_record(
            &run,
            (state, configuration, tool_loop, decision),
            false,
        )))))
    }

    /// Does work taken from the queue, until the run completes, fails or suspends.
    /// Its log lines carry the run's id and trace ([`super::run_span`]).
    pub async fn work(&self, work: Work) -> Result<RunRecord, ServiceError> {
        match work {
            Work::Start(run) => self.drive(*run).await,
            Work::Decided(claimed) => Ok(self.carry_out_here(*claimed).await?),
        }
    }

    /// Drives a run from its first round (or, for a continuation, from the transcript it
    /// continues) until it completes or suspends.
    pub async fn drive(&self, run: RunRecord) -> Result<RunRecord, ServiceError> {
        let (id, trace) = (run.id, run.trace.clone());
        super::in_run_span(
            id,
            trace.as_ref(),
            Box::pin(self.drive_from_start(run, None)),
        )
        .await
    }

    pub(super) async fn drive_from_start(
        &self,
        run: RunRecord,
        recovered: Option<Event>,
    ) -> Result<RunRecord, ServiceError> {
        let Some(configuration) = run.configuration.clone() else {
            // Nothing can drive it: end it with a reason instead of leaving it `running`.
            tracing::error!(run_id = %run.id, "a run's stored configuration cannot be read");
            self.fail_corrupted(
                &run,
                "The run's saved configuration could not be read; it is kept for inspection.",
            )
            .await?;
            return Err(ServiceError::Configuration(
                "the run's configuration cannot be read".into(),
            ));
        };
        let sink = SegmentSink::new(self, run.id, run.last_sequence, &configuration);
        if let Some(event) = recovered {
            sink.emit(event);
        }
        let ctx = RunContext {
            prices: self.loops.prices(&configuration),
            run_id: run.id.to_string(),
            actor: run.requested_by.clone(),
            rules: self
                .store
                .rules_for(run.id, &configuration.provider)
                .await?,
            inherited: configuration
                .continues
                .as_ref()
                .map(|c| c.inherited.clone())
                .unwrap_or_default(),
            lease: self.lease_guard(run.id),
            lease_epoch: Some(run.version),
            spend: self.spend_watch(&configuration, &run.requested_by),
            quorum: self.loops.quorum(&configuration),
            progress: self.progress_hook(run.id),
            trace: crate::spans::carried(run.trace.as_ref()),
            ..RunContext::default()
        };
        let tool_loop = self.loops.tool_loop(&configuration);
        let work = async {
            match &tool_loop {
                Ok(tool_loop) => {
                    let input = first_input(&configuration, &sink);
                    tool_loop.run(input, &ctx, &sink).await
                }
                Err(message) => Err(unavailable(message.clone(), Counters::default())),
            }
        };
        let segment = Segment {
            id: run.id,
            version: run.version,
            configuration: &configuration,
            requested_by: &run.requested_by,
            counters: run.counters,
            sink: &sink,
            verdict: None,
            tool_loop: tool_loop.as_ref().ok(),
        };
        Ok(self
            .drive_segment(segment, run.cancel_requested.clone(), work)
            .await?)
    }
}

/// What a run's first segment starts from: its prompt, or for a continuation (a retry or a fork)
/// the transcript it continues, with a step that says so.
fn first_input(configuration: &RunConfiguration, sink: &SegmentSink) -> RunInput {
    match &configuration.continues {
        Some(continuation) => {
            sink.emit(Event::Recovered {
                resumes_at: format!(
                    "continues run {} from its journal: {}",
                    continuation.parent, continuation.note
                ),
            });
            RunInput {
                transcript: Some(continuation.transcript.clone()),
                settings: configuration.settings.clone(),
                ..RunInput::default()
            }
        }
        None => RunInput {
            system_prompt: configuration.system_prompt.clone(),
            skills: configuration.skills.clone(),
            messages: vec![Message::user(configuration.prompt.clone())],
            settings: configuration.settings.clone(),
            transcript: None,
        },
    }
}
