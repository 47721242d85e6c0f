//! What the crate's tests share.

use std::time::UNIX_EPOCH;

use nrllm_core::spans::SpanRecord;

/// An environment of these variables only.
pub(crate) fn env_of(
    pairs: &'static [(&'static str, &'static str)],
) -> impl Fn(&str) -> Option<String> {
    move |name| {
        pairs
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| (*value).to_owned())
    }
}

/// A root span named `span <n>`, of a trace sampled or not.
pub(crate) fn root(n: u64, sampled: bool) -> SpanRecord {
    SpanRecord {
        name: format!("span {n}"),
        trace_id: [0x4b; 16],
        span_id: (n + 1).to_be_bytes(),
        parent_span_id: None,
        sampled,
        client: false,
        start: UNIX_EPOCH,
        end: UNIX_EPOCH,
        attributes: Vec::new(),
        link: None,
        error: None,
    }
}
