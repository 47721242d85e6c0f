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
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            allow_list: AllowList::All,
            admin: false,
            model: ModelOptions::default(),
            max_rounds: DEFAULT_MAX_ROUNDS,
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
        if !self.questions.is_empty() && self.undecided().is_empty() {
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

    /// Checks that the pending calls are exactly the last turn's calls, none answered yet.
    pub fn check(&self) -> Result<(), StateError> {
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
            },
            settings: RunSettings::default(),
            recorded_messages: 1,
            answered: Vec::new(),
            unknown: Vec::new(),
            ruled: Vec::new(),
            questions: Vec::new(),
        }
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
