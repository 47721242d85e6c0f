//! A run suspended by an earlier version still resumes: a saved state in the format of schema
//! version 1 (before tool results carried their outcome) is migrated on read and completes.

use std::sync::Arc;

use nrllm_core::events::NullSink;
use nrllm_core::provider::ChatResponse;
use nrllm_core::state::STATE_SCHEMA_VERSION;
use nrllm_core::testing::{probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::transcript::{Message, ToolOutcome};
use nrllm_core::{Decision, LoopOutcome, RunContext, SuspendedState, ToolLoop, ToolLoopService};

const V1: &str = include_str!("fixtures/suspended_state_v1.json");

fn tool_outcome(message: &Message) -> Option<ToolOutcome> {
    match message {
        Message::Tool { outcome, .. } => Some(*outcome),
        _ => None,
    }
}

#[test]
fn a_version_1_state_is_migrated_on_read() {
    let state = SuspendedState::from_json(V1).expect("a version-1 state reads");
    assert_eq!(state.schema_version, STATE_SCHEMA_VERSION);
    let outcomes: Vec<ToolOutcome> = state.messages.iter().filter_map(tool_outcome).collect();
    assert_eq!(outcomes, [ToolOutcome::Denied, ToolOutcome::Error]);
    // Saved again, it is the current version, and reads back the same.
    let saved = state.to_json();
    assert!(saved.starts_with(&format!("{{\"schema_version\":{STATE_SCHEMA_VERSION}")));
    assert_eq!(SuspendedState::from_json(&saved).unwrap(), state);
}

#[tokio::test]
async fn a_version_1_state_resumes_to_the_end_with_its_outcomes_sent_as_data() {
    let state = SuspendedState::from_json(V1).unwrap();
    let provider = ScriptedProvider::new([ChatResponse::text("Noted.", usage(40, 5))]);
    let probe = Probe::default();
    let tool_loop = ToolLoop::new(Arc::new(provider.clone()), Arc::new(probe_registry(&probe)));
    let ctx = RunContext {
        run_id: "run-v1".into(),
        actor: "bob".into(),
        ..RunContext::default()
    };
    let outcome = tool_loop
        .resume(&state, &Decision::ApproveAll, &ctx, &NullSink)
        .await
        .expect("the old run resumes");
    let LoopOutcome::Completed(done) = outcome else {
        panic!("the run completes");
    };
    assert_eq!(done.content, "Noted.");
    assert_eq!(probe.count("write_note"), 1);
    assert_eq!(done.counters.iterations, 4);
    let sent = &provider.requests()[0].messages;
    let outcomes: Vec<ToolOutcome> = sent.iter().filter_map(tool_outcome).collect();
    assert_eq!(
        outcomes,
        [ToolOutcome::Denied, ToolOutcome::Error, ToolOutcome::Ok]
    );
}

#[test]
fn a_state_saved_by_a_newer_version_is_refused_as_such() {
    let newer = V1.replacen("\"schema_version\":1", "\"schema_version\":99", 1);
    assert_eq!(
        SuspendedState::from_json(&newer).unwrap_err(),
        nrllm_core::state::StateError::UnsupportedVersion { found: 99 }
    );
}
