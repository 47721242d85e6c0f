//! Conformance of the one door ([`nrllm_core::authority`]): for every way a waiting turn moves on
//! ([`TurnMove`]: each button of the approval form, a per-call form with any choices, an answer,
//! a headless decision, the deadline), every caller (each role; the run's requester, whoever
//! forked it, the requester of the run it was forked from, a stranger; each of them through an
//! API token of any role) and four-eyes on and off, over turns of every shape (a gated call, a
//! question beside it, a question alone, a call whose outcome is unknown after a restart, a call
//! an approval rule lets through), a gated call runs only when a caller the authority allows
//! approved that call as the panel showed it. "Runs" is counted where the effect happens: the
//! probe tool records every execution when the loop resumes with what the move decided.
//!
//! The oracle (`may_decide`) is written here from the rules as README states them, not taken
//! from the code under test. Rules (a way a call runs with no operator), forks and retries (ways
//! a new run starts whose lineage four-eyes follows), cancels and recovery (a run cut off after
//! its claim goes on with no caller) have their own cases below.
//!
//! Every later way of moving a run (a new button, a channel, a wait) adds its case here: the
//! inbox's bulk decision is `Way::Bulk` (each picked run's own claim; that one run's refusal
//! leaves the others alone is `crates/nrllm-store/tests/bulk.rs`, on a real store); a person's
//! raise or stop of a run waiting at its budget is `Way::Budget`, over the turn shape
//! `Shape::Budget` (a turn held at its tool-call limit), which nothing else moves; the daily
//! allowance (a daily spend cap across runs with room again) is `Way::Allowance`, which moves
//! only `Shape::DailyCap` (a run held at such a cap before its first request), which no
//! person's raise moves; a decision offered away from the pages (a mailed link sent to one
//! person, a Slack button anyone allowed may press) is `Way::Offer`: the recipient of a link
//! alone may use it, and it approves or denies the whole turn as the button of the same verdict
//! (its expiry is the service's check, in `crates/nrllm-store/tests/notifications.rs`).
//!
//! A run whose approved call's server asked the operator mid-call (MCP elicitation,
//! [`nrllm_core::elicit`]) waits for input: every way and caller is tried on it too, and only an
//! allowed person's answer (accept, decline, cancel) or the deadline (cancel) moves it.
//!
//! A turn that needs two people's approvals (M-of-N, [`nrllm_core::quorum`]) has its own cases
//! at the end: every way a person moves it, in any order, runs the gated call only once two
//! distinct allowed people outside the run's lineage approved the same choices; a denial
//! decides at once; no rule or tool check lets such a call through. That the claim happens once
//! when approvals race, and that an expired or cancelled turn runs nothing whatever it gathered,
//! are the service's, on a real store (`crates/nrllm-store/tests/quorum.rs`).

use std::sync::Arc;

use nrllm_core::authority::{authorize, Act, Actor, Lineage, Refusal, RunFacts};
use nrllm_core::decision::DecisionError;
use nrllm_core::events::NullSink;
use nrllm_core::moves::{BudgetMove, BulkVerdict, Raise, TurnMove};
use nrllm_core::offer::{Channel, Offer};
use nrllm_core::provider::ChatResponse;
use nrllm_core::question::{AskOperator, FormAnswer};
use nrllm_core::quorum::{fingerprint, needs_quorum, Quorum, Tally, Vote};
use nrllm_core::rules::{ApprovalRule, RuleEffect, RuleScope};
use nrllm_core::run_store::RunStatus;
use nrllm_core::state::{LimitKind, Limits, UnknownCall};
use nrllm_core::submit::{Submission, SubmittedCall};
use nrllm_core::testing::{probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::transcript::{Message, ToolCall};
use nrllm_core::{
    Decision, LoopOutcome, RunContext, RunInput, SuspendedState, ToolLoop, ToolLoopService,
};
use nrllm_types::Role;
use proptest::prelude::*;
use serde_json::json;
use uuid::Uuid;

/// The run under decision was forked by `forker` from a run `olga` started.
const LINEAGE: [&str; 2] = ["forker", "olga"];
const NAMES: [&str; 3] = ["forker", "olga", "stranger"];

/// The shapes of a waiting turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `write_note` needs approval; `read_note` is held with it.
    Gated,
    /// A question beside a gated call: the turn waits for approval.
    QuestionAndGated,
    /// A question alone (with a read-only call): the turn waits for input.
    QuestionOnly,
    /// After a restart: the gated call was dispatched and its outcome is unknown.
    Unknown,
    /// A question beside a call whose outcome is unknown.
    QuestionAndUnknown,
    /// The gated turn, held at the run's tool-call limit before anything of it: the run waits
    /// at its budget.
    Budget,
    /// Held at a daily spend cap across runs before its first model request (nothing pending).
    DailyCap,
}

const SHAPES: [Shape; 7] = [
    Shape::Gated,
    Shape::QuestionAndGated,
    Shape::QuestionOnly,
    Shape::Unknown,
    Shape::QuestionAndUnknown,
    Shape::Budget,
    Shape::DailyCap,
];

fn calls_of(shape: Shape) -> Vec<ToolCall> {
    let question = ToolCall::new(
        "q",
        "ask_operator",
        &json!({"question": "Which note?", "choices": ["a", "b"]}),
    );
    let read = ToolCall::new("r", "read_note", &json!({"text": "r"}));
    let write = ToolCall::new("w", "write_note", &json!({"text": "w"}));
    match shape {
        Shape::Gated | Shape::Unknown | Shape::Budget | Shape::DailyCap => vec![read, write],
        Shape::QuestionAndGated | Shape::QuestionAndUnknown => vec![question, write, read],
        Shape::QuestionOnly => vec![question, read],
    }
}

struct World {
    tool_loop: ToolLoop,
    probe: Probe,
}

