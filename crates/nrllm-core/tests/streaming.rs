//! The loop and a streaming provider: each piece of the response reaches the sink's `delta`
//! (never its journal of events), and the response's step records when its first token came.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nrllm_core::events::{Event, EventSink, VecSink};
use nrllm_core::provider::{
    ChatRequest, ChatResponse, Delta, DeltaObserver, Provider, ProviderError, RetryObserver,
};
use nrllm_core::testing::{probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::transcript::Message;
use nrllm_core::{RunContext, RunInput, ToolLoop, ToolLoopService};

/// Answers "Hello there" after 30 ms, the second word 40 ms later.
struct Writer;

#[async_trait]
impl Provider for Writer {
    fn name(&self) -> &str {
        "writer"
    }

    fn model(&self) -> &str {
        "writer-1"
    }

    async fn complete(
        &self,
        _request: &ChatRequest,
        _on_retry: RetryObserver<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        Ok(ChatResponse::text("Hello there", usage(5, 8)))
    }

    async fn stream(
        &self,
        request: &ChatRequest,
        on_retry: RetryObserver<'_>,
        on_delta: DeltaObserver<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        for (wait, text) in [(30, "Hello"), (40, " there")] {
            tokio::time::sleep(Duration::from_millis(wait)).await;
            on_delta(Delta::Text { text: text.into() });
        }
        self.complete(request, on_retry).await
    }
}

/// Keeps the events and, apart, the deltas.
#[derive(Default)]
struct Watcher {
    events: VecSink,
    deltas: Mutex<Vec<(u32, Delta)>>,
}

impl EventSink for Watcher {
    fn emit(&self, event: Event) {
        self.events.emit(event)
    }

    fn delta(&self, round: u32, delta: Delta) {
        self.deltas.lock().unwrap().push((round, delta));
    }
}

async fn answered(provider: Arc<dyn Provider>) -> (Vec<Event>, Vec<(u32, Delta)>) {
    let tool_loop = ToolLoop::new(provider, Arc::new(probe_registry(&Probe::default())));
    let watcher = Watcher::default();
    let input = RunInput {
        messages: vec![Message::user("Say hello")],
        ..RunInput::default()
    };
    tool_loop
        .run(input, &RunContext::default(), &watcher)
        .await
        .unwrap();
    (
        watcher.events.events(),
        watcher.deltas.into_inner().unwrap(),
    )
}

fn first_token(events: &[Event]) -> (Option<u64>, u64) {
    events
        .iter()
        .find_map(|event| match event {
            Event::Llm {
                first_token_ms,
                duration_ms,
                ..
            } => Some((*first_token_ms, *duration_ms)),
            _ => None,
        })
        .expect("the response's step")
}

#[tokio::test]
async fn deltas_reach_the_sink_apart_from_the_journal_and_the_step_records_the_first_token() {
    let (events, deltas) = answered(Arc::new(Writer)).await;
    let texts: Vec<&str> = deltas
        .iter()
        .map(|(round, delta)| match delta {
            Delta::Text { text } if *round == 1 => text.as_str(),
            other => panic!("{other:?} in round {round}"),
        })
        .collect();
    assert_eq!(texts, ["Hello", " there"]);
    let (first, duration) = first_token(&events);
    let first = first.expect("a streamed response records its first token");
    assert!(
        first >= 30 && first < duration,
        "{first} ms of {duration} ms"
    );
    // A response given whole records none, and tells nothing.
    let whole = ScriptedProvider::new([ChatResponse::text("Hi", usage(1, 1))]);
    let (events, deltas) = answered(Arc::new(whole)).await;
    assert_eq!(first_token(&events).0, None);
    assert!(deltas.is_empty());
}
