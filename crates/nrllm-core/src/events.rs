//! The run's event stream: every step of the loop, in order. The playground's step list is this
//! stream; it is also the audit record of tool executions (including those that happen on resume).

use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::decision::Choice;
use crate::provider::{FinishReason, Usage};
use crate::state::{BudgetStop, Limits};
use crate::transcript::{Message, ToolCall, ToolOutcome};

/// One step of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// The conversation was assembled (once per run, never on resume).
    Assembled {
        system_prompt: bool,
        skills_included: Vec<String>,
        /// Skills left out because they did not fit the budget.
        skills_dropped: Vec<String>,
        messages: usize,
    },
    /// A request is about to go to the provider.
    Request {
        round: u32,
        /// Where `messages` start in the transcript sent. Each request records only the messages
        /// new since the previous one, so a run's stored size grows with its length, not with
        /// its length squared; [`transcript_at`] rebuilds the whole transcript. Absent in runs
        /// recorded before: there `messages` is the whole transcript.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        first: Option<usize>,
        messages: Vec<Message>,
        tools_offered: Vec<String>,
    },
    /// The provider answered.
    Llm {
        round: u32,
        content: Option<String>,
        tool_calls: Vec<ToolCall>,
        usage: Usage,
        finish_reason: FinishReason,
        duration_ms: u64,
        /// From the request to the first piece of the response (a streamed response; `None`
        /// when the provider gave it whole).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        first_token_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        raw: Option<Value>,
    },
    /// A provider request failed in a way worth retrying; it is retried after `wait_ms`.
    ProviderRetry {
        round: u32,
        /// 1 for the first retry of this request.
        retry: u32,
        wait_ms: u64,
        /// What went wrong with the previous attempt.
        reason: String,
        /// The provider's hint the wait follows, if it gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hint: Option<String>,
        /// What the previous attempt used, when it got as far as a response (a stream that
        /// broke off): counted in the run's usage.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// The provider failed.
    LlmFailed {
        round: u32,
        message: String,
        duration_ms: u64,
        /// What the failed attempt used, as for [`Event::ProviderRetry`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// A tool call was answered (executed, refused by the gate, or denied by the operator).
    Tool {
        round: u32,
        call_id: String,
        name: String,
        arguments: String,
        result: String,
        is_error: bool,
        /// How the call was answered (absent in runs recorded before it was kept; see
        /// [`Event::tool_outcome`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outcome: Option<ToolOutcome>,
        /// `false` when the call was answered without running the tool (denied, not permitted).
        executed: bool,
        duration_ms: u64,
        /// The call was answered while resuming after an operator's decision.
        on_resume: bool,
        /// Why it was answered the way it was, when that is not plain (run again after a
        /// restart, journaled before a restart).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// The run suspended: these calls wait for an operator.
    ApprovalRequested {
        round: u32,
        calls: Vec<ToolCall>,
        /// The calls whose tool requires approval (the rest of the turn is held with them).
        gated: Vec<String>,
        /// How many distinct people must approve the turn ([`crate::quorum`]).
        #[serde(
            default = "crate::quorum::one",
            skip_serializing_if = "crate::quorum::is_one"
        )]
        approvals_required: u32,
    },
    /// A person approved a turn that needs more than one approval: their approval counts, and
    /// the turn waits for the others ([`crate::quorum`]). Nothing ran.
    ApprovalCounted {
        round: u32,
        by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        through_token: Option<String>,
        /// Where the count for these choices stands now, and how many it needs.
        count: u32,
        required: u32,
        /// What they approved.
        choices: Vec<CallChoice>,
    },
    /// The server restarted while the run was running; it goes on from its last journaled step
    /// (`resumes_at` says where).
    Recovered { resumes_at: String },
    /// After a restart, these approved calls were found dispatched with no result: whether they
    /// took effect is unknown, so the run waits for an operator.
    OutcomeUnknown { round: u32, calls: Vec<UnknownStep> },
    /// The run was cancelled.
    Cancelled {
        by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Cancelled while it ran: what was abandoned (a model call, a read-only tool) is
        /// described here, and each approved call that had been dispatched without a journaled
        /// result is listed in `unknown` — it may or may not have taken effect.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        abandoned: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unknown: Vec<UnknownStep>,
    },
    /// The run could not go on (interrupted, or its saved state could not be read).
    Ended { reason: String, explanation: String },
    /// An operator decided.
    ApprovalDecided {
        /// The round whose turn was decided (absent in runs recorded before it was kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        round: Option<u32>,
        decided_by: String,
        /// The API token the decider acted through, if any (their name is `decided_by`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        through_token: Option<String>,
        choices: Vec<CallChoice>,
    },
    /// Nobody decided before the approval deadline: no call of the turn ran, and the model reads
    /// that (each choice is `expired`).
    ApprovalExpired {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        round: Option<u32>,
        choices: Vec<CallChoice>,
    },
    /// The run reached a limit of its budget and waits for a person, before the action that
    /// would have crossed it (nothing of which happened).
    BudgetReached { round: u32, stop: BudgetStop },
    /// A person (or the deadline: `decided_by` is `deadline`) decided on a run waiting at its
    /// budget: the limits it goes on with, or none when it stops there.
    BudgetDecided {
        round: u32,
        decided_by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        through_token: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        raised: Option<Limits>,
        stop: BudgetStop,
    },
    /// A call's tool server asked the operator while the call ran ([`crate::elicit`]): the run
    /// waits for input; the call is sent again with the reply.
    InputAsked {
        round: u32,
        call_id: String,
        tool: String,
        server: String,
        message: String,
        schema: serde_json::Value,
        /// URL mode: the link the operator is asked to open.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        link: Option<crate::elicit::Link>,
        /// It asked inside the open call, which is held open for the reply
        /// ([`crate::elicit::Asked::held_until_ms`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        held: bool,
    },
    /// A person (or the deadline: `decided_by` is `deadline`, the reply `cancel`) replied to
    /// what a server asked; the call is sent again with the reply.
    InputReplied {
        round: u32,
        call_id: String,
        tool: String,
        server: String,
        decided_by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        through_token: Option<String>,
        reply: crate::elicit::Reply,
        /// The reply went to the call held open, not with the call sent again.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        held: bool,
    },
}