fn world(turn: Vec<ToolCall>) -> World {
    let probe = Probe::default();
    let mut registry = probe_registry(&probe);
    registry.register(AskOperator).unwrap();
    let provider = ScriptedProvider::new([
        ChatResponse::calls(turn, usage(1, 1)),
        ChatResponse::text("done", usage(1, 1)),
    ]);
    World {
        tool_loop: ToolLoop::new(Arc::new(provider), Arc::new(registry)),
        probe,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn input() -> RunInput {
    RunInput {
        messages: vec![Message::user("go")],
        ..RunInput::default()
    }
}

/// The turn of `shape`, suspended (nothing of it ran), in a fresh world.
async fn suspended(shape: Shape) -> (World, SuspendedState) {
    let world = world(calls_of(shape));
    let mut input = input();
    if shape == Shape::Budget {
        input.settings.limits = Limits::default().with(LimitKind::ToolCalls, Some(1));
    }
    let mut ctx = RunContext::default();
    if shape == Shape::DailyCap {
        // The configuration may spend nothing more today.
        ctx.spend = Some(nrllm_core::spend::SpendWatch {
            caps: nrllm_core::spend::SpendCaps {
                per_configuration: Some(0),
                per_user: None,
            },
            configuration: "demo".into(),
            requester: "olga".into(),
            ledger: Arc::new(nrllm_core::testing::MemoryLedger::default()),
            clock: Arc::new(nrllm_core::clock::SystemClock),
        });
    }
    let outcome = world.tool_loop.run(input, &ctx, &NullSink).await.unwrap();
    let LoopOutcome::Suspended(mut state) = outcome else {
        panic!("{shape:?} must suspend: {outcome:?}");
    };
    if matches!(shape, Shape::Unknown | Shape::QuestionAndUnknown) {
        // As a recovery leaves it: the gated call was dispatched, its result never journaled.
        state.unknown = vec![UnknownCall {
            call_id: "w".into(),
            effect_key: "run/1/w".into(),
            dispatched_at_ms: 1,
        }];
    }
    assert!(world.probe.calls().is_empty());
    (world, state)
}

/// Whether `actor` may decide the run, by README's rules: the approver role (a token's: the
/// lower of its role and its user's), and under four-eyes nobody of the run's lineage.
fn may_decide(actor: &Actor, four_eyes: bool) -> bool {
    actor.role >= Role::Approver && !(four_eyes && LINEAGE.contains(&actor.name.as_str()))
}

/// Whether `actor` may move the run `way`'s way: as [`may_decide`], and an offer sent to one
/// person is theirs alone.
fn may_move(way: &Way, actor: &Actor, four_eyes: bool) -> bool {
    let recipient_ok = match way {
        Way::Offer(offer) => offer.recipient.as_deref().is_none_or(|to| to == actor.name),
        _ => true,
    };
    may_decide(actor, four_eyes) && recipient_ok
}

/// One caller: a user by name and role, maybe through a token of its own role.
fn arb_actor() -> impl Strategy<Value = Actor> {
    let role = || prop::sample::select(Role::ALL.to_vec());
    (
        prop::sample::select(NAMES.to_vec()),
        role(),
        proptest::option::of(role()),
    )
        .prop_map(|(name, role, token)| match token {
            Some(token_role) => Actor::through_token(name, role, "ci", token_role),
            None => Actor::user(name, role),
        })
}

/// A per-call form entry: the choice, what was typed.
fn arb_entry() -> impl Strategy<Value = (&'static str, Option<&'static str>)> {
    (
        prop::sample::select(vec![
            "approve", "deny", "edit", "respond", "failed", "answer",
        ]),
        prop::sample::select(vec![None, Some("a"), Some("b"), Some("zzz")]),
    )
}

#[derive(Debug, Clone)]
enum Way {
    ApproveAll,
    DenyAll,
    PerCall(Vec<(&'static str, Option<&'static str>)>),
    Answer(&'static str),
    Headless(Decision),
    Expire,
    /// Picked in the inbox with other runs: this run's own claim, as a bulk decision makes it.
    Bulk(BulkVerdict),
    /// A person raises the limit a run waits at, or stops the run there.
    Budget(BudgetMove),
    /// The server's own: the daily spend cap a run waits at has room again.
    Allowance,
    /// A decision offered away from the pages: a mailed link (sent to one person) or a Slack
    /// button (anyone the authority allows).
    Offer(Offer),
}

fn arb_way() -> impl Strategy<Value = Way> {
    prop_oneof![
        Just(Way::ApproveAll),
        Just(Way::DenyAll),
        prop::collection::vec(arb_entry(), 3).prop_map(Way::PerCall),
        prop::sample::select(vec!["a", "b", "zzz"]).prop_map(Way::Answer),
        Just(Way::Headless(Decision::ApproveAll)),
        Just(Way::Expire),
        Just(Way::Bulk(BulkVerdict::ApproveAll)),
        Just(Way::Bulk(BulkVerdict::DenyAll)),
        Just(Way::Budget(BudgetMove::Raise(Raise::By(5)))),
        Just(Way::Budget(BudgetMove::Raise(Raise::To(1)))),
        Just(Way::Budget(BudgetMove::Stop)),
        Just(Way::Allowance),
        (
            prop::sample::select(vec![BulkVerdict::ApproveAll, BulkVerdict::DenyAll]),
            prop::sample::select(vec![None, Some("olga"), Some("stranger"), Some("forker")]),
            prop::sample::select(vec![Channel::Email, Channel::Slack]),
        )
            .prop_map(|(verdict, recipient, channel)| Way::Offer(Offer {
                channel,
                verdict,
                recipient: recipient.map(str::to_owned),
                expires_at_ms: i64::MAX,
            })),
    ]
}

/// The form a way submits for `calls` (the answer text rides in the question's entry).
fn submission_of(way: &Way, calls: &[ToolCall]) -> Option<Submission> {
    let entry = |call: &ToolCall, choice: &str, typed: Option<&str>| SubmittedCall {
        call_id: call.id.clone(),
        choice: Some(choice.to_owned()),
        arguments: (choice == "edit").then(|| r#"{"text": "edited"}"#.to_owned()),
        result: (choice == "respond").then(|| typed.unwrap_or("what happened").to_owned()),
        answer: (choice == "answer")
            .then(|| typed.map(str::to_owned))
            .flatten(),
        ..SubmittedCall::default()
    };
    let (action, calls) = match way {
        Way::ApproveAll => ("approve_all", Vec::new()),
        Way::DenyAll => ("deny_all", Vec::new()),
        Way::Bulk(verdict) => return Some(verdict.submission(Some("not in bulk"))),
        Way::PerCall(entries) => (
            "per_call",
            calls
                .iter()
                .zip(entries)
                .map(|(call, (choice, typed))| entry(call, choice, *typed))
                .collect(),
        ),
        _ => return None,
    };
    Some(Submission {
        decision: action.to_owned(),
        reason: None,
        calls,
        acknowledge_discard: true,
    })
}

/// Whether `way` approves call `id` of the turn explicitly, as the panel shows it.
fn approves(way: &Way, calls: &[ToolCall], id: &str) -> bool {
    match way {
        Way::ApproveAll
        | Way::Headless(Decision::ApproveAll)
        | Way::Bulk(BulkVerdict::ApproveAll) => true,
        Way::Offer(offer) => offer.verdict == BulkVerdict::ApproveAll,
        Way::PerCall(entries) => calls
            .iter()
            .zip(entries)
            .any(|(call, (choice, _))| call.id == id && matches!(*choice, "approve" | "edit")),
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_gated_call_runs_only_when_an_allowed_caller_approved_it(
        shape in prop::sample::select(SHAPES.to_vec()),
        actor in arb_actor(),
        four_eyes in any::<bool>(),
        way in arb_way(),
    ) {
        runtime().block_on(async {
            let (world, state) = suspended(shape).await;
            let calls = state.pending.clone();
            let submission = submission_of(&way, &calls);
            let typed = match &way {
                Way::Answer(text) => FormAnswer::text(*text),
                _ => FormAnswer::default(),
            };
            let turn_move = match (&way, &submission) {
                (_, Some(submission)) => TurnMove::Submit(submission),
                (Way::Answer(_), _) => TurnMove::Answer { call_id: None, answer: &typed },
                (Way::Headless(decision), _) => TurnMove::Decision(decision),
                (Way::Budget(budget), _) => TurnMove::Budget(budget),
                (Way::Allowance, _) => TurnMove::Allowance,
                (Way::Offer(offer), _) => TurnMove::Offer(offer),
                _ => TurnMove::Expire,
            };
            let lineage = Lineage { requesters: LINEAGE.map(str::to_owned).to_vec() };
            let facts = RunFacts {
                status: state.waiting_for(),
                termination_reason: None,
                lineage: &lineage,
                four_eyes,
                approvals_required: state.approvals_required,
            };
            // The service's order: the authority, then the move, then the loop's resolution.
            let allowed = turn_move.act().map(|act| authorize(&actor, act, Some(&facts)));
            if let Some(allowed) = &allowed {
                prop_assert_eq!(allowed.is_ok(), may_move(&way, &actor, four_eyes), "{:?}", allowed);
            }
            if matches!(allowed, Some(Err(_))) {
                return Ok(());
            }
            let decided = turn_move
                .decide(&state, (Uuid::nil(), "demo"))
                .and_then(|(decision, _)| {
                    world
                        .tool_loop
                        .resolve_decision(&state, &decision)
                        .map(|choices| (decision, choices))
                        .map_err(|err| match err {
                            nrllm_core::LoopError::Decision(err) => err,
                            other => panic!("{other}"),
                        })
                });
            // A run waiting at its budget moves only by a budget decision (or the deadline,
            // which stops it); a budget decision moves nothing else.
            let budget_shape = matches!(shape, Shape::Budget | Shape::DailyCap);
            let budget_way = matches!(way, Way::Budget(_) | Way::Allowance);
            if budget_shape != budget_way && !matches!(way, Way::Expire) {
                prop_assert!(decided.is_err(), "{:?} moved a {:?} turn", way, shape);
            }
            // Only the allowance lets a run at a daily cap go on (a person may stop it), and
            // the allowance moves no run held at its own limit.
            let allowance_fits = (shape == Shape::DailyCap) == matches!(way, Way::Allowance);
            if budget_shape && !allowance_fits && !matches!(way, Way::Budget(BudgetMove::Stop) | Way::Expire) {
                prop_assert!(decided.is_err(), "{:?} moved a {:?} turn", way, shape);
            }
            let (decision, choices) = match decided {
                Ok(decided) => decided,
                Err(DecisionError::UndecidedCalls { calls }) => {
                    // An answer never decides another call: refused while one waits.
                    prop_assert!(matches!(way, Way::Answer(_)));
                    prop_assert!(!state.undecided().is_empty());
                    prop_assert!(calls.iter().any(|c| c.contains("write_note")));
                    return Ok(());
                }
                // Anything else refused (a bad answer, a choice the call does not take):
                // nothing happens.
                Err(_) => return Ok(()),
            };
            if let Way::Answer(_) = way {
                prop_assert!(state.undecided().is_empty(), "an answer was taken beside undecided calls");
            }
            // What each call's choice says, and what the loop then does.
            let ctx = RunContext::default();
            let outcome = world.tool_loop.resume(&state, &decision, &ctx, &NullSink).await.unwrap();
            if budget_shape {
                // Raised (far enough), or let go on by the allowance, the turn goes on to wait
                // for its approval; stopped, or expired, the run ends there. The gated call
                // never runs without an approval.
                match (&way, outcome) {
                    (Way::Budget(BudgetMove::Raise(_)) | Way::Allowance, LoopOutcome::Suspended(next)) => {
                        prop_assert_eq!(next.waiting_for(), RunStatus::WaitingForApproval);
                    }
                    (Way::Budget(BudgetMove::Stop) | Way::Expire, LoopOutcome::Completed(done)) => {
                        prop_assert_eq!(done.budget_stopped, state.budget);
                    }
                    (way, outcome) => prop_assert!(false, "{:?} came to {:?}", way, outcome),
                }
                prop_assert!(world.probe.calls().is_empty());
                return Ok(());
            }
            let writes = world.probe.count("write_note");
            for (call, choice) in calls.iter().zip(&choices) {
                // A question is answered, never run.
                if call.name == "ask_operator" {
                    prop_assert!(!choice.runs());
                }
                if call.name != "write_note" {
                    continue;
                }
                if choice.runs() {
                    prop_assert!(
                        turn_move.act().is_some() && may_move(&way, &actor, four_eyes),
                        "{:?} ran write_note for {:?}", way, actor
                    );
                    prop_assert!(approves(&way, &calls, &call.id), "{:?} did not approve it", way);
                    prop_assert_eq!(writes, 1);
                } else {
                    prop_assert_eq!(writes, 0, "{:?}", choice);
                }
            }
            if let Way::Expire = way {
                prop_assert!(choices.iter().all(|c| !c.runs()));
                prop_assert!(world.probe.calls().is_empty());
            }
            Ok(())
        })?;
    }
}

#[test]
fn an_answer_on_a_turn_that_also_waits_for_approval_is_refused_naming_the_calls() {
    runtime().block_on(async {
        for shape in [Shape::QuestionAndGated, Shape::QuestionAndUnknown] {
            let (_, state) = suspended(shape).await;
            assert_eq!(state.waiting_for(), RunStatus::WaitingForApproval);
            let answer = FormAnswer::text("a");
            let err = TurnMove::Answer {
                call_id: Some("q"),
                answer: &answer,
            }
            .decide(&state, (Uuid::nil(), "demo"))
            .unwrap_err();
            assert!(
                err.to_string().contains("write_note (w)"),
                "{shape:?}: {err}"
            );
        }
        // A question alone is answered as before: the read-only call goes ahead.
        let (world, state) = suspended(Shape::QuestionOnly).await;
        assert_eq!(state.waiting_for(), RunStatus::WaitingForInput);
        let answer = FormAnswer::text("b");
        let (decision, _) = TurnMove::Answer {
            call_id: None,
            answer: &answer,
        }
        .decide(&state, (Uuid::nil(), "demo"))
        .unwrap();
        world
            .tool_loop
            .resume(&state, &decision, &RunContext::default(), &NullSink)
            .await
            .unwrap();
        assert_eq!(world.probe.count("read_note"), 1);
    });
}

/// A rule is a way a call runs with no operator: the authority lets only those who may decide
/// the run add one for it (four-eyes keeps the lineage out), and a configuration's rule is an
/// administrator's. A call a rule lets through runs only if the rule was let in.
#[test]
fn a_call_runs_by_rule_only_when_the_rules_maker_was_allowed_to_add_it() {
    runtime().block_on(async {
        let lineage = Lineage {
            requesters: LINEAGE.map(str::to_owned).to_vec(),
        };
        let run = Uuid::now_v7();
        for four_eyes in [false, true] {
            for name in NAMES {
                for role in Role::ALL {
                    for scope in [RuleScope::Run(run), RuleScope::Configuration("demo".into())] {
                        let actor = Actor::user(name, role);
                        let facts = RunFacts {
                            status: RunStatus::Running,
                            termination_reason: None,
                            lineage: &lineage,
                            four_eyes,
                            approvals_required: 1,
                        };
                        let about = match &scope {
                            RuleScope::Run(_) => Some(&facts),
                            RuleScope::Configuration(_) => None,
                        };
                        let added = authorize(&actor, Act::Rule(&scope), about).is_ok();
                        let expected = match &scope {
                            RuleScope::Run(_) => may_decide(&actor, four_eyes),
                            RuleScope::Configuration(_) => role == Role::Admin,
                        };
                        assert_eq!(added, expected, "{name} {role} {scope:?} {four_eyes}");
                        let world = world(calls_of(Shape::Gated));
                        let ctx = RunContext {
                            rules: added
                                .then(|| ApprovalRule {
                                    id: 1,
                                    scope: scope.clone(),
                                    tool: "write_note".into(),
                                    effect: RuleEffect::Allow,
                                    conditions: Vec::new(),
                                    created_by: name.into(),
                                    created_at_ms: 0,
                                })
                                .into_iter()
                                .collect(),
                            ..RunContext::default()
                        };
                        let outcome = world.tool_loop.run(input(), &ctx, &NullSink).await.unwrap();
                        // Ruled through, the turn is decided without an operator (journaled as
                        // such); otherwise it waits, and nothing ran.
                        match outcome {
                            LoopOutcome::Decided(state) => {
                                assert!(added);
                                let decision = nrllm_core::tool_loop::automatic_decision(&state);
                                world
                                    .tool_loop
                                    .resume(&state, &decision, &ctx, &NullSink)
                                    .await
                                    .unwrap();
                                assert_eq!(world.probe.count("write_note"), 1);
                            }
                            LoopOutcome::Suspended(_) => {
                                assert!(!added);
                                assert_eq!(world.probe.count("write_note"), 0);
                            }
                            other => panic!("{other:?}"),
                        }
                    }
                }
            }
        }
    });
}

/// Forks and retries start runs: any operator may, the lineage included — and the new run's
/// lineage (its forker, then every requester up) may not decide it under four-eyes. A cancel is
/// an operator's; a finished run is not cancelled, a run whose model call did not fail is not
/// retried, a run that does not wait is not decided.
#[test]
fn forks_retries_and_cancels_are_an_operators_and_the_lineage_grows_with_them() {
    let parent = Lineage {
        requesters: vec!["olga".into()],
    };
    let fork = Lineage {
        requesters: vec!["forker".into(), "olga".into()],
    };
    let facts = |lineage, status, reason| RunFacts {
        status,
        termination_reason: reason,
        lineage,
        four_eyes: true,
        approvals_required: 1,
    };
    let failed = facts(&parent, RunStatus::Failed, Some("provider_failed"));
    for role in Role::ALL {
        let olga = Actor::user("olga", role);
        let operator = role >= Role::Operator;
        assert_eq!(authorize(&olga, Act::Fork, Some(&failed)).is_ok(), operator);
        assert_eq!(
            authorize(&olga, Act::Retry, Some(&failed)).is_ok(),
            operator
        );
    }
    let done = facts(&parent, RunStatus::Completed, Some("completed"));
    let admin = Actor::user("stranger", Role::Admin);
    assert!(matches!(
        authorize(&admin, Act::Retry, Some(&done)),
        Err(Refusal::State(_))
    ));
    assert!(matches!(
        authorize(&admin, Act::Cancel, Some(&done)),
        Err(Refusal::State(_))
    ));
    assert!(matches!(
        authorize(&admin, Act::Decide, Some(&done)),
        Err(Refusal::State(_))
    ));
    let waiting = facts(&fork, RunStatus::WaitingForApproval, None);
    for name in ["forker", "olga"] {
        for token in [None, Some(Role::Admin)] {
            let actor = match token {
                Some(role) => Actor::through_token(name, Role::Admin, "ci", role),
                None => Actor::user(name, Role::Admin),
            };
            assert!(matches!(
                authorize(&actor, Act::Decide, Some(&waiting)),
                Err(Refusal::FourEyes { .. })
            ));
            assert!(authorize(&actor, Act::Cancel, Some(&waiting)).is_ok());
        }
    }
    assert!(authorize(
        &Actor::user("stranger", Role::Approver),
        Act::Decide,
        Some(&waiting)
    )
    .is_ok());
}

/// Raising a daily spend cap for the day (which lets the runs waiting at it go on by the
/// allowance) is an administrator's alone, about no one run: every lower role is refused, and a
/// token acts with the lower of its role and its user's.
#[test]
fn raising_a_daily_spend_cap_is_an_administrators() {
    for user_role in Role::ALL {
        for token_role in [None, Some(Role::Approver), Some(Role::Admin)] {
            let (actor, acting) = match token_role {
                Some(role) => (
                    Actor::through_token("ada", user_role, "ci", role),
                    role.min(user_role),
                ),
                None => (Actor::user("ada", user_role), user_role),
            };
            let allowed = authorize(&actor, Act::RaiseSpendCap, None);
            assert_eq!(
                allowed.is_ok(),
                acting == Role::Admin,
                "{actor:?}: {allowed:?}"
            );
            if acting != Role::Admin {
                assert!(matches!(allowed, Err(Refusal::Role { .. })));
            }
        }
    }
}

/// A recovery moves a run on with no caller: it carries out the decision an allowed caller's
/// claim journaled, and nothing else. A call whose result the journal holds is answered with it
/// and never runs again, whatever the recorded decision says; a call dispatched without a
/// result waits as outcome unknown (the shapes above), where only an explicit approval runs it.
#[test]
fn a_recovery_carries_out_only_the_journaled_decision_and_never_reruns_a_journaled_call() {
    runtime().block_on(async {
        let (world, mut state) = suspended(Shape::Gated).await;
        // The claim approved the turn; `write_note` ran and its result was journaled, then the
        // process died before the segment's transition.
        state.answered = vec![nrllm_core::state::Answer {
            call_id: "w".into(),
            result: "wrote: w".into(),
            outcome: nrllm_core::transcript::ToolOutcome::Ok,
        }];
        let ctx = RunContext {
            recovering: true,
            ..RunContext::default()
        };
        let outcome = world
            .tool_loop
            .resume(&state, &Decision::ApproveAll, &ctx, &NullSink)
            .await
            .unwrap();
        assert!(matches!(outcome, LoopOutcome::Completed(_)));
        assert_eq!(world.probe.count("write_note"), 0, "not run again");
        assert_eq!(world.probe.count("read_note"), 1);
        // A journaled denial stays a denial: recovery does not approve anything.
        let (world, state) = suspended(Shape::Gated).await;
        world
            .tool_loop
            .resume(&state, &Decision::DenyAll { reason: None }, &ctx, &NullSink)
            .await
            .unwrap();
        assert_eq!(world.probe.count("write_note"), 0);
    });
}

/// The gated turn of a configuration whose `write_note` needs `approvals` people, suspended.
async fn suspended_needing(approvals: u32) -> (World, SuspendedState) {
    let world = world(calls_of(Shape::Gated));
    let ctx = RunContext {
        quorum: Quorum {
            approvals: 1,
            tools: [("write_note".to_owned(), approvals)].into(),
        },
        ..RunContext::default()
    };
    let outcome = world.tool_loop.run(input(), &ctx, &NullSink).await.unwrap();
    let LoopOutcome::Suspended(state) = outcome else {
        panic!("must suspend: {outcome:?}");
    };
    (world, state)
}

/// One person's move on a turn needing two approvals: what they pressed, as what it approves
/// (`Some("approve")`, `Some("edit")`) or denies (`None`).
#[derive(Debug, Clone)]
enum Vote2 {
    ApproveAll,
    Edit,
    DenyAll,
    Offer(Offer),
    Bulk(BulkVerdict),
}

impl Vote2 {
    /// What it lets run, by README's rules, or `None` for a denial.
    fn approves(&self) -> Option<&'static str> {
        match self {
            Vote2::ApproveAll | Vote2::Bulk(BulkVerdict::ApproveAll) => Some("approve"),
            Vote2::Offer(offer) if offer.verdict == BulkVerdict::ApproveAll => Some("approve"),
            Vote2::Edit => Some("edit"),
            _ => None,
        }
    }

    fn way(&self) -> Way {
        match self {
            Vote2::ApproveAll => Way::ApproveAll,
            Vote2::Edit => Way::PerCall(vec![("approve", None), ("edit", None), ("approve", None)]),
            Vote2::DenyAll => Way::DenyAll,
            Vote2::Offer(offer) => Way::Offer(offer.clone()),
            Vote2::Bulk(verdict) => Way::Bulk(*verdict),
        }
    }
}

fn arb_vote() -> impl Strategy<Value = Vote2> {
    prop_oneof![
        4 => Just(Vote2::ApproveAll),
        2 => Just(Vote2::Edit),
        1 => Just(Vote2::DenyAll),
        1 => Just(Vote2::Bulk(BulkVerdict::ApproveAll)),
        1 => prop::sample::select(vec![None, Some("approver2"), Some("stranger")]).prop_map(|to| {
            Vote2::Offer(Offer {
                channel: Channel::Email,
                verdict: BulkVerdict::ApproveAll,
                recipient: to.map(str::to_owned),
                expires_at_ms: i64::MAX,
            })
        }),
    ]
}

/// A caller among the lineage, two strangers, in any role, maybe through a token.
fn arb_voter() -> impl Strategy<Value = Actor> {
    let role = || prop::sample::select(Role::ALL.to_vec());
    (
        prop::sample::select(vec!["forker", "olga", "stranger", "approver2"]),
        role(),
        proptest::option::of(role()),
    )
        .prop_map(|(name, role, token)| match token {
            Some(token_role) => Actor::through_token(name, role, "ci", token_role),
            None => Actor::user(name, role),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Moves by anyone, in any order, on a turn whose `write_note` needs two approvals, made as
    /// the service makes them: the authority (the turn's count in its facts), the move, the
    /// loop's resolution, then the count ([`Tally`]) — claimed by the move that completes it,
    /// at once by a denial. The oracle: the call runs once, as approved, exactly when two
    /// distinct people the authority lets decide, outside the lineage whatever four-eyes says,
    /// last approved the same choices before any such person denied; a token is its user.
    #[test]
    fn a_turn_needing_two_runs_only_when_two_allowed_people_approved_the_same_choices(
        moves in prop::collection::vec((arb_voter(), arb_vote()), 1..6),
        four_eyes in any::<bool>(),
    ) {
        runtime().block_on(async {
            let (world, state) = suspended_needing(2).await;
            prop_assert_eq!(state.approvals_required, 2);
            prop_assert_eq!(state.waiting_for(), RunStatus::WaitingForApproval);
            let lineage = Lineage { requesters: LINEAGE.map(str::to_owned).to_vec() };
            let facts = RunFacts {
                status: state.waiting_for(),
                termination_reason: None,
                lineage: &lineage,
                four_eyes,
                approvals_required: state.approvals_required,
            };
            let mut tally = Tally { required: 2, votes: Vec::new() };
            // The oracle's own count: each allowed person's latest approval.
            let mut latest: Vec<(String, &'static str)> = Vec::new();
            for (actor, vote) in &moves {
                let way = vote.way();
                let allowed_by_rules = may_move(&way, actor, four_eyes)
                    && !LINEAGE.contains(&actor.name.as_str());
                let submission = submission_of(&way, &state.pending);
                let turn_move = match (&way, &submission) {
                    (_, Some(submission)) => TurnMove::Submit(submission),
                    (Way::Offer(offer), _) => TurnMove::Offer(offer),
                    _ => unreachable!(),
                };
                let allowed = authorize(actor, turn_move.act().unwrap(), Some(&facts));
                prop_assert_eq!(allowed.is_ok(), allowed_by_rules, "{:?} {:?}", actor, allowed);
                if allowed.is_err() {
                    continue;
                }
                let (decision, _) = turn_move.decide(&state, (Uuid::nil(), "demo")).unwrap();
                let choices = world.tool_loop.resolve_decision(&state, &decision).unwrap();
                let what = vote.approves();
                prop_assert_eq!(needs_quorum(&state, &choices), what.is_some());
                let decided = match what {
                    // A denial decides the turn at once: nothing runs.
                    None => Some(decision),
                    Some(what) => {
                        latest.retain(|(name, _)| *name != actor.name);
                        latest.push((actor.name.clone(), what));
                        let print = fingerprint(&state, &choices);
                        tally = tally.clone().with(Vote {
                            approver: actor.name.clone(),
                            token: actor.token.clone(),
                            fingerprint: print.clone(),
                            decision: String::new(),
                            at_ms: 0,
                        });
                        let agreeing = latest.iter().filter(|(_, w)| *w == what).count();
                        prop_assert_eq!(tally.reached(&print), agreeing >= 2, "{:?}", latest);
                        tally.reached(&print).then_some(decision)
                    }
                };
                let Some(decision) = decided else { continue };
                world
                    .tool_loop
                    .resume(&state, &decision, &RunContext::default(), &NullSink)
                    .await
                    .unwrap();
                match what {
                    None => prop_assert_eq!(world.probe.count("write_note"), 0),
                    Some(what) => {
                        prop_assert_eq!(world.probe.count("write_note"), 1);
                        let (_, args) = world
                            .probe
                            .calls()
                            .into_iter()
                            .find(|(name, _)| name == "write_note")
                            .unwrap();
                        let edited = args["text"] == "edited";
                        prop_assert_eq!(edited, what == "edit", "ran as approved");
                    }
                }
                return Ok(());
            }
            // Never completed: nothing ran.
            prop_assert!(latest.iter().filter(|(_, w)| *w == "approve").count() < 2);
            prop_assert!(latest.iter().filter(|(_, w)| *w == "edit").count() < 2);
            prop_assert_eq!(world.probe.count("write_note"), 0);
            Ok(())
        })?;
    }
}

/// A call that needs two approvals is let through by no allowing rule and no tool check: the
/// turn waits, and says how many it needs. A denying rule still refuses it, and a tool needing
/// one is let through as before.
#[test]
fn no_rule_or_tool_check_lets_a_call_needing_two_approvals_through() {
    runtime().block_on(async {
        for (approvals, effect) in [
            (2, RuleEffect::Allow),
            (1, RuleEffect::Allow),
            (2, RuleEffect::Deny),
        ] {
            let world = world(calls_of(Shape::Gated));
            let ctx = RunContext {
                rules: vec![ApprovalRule {
                    id: 1,
                    scope: RuleScope::Configuration("demo".into()),
                    tool: "write_note".into(),
                    effect,
                    conditions: Vec::new(),
                    created_by: "ada".into(),
                    created_at_ms: 0,
                }],
                quorum: Quorum {
                    approvals,
                    tools: Default::default(),
                },
                ..RunContext::default()
            };
            let outcome = world.tool_loop.run(input(), &ctx, &NullSink).await.unwrap();
            match (approvals, effect, outcome) {
                (2, RuleEffect::Allow, LoopOutcome::Suspended(state)) => {
                    assert_eq!(state.approvals_required, 2);
                    assert!(state.ruled.is_empty(), "the rule decided nothing");
                    assert_eq!(state.undecided().len(), 1);
                }
                (1, RuleEffect::Allow, LoopOutcome::Decided(_)) => {}
                (2, RuleEffect::Deny, LoopOutcome::Decided(state)) => {
                    assert!(state.ruled.iter().all(|r| !r.allow));
                }
                (approvals, effect, outcome) => panic!("{approvals} {effect:?}: {outcome:?}"),
            }
            assert_eq!(world.probe.count("write_note"), 0);
        }
    });
}

/// The lineage never counts toward a turn needing several approvals, four-eyes or not; a
/// stranger with the approver role does; one person is one vote, whatever token they use.
#[test]
fn the_lineage_never_counts_and_a_token_is_its_user() {
    let lineage = Lineage {
        requesters: LINEAGE.map(str::to_owned).to_vec(),
    };
    for four_eyes in [false, true] {
        let facts = RunFacts {
            status: RunStatus::WaitingForApproval,
            termination_reason: None,
            lineage: &lineage,
            four_eyes,
            approvals_required: 2,
        };
        for name in LINEAGE {
            let refusal = authorize(&Actor::user(name, Role::Admin), Act::Decide, Some(&facts));
            match (four_eyes, refusal) {
                (true, Err(Refusal::FourEyes { .. })) => {}
                (false, Err(refusal @ Refusal::Quorum { .. })) => {
                    assert!(
                        refusal.to_string().contains("needs 2 approvals"),
                        "{refusal}"
                    );
                }
                (four_eyes, other) => panic!("{name} {four_eyes}: {other:?}"),
            }
        }
        assert!(authorize(
            &Actor::user("stranger", Role::Approver),
            Act::Decide,
            Some(&facts)
        )
        .is_ok());
    }
    let vote = |token: Option<&str>, print: &str| Vote {
        approver: "stranger".into(),
        token: token.map(str::to_owned),
        fingerprint: print.into(),
        decision: String::new(),
        at_ms: 0,
    };
    let tally = Tally {
        required: 2,
        votes: Vec::new(),
    }
    .with(vote(None, "a"))
    .with(vote(Some("ci"), "a"));
    assert!(!tally.reached("a"), "a token counts as its user, once");
    assert_eq!(tally.votes.len(), 1);
}

/// The turn needs the most any of its waiting calls needs: a configuration's number, a tool's
/// own where set, and one for a turn with nothing waiting for a person.
#[test]
fn a_turn_needs_the_highest_number_among_its_waiting_calls() {
    runtime().block_on(async {
        let (_, state) = suspended(Shape::Gated).await;
        let quorum = |approvals, tools: &[(&str, u32)]| Quorum {
            approvals,
            tools: tools.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect(),
        };
        assert_eq!(quorum(1, &[]).for_turn(&state), 1);
        assert_eq!(quorum(3, &[]).for_turn(&state), 3);
        // read_note is free: its number does not count.
        assert_eq!(quorum(1, &[("read_note", 4)]).for_turn(&state), 1);
        assert_eq!(quorum(2, &[("write_note", 1)]).for_turn(&state), 1);
        let (_, question) = suspended(Shape::QuestionOnly).await;
        assert_eq!(
            quorum(3, &[]).for_turn(&question),
            1,
            "nothing waits for approval"
        );
    });
}

/// A turn whose approved call's server asked the operator while it ran (MCP elicitation,
/// [`nrllm_core::elicit`]): the call ran once and asked; nothing else of the turn waits.
async fn asking() -> (World, SuspendedState) {
    let world = world(vec![ToolCall::new(
        "w",
        "write_note",
        &json!({"text": "ask"}),
    )]);
    let LoopOutcome::Suspended(first) = world
        .tool_loop
        .run(input(), &RunContext::default(), &NullSink)
        .await
        .unwrap()
    else {
        panic!("the write waits for its approval");
    };
    let outcome = world
        .tool_loop
        .resume(
            &first,
            &Decision::ApproveAll,
            &RunContext::default(),
            &NullSink,
        )
        .await
        .unwrap();
    let LoopOutcome::Suspended(state) = outcome else {
        panic!("the server's question makes the run wait: {outcome:?}");
    };
    assert!(state.elicited.is_some());
    assert_eq!(world.probe.count("write_note"), 1);
    (world, state)
}

/// The reply `Way::Answer(text)` gives a server's question: `a` accepts with a title that fits,
/// `b` declines, anything else cancels.
fn reply_of(text: &str) -> FormAnswer {
    match text {
        "a" => FormAnswer {
            fields: Some([("title".to_owned(), "Ideas".to_owned())].into()),
            ..FormAnswer::default()
        },
        "b" => FormAnswer {
            action: Some(nrllm_core::elicit::ReplyAction::Decline),
            ..FormAnswer::default()
        },
        _ => FormAnswer {
            action: Some(nrllm_core::elicit::ReplyAction::Cancel),
            ..FormAnswer::default()
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every way, every caller, four-eyes on and off, on a run waiting for the answer to its
    /// server's question: only an answer (accept, decline, cancel) from someone the authority
    /// lets decide the run, or the deadline (which cancels), moves it; the call is then sent
    /// again exactly once with that reply. Every other way is refused, and nothing is sent.
    #[test]
    fn a_servers_question_moves_only_by_an_allowed_answer_or_the_deadline(
        actor in arb_actor(),
        four_eyes in any::<bool>(),
        way in arb_way(),
    ) {
        runtime().block_on(async {
            let (world, state) = asking().await;
            prop_assert_eq!(state.waiting_for(), RunStatus::WaitingForInput);
            let calls = state.pending.clone();
            let submission = submission_of(&way, &calls);
            let typed = match &way {
                Way::Answer(text) => reply_of(text),
                _ => FormAnswer::default(),
            };
            let turn_move = match (&way, &submission) {
                (_, Some(submission)) => TurnMove::Submit(submission),
                (Way::Answer(_), _) => TurnMove::Answer { call_id: None, answer: &typed },
                (Way::Headless(decision), _) => TurnMove::Decision(decision),
                (Way::Budget(budget), _) => TurnMove::Budget(budget),
                (Way::Allowance, _) => TurnMove::Allowance,
                (Way::Offer(offer), _) => TurnMove::Offer(offer),
                _ => TurnMove::Expire,
            };
            let lineage = Lineage { requesters: LINEAGE.map(str::to_owned).to_vec() };
            let facts = RunFacts {
                status: state.waiting_for(),
                termination_reason: None,
                lineage: &lineage,
                four_eyes,
                approvals_required: state.approvals_required,
            };
            let allowed = turn_move.act().map(|act| authorize(&actor, act, Some(&facts)));
            if let Some(allowed) = &allowed {
                prop_assert_eq!(allowed.is_ok(), may_move(&way, &actor, four_eyes), "{:?}", allowed);
            }
            if matches!(allowed, Some(Err(_))) {
                prop_assert_eq!(world.probe.count("write_note"), 1);
                return Ok(());
            }
            let decided = turn_move
                .decide(&state, (Uuid::nil(), "demo"))
                .and_then(|(decision, _)| {
                    world
                        .tool_loop
                        .resolve_decision(&state, &decision)
                        .map(|_| decision)
                        .map_err(|err| match err {
                            nrllm_core::LoopError::Decision(err) => err,
                            other => panic!("{other}"),
                        })
                });
            let moves = matches!(way, Way::Answer(_) | Way::Expire);
            let Ok(decision) = decided else {
                prop_assert!(!moves, "{:?} was refused: {:?}", way, decided);
                prop_assert_eq!(world.probe.count("write_note"), 1);
                return Ok(());
            };
            prop_assert!(moves, "{:?} moved a run waiting for a server's answer", way);
            let Decision::Reply { reply } = &decision else {
                panic!("{way:?} made {decision:?}");
            };
            let expected = match (&way, &typed.action) {
                (Way::Expire, _) => nrllm_core::elicit::ReplyAction::Cancel,
                (_, action) => action.unwrap_or_default(),
            };
            prop_assert_eq!(reply.action, expected);
            let outcome = world.tool_loop.resume(&state, &decision, &RunContext::default(), &NullSink).await.unwrap();
            prop_assert!(matches!(outcome, LoopOutcome::Completed(_)), "{:?}", outcome);
            prop_assert_eq!(world.probe.count("write_note"), 2, "sent again exactly once");
            Ok(())
        })?;
    }
}

#[test]
fn an_answer_that_does_not_fit_the_servers_form_is_refused_and_only_a_servers_question_is_declined()
{
    runtime().block_on(async {
        let (world, state) = asking().await;
        let too_long = FormAnswer {
            fields: Some([("title".to_owned(), "x".repeat(41))].into()),
            ..FormAnswer::default()
        };
        for answer in [FormAnswer::default(), too_long] {
            let err = TurnMove::Answer {
                call_id: None,
                answer: &answer,
            }
            .decide(&state, (Uuid::nil(), "demo"))
            .unwrap_err();
            assert!(
                matches!(&err, DecisionError::InvalidAnswer { field, .. } if field == "title"),
                "{err}"
            );
        }
        let other = TurnMove::Answer {
            call_id: Some("q"),
            answer: &reply_of("a"),
        }
        .decide(&state, (Uuid::nil(), "demo"))
        .unwrap_err();
        assert!(
            matches!(other, DecisionError::UnknownCall { .. }),
            "{other}"
        );
        assert_eq!(world.probe.count("write_note"), 1);
        // The model's own question is answered, never declined.
        let (_, question) = suspended(Shape::QuestionOnly).await;
        let err = TurnMove::Answer {
            call_id: None,
            answer: &reply_of("b"),
        }
        .decide(&question, (Uuid::nil(), "demo"))
        .unwrap_err();
        assert_eq!(err, DecisionError::NotDeclinable);
    });
}
