//! The loop as a step machine — the part of ADR-084's loop that decides, with nothing performed.
//! Given where a run is and what its last step brought, it says what to do next as a value: ask
//! the model (with this request), run or answer these calls, suspend (with this state), or finish.
//! The loop ([`crate::tool_loop::ToolLoop`]) asks the provider and runs the tools; the run service
//! journals each step. So a test can drive a run step by step, and a crash can only fall between
//! journaled steps.
//!
//! The rules it keeps (DESIGN §4): a turn that holds a call needing approval suspends **before any
//! call of that turn runs**; a resumed turn is answered whole, in call order, each call by its
//! decision; after the round cap one last round runs without tools; counters span the whole run.

use serde::{Deserialize, Serialize};

use crate::decision::Choice;
use crate::provider::{ChatRequest, ChatResponse, ToolChoice, Usage};
use crate::registry::Pass;
use crate::state::{
    Answer, BudgetStop, Counters, LimitKind, NextAction, RuledCall, RunSettings, SuspendedState,
    STATE_SCHEMA_VERSION,
};
use crate::tool::ToolSpec;
use crate::transcript::{Message, ToolCall};

/// Where a run is between steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    messages: Vec<Message>,
    /// How many messages earlier `request` steps hold already.
    recorded: usize,
    counters: Counters,
    settings: RunSettings,
}

/// One request to the model, as the machine wants it asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    pub round: u32,
    /// The final round after the cap: tools declared but not callable.
    pub capped: bool,
    /// Where the messages new in this round start (for the `request` step).
    pub first: usize,
    pub request: ChatRequest,
}

/// How one call of a turn is to be answered.
#[derive(Debug, Clone, PartialEq)]
pub enum CallPlan {
    /// As this choice says: run it (as is or edited), or answer it without running.
    Decide(Choice),
    /// Its result is known already (journaled before a restart): answer with it, run nothing.
    Known(Answer),
}

/// The next thing to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Answer these calls, in order (`on_resume`: they follow an operator's decision).
    Run {
        round: u32,
        calls: Vec<(ToolCall, CallPlan)>,
        on_resume: bool,
    },
    /// Wait for an operator; persist this state.
    Suspend(SuspendedState),
    /// Nobody needs to decide (rules and the tools' own checks did), but the turn has effects:
    /// journal the decision with this state, exactly like an operator's, then carry it out.
    Decided(SuspendedState),
    /// The run is done: the model's answer.
    Finish(Finished),
}

/// A finished run.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub content: String,
    pub counters: Counters,
    /// The round cap was hit and the final round ran without tools.
    pub truncated: bool,
    pub messages: Vec<Message>,
}

impl Machine {
    /// A run that starts from an assembled transcript.
    pub fn start(messages: Vec<Message>, settings: RunSettings) -> Machine {
        Machine {
            messages,
            recorded: 0,
            counters: Counters::default(),
            settings,
        }
    }

    /// A suspended run resumed with one plan per pending call (in call order): the machine and
    /// the step that answers the pending turn.
    pub fn resume(state: &SuspendedState, plans: Vec<CallPlan>) -> (Machine, Next) {
        let machine = Machine::waited(state);
        let step = Next::Run {
            round: state.counters.iterations,
            calls: state.pending.iter().cloned().zip(plans).collect(),
            on_resume: true,
        };
        (machine, step)
    }

    /// The machine of a run that waited in `state`, as it stood then.
    fn waited(state: &SuspendedState) -> Machine {
        Machine {
            messages: state.messages.clone(),
            recorded: state.recorded_messages,
            counters: state.counters,
            settings: state.settings.clone(),
        }
    }

    /// A run that waited at its budget, going on with `state`'s settings (its limits as a
    /// person raised them) and the step it stopped before: `None` to ask the model, or the
    /// pending turn's, as [`Machine::answered`] would have made it (checked against the limits
    /// again).
    pub fn resume_at_budget(
        state: &SuspendedState,
        pass: impl Fn(&ToolCall) -> Pass,
    ) -> (Machine, Option<Next>) {
        let mut machine = Machine::waited(state);
        let next = match state.budget.map(|stop| stop.next) {
            Some(NextAction::ToolCalls { .. }) => {
                Some(machine.pending_turn(state.pending.clone(), state.answered.clone(), pass))
            }
            _ => None,
        };
        (machine, next)
    }

