use super::hub::*;
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
        let sent: Vec<SseEvent> = settled_replay(store.clone(), id, after, page)
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
    };
    let id = store.create(&run, 1, true).await.unwrap().id;
    let last = Arc::new(AtomicI64::new(2));
    let paged: Vec<SseEvent> = paged_steps(store.clone(), id, 2, Arc::clone(&last))
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
