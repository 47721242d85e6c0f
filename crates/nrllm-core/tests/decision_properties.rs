//! Property: whatever the pending turn and whatever the operator decides, the provider then sees a
//! valid transcript — every tool call answered exactly once, in order — and only approved calls run.

use std::sync::Arc;

use nrllm_core::events::NullSink;
use nrllm_core::provider::ChatResponse;
use nrllm_core::testing::{probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::transcript::{validate, Message, Tail, ToolCall};
use nrllm_core::{
    CallDecision, Choice, Decision, LoopOutcome, RunContext, RunInput, ToolLoop, ToolLoopService,
};
use proptest::prelude::*;
use serde_json::json;

fn arb_call_tool() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("read_note"),
        Just("write_note"),
        Just("admin_note"),
        Just("gone_tool")
    ]
}

fn arb_choice() -> impl Strategy<Value = Choice> {
    prop_oneof![
        Just(Choice::Approve),
        "[a-z ]{0,12}".prop_map(|text| Choice::ApproveEdited {
            arguments: json!({ "text": text })
        }),
        proptest::option::of("[a-z ]{0,12}").prop_map(|reason| Choice::Deny { reason }),
    ]
}

fn arb_case() -> impl Strategy<Value = (Vec<&'static str>, Decision)> {
    prop::collection::vec(arb_call_tool(), 0..4).prop_flat_map(|mut tools| {
        // One gated call makes the turn suspend.
        tools.push("write_note");
        let n = tools.len();
        let decision = prop_oneof![
            Just(Decision::ApproveAll),
            proptest::option::of("[a-z]{1,8}").prop_map(|reason| Decision::DenyAll { reason }),
            prop::collection::vec(arb_choice(), n).prop_map(|choices| Decision::PerCall {
                calls: choices
                    .into_iter()
                    .enumerate()
                    .rev()
                    .map(|(i, choice)| CallDecision {
                        call_id: format!("call_{i}"),
                        choice,
                    })
                    .collect(),
            }),
        ];
        (Just(tools), decision)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn any_decision_over_any_pending_turn_yields_a_valid_transcript((tools, decision) in arb_case()) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let calls: Vec<ToolCall> = tools
                .iter()
                .enumerate()
                .map(|(i, tool)| ToolCall::new(format!("call_{i}"), *tool, &json!({"text": "t"})))
                .collect();
            let provider = ScriptedProvider::new([
                ChatResponse::calls(calls.clone(), usage(1, 1)),
                ChatResponse::text("done", usage(1, 1)),
            ]);
            let probe = Probe::default();
            let tool_loop = ToolLoop::new(Arc::new(provider.clone()), Arc::new(probe_registry(&probe)));
            let ctx = RunContext::default();
            let input = RunInput { messages: vec![Message::user("go")], ..RunInput::default() };
            let state = match tool_loop.run(input, &ctx, &NullSink).await.unwrap() {
                LoopOutcome::Suspended(state) => state,
                other => panic!("expected a suspension: {other:?}"),
            };
            prop_assert!(probe.calls().is_empty());
            let outcome = tool_loop.resume(&state, &decision, &ctx, &NullSink).await.unwrap();
            let sent = provider.requests().pop().unwrap().messages;
            prop_assert!(validate(&sent, Tail::Complete).is_ok(), "{:?}", validate(&sent, Tail::Complete));
            let answered = sent.iter().filter(|m| m.role() == "tool").count();
            prop_assert_eq!(answered, calls.len());
            prop_assert!(matches!(outcome, LoopOutcome::Completed(_)));
            // Only offered tools that the operator approved ran.
            let approved_offered = calls.iter().enumerate().filter(|(i, call)| {
                let offered = call.name == "read_note" || call.name == "write_note";
                let approved = match &decision {
                    Decision::ApproveAll => true,
                    Decision::DenyAll { .. } | Decision::RaiseBudget { .. } | Decision::StopAtBudget | Decision::ContinueAtBudget | Decision::Reply { .. } => false,
                    Decision::PerCall { calls } => calls.iter().any(|c| c.call_id == format!("call_{i}") && !matches!(c.choice, Choice::Deny { .. })),
                };
                offered && approved
            }).count();
            prop_assert_eq!(probe.calls().len(), approved_offered);
            Ok(())
        })?;
    }
}