    /// The time the run has spent running so far, waits excluded (the loop measures it).
    pub fn running_for(&mut self, ms: u64) {
        self.counters.running_ms = ms;
    }

    /// Before a model request: the state to wait in when a limit is reached (used ≥ limit;
    /// `cost_micros` is what the run cost so far, `None` without prices). The closing round
    /// after the round cap is asked whatever the request limit says: `max_rounds` keeps its
    /// meaning.
    pub fn budget_before_request(&self, cost_micros: Option<i64>) -> Option<Next> {
        let closing = self.counters.iterations >= self.settings.max_rounds;
        let reached = LimitKind::ALL
            .into_iter()
            .filter(|kind| *kind != LimitKind::ToolCalls)
            .filter(|kind| !(closing && *kind == LimitKind::Requests))
            .find_map(|kind| {
                let cap = self.settings.limits.get(kind)?;
                let used = self.counters.used(kind, cost_micros)?;
                (used >= cap).then_some((kind, used, cap))
            })?;
        let (limit, used, cap) = reached;
        Some(self.wait_at(BudgetStop {
            limit,
            used,
            cap,
            next: NextAction::ModelRequest {
                round: self.counters.iterations + 1,
            },
            daily: None,
        }))
    }

    /// The state to wait in at `stop`, reached before the next model request (one of the run's
    /// limits, or a cap across runs).
    pub fn wait_at(&self, stop: BudgetStop) -> Next {
        Next::Suspend(self.waiting(Vec::new(), Vec::new(), stop))
    }

    /// Before a turn of `calls` calls is dispatched: the stop when they would take the run past
    /// its tool-call limit.
    fn budget_before_calls(&self, calls: usize) -> Option<BudgetStop> {
        let cap = self.settings.limits.tool_calls?;
        let used = u64::from(self.counters.tool_calls);
        (used + calls as u64 > cap).then(|| BudgetStop {
            limit: LimitKind::ToolCalls,
            used,
            cap,
            next: NextAction::ToolCalls {
                calls: u32::try_from(calls).unwrap_or(u32::MAX),
            },
            daily: None,
        })
    }

    /// A state that waits at the budget `stop`, with `pending` the turn it stopped before.
    fn waiting(
        &self,
        pending: Vec<ToolCall>,
        answered: Vec<Answer>,
        stop: BudgetStop,
    ) -> SuspendedState {
        SuspendedState {
            schema_version: STATE_SCHEMA_VERSION,
            messages: self.messages.clone(),
            pending,
            gated: Vec::new(),
            counters: self.counters,
            settings: self.settings.clone(),
            recorded_messages: self.recorded,
            answered,
            unknown: Vec::new(),
            ruled: Vec::new(),
            questions: Vec::new(),
            budget: Some(stop),
            approvals_required: 1,
            elicited: None,
            waiting_since_ms: None,
        }
    }

    /// The state to wait in when the turn `calls` (its round's) stopped at a call whose server
    /// asked the operator: `answered` are the calls answered before it, `elicited` what the
    /// server asked and how the turn was decided. Nothing of the turn is counted yet: the
    /// resumed turn is, whole, when it is answered.
    pub fn waiting_for_reply(
        &self,
        calls: &[(ToolCall, CallPlan)],
        answered: Vec<Answer>,
        elicited: crate::elicit::Elicited,
    ) -> SuspendedState {
        SuspendedState {
            schema_version: STATE_SCHEMA_VERSION,
            messages: self.messages.clone(),
            pending: calls.iter().map(|(call, _)| call.clone()).collect(),
            gated: Vec::new(),
            counters: self.counters,
            settings: self.settings.clone(),
            recorded_messages: self.recorded,
            answered,
            unknown: Vec::new(),
            ruled: Vec::new(),
            questions: Vec::new(),
            budget: None,
            approvals_required: 1,
            elicited: Some(elicited),
            waiting_since_ms: None,
        }
    }

