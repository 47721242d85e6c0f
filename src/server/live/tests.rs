use super::hub::*;
use super::remote::Remote;
use super::stream::*;
use axum::response::sse::Event as SseEvent;
use futures::StreamExt;
use nrllm_core::run_service::RunListener;
use nrllm_core::run_store::NewRun;
use nrllm_core::run_store::{RunStatus, RunStore, SequencedEvent};
use nrllm_store::db::Database;
use nrllm_store::SqlRunStore;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use uuid::Uuid;

async fn store() -> (tempfile::TempDir, Arc<SqlRunStore>) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::connect(&format!("sqlite:{}/live.db", dir.path().display()))
        .await
        .unwrap();
    (dir, Arc::new(SqlRunStore::new(db)))
}

async fn running_run(store: &SqlRunStore) -> Uuid {
    new_run(store, true).await
}

/// A run stored as running under this store's lease, or (`running` false) queued.
async fn new_run(store: &SqlRunStore, running: bool) -> Uuid {
    let run = NewRun {
        id: Uuid::now_v7(),
        configuration: nrllm_store::testing::demo_configuration("p"),
        requested_by: "operator".into(),
        copied: Vec::new(),
        trace: nrllm_core::trace::RunTrace::start(None),
    };
    store.create(&run, 1, running).await.unwrap().id
}

#[tokio::test]
async fn streams_of_a_queued_run_count_toward_the_caps_until_they_end() {
    let (_dir, store) = store().await;
    let hub = Arc::new(LiveHub::new(StreamLimits {
        per_run: 5,
        total: 2,
    }));
    // Queued: nothing in this process takes it.
    let id = new_run(&store, false).await;
    let open = || event_stream(store.clone(), hub.clone(), None, id, 0);
    let first = open().await.unwrap();
    let second = open().await.unwrap();
    assert_eq!(hub.stats().subscribers, 2);
    assert_eq!(open().await.err(), Some(StreamError::Full));
    drop(first);
    assert_eq!(hub.stats().subscribers, 1);
    let third = open().await.unwrap();
    drop((second, third));
    assert_eq!(hub.stats(), HubStats::default());
}

#[tokio::test]
async fn a_finished_run_replays_every_step_a_page_at_a_time_then_its_status() {
    let (_dir, store) = store().await;
    let id = nrllm_store::testing::completed_run(store.as_ref(), 7, 1)
        .await
        .id;
    for (page, after) in [(1, 0), (2, 0), (3, 4), (500, 0)] {
        let sent: Vec<SseEvent> =
            settled_replay(store.clone(), id, after, (page, Default::default()))
                .collect()
                .await;
        let text: Vec<String> = sent.iter().map(|e| format!("{e:?}")).collect();
        // The reconnect hint, each step after `after` in order, the status.
        assert_eq!(
            sent.len(),
            1 + (7 - after as usize) + 1,
            "page {page}: {text:?}"
        );
        for (i, sequence) in (after + 1..=7).enumerate() {
            assert!(
                text[1 + i].contains(&format!("step {sequence}")),
                "page {page}: {text:?}"
            );
        }
        assert!(text.last().unwrap().contains("completed"), "{text:?}");
    }
}

#[tokio::test]
async fn a_running_run_replays_its_stored_steps_in_pages_then_follows_live() {
    let (_dir, store) = store().await;
    let hub = Arc::new(LiveHub::default());
    let step = |sequence: i64| SequencedEvent {
        sequence,
        event: nrllm_core::events::Event::Recovered {
            resumes_at: format!("step {sequence}"),
        },
        created_at_ms: 1,
    };
    // Running here, with the steps of an earlier segment stored (a fork's, copied).
    let run = NewRun {
        id: Uuid::now_v7(),
        configuration: nrllm_store::testing::demo_configuration("p"),
        requested_by: "operator".into(),
        copied: (1..=7).map(step).collect(),
        trace: nrllm_core::trace::RunTrace::start(None),
    };
    let id = store.create(&run, 1, true).await.unwrap().id;
    let last = Arc::new(AtomicI64::new(2));
    let paged: Vec<SseEvent> = paged_steps(
        store.clone(),
        id,
        (2, Default::default()),
        Arc::clone(&last),
    )
    .collect()
    .await;
    assert_eq!(paged.len(), 5, "steps 3 to 7, two at a time");
    assert_eq!(last.load(Ordering::Acquire), 7);

    hub.status(id, RunStatus::Running);
    let stream = event_stream(store.clone(), hub.clone(), None, id, 0)
        .await
        .unwrap();
    hub.event(id, &step(8));
    hub.status(id, RunStatus::Completed);
    let text: Vec<String> = stream
        .collect::<Vec<SseEvent>>()
        .await
        .iter()
        .map(|e| format!("{e:?}"))
        .collect();
    assert_eq!(
        text.len(),
        1 + 8 + 1,
        "hint, 7 stored, 1 live, status: {text:?}"
    );
    for sequence in 1..=8 {
        assert!(
            text[sequence].contains(&format!("step {sequence}")),
            "{text:?}"
        );
    }
    assert!(text[9].contains("completed"), "{text:?}");
    assert_eq!(hub.stats(), HubStats::default());
}

