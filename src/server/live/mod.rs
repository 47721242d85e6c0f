//! Live step lists: the run service tells [`LiveHub`] about every event as it happens, and
//! `GET /api/runs/{id}/events` streams them to browsers as server-sent events. Each event carries
//! its sequence number as the SSE id, so a reconnecting browser (`Last-Event-ID`) resumes exactly
//! where it left off: first from the database, then from the live feed.
//!
//! Resources stay bounded whatever clients do (the way Mercure and Centrifugo do it):
//! - nothing is allocated for a run that is not running here: an unknown id is a 404 before
//!   anything else, and a finished or waiting run's stream replays its steps and ends;
//! - a running run's broadcast channel exists only while someone listens: it is made by the first
//!   subscriber and dropped with the last one, or when the run stops running;
//! - a stream is a plain value, not a task: when the client goes, the connection drops it and its
//!   subscription with it, at once;
//! - live streams are capped per run and in total; over the cap the answer is 503 and the page
//!   polls instead.
//!
//! While a model writes its response, the stream also carries `delta` events (no id: they are
//! never journaled) with what it wrote, gathered so that a run sends at most one every 25 ms
//! ([`forming`]); the response's step replaces them when it lands.

mod forming;
mod hub;
mod remote;
mod route;
mod sse;
mod stream;
#[cfg(test)]
mod tests;

pub use hub::*;
pub use remote::*;
pub use route::*;
pub use stream::*;
