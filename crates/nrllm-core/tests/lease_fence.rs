//! A lost lease stops the run before its next effect: the loop asks the lease before each model
//! request and each tool call, and once it is gone returns `LeaseLost` without asking the model
//! or running the tool; the run service then writes nothing ([`nrllm_core::lease`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nrllm_core::events::NullSink;
use nrllm_core::lease::{LeaseGuard, LeaseWatch};
use nrllm_core::provider::ChatResponse;
use nrllm_core::testing::{call_turn, probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::transcript::Message;
use nrllm_core::{
    Decision, LoopError, LoopOutcome, RunContext, RunInput, ToolLoop, ToolLoopService,
};
use serde_json::json;
use uuid::Uuid;

/// A lease that holds until it is told it is gone.
#[derive(Default)]
struct Switch(AtomicBool);

impl LeaseWatch for Switch {
    fn holds(&self, _run: Uuid) -> bool {
        !self.0.load(Ordering::SeqCst)
    }
}

fn input() -> RunInput {
    RunInput {
        messages: vec![Message::user("go")],
        ..RunInput::default()
    }
}

#[tokio::test]
async fn a_lost_lease_stops_the_loop_before_its_next_model_request_or_tool_call() {
    let provider = ScriptedProvider::new([
        call_turn("c1", "write_note", json!({"text": "a"}), usage(1, 1)),
        ChatResponse::text("done", usage(1, 1)),
    ]);
    let probe = Probe::default();
    let tool_loop = ToolLoop::new(Arc::new(provider.clone()), Arc::new(probe_registry(&probe)));
    let switch = Arc::new(Switch::default());
    let ctx = RunContext {
        lease: Some(LeaseGuard {
            run: Uuid::nil(),
            watch: switch.clone(),
        }),
        lease_epoch: Some(7),
        ..RunContext::default()
    };
    // Held: the turn suspends as usual.
    let LoopOutcome::Suspended(state) = tool_loop.run(input(), &ctx, &NullSink).await.unwrap()
    else {
        panic!("the gated call suspends the run");
    };
    assert_eq!(provider.requests().len(), 1);
    // Gone: the approved call does not run, and the model is not asked again.
    switch.0.store(true, Ordering::SeqCst);
    let err = tool_loop
        .resume(&state, &Decision::ApproveAll, &ctx, &NullSink)
        .await
        .unwrap_err();
    assert_eq!(err, LoopError::LeaseLost);
    assert!(probe.calls().is_empty());
    assert_eq!(provider.requests().len(), 1);
    // A new segment does not ask the model at all.
    let err = tool_loop.run(input(), &ctx, &NullSink).await.unwrap_err();
    assert_eq!(err, LoopError::LeaseLost);
    assert_eq!(provider.requests().len(), 1);
    // Held again, the approved call runs.
    switch.0.store(false, Ordering::SeqCst);
    tool_loop
        .resume(&state, &Decision::ApproveAll, &ctx, &NullSink)
        .await
        .unwrap();
    assert_eq!(probe.count("write_note"), 1);
}
