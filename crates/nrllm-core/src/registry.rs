//! The tool registry and the gate. The gate decides which tools a run may use: the run's allow-list
//! ∩ the tools enabled now (∩ non-admin tools, unless the run is an administrator's). It is applied
//! when tools are offered, when a call is executed, and again when a suspended run resumes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::rules::{rule_for, ApprovalRule, RuleEffect};
use crate::tool::{DynTool, Tool, ToolSpec, TypedTool};
use crate::transcript::ToolCall;

/// How one call of a model's turn may go ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pass {
    /// It runs at once: a tool without effects (or one not offered, answered as such).
    Free,
    /// It waits for an operator, and holds its whole turn.
    Ask,
    /// It is a question for the operator (`ask_operator`): the turn waits for the answer.
    Input,
    /// Decided without an operator — by an approval rule, or (`allow`) by its tool's own check
    /// of the arguments. `note` says which, for its step. An allowed call has an effect, so it is
    /// journaled like an approved one before it runs.
    Auto { allow: bool, note: String },
}

/// The tools a run was started with permission to use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "tools", rename_all = "snake_case")]
pub enum AllowList {
    /// Every enabled tool.
    #[default]
    All,
    /// Only these tools (by name).
    Only(BTreeSet<String>),
}

impl AllowList {
    /// An allow-list of the named tools.
    pub fn only<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> AllowList {
        AllowList::Only(names.into_iter().map(Into::into).collect())
    }

    fn allows(&self, name: &str) -> bool {
        match self {
            AllowList::All => true,
            AllowList::Only(names) => names.contains(name),
        }
    }
}

/// Tools by name.
type Tools = BTreeMap<String, Arc<dyn DynTool>>;

/// Every tool this process knows, and which of them are enabled now.
#[derive(Default)]
pub struct ToolRegistry {
    tools: Tools,
    /// Tools that joined from a source outside the program (an MCP server's), by source. A
    /// source's set is replaced whole when it connects again.
    sources: RwLock<BTreeMap<String, Tools>>,
    /// Enable/disable choices that override each tool's default.
    enabled_overrides: RwLock<BTreeMap<String, bool>>,
    /// Groups switched off (or on) as a whole; a tool is enabled only if its group is.
    group_overrides: RwLock<BTreeMap<String, bool>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A name registered twice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a tool named `{0}` is already registered")]
pub struct DuplicateTool(pub String);

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> ToolRegistry {
        ToolRegistry::default()
    }

    /// Adds a tool.
    pub fn register<T: Tool>(&mut self, tool: T) -> Result<&mut Self, DuplicateTool> {
        if self.tools.contains_key(T::NAME) {
            return Err(DuplicateTool(T::NAME.to_owned()));
        }
        self.tools
            .insert(T::NAME.to_owned(), TypedTool::erase(tool));
        Ok(self)
    }

    /// Sets the tools `source` offers now, replacing the ones it offered before. A tool whose
    /// name another tool (of the program or of another source) already has is left out; the
    /// refused names are returned.
    pub fn set_source(&self, source: &str, tools: Vec<Arc<dyn DynTool>>) -> Vec<DuplicateTool> {
        let Ok(mut sources) = self.sources.write() else {
            return Vec::new();
        };
        let mut joined = BTreeMap::new();
        let mut refused = Vec::new();
        for tool in tools {
            let name = tool.spec().name.clone();
            let taken = self.tools.contains_key(&name)
                || joined.contains_key(&name)
                || sources
                    .iter()
                    .any(|(other, set)| other != source && set.contains_key(&name));
            if taken {
                refused.push(DuplicateTool(name));
            } else {
                joined.insert(name, tool);
            }
        }
        sources.insert(source.to_owned(), joined);
        refused
    }

    /// The tool with this name, enabled or not.
    pub fn get(&self, name: &str) -> Option<Arc<dyn DynTool>> {
        if let Some(tool) = self.tools.get(name) {
            return Some(Arc::clone(tool));
        }
        let sources = self.sources.read().ok()?;
        sources
            .values()
            .find_map(|set| set.get(name).map(Arc::clone))
    }

    /// Every registered tool's spec — the program's and the sources' — by name.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self.tools.values().map(|t| t.spec().clone()).collect();
        if let Ok(sources) = self.sources.read() {
            specs.extend(sources.values().flatten().map(|(_, t)| t.spec().clone()));
        }
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        specs
    }

    /// Enables or disables a tool for every run from now on (also runs waiting for approval).
    pub fn set_enabled(&self, name: &str, enabled: bool) {
        if let Ok(mut overrides) = self.enabled_overrides.write() {
            overrides.insert(name.to_owned(), enabled);
        }
    }

    /// Enables or disables a whole group of tools.
    pub fn set_group_enabled(&self, group: &str, enabled: bool) {
        if let Ok(mut overrides) = self.group_overrides.write() {
            overrides.insert(group.to_owned(), enabled);
        }
    }

    /// Whether a group is enabled (groups are, unless switched off).
    pub fn is_group_enabled(&self, group: &str) -> bool {
        self.group_overrides
            .read()
            .ok()
            .and_then(|overrides| overrides.get(group).copied())
            .unwrap_or(true)
    }

    /// Whether a registered tool is enabled now: its group is, and the tool is (by its own
    /// setting, or by default).
    pub fn is_enabled(&self, name: &str) -> bool {
        let Some(tool) = self.get(name) else {
            return false;
        };
        self.is_enabled_tool(&tool)
    }

    fn is_enabled_tool(&self, tool: &Arc<dyn DynTool>) -> bool {
        let name = &tool.spec().name;
        self.is_group_enabled(&tool.spec().group)
            && self
                .enabled_overrides
                .read()
                .ok()
                .and_then(|overrides| overrides.get(name).copied())
                .unwrap_or(tool.spec().enabled_by_default)
    }

    /// The gate for a run: the tools it is offered now.
    pub fn gate(&self, allow_list: &AllowList, admin: bool) -> Gate {
        let sources = self.sources.read().ok();
        let offered = self
            .tools
            .iter()
            .chain(
                sources
                    .iter()
                    .flat_map(|sources| sources.values().flatten()),
            )
            .filter(|(name, tool)| {
                allow_list.allows(name)
                    && self.is_enabled_tool(tool)
                    && (admin || !tool.spec().admin_only)
            })
            .map(|(name, tool)| (name.clone(), Arc::clone(tool)))
            .collect();
        Gate { offered }
    }
}

