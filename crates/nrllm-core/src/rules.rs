//! Approval rules: an operator's standing decision for calls of one tool — "always approve
//! `send_message` for this run", "… when `to` ends with `@example.com`", "never allow `delete_page`
//! in this configuration". A rule holds for one run or for every run of one configuration. A
//! call a rule decides does not wait: an allowing rule runs it, a denying rule answers it with a
//! refusal the model reads. Either way the decision is journaled like an operator's, naming the
//! rule. A denying rule wins over an allowing one; with several of one kind, the oldest decides.
//!
//! Matching is pure: a rule reads only the call's tool name and arguments.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::clock::format_utc;
use crate::transcript::ToolCall;

/// At most this many conditions per rule.
pub const MAX_CONDITIONS: usize = 8;
/// Longest tool or argument name a rule names.
pub const MAX_NAME_CHARS: usize = nrllm_types::RULE_NAME_CHARS;
/// Longest value a condition compares with.
pub const MAX_VALUE_CHARS: usize = nrllm_types::RULE_VALUE_CHARS;

/// Where a rule holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "target", rename_all = "snake_case")]
pub enum RuleScope {
    /// One run (any operator may add it while deciding that run).
    Run(Uuid),
    /// Every run of this configuration (administrators only).
    Configuration(String),
}

/// What a rule does with the calls it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleEffect {
    /// The call runs without waiting for anyone.
    Allow,
    /// The call is refused; the model reads why.
    Deny,
}

impl RuleEffect {
    pub fn as_str(self) -> &'static str {
        match self {
            RuleEffect::Allow => "allow",
            RuleEffect::Deny => "deny",
        }
    }

    pub fn parse(text: &str) -> Option<RuleEffect> {
        match text {
            "allow" => Some(RuleEffect::Allow),
            "deny" => Some(RuleEffect::Deny),
            _ => None,
        }
    }
}

/// How a condition compares an argument with its value (ignoring case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchOp {
    Equals,
    StartsWith,
    EndsWith,
    Contains,
}

impl MatchOp {
    pub const ALL: [MatchOp; 4] = [
        MatchOp::Equals,
        MatchOp::StartsWith,
        MatchOp::EndsWith,
        MatchOp::Contains,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MatchOp::Equals => "equals",
            MatchOp::StartsWith => "starts_with",
            MatchOp::EndsWith => "ends_with",
            MatchOp::Contains => "contains",
        }
    }

    /// The words an operator reads.
    pub fn words(self) -> &'static str {
        match self {
            MatchOp::Equals => "is",
            MatchOp::StartsWith => "starts with",
            MatchOp::EndsWith => "ends with",
            MatchOp::Contains => "contains",
        }
    }

    pub fn parse(text: &str) -> Option<MatchOp> {
        MatchOp::ALL.into_iter().find(|op| op.as_str() == text)
    }
}

/// One condition on one top-level argument of the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    pub argument: String,
    pub op: MatchOp,
    pub value: String,
}

impl Condition {
    /// Whether `args` (the call's parsed arguments) fit. A missing argument never fits; a
    /// number or a boolean is compared as its JSON text.
    fn holds(&self, args: &Value) -> bool {
        let Some(found) = args.get(&self.argument) else {
            return false;
        };
        let found = match found {
            Value::String(text) => text.to_lowercase(),
            Value::Number(_) | Value::Bool(_) => found.to_string(),
            _ => return false,
        };
        let value = self.value.to_lowercase();
        match self.op {
            MatchOp::Equals => found == value,
            MatchOp::StartsWith => found.starts_with(&value),
            MatchOp::EndsWith => found.ends_with(&value),
            MatchOp::Contains => found.contains(&value),
        }
    }
}

/// A rule as asked for, before it is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleDraft {
    pub scope: RuleScope,
    pub tool: String,
    pub effect: RuleEffect,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// Why a rule cannot be stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
}

fn invalid(field: &str, message: impl Into<String>) -> RuleError {
    RuleError::Invalid {
        field: field.to_owned(),
        message: message.into(),
    }
}

