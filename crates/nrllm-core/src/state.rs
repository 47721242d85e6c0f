//! The suspended state: everything needed to continue a run after an operator decides, as our own
//! versioned JSON. It is what the store keeps in `agent_run.suspended_state`.

use serde::{Deserialize, Serialize};

use crate::provider::{ModelOptions, Usage};
use crate::registry::AllowList;
use crate::transcript::{self, Message, Tail, ToolCall, ToolOutcome};

/// What a call of the turn came to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub call_id: String,
    pub result: String,
    pub outcome: ToolOutcome,
}

/// The version of the suspended-state JSON this build writes. It reads this one and every older
/// one, migrating on read:
/// - 1 → 2: tool results carry their outcome; a version-1 result's is told from its text.
pub const STATE_SCHEMA_VERSION: u32 = 2;

/// The default round cap.
pub const DEFAULT_MAX_ROUNDS: u32 = 5;

/// A run's settings, restored on resume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// Tools the run may use.
    pub allow_list: AllowList,
    /// Whether the run was started by an administrator (admin-only tools are offered).
    #[serde(default)]
    pub admin: bool,
    pub model: ModelOptions,
    /// Rounds with tools before the final, tool-less round.
    pub max_rounds: u32,
    /// The limits at which the run waits for a person ([`Limits`]; none by default).
    #[serde(default, skip_serializing_if = "Limits::is_empty")]
    pub limits: Limits,
}

/// What a run may use before it waits for a person to raise a limit or stop it. Each is checked
/// at a turn boundary ([`crate::step_machine::Machine`]): the token, cost, request and time
/// limits before each model request (used ≥ limit waits, so a run overshoots by at most one
/// response), the tool-call limit before a turn's calls are dispatched (for the whole turn).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// In millionths of a dollar, under the configuration's prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_micros: Option<u64>,
    /// Model requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    /// Time spent running, in milliseconds (waits for a person excluded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_ms: Option<u64>,
}

pub use nrllm_types::limits::LimitKind;

impl Limits {
    pub fn is_empty(&self) -> bool {
        LimitKind::ALL.iter().all(|kind| self.get(*kind).is_none())
    }

    /// The limit of `kind`, if set.
    pub fn get(&self, kind: LimitKind) -> Option<u64> {
        match kind {
            LimitKind::InputTokens => self.input_tokens,
            LimitKind::OutputTokens => self.output_tokens,
            LimitKind::CostMicros => self.cost_micros,
            LimitKind::Requests => self.requests,
            LimitKind::ToolCalls => self.tool_calls,
            LimitKind::WallMs => self.wall_ms,
        }
    }

    /// These limits with `kind` set to `value`.
    pub fn with(mut self, kind: LimitKind, value: Option<u64>) -> Limits {
        let slot = match kind {
            LimitKind::InputTokens => &mut self.input_tokens,
            LimitKind::OutputTokens => &mut self.output_tokens,
            LimitKind::CostMicros => &mut self.cost_micros,
            LimitKind::Requests => &mut self.requests,
            LimitKind::ToolCalls => &mut self.tool_calls,
            LimitKind::WallMs => &mut self.wall_ms,
        };
        *slot = value;
        self
    }
}

/// What the run was about to do when a limit stopped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum NextAction {
    /// Ask the model (round `round`).
    ModelRequest { round: u32 },
    /// Dispatch the calls of the pending turn.
    ToolCalls { calls: u32 },
}

/// A run waiting at its budget: which limit stopped it, how much was used, and what would have
/// happened next (nothing of which did).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetStop {
    pub limit: LimitKind,
    pub used: u64,
    pub cap: u64,
    pub next: NextAction,
    /// A cap across runs stopped it (the configuration's or the requester's for a UTC day),
    /// not one of the run's own limits: `limit` is the cost, `used` the day's spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily: Option<crate::daily_cap::DailyCap>,
}

impl BudgetStop {
    /// The least limit that lets the action it stopped before happen: above what was used
    /// for a model request, room for the whole turn for tool calls.
    pub fn needed(&self) -> u64 {
        match self.next {
            NextAction::ModelRequest { .. } => self.used + 1,
            NextAction::ToolCalls { calls } => self.used + u64::from(calls),
        }
    }