/// The tools one run may use at one moment.
#[derive(Clone)]
pub struct Gate {
    offered: BTreeMap<String, Arc<dyn DynTool>>,
}

impl Gate {
    /// The offered tool, if `name` is offered.
    pub fn tool(&self, name: &str) -> Option<&Arc<dyn DynTool>> {
        self.offered.get(name)
    }

    /// Specs of the offered tools, in name order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.offered
            .values()
            .map(|tool| tool.spec().clone())
            .collect()
    }

    /// Names of the offered tools.
    pub fn names(&self) -> Vec<String> {
        self.offered.keys().cloned().collect()
    }

    /// Whether calls to `name` may have to wait for approval (only offered tools can).
    pub fn requires_approval(&self, name: &str) -> bool {
        self.tool(name)
            .is_some_and(|tool| tool.spec().requires_approval)
    }

    /// How `call` may go ahead under `rules`, when `approvals` people must approve it: a denying
    /// rule refuses it (whatever the tool); an allowing rule lets a tool with effects run;
    /// otherwise the tool's own check of the arguments says whether it waits for an operator. A
    /// call that needs more than one person's approval ([`crate::quorum`]) is let through by
    /// neither: it waits. A call of a tool not offered is `Free` (it is answered as not
    /// available, and nothing runs).
    pub fn pass(&self, call: &ToolCall, rules: &[ApprovalRule], approvals: u32) -> Pass {
        let Some(tool) = self.tool(&call.name) else {
            return Pass::Free;
        };
        if tool.spec().asks_operator {
            return Pass::Input;
        }
        let effects = tool.spec().requires_approval;
        let one_decides = approvals <= 1;
        match rule_for(rules, call) {
            Some(rule) if rule.effect == RuleEffect::Deny => {
                return Pass::Auto {
                    allow: false,
                    note: rule.note(),
                }
            }
            Some(rule) if effects && one_decides => {
                return Pass::Auto {
                    allow: true,
                    note: rule.note(),
                }
            }
            _ => {}
        }
        if !effects {
            return Pass::Free;
        }
        let args = call.parsed_arguments().unwrap_or(serde_json::Value::Null);
        if !one_decides || tool.needs_approval(&args) {
            Pass::Ask
        } else {
            Pass::Auto {
                allow: true,
                note: tool.passed_note(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{probe_registry, Probe, ReadNote};

    fn registry() -> ToolRegistry {
        probe_registry(&Probe::default())
    }

    #[test]
    fn offered_is_the_allow_list_intersected_with_enabled() {
        let registry = registry();
        assert_eq!(
            registry.gate(&AllowList::All, false).names(),
            ["read_note", "write_note"]
        );
        assert_eq!(
            registry.gate(&AllowList::All, true).names(),
            ["admin_note", "read_note", "write_note"]
        );
        assert_eq!(
            registry
                .gate(&AllowList::only(["write_note", "nope"]), false)
                .names(),
            ["write_note"]
        );
        registry.set_enabled("write_note", false);
        assert_eq!(registry.gate(&AllowList::All, false).names(), ["read_note"]);
        // A tool that is not offered never asks for approval.
        assert!(!registry
            .gate(&AllowList::All, false)
            .requires_approval("write_note"));
        registry.set_group_enabled("general", false);
        assert!(registry.gate(&AllowList::All, true).names().is_empty());
        registry.set_group_enabled("general", true);
        registry.set_enabled("write_note", true);
        assert_eq!(
            registry.gate(&AllowList::All, false).names(),
            ["read_note", "write_note"]
        );
        assert!(registry
            .gate(&AllowList::All, false)
            .requires_approval("write_note"));
    }

    #[test]
    fn a_source_joins_replaces_its_tools_and_never_takes_a_name() {
        let registry = registry();
        let probe = || probe_registry(&Probe::default()).get("read_note").unwrap();
        // A source cannot take a program tool's name (nor another source's).
        let refused = registry.set_source("notes", vec![probe()]);
        assert_eq!(refused, [DuplicateTool("read_note".into())]);
        assert_eq!(registry.specs().len(), 3);
        let other = ToolRegistry::new();
        let refused = other.set_source("a", vec![probe()]);
        assert!(refused.is_empty());
        assert_eq!(other.gate(&AllowList::All, false).names(), ["read_note"]);
        assert_eq!(
            other.set_source("b", vec![probe()]),
            [DuplicateTool("read_note".into())]
        );
        // Connecting again replaces the source's set whole.
        assert!(other.set_source("a", Vec::new()).is_empty());
        assert!(other.get("read_note").is_none());
        assert!(other.set_source("b", vec![probe()]).is_empty());
        assert!(other.is_enabled("read_note"));
    }

    #[test]
    fn a_name_can_be_registered_once() {
        let mut registry = registry();
        let err = registry.register(ReadNote(Probe::default())).unwrap_err();
        assert_eq!(err, DuplicateTool("read_note".into()));
    }
}