#[tokio::test]
async fn an_unknown_run_is_refused_before_anything_is_allocated() {
    let (_dir, store) = store().await;
    let hub = Arc::new(LiveHub::default());
    let refused = event_stream(store.clone(), hub.clone(), None, Uuid::now_v7(), 0)
        .await
        .err();
    assert_eq!(refused, Some(StreamError::NotFound));
    assert_eq!(hub.stats(), HubStats::default());
}

#[tokio::test]
async fn a_run_not_running_here_replays_its_steps_and_ends_without_a_channel() {
    let (_dir, store) = store().await;
    let hub = Arc::new(LiveHub::default());
    // Stored as running, but nothing in this process drives it: the stream replays and ends.
    let id = running_run(&store).await;
    let events: Vec<SseEvent> = event_stream(store.clone(), hub.clone(), None, id, 0)
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(events.len(), 1, "only the reconnect hint");
    assert_eq!(hub.stats(), HubStats::default());
}

#[tokio::test]
async fn a_disconnected_client_frees_its_channel_at_once_and_a_stopped_run_its_entry() {
    let (_dir, store) = store().await;
    let hub = Arc::new(LiveHub::default());
    let id = running_run(&store).await;
    hub.status(id, RunStatus::Running);
    let mut stream = Box::pin(
        event_stream(store.clone(), hub.clone(), None, id, 0)
            .await
            .unwrap(),
    );
    assert!(
        stream.next().await.is_some(),
        "the reconnect hint comes first"
    );
    assert_eq!(
        hub.stats(),
        HubStats {
            runs: 1,
            channels: 1,
            subscribers: 1
        }
    );
    // The client goes away: the connection drops the stream.
    drop(stream);
    assert_eq!(
        hub.stats(),
        HubStats {
            runs: 1,
            channels: 0,
            subscribers: 0
        }
    );
    hub.status(id, RunStatus::Completed);
    assert_eq!(hub.stats(), HubStats::default());
}

#[tokio::test]
async fn live_steps_reach_a_subscriber_and_the_stream_ends_with_the_status() {
    let (_dir, store) = store().await;
    let hub = Arc::new(LiveHub::default());
    let id = running_run(&store).await;
    hub.status(id, RunStatus::Running);
    let stream = event_stream(store.clone(), hub.clone(), None, id, 0)
        .await
        .unwrap();
    let event = SequencedEvent {
        sequence: 1,
        event: nrllm_core::events::Event::LlmFailed {
            round: 1,
            message: "boom".into(),
            duration_ms: 3,
            usage: None,
        },
        created_at_ms: 5,
    };
    hub.event(id, &event);
    hub.status(id, RunStatus::Failed);
    let events: Vec<SseEvent> = stream.collect().await;
    assert_eq!(events.len(), 3, "hint, the step, the status");
    assert_eq!(hub.stats(), HubStats::default());
}

#[tokio::test]
async fn streams_over_the_caps_are_refused() {
    let (_dir, store) = store().await;
    let hub = Arc::new(LiveHub::new(StreamLimits {
        per_run: 2,
        total: 3,
    }));
    let first = running_run(&store).await;
    let second = running_run(&store).await;
    hub.status(first, RunStatus::Running);
    hub.status(second, RunStatus::Running);
    let a = hub.subscribe(first).unwrap();
    let _b = hub.subscribe(first).unwrap();
    assert!(matches!(hub.subscribe(first), Err(Refused::Full)));
    let _c = hub.subscribe(second).unwrap();
    assert!(matches!(hub.subscribe(second), Err(Refused::Full)), "total");
    drop(a);
    let _d = hub.subscribe(second).expect("a freed slot is free again");
    assert_eq!(
        event_stream(store.clone(), hub.clone(), None, first, 0)
            .await
            .err(),
        Some(StreamError::Full)
    );
}

