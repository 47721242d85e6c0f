//! Calls held open while their runs wait for the operator's reply to the question their server
//! asked inside them ([`crate::held`]), by run and call: parked when the run starts to wait,
//! taken back when it goes on.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rmcp::model::ElicitResult;
use tokio::sync::oneshot;

use crate::call::Running;

/// How long a call given up by its run (cancelled, or taken elsewhere) stays parked after its
/// question's time ran out, before it is dropped (and its server told to cancel it).
const PARKED_GRACE: Duration = Duration::from_secs(600);

/// A call held open while its run waits for the operator's reply.
pub(crate) struct Parked {
    pub running: Running,
    /// Where the reply goes (the server's question, answered).
    pub reply: oneshot::Sender<ElicitResult>,
    pub since: Instant,
}

/// One server's parked calls.
#[derive(Default)]
pub struct ParkedCalls {
    calls: Mutex<HashMap<(String, String), Parked>>,
}

impl ParkedCalls {
    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), Parked>> {
        self.calls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Parks call `call` of run `run` until its run goes on. Calls parked longer than `held`
    /// (their question's time) and a grace are dropped, their servers told to cancel them.
    pub(crate) fn park(&self, (run, call): (&str, &str), parked: Parked, held: Duration) {
        let stale = held + PARKED_GRACE;
        let mut calls = self.lock();
        calls.retain(|_, parked| parked.since.elapsed() < stale);
        calls.insert((run.to_owned(), call.to_owned()), parked);
    }

    /// The call `call` of run `run` parked here, if it still is.
    pub(crate) fn unpark(&self, run: &str, call: &str) -> Option<Parked> {
        self.lock().remove(&(run.to_owned(), call.to_owned()))
    }

    /// How many calls are parked now.
    pub fn count(&self) -> usize {
        self.lock().len()
    }
}
