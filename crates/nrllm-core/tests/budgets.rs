//! Budgets through the loop's public API: a scripted model that keeps calling a tool waits at
//! each kind of limit before the action that would cross it — nothing of that action happens —
//! and, once a person raises the limit, goes on from exactly there: the transcript after the
//! raise is the transcript of the same run without the limit.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nrllm_core::clock::Clock;
use nrllm_core::decision::DecisionError;
use nrllm_core::events::{Event, VecSink};
use nrllm_core::moves::{BudgetMove, Raise};
use nrllm_core::provider::{ChatResponse, Prices};
use nrllm_core::run_store::RunStatus;
use nrllm_core::state::{BudgetStop, LimitKind, Limits, NextAction};
use nrllm_core::testing::{call_turn, probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::transcript::Message;
use nrllm_core::{
    Decision, LoopError, LoopOutcome, RunContext, RunInput, RunSettings, SuspendedState, ToolLoop,
    ToolLoopService,
};
use serde_json::json;

/// A clock that moves on a second each time it is read, and by as much as a test says.
#[derive(Default)]
struct Ticking(AtomicI64);

#[async_trait]
impl Clock for Ticking {
    fn now_ms(&self) -> i64 {
        self.0.fetch_add(1_000, Ordering::SeqCst)
    }

    async fn sleep(&self, _duration: Duration) {}
}

/// Five turns of one read each (100 input and 10 output tokens a response), then the answer.
fn reads() -> Vec<ChatResponse> {
    let mut responses: Vec<ChatResponse> = (0..5)
        .map(|i| {
            call_turn(
                &format!("c{i}"),
                "read_note",
                json!({"text": format!("n{i}")}),
                usage(100, 10),
            )
        })
        .collect();
    responses.push(ChatResponse::text("Read them all.", usage(100, 10)));
    responses
}

struct Run {
    provider: ScriptedProvider,
    probe: Probe,
    tool_loop: ToolLoop,
    clock: Arc<Ticking>,
}

fn run_with(responses: Vec<ChatResponse>) -> Run {
    let provider = ScriptedProvider::new(responses);
    let probe = Probe::default();
    let clock = Arc::new(Ticking::default());
    let tool_loop = ToolLoop::new(Arc::new(provider.clone()), Arc::new(probe_registry(&probe)))
        .with_clock(clock.clone());
    Run {
        provider,
        probe,
        tool_loop,
        clock,
    }
}

fn input(limits: Limits) -> RunInput {
    RunInput {
        messages: vec![Message::user("read every note")],
        settings: RunSettings {
            max_rounds: 10,
            limits,
            ..RunSettings::default()
        },
        ..RunInput::default()
    }
}

fn ctx() -> RunContext {
    RunContext {
        run_id: "run-b".into(),
        actor: "olga".into(),
        prices: Prices {
            input: Some(1.0),
            output: Some(10.0),
            ..Prices::default()
        },
        ..RunContext::default()
    }
}

fn waiting(outcome: LoopOutcome) -> SuspendedState {
    match outcome {
        LoopOutcome::Suspended(state) => {
            // Kept and read back, as the store does between the wait and the decision.
            SuspendedState::from_json(&state.to_json()).expect("a budget wait reads back")
        }
        other => panic!("expected a wait, got {other:?}"),
    }
}

fn finished(outcome: LoopOutcome) -> nrllm_core::Completed {
    match outcome {
        LoopOutcome::Completed(done) => done,
        other => panic!("expected the run to finish, got {other:?}"),
    }
}

/// The run without limits: what every raised run must come to.
async fn uncapped() -> Vec<Message> {
    let run = run_with(reads());
    let done = finished(
        run.tool_loop
            .run(input(Limits::default()), &ctx(), &VecSink::default())
            .await
            .unwrap(),
    );
    assert_eq!(run.probe.count("read_note"), 5);
    done.messages
}

/// What a raise of the limit that stopped `state` to `to` decides.
fn raise(state: &SuspendedState, to: u64) -> Decision {
    let stop = state.budget.expect("waits at its budget");
    Decision::RaiseBudget {
        limits: state.settings.limits.with(stop.limit, Some(to)),
    }
}

#[tokio::test]
async fn each_limit_stops_the_run_before_the_action_that_would_cross_it() {
    let whole = uncapped().await;
    // (limit, cap, requests asked before the wait, reads run before it, what it stopped before)
    let cases = [
        (
            LimitKind::Requests,
            2,
            2,
            2,
            NextAction::ModelRequest { round: 3 },
        ),
        // 100 input tokens a response: 300 ≥ 250 after three.
        (
            LimitKind::InputTokens,
            250,
            3,
            3,
            NextAction::ModelRequest { round: 4 },
        ),
        (
            LimitKind::OutputTokens,
            20,
            2,
            2,
            NextAction::ModelRequest { round: 3 },
        ),
        // 100 × $1 + 10 × $10 per million = 200 micro-dollars a response.
        (
            LimitKind::CostMicros,
            500,
            3,
            3,
            NextAction::ModelRequest { round: 4 },
        ),
        // The third turn's call would be the third: the model was asked, the call not run.
        (
            LimitKind::ToolCalls,
            2,
            3,
            2,
            NextAction::ToolCalls { calls: 1 },
        ),
    ];
    for (limit, cap, asked, ran, next) in cases {
        let run = run_with(reads());
        let limits = Limits::default().with(limit, Some(cap));
        let sink = VecSink::default();
        let state = waiting(
            run.tool_loop
                .run(input(limits), &ctx(), &sink)
                .await
                .unwrap(),
        );
        assert_eq!(
            state.waiting_for(),
            RunStatus::WaitingForBudget,
            "{limit:?}"
        );
        let stop = state.budget.unwrap();
        assert_eq!(
            (stop.limit, stop.cap, stop.next),
            (limit, cap, next),
            "{limit:?}"
        );
        assert!(
            stop.used >= cap || limit == LimitKind::ToolCalls,
            "{limit:?}: {stop:?}"
        );
        assert_eq!(run.provider.requests().len(), asked, "{limit:?}: requests");
        assert_eq!(run.probe.count("read_note"), ran, "{limit:?}: reads");
        // The step says which limit, how much was used, and what did not happen.
        let reached = sink.events().into_iter().find_map(|e| match e {
            Event::BudgetReached { stop, .. } => Some(stop),
            _ => None,
        });
        assert_eq!(reached, Some(stop), "{limit:?}");
        assert!(
            stop.explain().starts_with(limit.label()),
            "{}",
            stop.explain()
        );

        // Raised, it goes on from exactly there, and comes to what the uncapped run did.
        let done = finished(
            run.tool_loop
                .resume(
                    &state,
                    &raise(&state, 1_000_000),
                    &ctx(),
                    &VecSink::default(),
                )
                .await
                .unwrap(),
        );
        assert_eq!(
            done.messages, whole,
            "{limit:?}: the transcript after the raise"
        );
        assert_eq!(
            run.probe.count("read_note"),
            5,
            "{limit:?}: each read ran once"
        );
        assert_eq!(
            run.provider.requests().len(),
            6,
            "{limit:?}: each request once"
        );
    }
}

#[tokio::test]
async fn running_time_counts_the_time_spent_running_not_the_wait() {
    let run = run_with(reads());
    // Each reading of the clock is a second on: the segment starts (0), looks before the first
    // request (1 s), after its answer (2 s), before the second (3 s ≥ 2.5 s): it waits.
    let limits = Limits::default().with(LimitKind::WallMs, Some(2_500));
    let state = waiting(
        run.tool_loop
            .run(input(limits), &ctx(), &VecSink::default())
            .await
            .unwrap(),
    );
    let stop = state.budget.unwrap();
    assert_eq!((stop.limit, stop.used), (LimitKind::WallMs, 3_000));
    assert_eq!(run.provider.requests().len(), 1);
    // A day passes while it waits: not counted. Raised to 5 s, it asks again at once (4 s).
    run.clock.0.fetch_add(86_400_000, Ordering::SeqCst);
    let again = waiting(
        run.tool_loop
            .resume(&state, &raise(&state, 5_000), &ctx(), &VecSink::default())
            .await
            .unwrap(),
    );
    assert_eq!(run.provider.requests().len(), 2, "the wait did not count");
    assert_eq!(again.budget.unwrap().used, 6_000);
}

#[tokio::test]
async fn a_raise_that_would_stop_it_again_and_a_turns_decision_are_refused_and_stop_ends_it() {
    let run = run_with(reads());
    let limits = Limits::default().with(LimitKind::ToolCalls, Some(1));
    let state = waiting(
        run.tool_loop
            .run(input(limits), &ctx(), &VecSink::default())
            .await
            .unwrap(),
    );
    assert_eq!(state.pending.len(), 1, "the turn it stopped before is kept");
    // One call used, one to run: the limit must be at least 2.
    let err = run
        .tool_loop
        .check_decision(&state, &raise(&state, 1))
        .unwrap_err();
    assert_eq!(
        err,
        LoopError::Decision(DecisionError::RaiseTooSmall {
            limit: "tool calls".into(),
            needed: "2".into()
        })
    );
    assert_eq!(
        run.tool_loop.check_decision(&state, &Decision::ApproveAll),
        Err(LoopError::Decision(DecisionError::WaitsForBudget))
    );
    // The moves a person makes: by an amount counts from the limit, to a value is the value.
    let by = BudgetMove::Raise(Raise::By(3));
    let to = BudgetMove::Raise(Raise::To(7));
    for (budget_move, value) in [(by, 4), (to, 7)] {
        let (decision, _) = nrllm_core::moves::TurnMove::Budget(&budget_move)
            .decide(&state, (uuid::Uuid::nil(), "demo"))
            .unwrap();
        assert_eq!(decision, raise(&state, value));
    }
    // Stopped, it ends where it stood: nothing more asked or run.
    let sink = VecSink::default();
    let done = finished(
        run.tool_loop
            .resume(&state, &Decision::StopAtBudget, &ctx(), &sink)
            .await
            .unwrap(),
    );
    assert_eq!(done.budget_stopped, state.budget);
    assert_eq!(done.counters, state.counters);
    assert_eq!(run.provider.requests().len(), 2);
    assert_eq!(run.probe.count("read_note"), 1);
    assert!(matches!(
        sink.events()[..],
        [Event::BudgetDecided { raised: None, .. }]
    ));
    // A budget decision for a run that waits for an approval is refused.
    let approvals = run_with(vec![call_turn(
        "w",
        "write_note",
        json!({"text": "x"}),
        usage(1, 1),
    )]);
    let turn = waiting(
        approvals
            .tool_loop
            .run(input(Limits::default()), &ctx(), &VecSink::default())
            .await
            .unwrap(),
    );
    assert_eq!(
        approvals
            .tool_loop
            .check_decision(&turn, &Decision::StopAtBudget),
        Err(LoopError::Decision(DecisionError::NoBudgetWait))
    );
}

#[tokio::test]
async fn the_closing_round_after_the_round_cap_is_asked_whatever_the_request_limit_says() {
    let run = run_with(reads());
    let settings = RunSettings {
        max_rounds: 2,
        limits: Limits::default().with(LimitKind::Requests, Some(2)),
        ..RunSettings::default()
    };
    let input = RunInput {
        settings,
        ..input(Limits::default())
    };
    let done = finished(
        run.tool_loop
            .run(input, &ctx(), &VecSink::default())
            .await
            .unwrap(),
    );
    assert!(
        done.truncated,
        "max_rounds keeps its meaning: the closing answer"
    );
    assert_eq!(run.provider.requests().len(), 3);
}

#[test]
fn a_stop_says_what_it_stopped_before() {
    let stop = BudgetStop {
        limit: LimitKind::ToolCalls,
        used: 4,
        cap: 4,
        next: NextAction::ToolCalls { calls: 2 },
        daily: None,
    };
    assert_eq!(
        stop.explain(),
        "tool calls: 4 used of 4; the next turn's 2 calls did not run"
    );
    assert_eq!(stop.needed(), 6);
}

/// A context whose spend counts toward the daily caps `caps` in `ledger` (configuration `demo`,
/// requester `olga`), on `clock`.
fn counted(
    caps: nrllm_core::spend::SpendCaps,
    ledger: &Arc<nrllm_core::testing::MemoryLedger>,
    clock: &Arc<Ticking>,
) -> RunContext {
    RunContext {
        spend: Some(nrllm_core::spend::SpendWatch {
            caps,
            configuration: "demo".into(),
            requester: "olga".into(),
            ledger: ledger.clone(),
            clock: clock.clone(),
        }),
        ..ctx()
    }
}

fn key(scope: nrllm_core::spend::CapScope, name: &str) -> nrllm_core::spend::SpendKey {
    nrllm_core::spend::SpendKey {
        scope,
        name: name.into(),
    }
}

#[tokio::test]
async fn a_daily_cap_across_runs_stops_a_run_before_the_request_and_the_allowance_lets_it_go_on() {
    use nrllm_core::spend::{utc_day, CapScope, SpendCaps, SpendLedger};
    let whole = uncapped().await;
    let ledger = Arc::new(nrllm_core::testing::MemoryLedger::default());
    // 200 micro-dollars a response: the user's 500 a day is reached after three.
    let caps = SpendCaps {
        per_configuration: Some(10_000),
        per_user: Some(500),
    };
    let run = run_with(reads());
    let ctx = counted(caps, &ledger, &run.clock);
    let sink = VecSink::default();
    let state = waiting(
        run.tool_loop
            .run(input(Limits::default()), &ctx, &sink)
            .await
            .unwrap(),
    );
    assert_eq!(run.provider.requests().len(), 3);
    let stop = state.budget.unwrap();
    let daily = stop.daily.expect("a daily cap stopped it");
    assert_eq!(daily.scope, CapScope::User);
    assert_eq!(
        (stop.limit, stop.used, stop.cap, stop.next),
        (
            LimitKind::CostMicros,
            600,
            500,
            NextAction::ModelRequest { round: 4 }
        )
    );
    let day = daily.day;
    assert_eq!(day, utc_day(0), "the day the clock read");
    // Every response counted once, toward both of the run's counts.
    assert_eq!(
        ledger.count(day, &key(CapScope::User, "olga")).spent_micros,
        600
    );
    assert_eq!(
        ledger
            .count(day, &key(CapScope::Configuration, "demo"))
            .spent_micros,
        600
    );
    assert!(
        stop.explain()
            .starts_with("the user's daily spend cap for 1970-01-01: $0.0006 spent of $0.0005"),
        "{}",
        stop.explain()
    );

    // A person's raise of the run's own limits does not lift it; only the allowance goes on.
    let raise = run
        .tool_loop
        .check_decision(&state, &raise(&state, 1_000_000))
        .unwrap_err();
    assert_eq!(raise, LoopError::Decision(DecisionError::DailyCap));
    // The allowance of a run waiting at its own limit is refused the other way round.
    let own = run_with(reads());
    let own_state = waiting(
        own.tool_loop
            .run(
                input(Limits::default().with(LimitKind::Requests, Some(1))),
                &self::ctx(),
                &VecSink::default(),
            )
            .await
            .unwrap(),
    );
    assert_eq!(
        own.tool_loop
            .check_decision(&own_state, &Decision::ContinueAtBudget)
            .unwrap_err(),
        LoopError::Decision(DecisionError::NoDailyCapWait)
    );

    // An administrator raises the user's cap for the day: it goes on from exactly there with its
    // own limits, and comes to what the uncapped run did.
    ledger
        .raise_cap(day, &key(CapScope::User, "olga"), 10_000, "ada")
        .await
        .unwrap();
    let resumed = VecSink::default();
    let done = finished(
        run.tool_loop
            .resume(&state, &Decision::ContinueAtBudget, &ctx, &resumed)
            .await
            .unwrap(),
    );
    assert_eq!(done.messages, whole, "the transcript after the allowance");
    assert_eq!(run.provider.requests().len(), 6, "each request once");
    assert_eq!(run.probe.count("read_note"), 5);
    assert_eq!(
        ledger.count(day, &key(CapScope::User, "olga")).spent_micros,
        1_200
    );
    let decided = resumed.events().into_iter().find_map(|e| match e {
        Event::BudgetDecided { raised, stop, .. } => Some((raised, stop)),
        _ => None,
    });
    assert_eq!(
        decided,
        Some((Some(Limits::default()), stop)),
        "the step says it went on with its own limits"
    );
}

#[tokio::test]
async fn a_new_day_has_a_new_allowance_and_no_cap_counts_without_prices() {
    use nrllm_core::spend::{CapScope, SpendCaps};
    let ledger = Arc::new(nrllm_core::testing::MemoryLedger::default());
    let caps = SpendCaps {
        per_configuration: Some(300),
        per_user: None,
    };
    let run = run_with(reads());
    let ctx = counted(caps, &ledger, &run.clock);
    let state = waiting(
        run.tool_loop
            .run(input(Limits::default()), &ctx, &VecSink::default())
            .await
            .unwrap(),
    );
    let stop = state.budget.unwrap();
    assert_eq!(stop.daily.unwrap().scope, CapScope::Configuration);
    assert_eq!(run.provider.requests().len(), 2, "400 ≥ 300 after two");
    // Resumed on the same day, it stops again before asking: the cap has no room.
    let again = waiting(
        run.tool_loop
            .resume(
                &state,
                &Decision::ContinueAtBudget,
                &ctx,
                &VecSink::default(),
            )
            .await
            .unwrap(),
    );
    assert_eq!(
        run.provider.requests().len(),
        2,
        "nothing asked over the cap"
    );
    // The next day: a new count, and it goes on until that one is reached.
    run.clock.0.fetch_add(86_400_000, Ordering::SeqCst);
    let next_day = waiting(
        run.tool_loop
            .resume(
                &again,
                &Decision::ContinueAtBudget,
                &ctx,
                &VecSink::default(),
            )
            .await
            .unwrap(),
    );
    assert_eq!(run.provider.requests().len(), 4);
    assert_eq!(
        next_day.budget.unwrap().daily.unwrap().day,
        stop.daily.unwrap().day + 1
    );

    // Without prices nothing is counted, so no cap is ever reached.
    let ledger = Arc::new(nrllm_core::testing::MemoryLedger::default());
    let free = run_with(reads());
    let ctx = RunContext {
        prices: Prices::default(),
        ..counted(caps, &ledger, &free.clock)
    };
    finished(
        free.tool_loop
            .run(input(Limits::default()), &ctx, &VecSink::default())
            .await
            .unwrap(),
    );
    assert_eq!(free.provider.requests().len(), 6);
}
