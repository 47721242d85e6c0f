//! The kinds of limit a run's budget has, and how a person reads, types and is shown each: a
//! count, US dollars (counted in millionths) or seconds (counted in milliseconds). The core holds
//! runs to them; the pages show them, the browser's live view too.

use serde::{Deserialize, Serialize};

/// One kind of limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    InputTokens,
    OutputTokens,
    CostMicros,
    Requests,
    ToolCalls,
    WallMs,
}

impl LimitKind {
    /// Every kind, in the order they are checked and shown.
    pub const ALL: [LimitKind; 6] = [
        LimitKind::InputTokens,
        LimitKind::OutputTokens,
        LimitKind::CostMicros,
        LimitKind::Requests,
        LimitKind::ToolCalls,
        LimitKind::WallMs,
    ];

    /// How a step names it.
    pub fn label(self) -> &'static str {
        match self {
            LimitKind::InputTokens => "input tokens",
            LimitKind::OutputTokens => "output tokens",
            LimitKind::CostMicros => "cost (millionths of a dollar)",
            LimitKind::Requests => "model requests",
            LimitKind::ToolCalls => "tool calls",
            LimitKind::WallMs => "running time (ms)",
        }
    }
}

impl LimitKind {
    /// The kind's one string form (`input_tokens`, `cost_micros`, …), as JSON writes it.
    pub fn key(self) -> &'static str {
        match self {
            LimitKind::InputTokens => "input_tokens",
            LimitKind::OutputTokens => "output_tokens",
            LimitKind::CostMicros => "cost_micros",
            LimitKind::Requests => "requests",
            LimitKind::ToolCalls => "tool_calls",
            LimitKind::WallMs => "wall_ms",
        }
    }

    /// A value of this kind as a person reads it: dollars, seconds, or a count.
    pub fn show(self, value: u64) -> String {
        match self {
            LimitKind::CostMicros => format!("${:.4}", value as f64 / 1_000_000.0),
            LimitKind::WallMs => format!("{:.1} s", value as f64 / 1000.0),
            _ => value.to_string(),
        }
    }

    /// The unit a person types a value of this kind in.
    pub fn unit(self) -> &'static str {
        match self {
            LimitKind::CostMicros => "US dollars",
            LimitKind::WallMs => "seconds",
            _ => "a whole number",
        }
    }

    /// A value typed in [`LimitKind::unit`], as the limits count it (millionths of a dollar,
    /// milliseconds); `None` unless it is a number above 0 (whole, but for dollars and seconds).
    pub fn parse(self, text: &str) -> Option<u64> {
        let text = text.trim();
        let scaled = |scale: f64| {
            let value: f64 = text.parse().ok()?;
            (value.is_finite() && value > 0.0 && value * scale < 1e15)
                .then(|| (value * scale).round() as u64)
                .filter(|v| *v > 0)
        };
        match self {
            LimitKind::CostMicros => scaled(1_000_000.0),
            LimitKind::WallMs => scaled(1000.0),
            _ => text
                .parse()
                .ok()
                .filter(|v| *v > 0 && *v < 1_000_000_000_000_000),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_one_key_the_json_form_agrees_with() {
        for kind in LimitKind::ALL {
            assert_eq!(
                serde_json::to_string(&kind).unwrap(),
                format!("\"{}\"", kind.key())
            );
        }
        assert_eq!(LimitKind::CostMicros.show(1_234), "$0.0012");
        assert_eq!(LimitKind::WallMs.parse("2.5"), Some(2_500));
    }
}
