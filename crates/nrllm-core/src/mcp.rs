//! What the gate makes of a Model Context Protocol server's tools (issue #21): the name a tool
//! joins the registry under, whether its calls wait for an operator, and whether a call a crash
//! cut off may be run again.
//!
//! A server describes each tool with hints (`readOnlyHint`, `destructiveHint`,
//! `idempotentHint`, `openWorldHint`). They are the server's word, not proof, so they only ever
//! decide for the operator where the operator's own policy — per server, and per tool — leaves
//! it to them (`annotations`, the default). Read-only is the one hint that lifts the gate: a
//! tool that does not say it is read-only writes something, whatever else it says, so its calls
//! wait. Everything here is pure; the client that talks to servers lives with the app.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A tool's hints as its server declared them (`None`: not said).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Annotations {
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub idempotent: Option<bool>,
    pub open_world: Option<bool>,
}

/// Who decides whether a tool's calls wait for an operator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalPolicy {
    /// Every call waits.
    Always,
    /// No call waits.
    Never,
    /// The tool's own hints decide: read-only calls go ahead, every other call waits.
    #[default]
    Annotations,
}

/// An operator's approval policy for one server: its default, and tools that differ from it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerPolicy {
    #[serde(default)]
    pub approval: ApprovalPolicy,
    /// By the tool's name on its server (not the registry name).
    #[serde(default)]
    pub tools: BTreeMap<String, ApprovalPolicy>,
}

impl ServerPolicy {
    /// Whether calls of `tool` (its name on the server) with `annotations` wait for an operator:
    /// the tool's policy if the operator set one, else the server's, else the hints.
    pub fn requires_approval(&self, tool: &str, annotations: &Annotations) -> bool {
        match self.tools.get(tool).copied().unwrap_or(self.approval) {
            ApprovalPolicy::Always => true,
            ApprovalPolicy::Never => false,
            ApprovalPolicy::Annotations => annotations.read_only != Some(true),
        }
    }
}

/// Whether a call the server says is idempotent, cut off by a crash after it was sent, is sent
/// again with the same effect key rather than left for an operator as "outcome unknown". Only a
/// tool that says so: an absent hint is not a promise.
pub fn rerun_after_crash(annotations: &Annotations) -> bool {
    annotations.idempotent == Some(true)
}

/// Separates the server's name from its tool's in the registry.
pub const SEPARATOR: &str = "__";

/// The longest registry name: the strictest provider's limit on a function's name (64).
pub const MAX_NAME: usize = 64;

/// Why a server's tool cannot join the registry. The texts are shown on the system page.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("a server's name is 1 to 32 of a–z, 0–9 and `-`, and it was `{0}`")]
    Server(String),
    #[error(
        "the tool's name has characters a model's function name cannot hold (only letters, \
         digits, `_` and `-`)"
    )]
    Tool,
    #[error("`{name}` is longer than the {MAX_NAME} characters providers accept")]
    TooLong { name: String },
}

/// The name the tool `tool` of server `server` joins the registry under: `<server>__<tool>`. The
/// server's name is the operator's (checked at start); the tool's comes from the server and is
/// checked here like any text from outside.
pub fn registry_name(server: &str, tool: &str) -> Result<String, NameError> {
    check_server_name(server)?;
    if tool.is_empty()
        || !tool
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(NameError::Tool);
    }
    let name = format!("{server}{SEPARATOR}{tool}");
    if name.len() > MAX_NAME {
        let shown: String = name.chars().take(MAX_NAME).collect();
        return Err(NameError::TooLong {
            name: format!("{shown}…"),
        });
    }
    Ok(name)
}

