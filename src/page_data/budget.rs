//! A run's budget as the pages show it: each limit used against its value, where a run waiting at
//! its budget stopped, and what each live step used (which moves the run page's strip).

use serde::{Deserialize, Serialize};

/// What one step used toward a run's budget: a response's tokens, request and cost, a broken
/// attempt's tokens and cost, a tool call answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepSpent {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub requests: u64,
    pub tool_calls: u64,
    /// Under the configuration's prices (0 without prices).
    pub cost_micros: u64,
}

impl StepSpent {
    /// What it used of `kind` (running time is not a step's: it moves at each journaled stop).
    pub fn of(&self, kind: nrllm_types::limits::LimitKind) -> Option<u64> {
        use nrllm_types::limits::LimitKind;
        match kind {
            LimitKind::InputTokens => Some(self.input_tokens),
            LimitKind::OutputTokens => Some(self.output_tokens),
            LimitKind::CostMicros => Some(self.cost_micros),
            LimitKind::Requests => Some(self.requests),
            LimitKind::ToolCalls => Some(self.tool_calls),
            LimitKind::WallMs => None,
        }
    }
}

/// One limit of a run's budget as its page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitView {
    pub kind: nrllm_types::limits::LimitKind,
    /// "model requests".
    pub label: String,
    /// What was used and the limit, as counted (`used_count` none: a cost without prices).
    pub used_count: Option<u64>,
    pub limit_count: u64,
    /// "3", "$0.0120", "4.2 s" (`—` when it cannot be told: a cost without prices).
    pub used: String,
    pub limit: String,
    /// The run reached it.
    pub reached: bool,
}

impl LimitView {
    /// Adds what a step used (a cost without prices stays unknown); the text follows.
    pub fn add(&mut self, spent: &StepSpent) {
        let (Some(used), Some(more)) = (self.used_count, spent.of(self.kind)) else {
            return;
        };
        let used = used.saturating_add(more);
        self.used_count = Some(used);
        self.used = self.kind.show(used);
        self.reached = used >= self.limit_count;
    }

    /// As the budget strip shows it: "model requests: 2 / 3".
    pub fn text(&self) -> String {
        format!("{}: {} / {}", self.label, self.used, self.limit)
    }
}

/// Where a run waiting at its budget stopped, and how a person raises it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetStopView {
    /// "tool calls: 4 used of 4; the next turn's 2 calls did not run".
    pub explanation: String,
    /// The limit that stopped it ("tool calls").
    pub limit: String,
    /// The unit a raise is typed in ("US dollars", "seconds", "a whole number").
    pub unit: String,
    /// The least value that lets the run go on, in that unit.
    pub least: String,
    /// A daily spend cap across runs stopped it (an administrator raises it on `/system`; the
    /// run goes on by itself when it has room), not one of its own limits.
    #[serde(default)]
    pub daily: bool,
}
