//! A transcript's last turn: its calls and what answered them (a fork goes on from there).

use crate::events::{Event, EventSink};
use crate::state::Answer;
use crate::state::UnknownCall;
use crate::step_machine::Next;
use crate::transcript::{Message, ToolCall};

/// Splits a transcript that ends in an assistant turn with calls not all answered: the turn's
/// calls and the answers given so far (taken off the transcript, which then ends with the turn).
/// `None` (and the transcript untouched) when there is no such turn.
pub fn split_pending_turn(transcript: &mut Vec<Message>) -> Option<(Vec<ToolCall>, Vec<Answer>)> {
    let turn = transcript
        .iter()
        .rposition(|m| !matches!(m, Message::Tool { .. }))?;
    let calls = transcript[turn].tool_calls().to_vec();
    let answered: Vec<Answer> = transcript[turn + 1..]
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                outcome,
            } => Some(Answer {
                call_id: tool_call_id.clone(),
                result: content.clone(),
                outcome: *outcome,
            }),
            _ => None,
        })
        .collect();
    if calls.is_empty()
        || calls
            .iter()
            .all(|c| answered.iter().any(|a| a.call_id == c.id))
    {
        return None;
    }
    transcript.truncate(turn + 1);
    Some((calls, answered))
}

/// A continued turn's next step with the calls its parent dispatched (`inherited`) marked as
/// outcome unknown: the turn then waits for an operator, whatever the gate and the rules let
/// through, and its step says which calls and with which effect keys.
pub(super) fn inherit(next: Next, inherited: &[UnknownCall], sink: &dyn EventSink) -> Next {
    let (mut state, waits) = match next {
        Next::Decided(state) => (state, false),
        Next::Suspend(state) => (state, true),
        // Nothing of the turn is gated today: its calls have no effect to repeat.
        other => return other,
    };
    state.unknown = inherited
        .iter()
        .filter(|u| state.pending.iter().any(|c| c.id == u.call_id))
        .filter(|u| !state.answered.iter().any(|a| a.call_id == u.call_id))
        .cloned()
        .collect();
    if state.unknown.is_empty() {
        return match waits {
            true => Next::Suspend(state),
            false => Next::Decided(state),
        };
    }
    sink.emit(Event::OutcomeUnknown {
        round: state.counters.iterations,
        calls: state
            .unknown
            .iter()
            .filter_map(|u| {
                let call = state.pending.iter().find(|c| c.id == u.call_id)?;
                Some(crate::events::UnknownStep {
                    call_id: u.call_id.clone(),
                    tool: call.name.clone(),
                    effect_key: u.effect_key.clone(),
                    dispatched_at_ms: u.dispatched_at_ms,
                })
            })
            .collect(),
    });
    // Every gated call waits for the operator, those a rule let through included.
    for unknown in &state.unknown {
        if !state.gated.contains(&unknown.call_id) {
            state.gated.push(unknown.call_id.clone());
        }
    }
    state
        .ruled
        .retain(|r| !state.unknown.iter().any(|u| u.call_id == r.call_id));
    Next::Suspend(state)
}