fn llm_event(sequence: i64, text: &str) -> SequencedEvent {
    SequencedEvent {
        sequence,
        event: nrllm_core::events::Event::Llm {
            round: 1,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            usage: Default::default(),
            finish_reason: nrllm_core::provider::FinishReason::Stop,
            duration_ms: 1,
            first_token_ms: None,
            raw: None,
        },
        created_at_ms: 0,
    }
}

/// The `delta` events among `events`, as the browser reads them.
fn deltas(events: &[SseEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| format!("{e:?}"))
        .filter(|e| e.contains("event: delta"))
        .collect()
}

#[tokio::test]
async fn a_response_being_written_reaches_the_stream_and_a_browser_joining_mid_response_gets_it_whole(
) {
    use nrllm_core::provider::Delta;
    let (_dir, store) = store().await;
    let hub = Arc::new(LiveHub::default());
    let id = running_run(&store).await;
    hub.status(id, RunStatus::Running);
    let write = |text: &str| {
        hub.delta(id, 1, &Delta::Text { text: text.into() });
    };
    // Written before anyone listens: kept, for whoever joins.
    write("Hello, ");
    write("wor");
    let mut stream = event_stream(store.clone(), hub.clone(), None, id, 0)
        .await
        .unwrap();
    let mut seen = Vec::new();
    // The reconnect hint, then what was written so far, whole, replacing what a page shows.
    for _ in 0..2 {
        seen.push(stream.next().await.unwrap());
    }
    let joined = deltas(&seen);
    assert_eq!(joined.len(), 1, "{seen:?}");
    assert!(
        joined[0].contains(r#"\"reset\":true"#) && joined[0].contains("Hello, wor"),
        "{joined:?}"
    );
    assert!(
        !joined[0].contains("id:"),
        "a delta carries no id: {joined:?}"
    );
    // Written now: sent (the first at once; later ones at most every 25 ms, gathered).
    write("ld");
    let next = stream.next().await.unwrap();
    assert!(
        format!("{next:?}").contains(r#"\"text\":\"ld\""#),
        "{next:?}"
    );
    // A retry starts the response over: the page drops what it showed, then the retry step.
    hub.event(
        id,
        &SequencedEvent {
            sequence: 1,
            event: nrllm_core::events::Event::ProviderRetry {
                round: 1,
                retry: 1,
                wait_ms: 10,
                reason: "the stream broke off".into(),
                hint: None,
                usage: None,
            },
            created_at_ms: 0,
        },
    );
    let reset = format!("{:?}", stream.next().await.unwrap());
    assert!(
        reset.contains(r#"\"reset\":true"#) && reset.contains(r#"\"text\":\"\""#),
        "{reset:?}"
    );
    assert!(format!("{:?}", stream.next().await.unwrap()).contains("event: step"));
    write("Again");
    assert!(format!("{:?}", stream.next().await.unwrap()).contains("Again"));
    // The step lands: the page replaces what it showed; a browser joining now gets no delta.
    hub.event(id, &llm_event(2, "Again"));
    let step = stream.next().await.unwrap();
    assert!(format!("{step:?}").contains("event: step"), "{step:?}");
    let mut late = event_stream(store.clone(), hub.clone(), None, id, 2)
        .await
        .unwrap();
    let hint = late.next().await.unwrap();
    assert!(deltas(&[hint]).is_empty());
    let more = tokio::time::timeout(std::time::Duration::from_millis(100), late.next()).await;
    assert!(
        more.is_err(),
        "nothing more until the run moves on: {more:?}"
    );
}

#[tokio::test]
async fn a_browser_joining_between_two_messages_gets_each_piece_once() {
    use crate::page_data::Forming;
    use nrllm_core::provider::Delta;
    let hub = Arc::new(LiveHub::default());
    let id = Uuid::now_v7();
    hub.status(id, RunStatus::Running);
    let write = |text: &str| hub.delta(id, 1, &Delta::Text { text: text.into() });
    let forming = |message: LiveMessage| match message {
        LiveMessage::Forming(forming) => forming,
        other => panic!("{other:?}"),
    };
    let mut first = hub.subscribe(id).unwrap();
    write("a"); // sent at once
    write("b"); // gathered: due within the interval
    assert_eq!(forming(first.receiver.try_recv().unwrap()).text, "a");
    assert!(
        first.receiver.try_recv().is_err(),
        "b waits for the interval"
    );
    // A second browser joins: the first gets what was gathered, the second all of it once.
    let mut second = hub.subscribe(id).unwrap();
    assert_eq!(forming(first.receiver.try_recv().unwrap()).text, "b");
    let mut shown: Forming = second.forming.clone().unwrap();
    assert_eq!(shown.text, "ab");
    std::thread::sleep(super::forming::FORMING_EVERY);
    write("c");
    shown.extend(&forming(second.receiver.try_recv().unwrap()));
    assert_eq!(shown.text, "abc", "no piece twice");
    assert!(second.receiver.try_recv().is_err());
}

/// The next `delta` event of `stream` (within 10 s), as the browser reads it.
async fn next_delta(stream: &mut futures::stream::BoxStream<'static, SseEvent>) -> String {
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            let event = format!("{:?}", stream.next().await.expect("the stream goes on"));
            if event.contains("event: delta") {
                return event;
            }
        }
    })
    .await
    .expect("a delta from the other instance")
}