impl Event {
    /// The event's kind, as stored.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Assembled { .. } => "assembled",
            Event::Request { .. } => "request",
            Event::Llm { .. } => "llm",
            Event::ProviderRetry { .. } => "provider_retry",
            Event::LlmFailed { .. } => "llm_failed",
            Event::Tool { .. } => "tool",
            Event::ApprovalRequested { .. } => "approval_requested",
            Event::ApprovalDecided { .. } => "approval_decided",
            Event::ApprovalCounted { .. } => "approval_counted",
            Event::ApprovalExpired { .. } => "approval_expired",
            Event::BudgetReached { .. } => "budget_reached",
            Event::BudgetDecided { .. } => "budget_decided",
            Event::InputAsked { .. } => "input_asked",
            Event::InputReplied { .. } => "input_replied",
            Event::Recovered { .. } => "recovered",
            Event::OutcomeUnknown { .. } => "outcome_unknown",
            Event::Cancelled { .. } => "cancelled",
            Event::Ended { .. } => "ended",
        }
    }

    /// The round the event belongs to, where it has one.
    pub fn round(&self) -> Option<u32> {
        match self {
            Event::Request { round, .. }
            | Event::Llm { round, .. }
            | Event::LlmFailed { round, .. }
            | Event::ProviderRetry { round, .. }
            | Event::Tool { round, .. }
            | Event::ApprovalRequested { round, .. }
            | Event::ApprovalCounted { round, .. }
            | Event::OutcomeUnknown { round, .. }
            | Event::BudgetReached { round, .. }
            | Event::BudgetDecided { round, .. }
            | Event::InputAsked { round, .. }
            | Event::InputReplied { round, .. } => Some(*round),
            Event::ApprovalDecided { round, .. } | Event::ApprovalExpired { round, .. } => *round,
            _ => None,
        }
    }

    /// How a `tool` step's call was answered (`None` for other steps). Steps recorded before the
    /// outcome was kept are told by their error flag and text.
    pub fn tool_outcome(&self) -> Option<ToolOutcome> {
        match self {
            Event::Tool {
                outcome: Some(outcome),
                ..
            } => Some(*outcome),
            Event::Tool {
                is_error: false, ..
            } => Some(ToolOutcome::Ok),
            Event::Tool { result, .. } => Some(match ToolOutcome::from_legacy_text(result) {
                ToolOutcome::Ok => ToolOutcome::Error,
                other => other,
            }),
            _ => None,
        }
    }

    /// How long the step took, where it has a duration.
    pub fn duration_ms(&self) -> Option<u64> {
        match self {
            Event::Llm { duration_ms, .. }
            | Event::LlmFailed { duration_ms, .. }
            | Event::Tool { duration_ms, .. } => Some(*duration_ms),
            _ => None,
        }
    }
}