/// The condition a form asks for, from its three fields (named with `prefix`, e.g.
/// `calls[0].rule_`, in a refusal): none when `argument` is empty, else all three.
pub fn form_conditions(
    argument: Option<&str>,
    op: Option<&str>,
    value: Option<&str>,
    prefix: &str,
) -> Result<Vec<Condition>, RuleError> {
    let argument = argument.unwrap_or_default().trim();
    if argument.is_empty() {
        return Ok(Vec::new());
    }
    let op = MatchOp::parse(op.unwrap_or_default().trim()).ok_or_else(|| {
        invalid(
            &format!("{prefix}op"),
            "equals, starts_with, ends_with or contains",
        )
    })?;
    let value = value.unwrap_or_default();
    if value.is_empty() {
        return Err(invalid(
            &format!("{prefix}value"),
            format!("give the value {argument} is compared with"),
        ));
    }
    Ok(vec![Condition {
        argument: argument.to_owned(),
        op,
        value: value.to_owned(),
    }])
}

impl RuleDraft {
    /// Checks the sizes and names; `Ok` means the store may keep it.
    pub fn check(&self) -> Result<(), RuleError> {
        let name_ok = |name: &str| {
            !name.trim().is_empty()
                && name.chars().count() <= MAX_NAME_CHARS
                && !name.chars().any(char::is_control)
        };
        if !name_ok(&self.tool) {
            return Err(invalid(
                "tool",
                format!("give a tool name of 1 to {MAX_NAME_CHARS} characters"),
            ));
        }
        if let RuleScope::Configuration(name) = &self.scope {
            if !name_ok(name) {
                return Err(invalid("configuration", "give a configuration name"));
            }
        }
        if self.conditions.len() > MAX_CONDITIONS {
            return Err(invalid(
                "conditions",
                format!("at most {MAX_CONDITIONS} conditions"),
            ));
        }
        for condition in &self.conditions {
            if !name_ok(&condition.argument) {
                return Err(invalid(
                    "argument",
                    format!("give an argument name of 1 to {MAX_NAME_CHARS} characters"),
                ));
            }
            if condition.value.is_empty() || condition.value.chars().count() > MAX_VALUE_CHARS {
                return Err(invalid(
                    "value",
                    format!("give a value of 1 to {MAX_VALUE_CHARS} characters"),
                ));
            }
        }
        Ok(())
    }
}

/// A stored rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRule {
    pub id: i64,
    pub scope: RuleScope,
    pub tool: String,
    pub effect: RuleEffect,
    pub conditions: Vec<Condition>,
    pub created_by: String,
    pub created_at_ms: i64,
}

impl ApprovalRule {
    /// Whether the rule decides `call` (with its arguments parsed as `args`).
    fn matches(&self, call: &ToolCall, args: Option<&Value>) -> bool {
        if self.tool != call.name {
            return false;
        }
        match args {
            Some(args) => self.conditions.iter().all(|c| c.holds(args)),
            // Arguments that are not JSON only fit a rule without conditions.
            None => self.conditions.is_empty(),
        }
    }

    /// "always approve send_message when to ends with “@example.com” — for this run".
    pub fn describe(&self) -> String {
        let verb = match self.effect {
            RuleEffect::Allow => "always approve",
            RuleEffect::Deny => "never allow",
        };
        let when = if self.conditions.is_empty() {
            String::new()
        } else {
            let parts: Vec<String> = self
                .conditions
                .iter()
                .map(|c| format!("{} {} “{}”", c.argument, c.op.words(), c.value))
                .collect();
            format!(" when {}", parts.join(" and "))
        };
        let scope = match &self.scope {
            RuleScope::Run(_) => "for this run".to_owned(),
            RuleScope::Configuration(name) => format!("in configuration {name}"),
        };
        format!("{verb} {}{when} {scope}", self.tool)
    }

    /// What a call's step says about the rule that decided it.
    pub fn note(&self) -> String {
        let did = match self.effect {
            RuleEffect::Allow => "auto-approved",
            RuleEffect::Deny => "refused",
        };
        format!(
            "{did} by rule {} ({}; added by {} at {})",
            self.id,
            self.describe(),
            self.created_by,
            format_utc(self.created_at_ms)
        )
    }
}

