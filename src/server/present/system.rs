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
) -> crate::page_data::system::McpServerView {
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
    crate::page_data::system::McpServerView {
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
        list_changed: status.list_changed_at_ms.map(|at| {
            format!(
                "Its tool list changed {} time(s) while connected, last at {}.",
                status.list_changes,
                format_utc(at)
            )
        }),
        held_calls: (status.held_calls > 0).then(|| {
            format!(
                "{} call(s) held open for an operator's reply to the question it asked inside \
                 them (see the inbox).",
                status.held_calls
            )
        }),
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

/// Today's spend against the daily caps for the system page: every configuration (its cap, if
/// any), then each user who spent today or had a cap raised (the cap every user has).
pub fn spend_today(
    day: i64,
    caps: &[(String, nrllm_core::spend::SpendCaps)],
    counted: Vec<(nrllm_core::spend::SpendKey, nrllm_core::spend::DaySpend)>,
    can_raise: bool,
) -> crate::page_data::system::SpendToday {
    use nrllm_core::spend::{show_day, CapScope, DaySpend};
    use nrllm_core::state::LimitKind;
    let dollars = |micros: u64| LimitKind::CostMicros.show(micros);
    let row = |scope: CapScope, name: &str, cap: Option<u64>, count: DaySpend| {
        let cap = cap.map(|cap| cap.saturating_add(count.raised_micros));
        crate::page_data::system::SpendRow {
            scope: scope.as_str().to_owned(),
            name: name.to_owned(),
            spent: dollars(count.spent_micros),
            cap: cap.map(dollars),
            raised: (count.raised_micros > 0).then(|| dollars(count.raised_micros)),
            reached: cap.is_some_and(|cap| count.spent_micros >= cap),
        }
    };
    let count_of = |scope: CapScope, name: &str| {
        counted
            .iter()
            .find(|(key, _)| key.scope == scope && key.name == name)
            .map(|(_, count)| count.clone())
            .unwrap_or_default()
    };
    let user_cap = caps.first().and_then(|(_, caps)| caps.per_user);
    let mut rows: Vec<_> = caps
        .iter()
        .map(|(name, caps)| {
            row(
                CapScope::Configuration,
                name,
                caps.per_configuration,
                count_of(CapScope::Configuration, name),
            )
        })
        .collect();
    rows.extend(
        counted
            .iter()
            .filter(|(key, _)| key.scope == CapScope::User)
            .map(|(key, count)| row(CapScope::User, &key.name, user_cap, count.clone())),
    );
    crate::page_data::system::SpendToday {
        day: show_day(day),
        rows,
        user_cap: user_cap.map(dollars),
        can_raise,
    }
}