/// A call whose outcome is unknown, as its step records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnknownStep {
    pub call_id: String,
    pub tool: String,
    pub effect_key: String,
    pub dispatched_at_ms: i64,
}

/// The operator's choice for one pending call, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallChoice {
    pub call_id: String,
    pub tool: String,
    pub choice: Choice,
    /// With an edit: the arguments the model had given, so the step can show what changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_arguments: Option<String>,
}

/// Where the loop sends its events. Emitting never fails the loop: a sink that persists buffers
/// and writes with the run's next transition.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: Event);

    /// A piece of round `round`'s response as the model writes it: for whoever watches the run
    /// live; never journaled (the response is emitted whole as [`Event::Llm`] once complete).
    fn delta(&self, _round: u32, _delta: crate::provider::Delta) {}
}

/// A sink that keeps every event in memory.
#[derive(Debug, Default)]
pub struct VecSink {
    events: Mutex<Vec<Event>>,
}

impl VecSink {
    /// A copy of the events so far.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .map(|events| events.clone())
            .unwrap_or_default()
    }
}

impl EventSink for VecSink {
    fn emit(&self, event: Event) {
        if let Ok(mut events) = self.events.lock() {
            events.push(event);
        }
    }
}

/// A sink that drops everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: Event) {}
}

/// The transcript as the journal `events` (in order) leaves it: what the last request sent, then
/// the model's answer to it and the calls answered since. A run forked after these steps goes on
/// from here ([`crate::run_service::RunService::fork`]).
pub fn journal_at<'a>(events: impl IntoIterator<Item = &'a Event>) -> Vec<Message> {
    let mut transcript: Vec<Message> = Vec::new();
    for event in events {
        match event {
            Event::Request {
                first, messages, ..
            } => {
                transcript.truncate(first.unwrap_or(0));
                transcript.extend(messages.iter().cloned());
            }
            Event::Llm {
                content,
                tool_calls,
                ..
            } => transcript.push(if tool_calls.is_empty() {
                Message::assistant_text(content.clone().unwrap_or_default())
            } else {
                Message::Assistant {
                    content: content.clone(),
                    tool_calls: tool_calls.clone(),
                }
            }),
            Event::Tool {
                call_id, result, ..
            } => transcript.push(Message::tool_answer(
                call_id.clone(),
                result.clone(),
                event.tool_outcome().unwrap_or_default(),
            )),
            _ => {}
        }
    }
    transcript
}

/// The whole transcript sent by the last `request` among `events` (in order), rebuilt from each
/// request's new messages.
pub fn transcript_at<'a>(events: impl IntoIterator<Item = &'a Event>) -> Vec<Message> {
    let mut transcript: Vec<Message> = Vec::new();
    for event in events {
        if let Event::Request {
            first, messages, ..
        } = event
        {
            transcript.truncate(first.unwrap_or(0));
            transcript.extend(messages.iter().cloned());
        }
    }
    transcript
}
