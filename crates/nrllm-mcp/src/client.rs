//! What this program is to a server: its name and capabilities, and what it does with the
//! server's notifications — a call's progress goes to whoever awaits that call
//! ([`crate::tool::McpTool`], which hands it to the run's live views).

use std::sync::Arc;

use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, FormElicitationCapability, Implementation, ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use rmcp::{ClientHandler, ErrorData};
use tokio::sync::Notify;

/// The client side of one connection.
#[derive(Clone)]
pub struct Client {
    info: ClientConfig,
    progress: ProgressDispatcher,
    /// Told when the server says its tool list changed (servers before 2026-07-28 say it unasked;
    /// later ones on a subscription, [`crate::relist::follow`]).
    relist: Arc<Notify>,
}

impl Client {
    /// A client whose calls' progress goes through `progress` (its server's, kept across
    /// reconnections).
    pub fn new(progress: ProgressDispatcher, relist: Arc<Notify>) -> Client {
        // Form questions, asked the way that lets a run wait durably ([`crate::elicit`]).
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
        Client {
            info: ClientConfig::new(
                capabilities,
                Implementation::new("nrllm-playground", env!("CARGO_PKG_VERSION")),
            ),
            progress,
            relist,
        }
    }
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    /// A question a server of a version before 2026-07-28 asks inside an open request: not
    /// shown yet (only the questions that come as a call's "input required" are, durably —
    /// [`crate::elicit`]), so it is declined, and the log says so.
    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        tracing::info!("an MCP server asked a question inside an open request; declined (only questions that come as \"input required\" are shown)");
        Ok(ElicitResult::new(ElicitationAction::Decline))
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