#[tokio::test]
#[ignore = "needs Postgres (TEST_DATABASE_URL); make test runs it"]
async fn a_browser_on_another_instance_gets_the_response_so_far_then_what_follows() {
    use super::remote::{announce_forming, RemoteFeed};
    use nrllm_core::provider::Delta;
    let test_db = nrllm_store::testing::postgres_from_env().await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    // Two instances on one database: A drives the run, a browser follows it through B.
    let instance = |db: Database| {
        let hub = Arc::new(LiveHub::default());
        let feed = Arc::new(RemoteFeed::new(
            &test_db.url,
            10,
            Arc::clone(&hub),
            db.clone(),
        ));
        tokio::spawn(Arc::clone(&feed).run(shutdown.clone()));
        tokio::spawn(announce_forming(Arc::clone(&hub), db, shutdown.clone()));
        (hub, feed)
    };
    let (hub_a, _feed_a) = instance(test_db.db.clone());
    let db_b = test_db.open(4).await;
    let (hub_b, feed_b) = instance(db_b.clone());
    let store_a = SqlRunStore::new(test_db.db.clone());
    let id = running_run(&store_a).await;
    hub_a.status(id, RunStatus::Running);
    let write = |text: &str| hub_a.delta(id, 1, &Delta::Text { text: text.into() });
    // Written before the browser came: it gets it, whole, once it follows the run.
    write("Hello");
    write(", wor");
    let store_b: Arc<dyn RunStore> = Arc::new(SqlRunStore::new(db_b));
    let mut stream = event_stream(store_b, Arc::clone(&hub_b), Some(feed_b), id, 0)
        .await
        .unwrap();
    let whole = next_delta(&mut stream).await;
    assert!(
        whole.contains(r#"\"reset\":true"#) && whole.contains("Hello, wor"),
        "{whole}"
    );
    // Then what is written next, and nothing twice.
    write("ld");
    let more = next_delta(&mut stream).await;
    assert!(
        more.contains(r#"\"text\":\"ld\""#) && !more.contains(r#"\"reset\":true"#),
        "{more}"
    );
    // A long piece comes through whole, in payloads under Postgres's limit.
    let long = "x".repeat(20_000);
    write(&long);
    let long_delta = next_delta(&mut stream).await;
    assert!(long_delta.contains(&long), "{} bytes", long_delta.len());
    assert_eq!(hub_b.stats().runs, 0, "B drives nothing");
    shutdown.cancel();
}

#[tokio::test]
#[ignore = "needs Postgres (TEST_DATABASE_URL); make test runs it"]
async fn a_stream_follows_a_run_another_instance_drives_without_waiting_for_it_here() {
    use super::remote::RemoteFeed;
    let test_db = nrllm_store::testing::postgres_from_env().await;
    let store_a = SqlRunStore::new(test_db.db.clone()).with_lease("instance-a", 30_000);
    let id = running_run(&store_a).await;
    let run = <SqlRunStore as nrllm_core::run_store::RunReader>::get(&store_a, id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.lease_owner.as_deref(), Some("instance-a"));
    let db_b = test_db.open(4).await;
    let store_b: Arc<dyn RunStore> = Arc::new(SqlRunStore::new(db_b.clone()));
    // How long instance `name` takes to open a stream of the run (nothing runs it there).
    let opened_in = |name: &'static str| {
        let (store_b, db_b, url) = (Arc::clone(&store_b), db_b.clone(), test_db.url.clone());
        async move {
            let hub = Arc::new(LiveHub::default());
            let feed = RemoteFeed::new(&url, 10, Arc::clone(&hub), db_b).of_instance(name);
            let started = std::time::Instant::now();
            let stream = event_stream(store_b, hub, Some(Arc::new(feed)), id, 0).await;
            assert!(stream.is_ok());
            started.elapsed()
        }
    };
    // Instance B knows the run is A's: it follows it as driven elsewhere at once.
    let elsewhere = opened_in("instance-b").await;
    assert!(
        elsewhere < std::time::Duration::from_millis(250),
        "{elsewhere:?}"
    );
    // The instance holding the lease gives its worker time to tell its hub (the grace).
    let here = opened_in("instance-a").await;
    assert!(here >= std::time::Duration::from_millis(400), "{here:?}");
}

#[tokio::test]
async fn a_live_step_says_what_it_used_toward_the_budget_under_the_runs_prices() {
    let (_dir, store) = store().await;
    let hub =
        Arc::new(
            LiveHub::default().with_prices(Arc::new(|_| nrllm_core::provider::Prices {
                input: Some(2.0),
                output: Some(10.0),
                ..Default::default()
            })),
        );
    let id = running_run(&store).await;
    hub.status(id, RunStatus::Running);
    let stream = event_stream(store.clone(), hub.clone(), None, id, 0)
        .await
        .unwrap();
    let mut answer = llm_event(1, "hello");
    if let nrllm_core::events::Event::Llm { usage, .. } = &mut answer.event {
        *usage = nrllm_core::provider::Usage::tokens(100, 20);
    }
    hub.event(id, &answer);
    hub.status(id, RunStatus::Completed);
    let events: Vec<String> = stream.map(|e| format!("{e:?}")).collect().await;
    let step = events
        .iter()
        .find(|e| e.contains("event: step"))
        .expect("the step");
    // 100 × $2 + 20 × $10 a million: 400 millionths of a dollar, one request.
    assert!(
        step.contains(
            r#"\"spent\":{\"input_tokens\":100,\"output_tokens\":20,\"requests\":1,\"tool_calls\":0,\"cost_micros\":400}"#
        ),
        "{step}"
    );
}

#[tokio::test]
async fn a_calls_progress_reaches_subscribers_coalesced_and_bounded() {
    use nrllm_core::tool::Progress;
    let hub = Arc::new(LiveHub::default());
    let id = Uuid::now_v7();
    let report = |n: f64, message: &str| Progress::bounded(n, Some(4.0), Some(message)).unwrap();
    hub.status(id, RunStatus::Running);
    // Nobody listens: nothing is kept.
    hub.progress(id, ("c1", "notes__count_words"), &report(1.0, "one"));
    let mut live = hub.subscribe(id).unwrap();
    let progress = |message: LiveMessage| match message {
        LiveMessage::Progress(progress) => progress,
        other => panic!("{other:?}"),
    };
    hub.progress(id, ("c1", "notes__count_words"), &report(2.0, "two"));
    hub.progress(id, ("c1", "notes__count_words"), &report(3.0, "three")); // within the interval
    hub.progress(
        id,
        ("c1", "notes__count_words"),
        &report(4.0, "<b>done</b>\u{7}"),
    );
    let first = progress(live.receiver.try_recv().unwrap());
    assert_eq!(first.text(), "notes__count_words: 2 of 4 — two");
    let last = progress(live.receiver.try_recv().unwrap());
    assert_eq!(
        (last.progress, last.message.as_deref()),
        (4.0, Some("<b>done</b>")),
        "the report that completes the total always goes; a control character does not"
    );
    assert!(live.receiver.try_recv().is_err(), "three was dropped");
    // A message is cut; a number that is not one is no report.
    let long = "x".repeat(1_000);
    let cut = Progress::bounded(1.0, None, Some(&long)).unwrap();
    assert_eq!(
        cut.message.map(|m| m.chars().count()),
        Some(nrllm_core::tool::MAX_PROGRESS_MESSAGE)
    );
    assert!(Progress::bounded(f64::NAN, None, None).is_none());
}

#[tokio::test]
async fn a_stream_that_looks_as_a_quick_run_ends_here_does_not_wait_out_the_grace() {
    let hub = Arc::new(LiveHub::default());
    let id = Uuid::now_v7();
    let long = std::time::Duration::from_secs(5);
    // The store said running, but the run ended before the stream could subscribe: the wait
    // ends at the store's next look, long before the grace.
    let began = std::time::Instant::now();
    let ended = hub.subscribe_soon(id, long, || async { false }).await;
    assert!(matches!(ended, Err(Refused::NotRunningHere)));
    assert!(began.elapsed() < long / 5, "{:?}", began.elapsed());
    // Still running (elsewhere, say): the grace is waited out, as before.
    let short = std::time::Duration::from_millis(200);
    let began = std::time::Instant::now();
    let elsewhere = hub.subscribe_soon(id, short, || async { true }).await;
    assert!(matches!(elsewhere, Err(Refused::NotRunningHere)));
    assert!(began.elapsed() >= short);
    // One that starts here within the grace is followed here.
    let waiting = {
        let hub = hub.clone();
        tokio::spawn(async move { hub.subscribe_soon(id, long, || async { true }).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    hub.status(id, RunStatus::Running);
    assert!(
        waiting.await.unwrap().is_ok(),
        "a run that started here is subscribed to"
    );
}

/// A feed that never listens to a database: the test delivers what it would have heard.
async fn unheard_feed() -> (tempfile::TempDir, Arc<super::remote::RemoteFeed>) {
    let (dir, store) = store().await;
    let hub = Arc::new(LiveHub::default());
    let feed = super::remote::RemoteFeed::new("unused", 10, hub, store.database().clone());
    (dir, Arc::new(feed))
}

#[tokio::test]
async fn a_queued_runs_stream_wakes_at_another_instances_commit_of_that_run() {
    let (_dir, feed) = unheard_feed().await;
    let id = Uuid::now_v7();
    let mut commits = Some(feed.run_feed(id));
    let within = |ms| std::time::Duration::from_millis(ms);
    feed.deliver(Uuid::now_v7(), Remote::Committed);
    let other = tokio::time::timeout(within(50), committed_elsewhere(&mut commits)).await;
    assert!(other.is_err(), "another run's commit woke it");
    feed.deliver(id, Remote::Committed);
    tokio::time::timeout(within(1000), committed_elsewhere(&mut commits))
        .await
        .expect("woken by its run's commit");
    let alone = tokio::time::timeout(within(50), committed_elsewhere(&mut None)).await;
    assert!(alone.is_err(), "without a feed nothing announces commits");
}

#[tokio::test]
async fn each_run_driven_elsewhere_has_its_own_channel_while_someone_listens() {
    let (_dir, feed) = unheard_feed().await;
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let (mut first, mut second, mut of_b) = (feed.run_feed(a), feed.run_feed(a), feed.run_feed(b));
    assert_eq!(feed.channels(), 2);
    // A commit of A reaches both listeners of A, and nothing reaches B's.
    feed.deliver(a, Remote::Committed);
    for listener in [&mut first, &mut second] {
        assert!(matches!(listener.recv().await, Ok(Remote::Committed)));
    }
    let quiet = tokio::time::timeout(std::time::Duration::from_millis(50), of_b.recv()).await;
    assert!(quiet.is_err(), "B's listener heard A's commit");
    // A commit of a run nobody here follows opens no channel.
    feed.deliver(Uuid::now_v7(), Remote::Committed);
    assert_eq!(feed.channels(), 2);
    // The channel goes with its last listener, not before.
    drop(first);
    assert_eq!(feed.channels(), 2);
    drop(second);
    assert_eq!(feed.channels(), 1);
    drop(of_b);
    assert_eq!(feed.channels(), 0);
}
