//! A running call's progress, as the run page shows it live.

use serde::{Deserialize, Serialize};

/// How far a running call has come, as its tool (an MCP server) reports it: shown under the
/// steps while the call runs, never journaled. The message is the server's text, shown as text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressView {
    pub call_id: String,
    pub tool: String,
    pub progress: f64,
    #[serde(default)]
    pub total: Option<f64>,
    #[serde(default)]
    pub message: Option<String>,
}

impl ProgressView {
    /// "notes__count_words: 3 of 5 — counted 3 of 5 parts".
    pub fn text(&self) -> String {
        let mut text = match self.total {
            Some(total) => format!("{}: {} of {}", self.tool, self.progress, total),
            None => format!("{}: {}", self.tool, self.progress),
        };
        if let Some(message) = &self.message {
            text.push_str(" — ");
            text.push_str(message);
        }
        text
    }
}
