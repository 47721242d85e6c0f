//! The server functions of approval rules (`nrllm_rules_list`, `nrllm_rule_add`,
//! `nrllm_rule_remove`). A run's rule may be added and removed by whoever may decide that run; a
//! configuration's rule only by an administrator — the core's authority says, through the run
//! service. Rules asked for from the approval panel arrive with the decision instead
//! (`nrllm_tool_resume`).

// A server function's arguments are its form fields, one per field.
#![allow(clippy::too_many_arguments)]

use leptos::prelude::*;

use crate::error::AppError;
use crate::page_data::RulesView;

/// Every approval rule (newest first), and the tools and configurations a new rule can name.
#[server(endpoint = "nrllm_rules_list")]
pub async fn nrllm_rules_list() -> Result<RulesView, AppError> {
    use crate::server::{present, request::require, request::state};
    use nrllm_types::Role;
    let who = require(Role::Viewer)?;
    let state = state()?;
    let rules = state
        .store
        .list_rules(ssr::LISTED)
        .await
        .map_err(|err| AppError::internal("listing approval rules", err))?;
    Ok(RulesView {
        rules: rules
            .iter()
            .map(|rule| present::rule_view(rule, ssr::may_change(&who, rule)))
            .collect(),
        tools: state
            .registry
            .specs()
            .into_iter()
            .map(|spec| spec.name)
            .collect(),
        configurations: state.configurations.names(),
        can_add: who.role.allows(Role::Admin),
    })
}

/// Adds an approval rule: `effect` `allow` or `deny` for calls of `tool`, optionally only when
/// argument `argument` compares with `value` by `op` (`equals`, `starts_with`, `ends_with`,
/// `contains`; case is ignored). `scope` `run` (with `run_id`) or `configuration` (with
/// `configuration`; administrators only). Returns the rule's id.
#[server(endpoint = "nrllm_rule_add")]
pub async fn nrllm_rule_add(
    scope: String,
    tool: String,
    effect: String,
    run_id: Option<String>,
    configuration: Option<String>,
    argument: Option<String>,
    op: Option<String>,
    value: Option<String>,
) -> Result<i64, AppError> {
    use crate::server::{request::require, request::state};
    use nrllm_core::rules::{RuleDraft, RuleEffect, RuleScope};
    let who = require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    let scope = match scope.trim() {
        "run" => RuleScope::Run(crate::api::checks::parse_run_id(
            run_id.as_deref().unwrap_or_default(),
        )?),
        "configuration" => {
            let name = configuration.unwrap_or_default().trim().to_owned();
            if !state.configurations.names().contains(&name) {
                return Err(AppError::invalid(
                    "configuration",
                    "choose one of the configurations",
                ));
            }
            RuleScope::Configuration(name)
        }
        _ => return Err(AppError::invalid("scope", "run or configuration")),
    };
    let tool = tool.trim().to_owned();
    if state.registry.get(&tool).is_none() {
        return Err(AppError::invalid("tool", "choose one of the tools"));
    }
    let draft = RuleDraft {
        scope,
        tool,
        effect: RuleEffect::parse(effect.trim())
            .ok_or_else(|| AppError::invalid("effect", "allow or deny"))?,
        conditions: nrllm_core::rules::form_conditions(
            argument.as_deref(),
            op.as_deref(),
            value.as_deref(),
            "",
        )?,
    };
    // Whoever may not decide the run may not decide its calls in advance either: the run
    // service asks the core's authority.
    let rule = state.runs.add_rule(&who, &draft).await?;
    ssr::back_to(&rule);
    Ok(rule.id)
}

/// Removes an approval rule (a run's: whoever may decide the run; a configuration's: an
/// administrator).
#[server(endpoint = "nrllm_rule_remove")]
pub async fn nrllm_rule_remove(id: String) -> Result<(), AppError> {
    use crate::server::{request::require, request::state};
    let who = require(nrllm_types::Role::Viewer)?;
    let state = state()?;
    let id: i64 = id
        .trim()
        .parse()
        .map_err(|_| AppError::invalid("id", "a rule's number"))?;
    let removed = state.runs.remove_rule(&who, id).await?;
    ssr::back_to(&removed);
    Ok(())
}

#[cfg(feature = "ssr")]
pub mod ssr {
    use nrllm_core::rules::{ApprovalRule, RuleScope};
    use nrllm_store::accounts::Principal;

    /// The most rules listed at once.
    pub const LISTED: u32 = 1000;

    /// Whether `who`'s role lets them remove `rule` (for showing the button; removing it asks
    /// the authority, four-eyes included).
    pub fn may_change(who: &Principal, rule: &ApprovalRule) -> bool {
        who.role
            .allows(nrllm_core::authority::Act::Rule(&rule.scope).needs())
    }

    /// A browser goes back to where the rule shows: its run's page, or the rules page.
    pub fn back_to(rule: &ApprovalRule) {
        let path = match &rule.scope {
            RuleScope::Run(id) => format!("/runs/{id}"),
            RuleScope::Configuration(_) => "/rules".to_owned(),
        };
        if crate::server::wants_html() {
            leptos_axum::redirect(&path);
        }
    }
}