    /// What the step says: "tool calls: 4 used of 4; the next turn's 2 calls did not run".
    pub fn explain(&self) -> String {
        let next = match self.next {
            NextAction::ModelRequest { round } => {
                format!("the model was not asked for round {round}")
            }
            NextAction::ToolCalls { calls: 1 } => "the next call did not run".to_owned(),
            NextAction::ToolCalls { calls } => format!("the next turn's {calls} calls did not run"),
        };
        let (what, used) = match self.daily {
            Some(daily) => (daily.describe(), "spent"),
            None => (self.limit.label().to_owned(), "used"),
        };
        format!(
            "{what}: {} {used} of {}; {next}",
            self.limit.show(self.used),
            self.limit.show(self.cap)
        )
    }
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            allow_list: AllowList::All,
            admin: false,
            model: ModelOptions::default(),
            max_rounds: DEFAULT_MAX_ROUNDS,
            limits: Limits::default(),
        }
    }
}

/// Counters that span the whole run, across suspensions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Provider requests made.
    pub iterations: u32,
    pub usage: Usage,
    /// Tool calls answered (executed or refused).
    pub tool_calls: u32,
    /// Time spent running, in milliseconds (waits for a person excluded; 0 in states saved
    /// before it was kept).
    #[serde(default)]
    pub running_ms: u64,
}

impl Counters {
    /// How much of `kind` these counters used, with `cost_micros` their cost (none: no prices,
    /// so no cost limit applies).
    pub fn used(&self, kind: LimitKind, cost_micros: Option<i64>) -> Option<u64> {
        Some(match kind {
            LimitKind::InputTokens => self.usage.prompt_tokens,
            LimitKind::OutputTokens => self.usage.completion_tokens,
            LimitKind::CostMicros => u64::try_from(cost_micros?).unwrap_or(0),
            LimitKind::Requests => u64::from(self.iterations),
            LimitKind::ToolCalls => u64::from(self.tool_calls),
            LimitKind::WallMs => self.running_ms,
        })
    }
}

/// A state to keep while a run waits, with the JSON it is kept as: serialized once, by whoever
/// measured it against the size limit, and stored as it is.
#[derive(Debug, Clone)]
pub struct Kept<'a> {
    pub state: &'a SuspendedState,
    pub json: std::borrow::Cow<'a, str>,
}

impl<'a> Kept<'a> {
    /// `state`, serialized here.
    pub fn new(state: &'a SuspendedState) -> Kept<'a> {
        Kept {
            state,
            json: state.to_json().into(),
        }
    }

    /// `state` with the JSON its caller serialized it as already.
    pub fn serialized(
        state: &'a SuspendedState,
        json: impl Into<std::borrow::Cow<'a, str>>,
    ) -> Kept<'a> {
        Kept {
            state,
            json: json.into(),
        }
    }
}

/// A run waiting for an operator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuspendedState {
    pub schema_version: u32,
    /// The transcript up to and including the assistant turn that holds the pending calls.
    pub messages: Vec<Message>,
    /// The calls of that turn, in order; the whole turn waits.
    pub pending: Vec<ToolCall>,
    /// Ids of the pending calls whose tool requires approval.
    pub gated: Vec<String>,
    pub counters: Counters,
    pub settings: RunSettings,
    /// How many messages of `messages` the run's `request` events hold already (0 in states
    /// saved before this was kept: the next request then records the whole transcript).
    #[serde(default)]
    pub recorded_messages: usize,
    /// Calls of the pending turn whose results are known already (journaled before a restart):
    /// they are answered with these, whatever the decision says, and never run again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answered: Vec<Answer>,
    /// Calls that were dispatched before a restart and whose outcome is unknown: the operator
    /// decides whether they run again (with the same effect key), what the model reads instead,
    /// or that they failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<UnknownCall>,
    /// Calls of the turn that an approval rule or their tool's own check decided: an allowed
    /// one runs (journaled, as `gated`), a refused one is answered with the rule's refusal,
    /// whatever an operator chooses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ruled: Vec<RuledCall>,
    /// Calls that are questions for the operator (`ask_operator`): answered by an operator's
    /// answer, never run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub questions: Vec<String>,
    /// The run waits at its budget ([`RunStatus::WaitingForBudget`]): `pending` is the turn
    /// whose calls were about to be dispatched, or empty when the model was about to be asked.
    ///
    /// [`RunStatus::WaitingForBudget`]: nrllm_types::RunStatus::WaitingForBudget
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetStop>,
    /// How many distinct people must approve the turn ([`crate::quorum`]): fixed when it began
    /// to wait, from the configuration's quorum and the calls that wait for a person.
    #[serde(
        default = "crate::quorum::one",
        skip_serializing_if = "crate::quorum::is_one"
    )]
    pub approvals_required: u32,
    /// The turn stopped at a call whose server asked the operator ([`crate::elicit`]): the run
    /// waits for the reply, then goes on with the turn as it was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicited: Option<crate::elicit::Elicited>,
    /// When the run began to wait in this state (stamped as it is kept; none in states saved
    /// before it was): where the span of the wait starts ([`crate::spans`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_since_ms: Option<i64>,
}

