use super::*;
use crate::page_data::STEP_WINDOW;
use nrllm_core::events::Event;
use nrllm_core::registry::ToolRegistry;
use nrllm_core::run_store::{RunRecord, RunStatus, StoredEvent};
use nrllm_core::transcript::Message;
use nrllm_core::Choice;

fn stored(sequence: i64, event: &Event) -> StoredEvent {
    StoredEvent {
        run_id: uuid::Uuid::nil(),
        sequence,
        kind: event.kind().to_owned(),
        round: event.round().map(i64::from),
        duration_ms: None,
        payload: serde_json::to_value(event).unwrap(),
        created_at_ms: 0,
    }
}

pub(super) fn record(last_sequence: i64) -> RunRecord {
    RunRecord {
        id: uuid::Uuid::nil(),
        status: RunStatus::Completed,
        configuration: None,
        requested_by: "operator".into(),
        counters: Default::default(),
        truncated: false,
        estimated_cost_micros: None,
        termination_reason: None,
        error_summary: None,
        final_answer: None,
        suspended_state: None,
        decided_by: None,
        decided_at_ms: None,
        decision: None,
        decision_record: None,
        version: 1,
        last_sequence,
        created_at_ms: 0,
        updated_at_ms: 0,
        started_at_ms: None,
        finished_at_ms: None,
        approval_deadline_ms: None,
        approvals_required: 1,
        queued_at_ms: None,
        approved_bases: None,
        cancel_requested: None,
        trace: None,
        lease_owner: None,
    }
}

fn failure(round: u32) -> Event {
    Event::LlmFailed {
        round,
        message: "x".into(),
        duration_ms: 1,
        usage: None,
    }
}

#[test]
fn the_page_shows_a_window_of_the_latest_steps_and_links_the_older_ones() {
    let events: Vec<StoredEvent> = (1..=250).map(|i| stored(i, &failure(1))).collect();
    let latest = run_view(&record(250), &events, None, None, None);
    assert_eq!(latest.steps.len(), STEP_WINDOW);
    assert_eq!(latest.steps[0].sequence, 151);
    assert_eq!(latest.older_before, Some(151));
    assert!(latest.latest);
    let older = run_view(&record(250), &events, Some(151), None, None);
    assert_eq!(older.steps.first().map(|s| s.sequence), Some(51));
    assert_eq!(older.steps.last().map(|s| s.sequence), Some(150));
    assert_eq!(older.older_before, Some(51));
    assert!(!older.latest);
    let first = run_view(&record(250), &events, Some(51), None, None);
    assert_eq!(first.steps.len(), 50);
    assert_eq!(first.older_before, None);
}

#[test]
fn a_request_step_shows_its_new_messages_and_rebuilds_the_whole_transcript() {
    let request = |first, messages: Vec<Message>| Event::Request {
        round: 1,
        first: Some(first),
        messages,
        tools_offered: Vec::new(),
    };
    let events = vec![
        stored(
            1,
            &request(0, vec![Message::system("sys"), Message::user("hi")]),
        ),
        stored(2, &failure(1)),
        stored(
            3,
            &request(2, vec![Message::assistant_text("a"), Message::user("more")]),
        ),
    ];
    let registry = ToolRegistry::new();
    let detail = step_detail(&events, Some(3), Some("transcript"), &registry).unwrap();
    assert_eq!(detail.selected, "transcript");
    assert_eq!(
        detail.step.title,
        "request: 4 message(s) (2 new), 0 tool(s) offered"
    );
    let text = |key: &str| {
        detail
            .tabs
            .iter()
            .find(|t| t.key == key)
            .map(|t| t.text.clone())
            .unwrap()
    };
    let transcript: Vec<Message> = serde_json::from_str(&text("transcript")).unwrap();
    assert_eq!(transcript.len(), 4);
    assert_eq!(transcript[0], Message::system("sys"));
    let new: Vec<Message> = serde_json::from_str(&text("messages")).unwrap();
    assert_eq!(new, [Message::assistant_text("a"), Message::user("more")]);
    // An unknown tab falls back to the first one; the latest step is the default.
    let latest = step_detail(&events, None, Some("nope"), &registry).unwrap();
    assert_eq!(latest.step.sequence, 3);
    assert_eq!(latest.selected, "messages");
}

#[test]
fn the_deadline_says_when_and_how_long_is_left() {
    let at = 1_796_020_889_000; // 2026-11-30 06:41:29 UTC
    assert_eq!(
        deadline_text(at, at - 2 * 3_600_000 - 5 * 60_000),
        "Decide by 2026-11-30 06:41:29 UTC (2 h 5 min left); after that the turn expires and none of its calls runs."
    );
    assert!(deadline_text(at, at - 30_000).contains("(30 s left)"));
    assert!(deadline_text(at, at - 3 * 86_400_000).contains("(3 d 0 h left)"));
    assert!(deadline_text(at, at + 1)
        .starts_with("The time to decide ran out at 2026-11-30 06:41:29 UTC"));
}

