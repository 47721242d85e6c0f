//! The loop's behaviour through the public API: ADR-084's suspend/resume cases and ours, with a
//! scripted provider (asserting on the exact transcripts sent) and probe tools (counting executions).

use std::sync::Arc;

use nrllm_core::assembly::Skill;
use nrllm_core::events::{Event, VecSink};
use nrllm_core::provider::{ChatResponse, ModelOptions, ToolChoice};
use nrllm_core::registry::{AllowList, ToolRegistry};
use nrllm_core::state::Counters;
use nrllm_core::testing::{call_turn, probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::tool_loop::{cap_result, MAX_RESULT_BYTES};
use nrllm_core::transcript::{validate, Message, Tail, ToolCall};
use nrllm_core::{
    CallDecision, Choice, Decision, LoopError, LoopOutcome, RunContext, RunInput, RunSettings,
    SuspendedState, ToolLoop, ToolLoopService,
};
use serde_json::json;

struct Fixture {
    provider: ScriptedProvider,
    probe: Probe,
    registry: Arc<ToolRegistry>,
    tool_loop: ToolLoop,
}

fn fixture(responses: Vec<ChatResponse>) -> Fixture {
    let provider = ScriptedProvider::new(responses);
    let probe = Probe::default();
    let registry = Arc::new(probe_registry(&probe));
    let tool_loop = ToolLoop::new(Arc::new(provider.clone()), Arc::clone(&registry));
    Fixture {
        provider,
        probe,
        registry,
        tool_loop,
    }
}

fn input(prompt: &str) -> RunInput {
    RunInput {
        system_prompt: Some("You are careful.".into()),
        messages: vec![Message::user(prompt)],
        ..RunInput::default()
    }
}

fn ctx(actor: &str) -> RunContext {
    RunContext {
        run_id: "run-1".into(),
        actor: actor.into(),
        ..RunContext::default()
    }
}

fn suspended(outcome: LoopOutcome) -> SuspendedState {
    match outcome {
        LoopOutcome::Suspended(state) => state,
        LoopOutcome::Completed(done) => panic!("expected a suspension, got {done:?}"),
        LoopOutcome::Decided(state) => panic!("expected a suspension, got {state:?}"),
    }
}

fn completed(outcome: LoopOutcome) -> nrllm_core::Completed {
    match outcome {
        LoopOutcome::Completed(done) => done,
        LoopOutcome::Suspended(state) | LoopOutcome::Decided(state) => {
            panic!("expected completion, got {state:?}")
        }
    }
}

/// Persist and reload, as a store would between the two processes.
fn through_json(state: &SuspendedState) -> SuspendedState {
    SuspendedState::from_json(&state.to_json()).expect("state reads back")
}

fn tool_messages(messages: &[Message]) -> Vec<(String, String)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => Some((tool_call_id.clone(), content.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_gated_call_suspends_with_nothing_executed_and_counters_set() {
    let f = fixture(vec![call_turn(
        "c1",
        "write_note",
        json!({"text": "hi"}),
        usage(100, 20),
    )]);
    let sink = VecSink::default();
    let state = suspended(
        f.tool_loop
            .run(input("write hi"), &ctx("alice"), &sink)
            .await
            .unwrap(),
    );

    assert_eq!(f.probe.calls(), vec![]);
    assert_eq!(state.counters.iterations, 1);
    assert_eq!(state.counters.usage, usage(100, 20));
    assert_eq!(state.pending.len(), 1);
    assert_eq!(state.gated, ["c1"]);
    // The transcript ends with the assistant tool-call turn, unanswered.
    assert_eq!(
        state.messages.last().unwrap().tool_calls(),
        state.pending.as_slice()
    );
    assert!(validate(&state.messages, Tail::PendingAllowed).is_ok());
    let kinds: Vec<&str> = sink.events().iter().map(Event::kind).collect();
    assert_eq!(kinds, ["assembled", "request", "llm", "approval_requested"]);
}

#[tokio::test]
async fn approve_runs_the_call_and_continues_with_tokens_summed_across_segments() {
    let f = fixture(vec![
        call_turn("c1", "write_note", json!({"text": "hi"}), usage(100, 20)),
        ChatResponse::text("I wrote the note.", usage(150, 10)),
    ]);
    let state = suspended(
        f.tool_loop
            .run(input("write hi"), &ctx("alice"), &VecSink::default())
            .await
            .unwrap(),
    );
    let sink = VecSink::default();
    let done = completed(
        f.tool_loop
            .resume(
                &through_json(&state),
                &Decision::ApproveAll,
                &ctx("bob"),
                &sink,
            )
            .await
            .unwrap(),
    );

    assert_eq!(
        f.probe.calls(),
        vec![("write_note".into(), json!({"text": "hi"}))]
    );
    assert_eq!(done.content, "I wrote the note.");
    assert_eq!(done.counters.iterations, 2);
    assert_eq!(done.counters.usage, usage(250, 30));
    assert_eq!(done.counters.tool_calls, 1);
    assert!(!done.truncated);
    // The second request carries the stored transcript plus the tool result — no re-assembly.
    let requests = f.provider.requests();
    assert_eq!(requests.len(), 2);
    let mut expected = state.messages.clone();
    expected.push(Message::tool_result("c1", "wrote: hi"));
    assert_eq!(requests[1].messages, expected);
    assert_eq!(
        requests[1]
            .messages
            .iter()
            .filter(|m| m.role() == "system")
            .count(),
        1
    );
    assert!(validate(&done.messages, Tail::Complete).is_ok());
    // The execution on resume is on the event stream, with who decided.
    let events = sink.events();
    assert!(matches!(&events[0], Event::ApprovalDecided { decided_by, .. } if decided_by == "bob"));
    assert!(events.iter().any(|e| matches!(e, Event::Tool { name, on_resume: true, executed: true, .. } if name == "write_note")));
    assert!(!events.iter().any(|e| e.kind() == "assembled"));
}

#[tokio::test]
async fn deny_injects_a_refusal_the_model_reads_and_the_tool_never_runs() {
    let f = fixture(vec![
        call_turn("c1", "write_note", json!({"text": "hi"}), usage(10, 2)),
        ChatResponse::text("Understood, I did not write it.", usage(12, 3)),
    ]);
    let state = suspended(
        f.tool_loop
            .run(input("write hi"), &ctx("alice"), &VecSink::default())
            .await
            .unwrap(),
    );
    let decision = Decision::DenyAll {
        reason: Some("not today".into()),
    };
    let done = completed(
        f.tool_loop
            .resume(&state, &decision, &ctx("bob"), &VecSink::default())
            .await
            .unwrap(),
    );

    assert_eq!(f.probe.count("write_note"), 0);
    let sent = &f.provider.requests()[1].messages;
    assert_eq!(
        tool_messages(sent),
        [(
            "c1".to_owned(),
            "denied by the operator: not today".to_owned()
        )]
    );
    assert_eq!(done.content, "Understood, I did not write it.");
}

#[tokio::test]
async fn allow_list_and_options_are_restored_on_resume() {
    let f = fixture(vec![
        call_turn("c1", "write_note", json!({"text": "a"}), usage(1, 1)),
        ChatResponse::text("done", usage(1, 1)),
    ]);
    let settings = RunSettings {
        allow_list: AllowList::only(["write_note"]),
        model: ModelOptions {
            temperature: Some(0.25),
            max_tokens: Some(321),
            ..ModelOptions::default()
        },
        max_rounds: 7,
        admin: false,
        limits: Default::default(),
    };
    let run_input = RunInput {
        settings: settings.clone(),
        ..input("write a")
    };
    let state = suspended(
        f.tool_loop
            .run(run_input, &ctx("alice"), &VecSink::default())
            .await
            .unwrap(),
    );
    let state = through_json(&state);
    assert_eq!(state.settings, settings);
    f.tool_loop
        .resume(
            &state,
            &Decision::ApproveAll,
            &ctx("bob"),
            &VecSink::default(),
        )
        .await
        .unwrap();
    let requests = f.provider.requests();
    for request in &requests {
        assert_eq!(request.options, settings.model);
        let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(offered, ["write_note"]);
    }
}

#[tokio::test]
async fn a_tool_no_longer_offered_is_refused_on_resume() {
    let f = fixture(vec![
        call_turn("c1", "write_note", json!({"text": "a"}), usage(1, 1)),
        ChatResponse::text("ok", usage(1, 1)),
    ]);
    let state = suspended(
        f.tool_loop
            .run(input("write a"), &ctx("alice"), &VecSink::default())
            .await
            .unwrap(),
    );
    f.registry.set_enabled("write_note", false);
    f.tool_loop
        .resume(
            &state,
            &Decision::ApproveAll,
            &ctx("bob"),
            &VecSink::default(),
        )
        .await
        .unwrap();
    assert_eq!(f.probe.count("write_note"), 0);
    let sent = &f.provider.requests()[1].messages;
    assert_eq!(
        tool_messages(sent),
        [(
            "c1".to_owned(),
            "Error: tool `write_note` is no longer available (it was disabled, or its MCP server no longer lists it), so it was not executed".to_owned()
        )]
    );
}

#[tokio::test]
async fn a_registered_gated_tool_that_is_not_offered_does_not_suspend() {
    let f = fixture(vec![
        call_turn("c1", "write_note", json!({"text": "a"}), usage(1, 1)),
        ChatResponse::text("could not", usage(1, 1)),
    ]);
    let run_input = RunInput {
        settings: RunSettings {
            allow_list: AllowList::only(["read_note"]),
            ..RunSettings::default()
        },
        ..input("write a")
    };
    let done = completed(
        f.tool_loop
            .run(run_input, &ctx("alice"), &VecSink::default())
            .await
            .unwrap(),
    );
    assert_eq!(f.probe.count("write_note"), 0);
    assert_eq!(
        tool_messages(&done.messages),
        [(
            "c1".to_owned(),
            "Error: tool `write_note` is not available to this run".to_owned()
        )]
    );
}

#[tokio::test]
async fn counters_accumulate_across_a_second_suspension() {
    let f = fixture(vec![
        call_turn("c1", "write_note", json!({"text": "one"}), usage(10, 1)),
        call_turn("c2", "write_note", json!({"text": "two"}), usage(20, 2)),
        ChatResponse::text("both written", usage(30, 3)),
    ]);
    let first = suspended(
        f.tool_loop
            .run(input("write two"), &ctx("alice"), &VecSink::default())
            .await
            .unwrap(),
    );
    let second = suspended(
        f.tool_loop
            .resume(
                &through_json(&first),
                &Decision::ApproveAll,
                &ctx("bob"),
                &VecSink::default(),
            )
            .await
            .unwrap(),
    );
    assert_eq!(
        second.counters,
        Counters {
            iterations: 2,
            usage: usage(30, 3),
            tool_calls: 1,
            running_ms: second.counters.running_ms,
        }
    );
    assert_eq!(second.pending[0].id, "c2");
    let done = completed(
        f.tool_loop
            .resume(
                &through_json(&second),
                &Decision::ApproveAll,
                &ctx("carol"),
                &VecSink::default(),
            )
            .await
            .unwrap(),
    );
    assert_eq!(
        done.counters,
        Counters {
            iterations: 3,
            usage: usage(60, 6),
            tool_calls: 2,
            running_ms: done.counters.running_ms,
        }
    );
    assert_eq!(f.probe.count("write_note"), 2);
    assert!(validate(&done.messages, Tail::Complete).is_ok());
}

fn two_call_turn() -> ChatResponse {
    ChatResponse::calls(
        vec![
            ToolCall::new("r1", "read_note", &json!({"text": "look"})),
            ToolCall::new("w1", "write_note", &json!({"text": "change"})),
        ],
        usage(5, 5),
    )
}

#[tokio::test]
async fn a_two_call_turn_with_one_gated_call_runs_neither_before_the_decision() {
    let f = fixture(vec![two_call_turn()]);
    let state = suspended(
        f.tool_loop
            .run(input("look and change"), &ctx("alice"), &VecSink::default())
            .await
            .unwrap(),
    );
    assert!(f.probe.calls().is_empty());
    assert_eq!(state.pending.len(), 2);
    assert_eq!(state.gated, ["w1"]);
}

#[tokio::test]
async fn per_call_approve_and_deny_answer_each_call_in_order() {
    let f = fixture(vec![
        two_call_turn(),
        ChatResponse::text("read, not written", usage(1, 1)),
    ]);
    let state = suspended(
        f.tool_loop
            .run(input("look and change"), &ctx("alice"), &VecSink::default())
            .await
            .unwrap(),
    );
    let decision = Decision::PerCall {
        calls: vec![
            CallDecision {
                call_id: "w1".into(),
                choice: Choice::Deny {
                    reason: Some("keep it".into()),
                },
            },
            CallDecision {
                call_id: "r1".into(),
                choice: Choice::Approve,
            },
        ],
    };
    let done = completed(
        f.tool_loop
            .resume(&state, &decision, &ctx("bob"), &VecSink::default())
            .await
            .unwrap(),
    );
    assert_eq!(
        f.probe.calls(),
        vec![("read_note".into(), json!({"text": "look"}))]
    );
    assert_eq!(
        tool_messages(&done.messages),
        [
            ("r1".to_owned(), "note: look".to_owned()),
            (
                "w1".to_owned(),
                "denied by the operator: keep it".to_owned()
            )
        ]
    );
}

#[tokio::test]
async fn edited_arguments_are_validated_and_what_runs() {
    let f = fixture(vec![
        call_turn("c1", "write_note", json!({"text": "draft"}), usage(1, 1)),
        ChatResponse::text("ok", usage(1, 1)),
    ]);
    let state = suspended(
        f.tool_loop
            .run(input("write"), &ctx("alice"), &VecSink::default())
            .await
            .unwrap(),
    );
    let edit = |arguments| Decision::PerCall {
        calls: vec![CallDecision {
            call_id: "c1".into(),
            choice: Choice::ApproveEdited { arguments },
        }],
    };

    let invalid = f
        .tool_loop
        .resume(
            &state,
            &edit(json!({"text": 42})),
            &ctx("bob"),
            &VecSink::default(),
        )
        .await
        .unwrap_err();
    match &invalid {
        LoopError::Decision(err) => assert!(err.to_string().contains("field `text`"), "{err}"),
        other => panic!("expected a decision error, got {other:?}"),
    }
    assert!(f.probe.calls().is_empty());
    assert_eq!(
        f.provider.requests().len(),
        1,
        "nothing was sent after a refused decision"
    );

    let done = completed(
        f.tool_loop
            .resume(
                &state,
                &edit(json!({"text": "final"})),
                &ctx("bob"),
                &VecSink::default(),
            )
            .await
            .unwrap(),
    );
    assert_eq!(
        f.probe.calls(),
        vec![("write_note".into(), json!({"text": "final"}))]
    );
    let (_, result) = &tool_messages(&done.messages)[0];
    assert!(
        result.contains("edited the arguments") && result.ends_with("wrote: final"),
        "{result}"
    );
}

#[tokio::test]
async fn a_decision_naming_unknown_or_missing_calls_is_refused() {
    let f = fixture(vec![two_call_turn()]);
    let state = suspended(
        f.tool_loop
            .run(input("x"), &ctx("alice"), &VecSink::default())
            .await
            .unwrap(),
    );
    let approve = |id: &str| CallDecision {
        call_id: id.into(),
        choice: Choice::Approve,
    };
    let unknown = Decision::PerCall {
        calls: vec![approve("r1"), approve("w1"), approve("zz")],
    };
    let missing = Decision::PerCall {
        calls: vec![approve("r1")],
    };
    let twice = Decision::PerCall {
        calls: vec![approve("r1"), approve("r1"), approve("w1")],
    };
    for (decision, expected) in [(unknown, "`zz`"), (missing, "`w1`"), (twice, "twice")] {
        let err = f.tool_loop.check_decision(&state, &decision).unwrap_err();
        assert!(err.to_string().contains(expected), "{err}");
        let err = f
            .tool_loop
            .resume(&state, &decision, &ctx("bob"), &VecSink::default())
            .await
            .unwrap_err();
        assert!(matches!(err, LoopError::Decision(_)));
    }
    assert!(f.probe.calls().is_empty());
}

#[tokio::test]
async fn the_round_cap_ends_with_a_tool_less_round_marked_truncated() {
    let mut responses: Vec<ChatResponse> = (0..3)
        .map(|i| {
            call_turn(
                &format!("c{i}"),
                "read_note",
                json!({"text": "again"}),
                usage(1, 1),
            )
        })
        .collect();
    responses.push(ChatResponse::text("stopping here", usage(1, 1)));
    let f = fixture(responses);
    let run_input = RunInput {
        settings: RunSettings {
            max_rounds: 3,
            ..RunSettings::default()
        },
        ..input("loop")
    };
    let done = completed(
        f.tool_loop
            .run(run_input, &ctx("alice"), &VecSink::default())
            .await
            .unwrap(),
    );
    assert!(done.truncated);
    assert_eq!(done.content, "stopping here");
    assert_eq!(done.counters.iterations, 4);
    let requests = f.provider.requests();
    assert!(requests
        .iter()
        .all(|r| r.tools.iter().any(|t| t.name == "read_note")));
    assert!(requests[..3]
        .iter()
        .all(|r| r.tool_choice == ToolChoice::Auto));
    assert_eq!(requests[3].tool_choice, ToolChoice::Disabled);
}

#[tokio::test]
async fn tool_failures_become_error_results_without_internal_detail() {
    let f = fixture(vec![
        ChatResponse::calls(
            vec![
                ToolCall::new("a", "read_note", &json!({"text": "fail"})),
                ToolCall::new("b", "read_note", &json!({"wrong": 1})),
                ToolCall::with_raw_arguments("c", "read_note", "{broken"),
                ToolCall::new("d", "no_such_tool", &json!({})),
            ],
            usage(1, 1),
        ),
        ChatResponse::text("some failed", usage(1, 1)),
    ]);
    let done = completed(
        f.tool_loop
            .run(input("x"), &ctx("alice"), &VecSink::default())
            .await
            .unwrap(),
    );
    let results = tool_messages(&done.messages);
    assert_eq!(results.len(), 4);
    assert!(
        results.iter().all(|(_, text)| text.starts_with("Error:")),
        "{results:?}"
    );
    assert!(!results[0].1.contains("/srv/notes"));
    assert!(
        results[1].1.contains("invalid arguments: text"),
        "{}",
        results[1].1
    );
    assert!(results[2].1.contains("not valid JSON"), "{}", results[2].1);
}

/// What a `read_note` call with `text` answered the model.
async fn read_note_result(text: &str) -> String {
    let f = fixture(vec![
        call_turn("a", "read_note", json!({ "text": text }), usage(1, 1)),
        ChatResponse::text("ok", usage(1, 1)),
    ]);
    let done = completed(
        f.tool_loop
            .run(input("x"), &ctx("alice"), &VecSink::default())
            .await
            .unwrap(),
    );
    tool_messages(&done.messages).remove(0).1
}

#[tokio::test]
async fn long_results_are_cut_on_a_character_boundary() {
    let result = read_note_result("huge").await;
    assert!(
        result.contains("[result truncated: 49999 of 80001 bytes shown]"),
        "{}",
        &result[result.len() - 60..]
    );
    assert!(result.len() < MAX_RESULT_BYTES + 100);
    assert_eq!(cap_result("short".into()), "short");
}

#[tokio::test]
async fn long_error_texts_are_cut_like_results() {
    let result = read_note_result("huge refusal").await;
    assert!(result.starts_with("Error: nnn"), "{}", &result[..20]);
    assert!(
        result.ends_with("[result truncated: 50000 of 80007 bytes shown]"),
        "{}",
        &result[result.len() - 60..]
    );
}

#[tokio::test]
async fn skills_are_assembled_once_and_admin_tools_offered_only_to_admins() {
    let f = fixture(vec![
        call_turn("c1", "write_note", json!({"text": "a"}), usage(1, 1)),
        ChatResponse::text("ok", usage(1, 1)),
    ]);
    let run_input = RunInput {
        skills: vec![Skill {
            name: "tone".into(),
            content: "Be brief.".into(),
        }],
        ..input("write a")
    };
    let state = suspended(
        f.tool_loop
            .run(run_input, &ctx("alice"), &VecSink::default())
            .await
            .unwrap(),
    );
    f.tool_loop
        .resume(
            &state,
            &Decision::ApproveAll,
            &ctx("bob"),
            &VecSink::default(),
        )
        .await
        .unwrap();
    let requests = f.provider.requests();
    for request in &requests {
        let with_skills = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::User { content } if content.contains("<skill name=\"tone\">")))
            .count();
        assert_eq!(with_skills, 1);
        assert!(!request.tools.iter().any(|t| t.name == "admin_note"));
    }
}

#[tokio::test]
async fn a_provider_failure_reports_the_counters_so_far() {
    let f = fixture(vec![call_turn(
        "a",
        "read_note",
        json!({"text": "x"}),
        usage(7, 3),
    )]);
    let sink = VecSink::default();
    let err = f
        .tool_loop
        .run(input("x"), &ctx("alice"), &sink)
        .await
        .unwrap_err();
    match err {
        LoopError::Provider { counters, .. } => {
            assert_eq!(counters.iterations, 2);
            assert_eq!(counters.usage, usage(7, 3));
        }
        other => panic!("expected a provider error, got {other:?}"),
    }
    assert_eq!(sink.events().last().map(Event::kind), Some("llm_failed"));
}

/// A provider whose every request first has a stream that broke off after using `spent`, then
/// answers as `inner` does.
struct BrokeOffFirst {
    inner: ScriptedProvider,
    spent: nrllm_core::provider::Usage,
}

#[async_trait::async_trait]
impl nrllm_core::provider::Provider for BrokeOffFirst {
    fn name(&self) -> &str {
        "broke-off-first"
    }

    fn model(&self) -> &str {
        "script"
    }

    async fn complete(
        &self,
        request: &nrllm_core::provider::ChatRequest,
        on_retry: nrllm_core::provider::RetryObserver<'_>,
    ) -> Result<ChatResponse, nrllm_core::provider::ProviderError> {
        on_retry(nrllm_core::provider::RetryNotice {
            retry: 1,
            wait_ms: 0,
            reason: "the stream broke off".into(),
            hint: None,
            spent: Some(self.spent),
        });
        self.inner.complete(request, on_retry).await
    }
}

#[tokio::test]
async fn what_broken_attempts_used_is_counted_so_the_run_is_the_sum_of_its_steps() {
    use nrllm_core::provider::{ProviderError, Usage};
    let inner = ScriptedProvider::new([ChatResponse::text("Done.", usage(10, 2))]);
    let probe = Probe::default();
    let registry = Arc::new(probe_registry(&probe));
    let provider = BrokeOffFirst {
        inner: inner.clone(),
        spent: usage(4, 1),
    };
    let tool_loop = ToolLoop::new(Arc::new(provider), Arc::clone(&registry));
    let sink = VecSink::default();
    let done = completed(
        tool_loop
            .run(input("x"), &ctx("alice"), &sink)
            .await
            .unwrap(),
    );
    assert_eq!(done.counters.usage, usage(14, 3));
    let mut summed = Usage::default();
    for event in sink.events() {
        match event {
            Event::Llm { usage, .. } => summed += usage,
            Event::ProviderRetry {
                usage: Some(usage), ..
            } => summed += usage,
            _ => {}
        }
    }
    assert_eq!(summed, done.counters.usage, "the run's usage is its steps'");

    // A request that fails for good after its stream broke off counts what it used, and a
    // usage the provider never reported stays marked unknown (never 0).
    let f = fixture(Vec::new());
    let mut error = ProviderError::transient("the stream broke off");
    error.spent = Some(Usage::unreported());
    f.provider.push_result(Err(error));
    let sink = VecSink::default();
    match f.tool_loop.run(input("x"), &ctx("alice"), &sink).await {
        Err(LoopError::Provider { counters, .. }) => {
            assert_eq!(counters.usage.unreported, 1);
            assert!(!counters.usage.is_complete());
        }
        other => panic!("expected a provider error, got {other:?}"),
    }
    assert!(matches!(
        sink.events().last(),
        Some(Event::LlmFailed { usage: Some(usage), .. }) if usage.unreported == 1
    ));
}

/// A turn of three approved writes whose second call's server asks the operator (an MCP
/// elicitation): the turn stops there, waiting for input with the server's form; only a reply
/// moves it on, and the call is sent again with the reply and its server's state under the same
/// effect key; the calls before it are not run again, the one after it runs once.
#[tokio::test]
async fn a_server_that_asks_mid_turn_makes_the_run_wait_and_the_reply_goes_back_with_the_call() {
    use nrllm_core::elicit::{Reply, ReplyAction};
    let turn = ChatResponse::calls(
        vec![
            ToolCall::new("w1", "write_note", &json!({"text": "first"})),
            ToolCall::new("w2", "write_note", &json!({"text": "ask"})),
            ToolCall::new("w3", "write_note", &json!({"text": "third"})),
        ],
        usage(5, 5),
    );
    let f = fixture(vec![turn, ChatResponse::text("done", usage(1, 1))]);
    let first = suspended(
        f.tool_loop
            .run(input("write three"), &ctx("alice"), &VecSink::default())
            .await
            .unwrap(),
    );
    let sink = VecSink::default();
    let waiting = suspended(
        f.tool_loop
            .resume(&first, &Decision::ApproveAll, &ctx("bert"), &sink)
            .await
            .unwrap(),
    );
    let waiting = through_json(&waiting);
    assert_eq!(
        waiting.waiting_for(),
        nrllm_types::RunStatus::WaitingForInput
    );
    let wait = waiting
        .elicited
        .clone()
        .expect("the server's question is kept");
    assert_eq!(wait.call_id, "w2");
    assert_eq!(wait.asked.server, "probe");
    assert_eq!(wait.asked.message, "Which title?");
    assert_eq!(waiting.answered.len(), 1, "w1 ran before the question");
    assert!(waiting.undecided().is_empty());
    assert_eq!(f.probe.count("write_note"), 2, "w1 ran, w2 asked, w3 waits");
    let events = sink.events();
    assert!(
        matches!(events.last(), Some(Event::InputAsked { call_id, server, .. }) if call_id == "w2" && server == "probe"),
        "{events:?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::Tool { call_id, .. } if call_id == "w2")),
        "nothing of the asking call is journaled as answered"
    );

    // Anything but a reply is refused, nothing runs.
    let refused = f
        .tool_loop
        .resume(
            &waiting,
            &Decision::ApproveAll,
            &ctx("bert"),
            &VecSink::default(),
        )
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("server probe asked"),
        "{refused}"
    );
    assert_eq!(f.probe.count("write_note"), 2);

    let reply = Decision::Reply {
        reply: Reply {
            action: ReplyAction::Accept,
            content: Some(json!({"title": "Ideas"})),
        },
    };
    let sink = VecSink::default();
    let done = completed(
        f.tool_loop
            .resume(&waiting, &reply, &ctx("carol"), &sink)
            .await
            .unwrap(),
    );
    let writes: Vec<String> = f
        .probe
        .calls()
        .into_iter()
        .map(|(_, args)| args["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(writes, ["first", "ask", "ask", "third"]);
    let keys = f.probe.effect_keys();
    assert_eq!(keys[1], keys[2], "sent again under the same effect key");
    assert_eq!(keys[1].as_deref(), Some("run-1/1/w2"));
    let results = tool_messages(&done.messages);
    assert_eq!(
        results,
        [
            ("w1".to_owned(), "wrote: first".to_owned()),
            (
                "w2".to_owned(),
                r#"wrote: ask (accepted: {"title":"Ideas"}; state s1)"#.to_owned()
            ),
            ("w3".to_owned(), "wrote: third".to_owned()),
        ]
    );
    assert_eq!(done.counters.tool_calls, 3, "the turn counts once");
    assert!(validate(&done.messages, Tail::Complete).is_ok());
    let events = sink.events();
    assert!(
        matches!(events.first(), Some(Event::InputReplied { decided_by, reply, .. }) if decided_by == "carol" && reply.action == ReplyAction::Accept),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| matches!(e, Event::Tool { call_id, note: Some(note), .. } if call_id == "w1" && note.contains("journaled already"))),
        "w1 is answered from its result, not run again"
    );
}
