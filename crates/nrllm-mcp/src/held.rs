//! A question a server of a version before 2026-07-28 asks inside its open call
//! (`elicitation/create` while `tools/call` runs). Such a server cannot be sent the call again
//! with the answer, so the call is held open while the run waits, up to the server's
//! `elicitation_timeout` (`mcp_elicitation_timeout_secs`):
//!
//! - the connection's client hands the question to the open call it came in ([`Held::ask`]),
//!   matched by its progress token, or the only call open;
//! - the call's tool parks the call, keyed by run and call ([`crate::parked`]), and the run
//!   waits for input like any other question (durably: its wait says until when the call is held);
//! - the reply, when the run goes on, is handed to the parked call, which the
//!   tool then awaits again; a call not parked here any more (this process restarted, or it was
//!   given up) is answered with a step that says its outcome is unknown;
//! - when the time runs out first, the server is answered `cancel` and the call goes on; the
//!   run's wait ends at the same time (its deadline).
//!
//! Only this process holds a call, so only this process can hand the reply on: the store holds
//! the waiting run for this instance (its queue gives the run, once answered through any
//! instance, only to this one while the hold lasts; the hold is renewed like a lease).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rmcp::model::{
    ElicitRequestParams, ElicitResult, ElicitationAction, ProgressToken, RequestMetaObject,
};
use tokio::sync::{mpsc, oneshot};

/// A question asked inside an open call, and where its answer goes.
pub struct Ask {
    pub params: ElicitRequestParams,
    pub reply: oneshot::Sender<ElicitResult>,
}

/// One connection's (one server's) held calls.
#[derive(Default)]
pub struct Held {
    /// How long a question is held open; `None`: questions asked inside a call are declined.
    limit: Option<Duration>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next: u64,
    /// The calls of runs open now, which a question may come inside.
    open: Vec<Open>,
}

struct Open {
    id: u64,
    token: ProgressToken,
    asks: mpsc::Sender<Ask>,
}

/// Keeps a call in [`Held`]'s open calls while it lives.
pub(crate) struct OpenGuard {
    held: Arc<Held>,
    id: u64,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.held.lock().open.retain(|open| open.id != self.id);
    }
}

fn answer(action: ElicitationAction) -> ElicitResult {
    ElicitResult::new(action)
}

impl Held {
    /// Calls of a server whose questions are held `limit` (none: declined).
    pub fn new(limit: Option<Duration>) -> Held {
        Held {
            limit,
            state: Mutex::default(),
        }
    }

    /// How long a question is held open, if at all.
    pub fn limit(&self) -> Option<Duration> {
        self.limit
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a call sent under `token` that a question may come inside: the questions
    /// arrive on the receiver while the guard lives.
    pub(crate) fn open(self: &Arc<Self>, token: ProgressToken) -> (OpenGuard, mpsc::Receiver<Ask>) {
        let (asks, received) = mpsc::channel(1);
        let mut state = self.lock();
        state.next += 1;
        let id = state.next;
        state.open.push(Open { id, token, asks });
        let guard = OpenGuard {
            held: Arc::clone(self),
            id,
        };
        (guard, received)
    }

    /// The open call a question with `meta` came inside: the one under its progress token,
    /// else the only one open.
    fn route(&self, meta: &RequestMetaObject) -> Result<mpsc::Sender<Ask>, &'static str> {
        let state = self.lock();
        if let Some(token) = meta.get_progress_token() {
            if let Some(open) = state.open.iter().find(|open| open.token == token) {
                return Ok(open.asks.clone());
            }
        }
        match state.open.as_slice() {
            [] => Err("no call of a run is open on this connection"),
            [only] => Ok(only.asks.clone()),
            _ => Err("several calls are open on this connection and it did not say which one asks"),
        }
    }

    /// What the server is answered for the question `params` it asked inside an open call: the
    /// operator's reply, or `cancel` once the time runs out (or the call's run stops waiting);
    /// `decline` at once when questions are not held here or the call cannot be told.
    pub async fn ask(&self, params: ElicitRequestParams, meta: &RequestMetaObject) -> ElicitResult {
        let Some(limit) = self.limit else {
            tracing::info!("an MCP server asked a question inside an open call; declined (questions inside a call are not held here)");
            return answer(ElicitationAction::Decline);
        };
        let asks = match self.route(meta) {
            Ok(asks) => asks,
            Err(why) => {
                tracing::info!(
                    why,
                    "an MCP server asked a question inside an open call; declined"
                );
                return answer(ElicitationAction::Decline);
            }
        };
        let (reply, replied) = oneshot::channel();
        if asks.send(Ask { params, reply }).await.is_err() {
            return answer(ElicitationAction::Decline);
        }
        match tokio::time::timeout(limit, replied).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => answer(ElicitationAction::Cancel),
            Err(_) => {
                tracing::info!(
                    limit_secs = limit.as_secs(),
                    "nobody answered an MCP server's question in time; it was answered cancel"
                );
                answer(ElicitationAction::Cancel)
            }
        }
    }
}
