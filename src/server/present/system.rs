//! Tools, MCP servers and approval rules as the system and rules pages show them.

use nrllm_core::clock::format_utc;
use nrllm_core::rules::{ApprovalRule, RuleScope};

use crate::page_data::RuleView;

/// An MCP server's status for the system page.
/// An MCP server as the system page shows it; its command, arguments or URL (which may hold a
/// secret) only to an administrator (`admin`).
pub fn mcp_server_view(
    status: nrllm_mcp::hub::Status,
    admin: bool,
) -> crate::page_data::McpServerView {
    use nrllm_mcp::hub::State;
    use nrllm_types::McpState;
    let (state, reason, retry_at_ms) = match status.state {
        State::Connected => (McpState::Connected, None, None),
        State::Connecting => (McpState::Connecting, None, None),
        State::Failed {
            reason,
            retry_at_ms,
        } => (McpState::Failed, Some(reason), retry_at_ms),
    };
    crate::page_data::McpServerView {
        name: status.name,
        endpoint: match admin {
            true => status.endpoint,
            false => "(its command or address is shown to administrators)".to_owned(),
        },
        state,
        // A failure names the command or address too.
        reason: reason.map(|reason| match admin {
            true => reason,
            false => "it could not be reached (an administrator sees why)".to_owned(),
        }),
        retry_at: retry_at_ms.map(format_utc),
        server_info: status.server_info,
        tools: status.tools,
        connections: status.connections,
    }
}

/// Every tool with its group, whether it needs approval and whether it is enabled.
pub fn tool_views(
    registry: &nrllm_core::registry::ToolRegistry,
) -> Vec<crate::page_data::ToolView> {
    registry
        .specs()
        .into_iter()
        .map(|spec| crate::page_data::ToolView {
            name: spec.name.clone(),
            description: spec.description.clone(),
            group: spec.group.clone(),
            requires_approval: spec.requires_approval,
            approval_per_call: spec.approval_per_call,
            enabled: registry.is_enabled(&spec.name),
        })
        .collect()
}

/// One approval rule as listed; `removable` if the viewer may remove it.
pub fn rule_view(rule: &ApprovalRule, removable: bool) -> RuleView {
    let (run_id, configuration) = match &rule.scope {
        RuleScope::Run(id) => (Some(id.to_string()), None),
        RuleScope::Configuration(name) => (None, Some(name.clone())),
    };
    RuleView {
        id: rule.id,
        description: rule.describe(),
        run_id,
        configuration,
        tool: rule.tool.clone(),
        effect: rule.effect.as_str().to_owned(),
        created_by: rule.created_by.clone(),
        created: format_utc(rule.created_at_ms),
        removable,
    }
}