    /// The totals so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The settings the run was started with.
    pub fn settings(&self) -> &RunSettings {
        &self.settings
    }

    /// The transcript so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The next round's request, with `tools` the tools offered now.
    pub fn ask(&mut self, tools: Vec<ToolSpec>) -> Ask {
        let capped = self.counters.iterations >= self.settings.max_rounds;
        self.counters.iterations += 1;
        let first = self.recorded.min(self.messages.len());
        self.recorded = self.messages.len();
        Ask {
            round: self.counters.iterations,
            capped,
            first,
            request: ChatRequest {
                messages: self.messages.clone(),
                tools,
                // The capped round still declares the tools (formats such as Anthropic's reject
                // a transcript with tool calls but no tools) and forbids calling them.
                tool_choice: if capped {
                    ToolChoice::Disabled
                } else {
                    ToolChoice::Auto
                },
                options: self.settings.model.clone(),
            },
        }
    }

    /// Counts what a request's failed attempts used (streams that broke off).
    pub fn spent(&mut self, usage: Usage) {
        self.counters.usage += usage;
    }

    /// The model answered `ask`: finish, suspend, or run the turn's calls. `pass` says how each
    /// call may go ahead.
    pub fn answered(
        &mut self,
        ask: &Ask,
        response: ChatResponse,
        pass: impl Fn(&ToolCall) -> Pass,
    ) -> Next {
        self.counters.usage += response.usage;
        if ask.capped || response.tool_calls.is_empty() {
            let content = response.content.unwrap_or_default();
            // A model that calls tools in the tool-less round is answered by its text alone.
            self.messages.push(Message::assistant_text(content.clone()));
            return Next::Finish(Finished {
                content,
                counters: self.counters,
                truncated: ask.capped,
                messages: self.messages.clone(),
            });
        }
        let calls = response.tool_calls;
        self.messages.push(Message::Assistant {
            content: response.content,
            tool_calls: calls.clone(),
        });
        self.turn(ask.round, calls, Vec::new(), pass)
    }

    /// A run that goes on from a journal whose last assistant turn still has calls to answer
    /// (a fork): the step that answers them, as [`Machine::answered`] would have — the whole-turn
    /// rule holds. `answered` are the turn's calls answered already (they never run again).
    pub fn pending_turn(
        &mut self,
        calls: Vec<ToolCall>,
        answered: Vec<Answer>,
        pass: impl Fn(&ToolCall) -> Pass,
    ) -> Next {
        let round = self.counters.iterations;
        self.turn(round, calls, answered, pass)
    }

    fn turn(
        &mut self,
        round: u32,
        calls: Vec<ToolCall>,
        answered: Vec<Answer>,
        pass: impl Fn(&ToolCall) -> Pass,
    ) -> Next {
        let known = |call: &ToolCall| answered.iter().any(|a| a.call_id == call.id);
        // The tool-call limit is checked for the whole turn, before anything of it (a decision
        // included) happens.
        let to_answer = calls.iter().filter(|call| !known(call)).count();
        if let Some(stop) = self.budget_before_calls(to_answer) {
            return Next::Suspend(self.waiting(calls, answered, stop));
        }
        // The whole turn is checked before any of its calls runs. A call with an effect is
        // journaled before it runs whoever lets it through (`gated`).
        let mut gated = Vec::new();
        let mut ruled = Vec::new();
        let mut questions = Vec::new();
        let mut ask_anyone = false;
        for call in calls.iter().filter(|call| !known(call)) {
            match pass(call) {
                Pass::Free => {}
                Pass::Ask => {
                    ask_anyone = true;
                    gated.push(call.id.clone());
                }
                Pass::Input => {
                    ask_anyone = true;
                    questions.push(call.id.clone());
                }
                Pass::Auto { allow, note } => {
                    if allow {
                        gated.push(call.id.clone());
                    }
                    ruled.push(RuledCall {
                        call_id: call.id.clone(),
                        allow,
                        note,
                    });
                }
            }
        }
        if ask_anyone || !ruled.is_empty() {
            let state = SuspendedState {
                schema_version: STATE_SCHEMA_VERSION,
                messages: self.messages.clone(),
                pending: calls,
                gated,
                counters: self.counters,
                settings: self.settings.clone(),
                recorded_messages: self.recorded,
                answered,
                unknown: Vec::new(),
                ruled,
                questions,
                budget: None,
                approvals_required: 1,
                elicited: None,
                waiting_since_ms: None,
            };
            return match ask_anyone {
                true => Next::Suspend(state),
                false => Next::Decided(state),
            };
        }
        let calls = calls
            .into_iter()
            .filter(|call| !known(call))
            .map(|call| (call, CallPlan::Decide(Choice::Approve)))
            .collect();
        // Calls answered already keep their answers, ahead of the rest.
        self.ran(answered);
        Next::Run {
            round,
            calls,
            on_resume: false,
        }
    }