/// A server's name as the operator may write it: 1 to 32 of a–z, 0–9 and `-` (so that it
/// cannot hold the separator, and the registry name says which server a tool is from).
pub fn check_server_name(server: &str) -> Result<(), NameError> {
    let fits = (1..=32).contains(&server.len())
        && server
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if fits {
        Ok(())
    } else {
        Err(NameError::Server(server.chars().take(40).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hints(read_only: Option<bool>, destructive: Option<bool>) -> Annotations {
        Annotations {
            read_only,
            destructive,
            ..Annotations::default()
        }
    }

    #[test]
    fn by_default_only_a_read_only_tool_goes_ahead() {
        let policy = ServerPolicy::default();
        let cases = [
            (hints(Some(true), None), false, "read-only"),
            // The spec says destructive means nothing for a read-only tool.
            (
                hints(Some(true), Some(true)),
                false,
                "read-only, destructive",
            ),
            (hints(None, None), true, "no hint"),
            (hints(None, Some(true)), true, "destructive"),
            (
                hints(Some(false), Some(false)),
                true,
                "writes, not destructive",
            ),
            (hints(Some(false), None), true, "not read-only"),
        ];
        for (annotations, waits, case) in cases {
            assert_eq!(policy.requires_approval("t", &annotations), waits, "{case}");
        }
    }

    #[test]
    fn the_operator_overrides_the_hints_per_server_and_per_tool() {
        let read_only = hints(Some(true), None);
        let destructive = hints(Some(false), Some(true));
        let always = ServerPolicy {
            approval: ApprovalPolicy::Always,
            tools: BTreeMap::from([("search".to_owned(), ApprovalPolicy::Annotations)]),
        };
        assert!(always.requires_approval("read_file", &read_only));
        assert!(
            !always.requires_approval("search", &read_only),
            "the tool's own policy"
        );
        let never = ServerPolicy {
            approval: ApprovalPolicy::Never,
            tools: BTreeMap::from([("delete".to_owned(), ApprovalPolicy::Always)]),
        };
        assert!(!never.requires_approval("write", &destructive));
        assert!(never.requires_approval("delete", &read_only));
    }

    #[test]
    fn only_a_tool_that_says_so_is_run_again_after_a_crash() {
        let said = |idempotent| Annotations {
            idempotent,
            ..Annotations::default()
        };
        assert!(rerun_after_crash(&said(Some(true))));
        assert!(!rerun_after_crash(&said(Some(false))));
        assert!(!rerun_after_crash(&said(None)));
    }

    #[test]
    fn policies_read_from_settings() {
        let policy: ServerPolicy =
            serde_json::from_str(r#"{"approval":"never","tools":{"rm":"always"}}"#).unwrap();
        assert_eq!(policy.approval, ApprovalPolicy::Never);
        assert_eq!(policy.tools["rm"], ApprovalPolicy::Always);
        assert_eq!(
            serde_json::from_str::<ServerPolicy>("{}").unwrap(),
            ServerPolicy::default()
        );
        assert!(serde_json::from_str::<ServerPolicy>(r#"{"approval":"sometimes"}"#).is_err());
    }

    #[test]
    fn registry_names_are_checked_like_any_text_from_outside() {
        assert_eq!(
            registry_name("files", "read_file").unwrap(),
            "files__read_file"
        );
        assert_eq!(
            registry_name("gh-2", "create-issue").unwrap(),
            "gh-2__create-issue"
        );
        for tool in ["", "read file", "a<b>", "naïve", "x.y"] {
            assert_eq!(
                registry_name("files", tool),
                Err(NameError::Tool),
                "{tool:?}"
            );
        }
        for server in ["", "Files", "a__b", "a_b", &"s".repeat(33)] {
            assert!(
                matches!(registry_name(server, "t"), Err(NameError::Server(_))),
                "{server:?}"
            );
        }
        let long = "t".repeat(60);
        let err = registry_name("files", &long).unwrap_err();
        assert!(matches!(err, NameError::TooLong { .. }));
        assert!(err.to_string().contains("64 characters"));
        assert!(
            registry_name("files", &"t".repeat(57)).is_ok(),
            "exactly 64"
        );
    }
}