#[test]
fn an_edit_is_shown_as_a_diff_of_the_arguments_in_the_decision_step() {
    let decided = Event::ApprovalDecided {
        round: Some(2),
        decided_by: "bob".into(),
        through_token: None,
        choices: vec![nrllm_core::events::CallChoice {
            call_id: "c1".into(),
            tool: "update_page".into(),
            choice: Choice::ApproveEdited {
                arguments: serde_json::json!({"slug": "home", "title": "Mine"}),
            },
            original_arguments: Some(r#"{"slug":"home","title":"Theirs"}"#.into()),
        }],
    };
    let view = step(9, &decided);
    assert_eq!(
        view.title,
        "decided by bob: update_page approved with edits"
    );
    assert_eq!(view.round, Some(2));
    let tabs = detail_tabs(&decided, [], &ToolRegistry::new());
    let decision = &tabs.iter().find(|t| t.key == "result").unwrap().text;
    assert!(decision.contains(r#"-   "title": "Theirs""#), "{decision}");
    assert!(decision.contains(r#"+   "title": "Mine""#), "{decision}");
}

#[test]
fn a_retry_is_a_step_that_says_why_and_how_long_it_waits() {
    let retry = |wait_ms| Event::ProviderRetry {
        round: 2,
        retry: 1,
        wait_ms,
        reason: "openai: rate limited (HTTP 429): slow down".into(),
        hint: None,
        usage: None,
    };
    let view = step(7, &retry(1500));
    assert_eq!(view.kind, "provider_retry");
    assert_eq!(view.round, Some(2));
    assert!(!view.ok);
    assert_eq!(
        view.title,
        "retry 1 in 1.5 s: openai: rate limited (HTTP 429): slow down"
    );
    let quick = step(8, &retry(250));
    assert!(
        quick.title.starts_with("retry 1 in 250 ms: "),
        "{}",
        quick.title
    );
    let hinted = Event::ProviderRetry {
        round: 2,
        retry: 1,
        wait_ms: 2000,
        reason: "gemini: rate limited (HTTP 429): quota".into(),
        hint: Some("RetryInfo.retryDelay 2s".into()),
        usage: None,
    };
    assert_eq!(
        step(9, &hinted).title,
        "retry 1 in 2.0 s (as the provider asked: RetryInfo.retryDelay 2s): gemini: rate limited (HTTP 429): quota"
    );
}

#[test]
fn a_broken_stream_says_what_it_used_and_unreported_usage_is_never_zero() {
    use nrllm_core::provider::Usage;
    let broken = |usage| Event::ProviderRetry {
        round: 1,
        retry: 1,
        wait_ms: 500,
        reason: "anthropic: the provider failed mid-response (overloaded_error): busy".into(),
        hint: None,
        usage,
    };
    let counted = step(3, &broken(Some(Usage::tokens(120, 7))));
    assert_eq!(
        counted.title,
        "retry 1 in 500 ms: anthropic: the provider failed mid-response (overloaded_error): busy; \
         the broken attempt used 127 tokens (120 + 7)"
    );
    assert_eq!(counted.tokens, Some(127));
    let unknown = step(4, &broken(Some(Usage::unreported())));
    assert!(
        unknown
            .title
            .ends_with("; the provider did not report what the broken attempt used"),
        "{}",
        unknown.title
    );
    assert_eq!(
        unknown.tokens, None,
        "unknown usage is not shown as 0 tokens"
    );
    let answer = Event::Llm {
        round: 1,
        content: Some("hi".into()),
        tool_calls: Vec::new(),
        usage: Usage::unreported(),
        finish_reason: nrllm_core::provider::FinishReason::Stop,
        duration_ms: 900,
        first_token_ms: Some(100),
        raw: None,
    };
    let view = step(5, &answer);
    assert_eq!(
        view.title,
        "model answered (first token after 100 ms); the provider did not report its usage"
    );
    assert_eq!(view.tokens, None);
    let mut run = record(1);
    run.counters.usage = Usage::tokens(100, 20);
    run.counters.usage += Usage::unreported();
    run.estimated_cost_micros = Some(1200);
    let shown = summary(&run);
    assert_eq!(shown.total_tokens_text(), "120+");
    assert_eq!(
        shown.tokens_fact(),
        "tokens 120+ (100 + 20); usage of 1 response not reported"
    );
    assert_eq!(shown.estimated_cost.as_deref(), Some("at least $0.0012"));
    // The parts priced apart are named, those there are.
    run.counters.usage = Usage {
        cached_input_tokens: 60,
        reasoning_tokens: 5,
        ..Usage::tokens(100, 20)
    };
    assert_eq!(
        summary(&run).tokens_fact(),
        "tokens 120 (100 + 20; 60 cached, 5 reasoning)"
    );
}

#[test]
fn a_streamed_response_step_says_when_its_first_token_came_and_how_fast_it_wrote() {
    let answer = |first_token_ms| nrllm_core::run_store::SequencedEvent {
        sequence: 3,
        event: Event::Llm {
            round: 1,
            content: Some("Hello".into()),
            tool_calls: Vec::new(),
            usage: nrllm_core::provider::Usage::tokens(10, 50),
            finish_reason: nrllm_core::provider::FinishReason::Stop,
            duration_ms: 1200,
            first_token_ms,
            raw: None,
        },
        created_at_ms: 0,
    };
    assert_eq!(
        live_step(&answer(Some(200)), &Default::default()).title,
        "model answered (first token after 200 ms, 50 tokens/s)"
    );
    assert_eq!(
        live_step(&answer(None), &Default::default()).title,
        "model answered"
    );
}

#[test]
fn a_limit_moves_by_what_a_live_step_used_and_says_when_it_is_reached() {
    use crate::page_data::{LimitView, StepSpent};
    use nrllm_types::limits::LimitKind;
    let limit = |kind: LimitKind, used: Option<u64>, cap: u64| LimitView {
        kind,
        label: kind.label().to_owned(),
        used: used.map_or("—".to_owned(), |u| kind.show(u)),
        used_count: used,
        limit: kind.show(cap),
        limit_count: cap,
        reached: false,
    };
    let mut requests = limit(LimitKind::Requests, Some(1), 3);
    let mut cost = limit(LimitKind::CostMicros, Some(900), 1_000);
    let mut unpriced = limit(LimitKind::CostMicros, None, 1_000);
    let mut time = limit(LimitKind::WallMs, Some(10), 20);
    let answer = StepSpent {
        requests: 1,
        cost_micros: 300,
        ..StepSpent::default()
    };
    for view in [&mut requests, &mut cost, &mut unpriced, &mut time] {
        view.add(&answer);
    }
    assert_eq!(requests.text(), "model requests: 2 / 3");
    assert!(!requests.reached);
    assert_eq!(
        cost.text(),
        "cost (millionths of a dollar): $0.0012 / $0.0010"
    );
    assert!(cost.reached);
    assert_eq!(
        unpriced.text(),
        "cost (millionths of a dollar): — / $0.0010"
    );
    assert_eq!(time.used_count, Some(10), "running time is not a step's");
    // What each kind of step used.
    let prices = nrllm_core::provider::Prices {
        input: Some(1.0),
        output: Some(1.0),
        ..Default::default()
    };
    let ended = Event::Ended {
        reason: "completed".into(),
        explanation: String::new(),
    };
    assert_eq!(step_spent(&ended, &prices), None);
    let retried = Event::ProviderRetry {
        round: 1,
        retry: 1,
        wait_ms: 0,
        reason: "overloaded".into(),
        hint: None,
        usage: Some(nrllm_core::provider::Usage::tokens(30, 5)),
    };
    let spent = step_spent(&retried, &prices).unwrap();
    assert_eq!(
        (
            spent.input_tokens,
            spent.output_tokens,
            spent.requests,
            spent.cost_micros
        ),
        (30, 5, 0, 35),
        "a broken attempt's tokens count, not as a request"
    );
}

#[test]
fn a_turn_needing_two_approvals_says_so_and_each_counted_approval_is_a_step() {
    let call = nrllm_core::transcript::ToolCall::new(
        "c1",
        "delete_page",
        &serde_json::json!({"slug": "old"}),
    );
    let requested = Event::ApprovalRequested {
        round: 1,
        calls: vec![call.clone()],
        gated: vec!["c1".into()],
        approvals_required: 2,
    };
    assert_eq!(
        step(3, &requested).title,
        "approval requested: delete_page (1 gated); needs 2 approvals from different people"
    );
    let counted = Event::ApprovalCounted {
        round: 1,
        by: "alice".into(),
        through_token: Some("ci".into()),
        count: 1,
        required: 2,
        choices: vec![nrllm_core::events::CallChoice {
            call_id: "c1".into(),
            tool: "delete_page".into(),
            choice: Choice::Approve,
            original_arguments: None,
        }],
    };
    let view = step(4, &counted);
    assert_eq!(view.kind, "approval_counted");
    assert!(view.ok);
    assert_eq!(
        view.title,
        "approval 1 of 2 by alice (token ci): delete_page approved as is; waiting for more"
    );
    // One approval alone: as before.
    let alone = Event::ApprovalRequested {
        round: 1,
        calls: vec![call],
        gated: vec!["c1".into()],
        approvals_required: 1,
    };
    assert_eq!(
        step(5, &alone).title,
        "approval requested: delete_page (1 gated)"
    );
}
