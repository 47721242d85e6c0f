//! A run's stored steps read a page at a time, for exports and live replays: a long run's steps
//! never sit in memory whole.

use std::sync::Arc;

use nrllm_core::run_store::{RunStore, StoreError, StoredEvent};
use uuid::Uuid;

/// Events read from the database at a time by exports and replays.
pub const EVENTS_PAGE: u32 = 500;

/// Run `id`'s stored events after `after`, `page` at a time, each page read as the stream is
/// polled (a long run never sits in memory whole); the stream ends after the last page, or with
/// the error of a read that failed. Exports and live replays read through it.
pub fn event_pages(
    store: Arc<dyn RunStore>,
    id: Uuid,
    after: i64,
    page: u32,
) -> impl futures::Stream<Item = Result<Vec<StoredEvent>, StoreError>> + Send + 'static {
    futures::stream::unfold(Some(after), move |state| {
        let store = Arc::clone(&store);
        async move {
            let after = state?;
            match store.events_page(id, after, page).await {
                Ok(events) if events.is_empty() => None,
                Ok(events) => {
                    let next = events.last().map(|e| e.sequence);
                    Some((Ok(events), next))
                }
                Err(err) => Some((Err(err), None)),
            }
        }
    })
}
