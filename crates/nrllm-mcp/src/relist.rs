//! A server's tool list changes while it is connected (`notifications/tools/list_changed`): the
//! hub lists its tools again, at most once every [`RELIST_EVERY`] (the notifications between
//! are one relisting). A server of MCP 2026-07-28 sends them on a `subscriptions/listen`
//! request, which [`follow`] opens; an earlier one sends them unasked, to the client's handler.
//!
//! A tool whose server loosened its hints (it said it changes something, and now says it is
//! read-only) is not let through on its word: its calls wait as before until an administrator
//! accepts the change on the system page ([`held`]). A stricter hint applies at once; a tool
//! that is gone leaves the registry, and a waiting turn that still names it is answered that it
//! is no longer available.

use std::sync::Arc;
use std::time::Duration;

use nrllm_types::McpToolStatus;
use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::{Peer, RoleClient};
use tokio::sync::Notify;

/// The least time between two listings of one server's tools after a change.
pub const RELIST_EVERY: Duration = Duration::from_secs(2);

/// What the system page says of a tool held at its old gate.
pub const HELD: &str = "its server now says it is read-only, so it would run without approval; \
     it still waits for approval until an administrator accepts the change";

/// Listens for the server's tool list changes on a subscription (MCP 2026-07-28), telling
/// `relist` of each (and once when it is open, for a change made before), until the connection
/// ends. A server of an earlier version, or one that
/// does not say its list changes, is not asked.
pub(crate) async fn follow(peer: Peer<RoleClient>, relist: Arc<Notify>) {
    let Some(info) = peer.peer_info() else {
        return;
    };
    let changes = info
        .capabilities
        .tools
        .as_ref()
        .and_then(|tools| tools.list_changed)
        == Some(true);
    if info.protocol_version.has_initialize() || !changes {
        return;
    }
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let mut subscription = match peer.listen(filter).await {
        Ok(subscription) => subscription,
        Err(err) => {
            tracing::warn!(%err, "an MCP server's tool list changes cannot be followed");
            return;
        }
    };
    // What changed between the first listing and this subscription was not announced to us.
    relist.notify_one();
    while let Ok(Some(notification)) = subscription.next().await {
        if matches!(
            notification,
            ServerNotification::ToolListChangedNotification(_)
        ) {
            relist.notify_one();
        }
    }
}

/// Whether a tool listed again keeps its old gate: its calls waited before (`before`, what the
/// system page showed), its hints would let them through now (`waits_now` false), and no
/// administrator accepted that (`keep`).
pub(crate) fn held(before: Option<&McpToolStatus>, waits_now: bool, keep: bool) -> bool {
    keep && !waits_now && before.is_some_and(|tool| tool.waits && tool.refused.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(waits: bool) -> McpToolStatus {
        McpToolStatus {
            name: "notes__write_note".into(),
            waits,
            rerun_after_crash: false,
            refused: None,
            held: None,
        }
    }

    #[test]
    fn only_a_loosened_gate_is_held_and_only_until_accepted() {
        // It waited, and would not now: held.
        assert!(held(Some(&status(true)), false, true));
        // Accepted by an administrator: the new hints apply.
        assert!(!held(Some(&status(true)), false, false));
        // Stricter, or unchanged: nothing to hold.
        assert!(!held(Some(&status(false)), true, true));
        assert!(!held(Some(&status(true)), true, true));
        assert!(!held(Some(&status(false)), false, true));
        // New on this listing: its hints decide from the start.
        assert!(!held(None, false, true));
    }
}
