//! What this program is to a server: its name and capabilities, and what it does with the
//! server's notifications — a call's progress goes to whoever awaits that call
//! ([`crate::tool::McpTool`], which hands it to the run's live views).

use std::sync::Arc;

use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationCapability,
    FormElicitationCapability, Implementation, ProgressNotificationParam, UrlElicitationCapability,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use rmcp::{ClientHandler, ErrorData};
use tokio::sync::Notify;

use crate::held::Held;

/// The client side of one connection.
#[derive(Clone)]
pub struct Client {
    info: ClientConfig,
    progress: ProgressDispatcher,
    /// Told when the server says its tool list changed (servers before 2026-07-28 say it unasked;
    /// later ones on a subscription, [`crate::relist::follow`]).
    relist: Arc<Notify>,
    /// Where a question asked inside an open call goes ([`crate::held`]).
    held: Arc<Held>,
}

impl Client {
    /// A client whose calls' progress goes through `progress` and whose questions asked inside
    /// a call go to `held` (its server's, kept across reconnections).
    pub fn new(progress: ProgressDispatcher, relist: Arc<Notify>, held: Arc<Held>) -> Client {
        // Forms and links, asked the way that lets a run wait durably ([`crate::elicit`]) or
        // inside an open call ([`crate::held`]).
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(
            ElicitationCapability::new()
                .with_form(FormElicitationCapability::default())
                .with_url(UrlElicitationCapability::new()),
        );
        Client {
            info: ClientConfig::new(
                capabilities,
                Implementation::new("nrllm-playground", env!("CARGO_PKG_VERSION")),
            ),
            progress,
            relist,
            held,
        }
    }
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    /// A question a server of a version before 2026-07-28 asks inside an open call: answered
    /// when the operator replies, or `cancel` when its time runs out ([`crate::held`]).
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(self.held.ask(request, &context.meta).await)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.relist.notify_one();
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // A token nobody awaits (a call already answered, or made up) is dropped there.
        self.progress.handle_notification(params).await;
    }
}
