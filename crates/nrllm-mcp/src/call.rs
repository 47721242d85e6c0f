//! One `tools/call` on the wire while it is open: its server's progress notifications handed to
//! the run's live views, a question its server asks inside it handed to the tool
//! ([`crate::held`]), its time limit counted only while nobody waits for the operator, and a
//! cancel sent to the server when nobody waits for it any more.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use nrllm_core::tool::{CallProgress, Progress};
use rmcp::handler::client::progress::{ProgressDispatcher, ProgressSubscriber};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, InputRequiredResult, ProgressToken, RequestId, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use tokio::sync::mpsc;

use crate::held::{Ask, Held, OpenGuard};

/// A server's answer to `tools/call`: the result, or the input it needs first.
pub(crate) enum Answered {
    Complete(CallToolResult),
    Input(InputRequiredResult),
}

/// What came next on an open call.
pub(crate) enum Next {
    Answered(Result<Answered, ServiceError>),
    /// Its server asked a question inside it.
    Asked(Ask),
    /// Its time limit ran out (the server is told to cancel it when it is dropped).
    TimedOut,
}

type Response = Pin<Box<dyn Future<Output = Result<ServerResult, ServiceError>> + Send>>;

/// A sent call whose answer has not come yet.
pub(crate) struct Running {
    answer: Response,
    abandoned: CancelOnDrop,
    dispatcher: ProgressDispatcher,
    token: ProgressToken,
    subscriber: Option<ProgressSubscriber>,
    /// Questions asked inside it, when its server's questions are held.
    asks: Option<(OpenGuard, mpsc::Receiver<Ask>)>,
    /// What is left of its time limit.
    remaining: Duration,
}

impl Running {
    /// Sends `tools/call` with `params` through `peer`, with `limit` to answer in. The SDK gives
    /// each request a progress token of its own; its progress (through `dispatcher`) and, when
    /// `held` holds questions, the questions asked inside it are told apart by it.
    pub(crate) async fn send(
        peer: &Peer<RoleClient>,
        params: CallToolRequestParams,
        (dispatcher, held): (&ProgressDispatcher, Option<&Arc<Held>>),
        limit: Duration,
    ) -> Result<Running, ServiceError> {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await?;
        let token = handle.progress_token.clone();
        let abandoned = CancelOnDrop {
            peer: peer.clone(),
            id: Some(handle.id.clone()),
        };
        Ok(Running {
            asks: held
                .filter(|held| held.limit().is_some())
                .map(|held| held.open(token.clone())),
            answer: Box::pin(handle.await_response()),
            abandoned,
            dispatcher: dispatcher.clone(),
            token,
            subscriber: None,
            remaining: limit,
        })
    }

    /// Awaits what comes next, handing progress to `progress` meanwhile.
    pub(crate) async fn next(&mut self, progress: Option<&CallProgress>) -> Next {
        let started = Instant::now();
        if progress.is_some() && self.subscriber.is_none() {
            self.subscriber = Some(self.dispatcher.subscribe(self.token.clone()).await);
        }
        let deadline = tokio::time::sleep(self.remaining);
        tokio::pin!(deadline);
        loop {
            let note = async {
                match self.subscriber.as_mut() {
                    Some(subscriber) => subscriber.next().await,
                    None => std::future::pending().await,
                }
            };
            let asked = async {
                match self.asks.as_mut() {
                    Some((_, asks)) => asks.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                answer = &mut self.answer => {
                    self.abandoned.id = None;
                    return Next::Answered(answer.and_then(|answer| match answer {
                        ServerResult::CallToolResult(result) => Ok(Answered::Complete(result)),
                        ServerResult::InputRequiredResult(input) => Ok(Answered::Input(input)),
                        _ => Err(ServiceError::UnexpectedResponse),
                    }));
                }
                Some(note) = note => {
                    let report = Progress::bounded(note.progress, note.total, note.message.as_deref());
                    if let (Some(report), Some(progress)) = (report, progress) {
                        progress.report(&report);
                    }
                }
                Some(ask) = asked => {
                    // The time limit waits while the operator does.
                    self.remaining = self.remaining.saturating_sub(started.elapsed());
                    // Nobody reads its progress while it is parked; the dispatcher drops it.
                    self.subscriber = None;
                    return Next::Asked(ask);
                }
                () = &mut deadline => return Next::TimedOut,
            }
        }
    }
}

/// A request whose caller stopped waiting: the server is told to cancel it.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        tokio::spawn(async move {
            let cancel = CancelledNotificationParam::new(
                Some(id),
                Some("the run stopped waiting for the call".to_owned()),
            );
            let _ = peer.notify_cancelled(cancel).await;
        });
    }
}