/// A call decided without an operator, and what its step says about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuledCall {
    pub call_id: String,
    pub allow: bool,
    pub note: String,
}

/// A call dispatched before a restart, with no result recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnknownCall {
    pub call_id: String,
    pub effect_key: String,
    pub dispatched_at_ms: i64,
}

/// Why stored state could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("the suspended state is not valid JSON: {0}")]
    Malformed(String),
    #[error("the suspended state has schema version {found}; this build reads version {STATE_SCHEMA_VERSION}")]
    UnsupportedVersion { found: u64 },
    #[error("the suspended state is inconsistent: {0}")]
    Inconsistent(String),
}

impl SuspendedState {
    /// What the run waits for: `waiting_for_input` when the turn asks the operator questions
    /// and nothing else of it waits for a decision ([`SuspendedState::undecided`]); else
    /// `waiting_for_approval`.
    pub fn waiting_for(&self) -> nrllm_types::RunStatus {
        if self.budget.is_some() {
            nrllm_types::RunStatus::WaitingForBudget
        } else if self.elicited.is_some()
            || (!self.questions.is_empty() && self.undecided().is_empty())
        {
            nrllm_types::RunStatus::WaitingForInput
        } else {
            nrllm_types::RunStatus::WaitingForApproval
        }
    }

    /// The calls of the pending turn, other than its questions, that only an operator's decision
    /// lets run: calls of tools that need approval which no rule or tool check decided, and
    /// calls whose outcome is unknown after a restart. Calls answered already are not among
    /// them.
    pub fn undecided(&self) -> Vec<&ToolCall> {
        if self.elicited.is_some() {
            // The turn was decided; it waits for a reply to its server's question only.
            return Vec::new();
        }
        self.pending
            .iter()
            .filter(|call| !self.answered.iter().any(|a| a.call_id == call.id))
            .filter(|call| {
                let gated = self.gated.contains(&call.id)
                    && !self.ruled.iter().any(|r| r.call_id == call.id);
                gated || self.unknown.iter().any(|u| u.call_id == call.id)
            })
            .collect()
    }

    /// The pending call that asks the operator question `call_id` (the first question when
    /// `None`).
    pub fn question(&self, call_id: Option<&str>) -> Option<&ToolCall> {
        self.pending
            .iter()
            .filter(|c| self.questions.contains(&c.id))
            .find(|c| call_id.is_none_or(|id| c.id == id))
    }