/// The rule that decides `call`, if any: a denying rule first, then an allowing one; the oldest
/// of each kind.
pub fn rule_for<'a>(rules: &'a [ApprovalRule], call: &ToolCall) -> Option<&'a ApprovalRule> {
    let args = call.parsed_arguments().ok();
    let matching = |effect: RuleEffect| {
        rules
            .iter()
            .filter(|rule| rule.effect == effect && rule.matches(call, args.as_ref()))
            .min_by_key(|rule| rule.id)
    };
    matching(RuleEffect::Deny).or_else(|| matching(RuleEffect::Allow))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(id: i64, tool: &str, effect: RuleEffect, conditions: Vec<Condition>) -> ApprovalRule {
        ApprovalRule {
            id,
            scope: RuleScope::Configuration("demo".into()),
            tool: tool.into(),
            effect,
            conditions,
            created_by: "alice".into(),
            created_at_ms: 0,
        }
    }

    fn to(op: MatchOp, value: &str) -> Condition {
        Condition {
            argument: "to".into(),
            op,
            value: value.into(),
        }
    }

    fn message(to: &str) -> ToolCall {
        ToolCall::new(
            "c",
            "send_message",
            &json!({"to": to, "subject": "s", "body": "b"}),
        )
    }

    #[test]
    fn conditions_compare_one_argument_ignoring_case() {
        let rules = [rule(
            1,
            "send_message",
            RuleEffect::Allow,
            vec![to(MatchOp::EndsWith, "@example.com")],
        )];
        assert!(rule_for(&rules, &message("team@example.com")).is_some());
        assert!(rule_for(&rules, &message("Team@EXAMPLE.com")).is_some());
        assert!(rule_for(&rules, &message("team@example.com.evil")).is_none());
        // Another tool, or a call without the argument, is not matched.
        let other = ToolCall::new("c", "update_page", &json!({"to": "x@example.com"}));
        assert!(rule_for(&rules, &other).is_none());
        let missing = ToolCall::new("c", "send_message", &json!({"subject": "s"}));
        assert!(rule_for(&rules, &missing).is_none());
        for (op, value, fits) in [
            (MatchOp::Equals, "team@example.com", true),
            (MatchOp::Equals, "team@", false),
            (MatchOp::StartsWith, "team@", true),
            (MatchOp::Contains, "@exam", true),
            (MatchOp::Contains, "nobody", false),
        ] {
            let rules = [rule(
                1,
                "send_message",
                RuleEffect::Allow,
                vec![to(op, value)],
            )];
            assert_eq!(
                rule_for(&rules, &message("team@example.com")).is_some(),
                fits,
                "{op:?} {value}"
            );
        }
    }

    #[test]
    fn a_denying_rule_wins_and_the_oldest_of_a_kind_decides() {
        let rules = [
            rule(5, "send_message", RuleEffect::Allow, vec![]),
            rule(3, "send_message", RuleEffect::Allow, vec![]),
            rule(
                9,
                "send_message",
                RuleEffect::Deny,
                vec![to(MatchOp::EndsWith, "@rival.example")],
            ),
        ];
        assert_eq!(rule_for(&rules, &message("a@example.com")).unwrap().id, 3);
        assert_eq!(rule_for(&rules, &message("a@rival.example")).unwrap().id, 9);
    }

    #[test]
    fn the_note_names_the_rule_who_added_it_and_when() {
        let rule = rule(
            7,
            "send_message",
            RuleEffect::Allow,
            vec![to(MatchOp::EndsWith, "@example.com")],
        );
        assert_eq!(
            rule.note(),
            "auto-approved by rule 7 (always approve send_message when to ends with \
             “@example.com” in configuration demo; added by alice at 1970-01-01 00:00:00 UTC)"
        );
    }

    #[test]
    fn drafts_are_bounded() {
        let good = RuleDraft {
            scope: RuleScope::Run(Uuid::nil()),
            tool: "send_message".into(),
            effect: RuleEffect::Allow,
            conditions: vec![to(MatchOp::EndsWith, "@example.com")],
        };
        assert!(good.check().is_ok());
        let mut long = good.clone();
        long.conditions[0].value = "x".repeat(MAX_VALUE_CHARS + 1);
        assert!(matches!(long.check(), Err(RuleError::Invalid { field, .. }) if field == "value"));
        let mut unnamed = good.clone();
        unnamed.tool = " ".into();
        assert!(
            matches!(unnamed.check(), Err(RuleError::Invalid { field, .. }) if field == "tool")
        );
        let mut many = good;
        many.conditions = vec![to(MatchOp::Equals, "a"); MAX_CONDITIONS + 1];
        assert!(many.check().is_err());
    }
}
