//! Loop overhead, measured: one run of ten tool rounds with the scripted provider and a no-op
//! tool; and suspend → JSON → resume of a run whose state is ~1 KB and ~1 MB, all in memory.
//! Run with `cargo bench -p nrllm-core --bench loop_overhead`.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use nrllm_core::events::NullSink;
use nrllm_core::provider::ChatResponse;
use nrllm_core::testing::{call_turn, probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::transcript::Message;
use nrllm_core::{
    Decision, LoopOutcome, RunContext, RunInput, RunSettings, SuspendedState, ToolLoop,
    ToolLoopService,
};
use serde_json::json;

const ROUNDS: u32 = 10;

fn rounds_script() -> ScriptedProvider {
    let provider = ScriptedProvider::default();
    for i in 0..ROUNDS {
        provider.push(call_turn(
            &format!("c{i}"),
            "read_note",
            json!({"text": "x"}),
            usage(10, 2),
        ));
    }
    provider.push(ChatResponse::text("done", usage(10, 2)));
    provider
}

fn bench_rounds(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let registry = Arc::new(probe_registry(&Probe::default()));
    let mut group = c.benchmark_group("loop");
    group.throughput(Throughput::Elements(u64::from(ROUNDS)));
    group.bench_function("ten_tool_rounds", |b| {
        b.iter_batched(
            rounds_script,
            |provider| {
                let tool_loop = ToolLoop::new(Arc::new(provider), Arc::clone(&registry));
                let input = RunInput {
                    messages: vec![Message::user("go")],
                    settings: RunSettings {
                        max_rounds: ROUNDS + 1,
                        ..RunSettings::default()
                    },
                    ..RunInput::default()
                };
                let outcome = runtime
                    .block_on(tool_loop.run(input, &RunContext::default(), &NullSink))
                    .unwrap();
                assert!(matches!(outcome, LoopOutcome::Completed(_)));
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn bench_suspend_resume(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let registry = Arc::new(probe_registry(&Probe::default()));
    let mut group = c.benchmark_group("suspend_resume");
    for (label, prompt_bytes) in [("1KB", 1024usize), ("1MB", 1024 * 1024)] {
        group.throughput(Throughput::Bytes(prompt_bytes as u64));
        group.bench_function(label, |b| {
            b.iter_batched(
                || {
                    ScriptedProvider::new([
                        call_turn("w", "write_note", json!({"text": "x"}), usage(10, 2)),
                        ChatResponse::text("done", usage(10, 2)),
                    ])
                },
                |provider| {
                    let tool_loop = ToolLoop::new(Arc::new(provider), Arc::clone(&registry));
                    let input = RunInput {
                        messages: vec![Message::user("p".repeat(prompt_bytes))],
                        ..RunInput::default()
                    };
                    runtime.block_on(async {
                        let ctx = RunContext::default();
                        let LoopOutcome::Suspended(state) =
                            tool_loop.run(input, &ctx, &NullSink).await.unwrap()
                        else {
                            panic!("expected a suspension")
                        };
                        let stored = state.to_json();
                        let state = SuspendedState::from_json(&stored).unwrap();
                        let outcome = tool_loop
                            .resume(&state, &Decision::ApproveAll, &ctx, &NullSink)
                            .await
                            .unwrap();
                        assert!(matches!(outcome, LoopOutcome::Completed(_)));
                    })
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench_rounds, bench_suspend_resume);
criterion_main!(benches);