    /// The state as stored.
    pub fn to_json(&self) -> String {
        // Serialising plain data with string keys cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads stored state of this or an older version (migrating it), refusing versions this
    /// build does not know and states that break the transcript rules.
    pub fn from_json(text: &str) -> Result<SuspendedState, StateError> {
        // The version first, skimming past the rest: a state of another version may not read
        // as this one. Then the state itself, straight from the text rather than through a
        // `serde_json::Value` built first (its maps and strings made twice).
        #[derive(Deserialize)]
        struct Versioned {
            schema_version: Option<serde_json::Value>,
        }
        let malformed = |err: serde_json::Error| StateError::Malformed(err.to_string());
        let versioned: Versioned = serde_json::from_str(text).map_err(malformed)?;
        let version = match versioned.schema_version.as_ref().and_then(|v| v.as_u64()) {
            Some(version @ 1..=2) => version,
            Some(found) => return Err(StateError::UnsupportedVersion { found }),
            None => return Err(StateError::Malformed("no schema_version".to_owned())),
        };
        let mut state: SuspendedState = serde_json::from_str(text).map_err(malformed)?;
        if version < 2 {
            for message in &mut state.messages {
                if let Message::Tool {
                    content, outcome, ..
                } = message
                {
                    *outcome = ToolOutcome::from_legacy_text(content);
                }
            }
        }
        state.schema_version = STATE_SCHEMA_VERSION;
        state.check()?;
        Ok(state)
    }

    /// Checks that the pending calls are exactly the last turn's calls, none answered yet (a
    /// run waiting at its budget before a model request has none, and a complete transcript).
    pub fn check(&self) -> Result<(), StateError> {
        if let Some(BudgetStop {
            next: NextAction::ModelRequest { .. },
            ..
        }) = self.budget
        {
            if !self.pending.is_empty() {
                return Err(StateError::Inconsistent(
                    "a run waiting to ask the model has pending calls".to_owned(),
                ));
            }
            return transcript::validate(&self.messages, Tail::Complete)
                .map_err(|err| StateError::Inconsistent(err.to_string()));
        }
        if self.pending.is_empty() {
            return Err(StateError::Inconsistent("no pending calls".to_owned()));
        }
        match self.messages.last() {
            Some(last) if last.tool_calls() == self.pending.as_slice() => {}
            _ => {
                return Err(StateError::Inconsistent(
                    "the pending calls are not the last assistant turn".to_owned(),
                ))
            }
        }
        if let Some(id) = self
            .gated
            .iter()
            .find(|id| !self.pending.iter().any(|c| &c.id == *id))
        {
            return Err(StateError::Inconsistent(format!(
                "gated call `{id}` is not pending"
            )));
        }
        transcript::validate(&self.messages, Tail::PendingAllowed)
            .map_err(|err| StateError::Inconsistent(err.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state() -> SuspendedState {
        let call = ToolCall::new("c1", "write_note", &json!({"text": "hi"}));
        SuspendedState {
            schema_version: STATE_SCHEMA_VERSION,
            messages: vec![
                Message::user("write hi"),
                Message::Assistant {
                    content: None,
                    tool_calls: vec![call.clone()],
                },
            ],
            pending: vec![call],
            gated: vec!["c1".into()],
            counters: Counters {
                iterations: 1,
                usage: Usage::tokens(10, 3),
                tool_calls: 0,
                running_ms: 0,
            },
            settings: RunSettings::default(),
            recorded_messages: 1,
            answered: Vec::new(),
            unknown: Vec::new(),
            ruled: Vec::new(),
            questions: Vec::new(),
            budget: None,
            approvals_required: 1,
            elicited: None,
            waiting_since_ms: None,
        }
    }

    #[test]
    fn limits_are_read_and_shown_in_a_persons_units() {
        assert_eq!(LimitKind::CostMicros.parse("0.25"), Some(250_000));
        assert_eq!(LimitKind::CostMicros.show(250_000), "$0.2500");
        assert_eq!(LimitKind::WallMs.parse("1.5"), Some(1_500));
        assert_eq!(LimitKind::WallMs.show(1_500), "1.5 s");
        assert_eq!(LimitKind::Requests.parse(" 12 "), Some(12));
        for bad in ["0", "-3", "1.5", "many", "", "NaN"] {
            assert_eq!(LimitKind::ToolCalls.parse(bad), None, "{bad}");
        }
        assert_eq!(LimitKind::CostMicros.parse("inf"), None);
        assert_eq!(LimitKind::CostMicros.parse("0"), None);
    }

    #[test]
    fn state_round_trips_through_json() {
        let state = state();
        assert_eq!(SuspendedState::from_json(&state.to_json()).unwrap(), state);
    }

    #[test]
    fn corrupted_states_are_typed_errors() {
        assert!(matches!(
            SuspendedState::from_json("{nope"),
            Err(StateError::Malformed(_))
        ));
        assert!(matches!(
            SuspendedState::from_json("{}"),
            Err(StateError::Malformed(_))
        ));
        let mut value: serde_json::Value = serde_json::from_str(&state().to_json()).unwrap();
        value["schema_version"] = json!(99);
        assert_eq!(
            SuspendedState::from_json(&value.to_string()),
            Err(StateError::UnsupportedVersion { found: 99 })
        );
        let mut value: serde_json::Value = serde_json::from_str(&state().to_json()).unwrap();
        value["counters"] = json!("many");
        assert!(matches!(
            SuspendedState::from_json(&value.to_string()),
            Err(StateError::Malformed(_))
        ));
        let mut broken = state();
        broken.pending[0].id = "other".into();
        assert!(matches!(
            SuspendedState::from_json(&broken.to_json()),
            Err(StateError::Inconsistent(_))
        ));
        let mut answered = state();
        answered.messages.push(Message::tool_result("c1", "done"));
        assert!(matches!(
            SuspendedState::from_json(&answered.to_json()),
            Err(StateError::Inconsistent(_))
        ));
    }
}