    /// The calls of the last [`Next::Run`] were answered, in call order.
    pub fn ran(&mut self, answers: Vec<Answer>) {
        for answer in answers {
            self.counters.tool_calls += 1;
            self.messages.push(Message::tool_answer(
                answer.call_id,
                answer.result,
                answer.outcome,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Usage;
    use crate::transcript::ToolOutcome;
    use serde_json::json;

    fn usage() -> Usage {
        Usage::tokens(10, 2)
    }

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall::new(id, name, &json!({}))
    }

    fn answer(id: &str) -> Answer {
        Answer {
            call_id: id.into(),
            result: format!("result of {id}"),
            outcome: ToolOutcome::Ok,
        }
    }

    #[test]
    fn a_turn_without_gated_calls_runs_then_asks_again_then_finishes() {
        let mut machine = Machine::start(vec![Message::user("hi")], RunSettings::default());
        let ask = machine.ask(Vec::new());
        assert_eq!((ask.round, ask.capped, ask.first), (1, false, 0));
        let next = machine.answered(
            &ask,
            ChatResponse::calls(vec![call("a", "read"), call("b", "read")], usage()),
            |_| Pass::Free,
        );
        let Next::Run {
            calls, on_resume, ..
        } = next
        else {
            panic!("runs the turn: {next:?}")
        };
        assert!(!on_resume);
        assert_eq!(calls.len(), 2);
        machine.ran(vec![answer("a"), answer("b")]);
        let ask = machine.ask(Vec::new());
        assert_eq!((ask.round, ask.first), (2, 1));
        assert_eq!(ask.request.messages.len(), 4);
        let Next::Finish(done) =
            machine.answered(&ask, ChatResponse::text("done", usage()), |_| Pass::Free)
        else {
            panic!("finishes")
        };
        assert_eq!(done.content, "done");
        assert_eq!(done.counters.iterations, 2);
        assert_eq!(done.counters.tool_calls, 2);
        assert_eq!(done.counters.usage.prompt_tokens, 20);
    }

    fn ask_writes(call: &ToolCall) -> Pass {
        match call.name.as_str() {
            "write" => Pass::Ask,
            "send" => Pass::Auto {
                allow: true,
                note: "by rule 1".into(),
            },
            "drop" => Pass::Auto {
                allow: false,
                note: "by rule 2".into(),
            },
            _ => Pass::Free,
        }
    }

    #[test]
    fn a_turn_decided_without_an_operator_is_journaled_not_run_in_passing() {
        let mut machine = Machine::start(vec![Message::user("hi")], RunSettings::default());
        let ask = machine.ask(Vec::new());
        let next = machine.answered(
            &ask,
            ChatResponse::calls(
                vec![call("a", "read"), call("b", "send"), call("c", "drop")],
                usage(),
            ),
            ask_writes,
        );
        let Next::Decided(state) = next else {
            panic!("decided by rules: {next:?}")
        };
        // The allowed call has an effect, so it is dispatched on the journal; the refused one
        // never runs.
        assert_eq!(state.gated, ["b"]);
        assert_eq!(
            state.ruled,
            [
                RuledCall {
                    call_id: "b".into(),
                    allow: true,
                    note: "by rule 1".into()
                },
                RuledCall {
                    call_id: "c".into(),
                    allow: false,
                    note: "by rule 2".into()
                }
            ]
        );
        // One call that asks holds the whole turn, rules or not.
        let mut machine = Machine::start(vec![Message::user("hi")], RunSettings::default());
        let ask = machine.ask(Vec::new());
        let next = machine.answered(
            &ask,
            ChatResponse::calls(vec![call("b", "send"), call("w", "write")], usage()),
            ask_writes,
        );
        let Next::Suspend(state) = next else {
            panic!("waits: {next:?}")
        };
        assert_eq!(state.gated, ["b", "w"]);
        assert_eq!(state.ruled.len(), 1);
    }

    #[test]
    fn a_question_waits_for_input_unless_the_turn_also_needs_approval() {
        let asks = |call: &ToolCall| match call.name.as_str() {
            "ask" => Pass::Input,
            other => ask_writes(&ToolCall::new("x", other, &json!({}))),
        };
        let suspend = |names: &[&str]| {
            let mut machine = Machine::start(vec![Message::user("hi")], RunSettings::default());
            let ask = machine.ask(Vec::new());
            let calls = names
                .iter()
                .enumerate()
                .map(|(i, name)| call(&format!("c{i}"), name))
                .collect();
            match machine.answered(&ask, ChatResponse::calls(calls, usage()), asks) {
                Next::Suspend(state) => state,
                other => panic!("waits: {other:?}"),
            }
        };
        let state = suspend(&["ask", "read"]);
        assert_eq!(state.questions, ["c0"]);
        assert!(state.gated.is_empty());
        assert_eq!(
            state.waiting_for(),
            crate::run_store::RunStatus::WaitingForInput
        );
        // A call a rule let through is held with the question.
        assert_eq!(
            suspend(&["ask", "send"]).waiting_for(),
            crate::run_store::RunStatus::WaitingForInput
        );
        assert_eq!(
            suspend(&["ask", "write"]).waiting_for(),
            crate::run_store::RunStatus::WaitingForApproval
        );
    }

    #[test]
    fn one_gated_call_suspends_the_whole_turn_before_anything_runs() {
        let mut machine = Machine::start(vec![Message::user("hi")], RunSettings::default());
        let ask = machine.ask(Vec::new());
        let next = machine.answered(
            &ask,
            ChatResponse::calls(vec![call("a", "read"), call("b", "write")], usage()),
            ask_writes,
        );
        let Next::Suspend(state) = next else {
            panic!("suspends: {next:?}")
        };
        assert_eq!(state.pending.len(), 2);
        assert_eq!(state.gated, ["b"]);
        assert!(state.check().is_ok());
        // Resumed with a decision per call, the turn is answered whole, in order.
        let (_, step) = Machine::resume(
            &state,
            vec![
                CallPlan::Decide(Choice::Approve),
                CallPlan::Decide(Choice::Deny { reason: None }),
            ],
        );
        let Next::Run {
            calls, on_resume, ..
        } = step
        else {
            panic!("runs the pending turn")
        };
        assert!(on_resume);
        assert_eq!(calls[0].0.id, "a");
        assert_eq!(calls[1].1, CallPlan::Decide(Choice::Deny { reason: None }));
    }

    #[test]
    fn after_the_round_cap_one_round_runs_without_tools() {
        let settings = RunSettings {
            max_rounds: 1,
            ..RunSettings::default()
        };
        let mut machine = Machine::start(vec![Message::user("hi")], settings);
        let ask = machine.ask(Vec::new());
        let _ = machine.answered(
            &ask,
            ChatResponse::calls(vec![call("a", "read")], usage()),
            |_| Pass::Free,
        );
        machine.ran(vec![answer("a")]);
        let ask = machine.ask(Vec::new());
        assert!(ask.capped);
        assert_eq!(ask.request.tool_choice, ToolChoice::Disabled);
        let Next::Finish(done) = machine.answered(
            &ask,
            ChatResponse::calls(vec![call("b", "read")], usage()),
            |_| Pass::Free,
        ) else {
            panic!("the capped round finishes whatever the model asks")
        };
        assert!(done.truncated);
    }
}
