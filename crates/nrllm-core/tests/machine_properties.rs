//! Property of the step machine, driven step by step with no loop around it: whatever the model
//! answers and whatever operators decide — with the machine saved and restored between any two
//! steps, as a restart would — every transcript the model is sent is valid, a suspension comes
//! before any call of its turn runs, and a gated call runs only with a matching approval.

use std::collections::BTreeSet;

use nrllm_core::provider::ChatResponse;
use nrllm_core::registry::AllowList;
use nrllm_core::state::Answer;
use nrllm_core::step_machine::{CallPlan, Machine, Next};
use nrllm_core::testing::{probe_registry, usage, Probe};
use nrllm_core::transcript::{validate, Message, Tail, ToolCall, ToolOutcome};
use nrllm_core::{CallDecision, Choice, Decision, RunSettings, SuspendedState};
use proptest::prelude::*;
use serde_json::json;

/// One model turn: text, or calls to these tools.
#[derive(Debug, Clone)]
enum Turn {
    Text,
    Calls(Vec<&'static str>),
}

fn arb_turn() -> impl Strategy<Value = Turn> {
    prop_oneof![
        1 => Just(Turn::Text),
        4 => prop::collection::vec(
            prop_oneof![Just("read_note"), Just("write_note"), Just("admin_note")],
            1..4
        )
        .prop_map(Turn::Calls),
    ]
}

fn arb_choice() -> impl Strategy<Value = Choice> {
    prop_oneof![
        Just(Choice::Approve),
        "[a-z]{0,6}".prop_map(|text| Choice::ApproveEdited {
            arguments: json!({ "text": text })
        }),
        proptest::option::of("[a-z]{1,6}").prop_map(|reason| Choice::Deny { reason }),
        "[a-z]{1,6}".prop_map(|result| Choice::Respond { result }),
        proptest::option::of("[a-z]{1,6}").prop_map(|note| Choice::Failed { note }),
    ]
}

/// What an operator does with a suspension: one of the buttons, or a choice per call (drawn
/// for up to four calls, the longest turn).
#[derive(Debug, Clone)]
enum Operator {
    ApproveAll,
    DenyAll,
    PerCall(Vec<Choice>),
}

fn arb_operator() -> impl Strategy<Value = Operator> {
    prop_oneof![
        Just(Operator::ApproveAll),
        Just(Operator::DenyAll),
        prop::collection::vec(arb_choice(), 4).prop_map(Operator::PerCall),
    ]
}

fn decision(operator: &Operator, pending: &[ToolCall]) -> Decision {
    match operator {
        Operator::ApproveAll => Decision::ApproveAll,
        Operator::DenyAll => Decision::DenyAll {
            reason: Some("no".into()),
        },
        Operator::PerCall(choices) => Decision::PerCall {
            calls: pending
                .iter()
                .zip(choices)
                .map(|(call, choice)| CallDecision {
                    call_id: call.id.clone(),
                    choice: choice.clone(),
                })
                .collect(),
        },
    }
}

/// Whether `decision` approves running `call_id`.
fn approves(decision: &Decision, call_id: &str) -> bool {
    match decision {
        Decision::ApproveAll => true,
        // A budget decision approves no call.
        Decision::DenyAll { .. }
        | Decision::RaiseBudget { .. }
        | Decision::StopAtBudget
        | Decision::ContinueAtBudget
        | Decision::Reply { .. } => false,
        Decision::PerCall { calls } => calls
            .iter()
            .any(|c| c.call_id == call_id && c.choice.runs()),
    }
}

/// Saves and restores the machine, as a restart between two journaled steps would.
fn restart(machine: Machine) -> Machine {
    serde_json::from_str(&serde_json::to_string(&machine).unwrap()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_gated_call_runs_without_its_approval_and_every_request_is_valid(
        turns in prop::collection::vec(arb_turn(), 1..8),
        operators in prop::collection::vec(arb_operator(), 8),
        restarts in prop::collection::vec(any::<bool>(), 24),
        max_rounds in 1u32..6,
    ) {
        let probe = Probe::default();
        let registry = probe_registry(&probe);
        let gate = registry.gate(&AllowList::All, false);
        let settings = RunSettings { max_rounds, ..RunSettings::default() };
        let mut machine = Machine::start(vec![Message::user("go")], settings);
        let mut turns = turns.into_iter();
        let mut operators = operators.into_iter().cycle();
        let mut restarts = restarts.into_iter().cycle();
        let mut call_ids = 0usize;
        let mut ran: BTreeSet<String> = BTreeSet::new();
        let mut steps = 0;
        let finished = loop {
            steps += 1;
            prop_assert!(steps < 100, "the run ends");
            if restarts.next().unwrap() {
                machine = restart(machine);
            }
            let ask = machine.ask(gate.specs());
            validate(&ask.request.messages, Tail::Complete)
                .map_err(|e| TestCaseError::fail(format!("invalid request: {e}")))?;
            let response = match turns.next().unwrap_or(Turn::Text) {
                Turn::Text => ChatResponse::text("done", usage(1, 1)),
                Turn::Calls(tools) => ChatResponse::calls(
                    tools
                        .into_iter()
                        .map(|tool| {
                            call_ids += 1;
                            ToolCall::new(format!("call_{call_ids}"), tool, &json!({"text": "t"}))
                        })
                        .collect(),
                    usage(1, 1),
                ),
            };
            let next = machine.answered(&ask, response, |call| gate.pass(call, &[], 1));
            match next {
                Next::Finish(finished) => break finished,
                Next::Run { calls, on_resume, .. } => {
                    // Without a decision, only calls that need none run.
                    prop_assert!(!on_resume);
                    let mut answers = Vec::new();
                    for (call, plan) in calls {
                        prop_assert!(!gate.requires_approval(&call.name), "{} ran ungated", call.name);
                        prop_assert_eq!(plan, CallPlan::Decide(Choice::Approve));
                        prop_assert!(ran.insert(call.id.clone()), "{} ran twice", call.id);
                        answers.push(Answer { call_id: call.id, result: "ok".into(), outcome: ToolOutcome::Ok });
                    }
                    machine.ran(answers);
                }
                Next::Decided(state) => {
                    return Err(TestCaseError::fail(format!("no rules, no per-call tools: {state:?}")));
                }
                Next::Suspend(state) => {
                    // The turn waits whole: none of its calls ran, and it holds a gated call.
                    prop_assert!(state.pending.iter().all(|c| !ran.contains(&c.id)));
                    prop_assert!(state.pending.iter().any(|c| gate.requires_approval(&c.name)));
                    validate(&state.messages, Tail::PendingAllowed)
                        .map_err(|e| TestCaseError::fail(format!("invalid state: {e}")))?;
                    // Persisted, and read back by whichever process resumes it.
                    let state = SuspendedState::from_json(&state.to_json()).unwrap();
                    let mut decision = decision(&operators.next().unwrap(), &state.pending);
                    let choices = match decision.resolve(&state.pending, &gate) {
                        Ok(choices) => choices,
                        // A refused decision changes nothing; the operator then approves.
                        Err(_) => {
                            decision = Decision::ApproveAll;
                            decision.resolve(&state.pending, &gate).unwrap()
                        }
                    };
                    let plans = choices.into_iter().map(CallPlan::Decide).collect();
                    let (resumed, next) = Machine::resume(&state, plans);
                    machine = resumed;
                    let answers = answer_resumed(next, &decision, &mut ran)?;
                    if restarts.next().unwrap() {
                        machine = restart(machine);
                    }
                    machine.ran(answers);
                }
            }
        };
        validate(&finished.messages, Tail::Complete)
            .map_err(|e| TestCaseError::fail(format!("invalid final transcript: {e}")))?;
        prop_assert!(finished.counters.iterations <= max_rounds + 1);
    }
}

/// Answers a resumed turn as a loop would, asserting that a call runs only if `decision`
/// approves it (a resumed turn's calls all wait on the decision).
fn answer_resumed(
    next: Next,
    decision: &Decision,
    ran: &mut BTreeSet<String>,
) -> Result<Vec<Answer>, TestCaseError> {
    let Next::Run {
        calls, on_resume, ..
    } = next
    else {
        return Err(TestCaseError::fail("a resume answers the pending turn"));
    };
    prop_assert!(on_resume);
    let mut answers = Vec::new();
    for (call, plan) in calls {
        let CallPlan::Decide(choice) = plan else {
            return Err(TestCaseError::fail("no result was journaled"));
        };
        let outcome = if choice.runs() {
            prop_assert!(
                approves(decision, &call.id),
                "{} ran without approval",
                call.id
            );
            prop_assert!(ran.insert(call.id.clone()), "{} ran twice", call.id);
            ToolOutcome::Ok
        } else {
            ToolOutcome::Denied
        };
        answers.push(Answer {
            call_id: call.id,
            result: "answered".into(),
            outcome,
        });
    }
    Ok(answers)
}
