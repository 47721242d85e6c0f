//! A run's place in a distributed trace (W3C Trace Context): its trace id and the id of its root
//! span, fixed when the run is created and stored with it, so that every span of the run — before
//! and after a wait, in another process, on another instance — is a child in that one trace. A
//! run started with an incoming `traceparent` (from an authenticated caller) joins the caller's
//! trace; a fork or a retry starts its own trace, linked to the run it came from.
//!
//! Everything here is parsed strictly: a malformed header is ignored (the run starts its own
//! trace), never half-read; `tracestate` is kept only while small and well formed.

use serde::{Deserialize, Serialize};

/// The longest `tracestate` kept, in bytes (the size W3C asks every vendor to propagate).
pub const MAX_TRACESTATE_BYTES: usize = 512;
/// The most list members a kept `tracestate` has.
pub const MAX_TRACESTATE_MEMBERS: usize = 32;

/// A parent span as a `traceparent` header names it (version `00`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

impl TraceParent {
    /// `header` as a version-00 `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`, lower case,
    /// neither id all zeros); `None` for anything else.
    pub fn parse(header: &str) -> Option<TraceParent> {
        let header = header.trim_matches(|c| c == ' ' || c == '\t');
        let mut parts = header.split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || version != "00" {
            return None;
        }
        let trace_id: [u8; 16] = lower_hex(trace)?;
        let span_id: [u8; 8] = lower_hex(span)?;
        let [flags]: [u8; 1] = lower_hex(flags)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// As a `traceparent` header.
    pub fn header(&self) -> String {
        traceparent(
            &const_hex::encode(self.trace_id),
            &const_hex::encode(self.span_id),
            self.sampled,
        )
    }
}

/// A version-00 `traceparent` header naming span `span_id` (lower-case hex) of trace `trace_id`.
pub fn traceparent(trace_id: &str, span_id: &str, sampled: bool) -> String {
    format!("00-{trace_id}-{span_id}-{:02x}", u8::from(sampled))
}

/// `raw` as a `tracestate` worth passing on: at most [`MAX_TRACESTATE_BYTES`] and
/// [`MAX_TRACESTATE_MEMBERS`] members, each `key=value` as W3C spells them; `None` otherwise.
pub fn bounded_tracestate(raw: &str) -> Option<String> {
    if raw.len() > MAX_TRACESTATE_BYTES {
        return None;
    }
    let members: Vec<&str> = raw
        .split(',')
        .map(|m| m.trim_matches(|c| c == ' ' || c == '\t'))
        .filter(|m| !m.is_empty())
        .collect();
    if members.is_empty() || members.len() > MAX_TRACESTATE_MEMBERS {
        return None;
    }
    members
        .iter()
        .all(|member| member_ok(member))
        .then(|| members.join(","))
}

fn member_ok(member: &str) -> bool {
    let Some((key, value)) = member.split_once('=') else {
        return false;
    };
    let key_ok = (1..=256).contains(&key.len())
        && key.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-*/@".contains(c));
    let value_ok = (1..=256).contains(&value.len())
        && !value.ends_with(' ')
        && value
            .chars()
            .all(|c| (' '..='~').contains(&c) && c != ',' && c != '=');
    key_ok && value_ok
}

/// A span in another trace that a run's trace points to (the run it was forked or retried from).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceLink {
    pub trace_id: String,
    pub span_id: String,
}

/// A run's trace, as stored with it (ids in lower-case hex).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunTrace {
    pub trace_id: String,
    /// The run's root span (`invoke_agent`), emitted when the run ends.
    pub span_id: String,
    pub sampled: bool,
    /// The caller's span the run was started under, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<TraceLink>,
}

impl RunTrace {
    /// A new run's trace: under `parent` (the caller's span, with its `tracestate`), or a trace
    /// of its own.
    pub fn start(parent: Option<(TraceParent, Option<String>)>) -> RunTrace {
        let span_id = const_hex::encode(random_span_id());
        match parent {
            Some((parent, tracestate)) => RunTrace {
                trace_id: const_hex::encode(parent.trace_id),
                span_id,
                sampled: parent.sampled,
                parent_span_id: Some(const_hex::encode(parent.span_id)),
                tracestate,
                link: None,
            },
            None => RunTrace {
                trace_id: const_hex::encode(random_trace_id()),
                span_id,
                sampled: true,
                parent_span_id: None,
                tracestate: None,
                link: None,
            },
        }
    }

    /// A fork's or a retry's trace: its own, linked to the root span of `from`'s.
    pub fn linked_to(from: &RunTrace) -> RunTrace {
        RunTrace {
            link: Some(TraceLink {
                trace_id: from.trace_id.clone(),
                span_id: from.span_id.clone(),
            }),
            ..RunTrace::start(None)
        }
    }

    /// The run's root span as a `traceparent` header (for requests made for the run).
    pub fn traceparent(&self) -> String {
        traceparent(&self.trace_id, &self.span_id, self.sampled)
    }

    /// The run's trace id and root span id as bytes; none if the stored ones are not ids.
    pub fn ids(&self) -> Option<([u8; 16], [u8; 8])> {
        Some((lower_hex(&self.trace_id)?, lower_hex(&self.span_id)?))
    }

    /// The stored form.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The stored form read back; `None` if it does not read (the run is then traced as if it
    /// had no stored trace).
    pub fn from_json(json: &str) -> Option<RunTrace> {
        serde_json::from_str::<RunTrace>(json).ok().filter(|trace| {
            lower_hex::<16>(&trace.trace_id).is_some() && lower_hex::<8>(&trace.span_id).is_some()
        })
    }
}

fn random_trace_id() -> [u8; 16] {
    loop {
        let id = *uuid::Uuid::new_v4().as_bytes();
        if id != [0; 16] {
            return id;
        }
    }
}

pub(crate) fn random_span_id() -> [u8; 8] {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    // SipHash under this thread's random keys (drawn once; each `RandomState` after that takes
    // the next key): unpredictable ids without a system call for each.
    static DRAWN: AtomicU64 = AtomicU64::new(0);
    loop {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(DRAWN.fetch_add(1, Ordering::Relaxed));
        let id = hasher.finish().to_be_bytes();
        if id != [0; 8] {
            return id;
        }
    }
}

/// `text` as exactly `N` bytes of lower-case hex (W3C forbids upper case).
pub(crate) fn lower_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    // Exactly two digits a byte: `const_hex` would also take a `0x` before them.
    if text.len() != N * 2 || text.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    const_hex::decode_to_array(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_version_00_traceparent_reads_and_writes_back_the_same() {
        let parent = TraceParent::parse(GOOD).unwrap();
        assert!(parent.sampled);
        assert_eq!(parent.header(), GOOD);
        let unsampled = TraceParent::parse(&GOOD.replace("-01", "-00")).unwrap();
        assert!(!unsampled.sampled);
    }

    #[test]
    fn anything_but_a_strict_traceparent_is_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-0x4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_tracestate_is_kept_only_while_small_and_well_formed() {
        assert_eq!(
            bounded_tracestate("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE").as_deref(),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        );
        assert_eq!(
            bounded_tracestate("tenant@vendor=x").as_deref(),
            Some("tenant@vendor=x")
        );
        let long = format!("a={}", "x".repeat(MAX_TRACESTATE_BYTES));
        let many = (0..=MAX_TRACESTATE_MEMBERS)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        for bad in [
            "",
            "novalue",
            "Upper=x",
            "a=b=c",
            "a=b,=c",
            &long,
            &many,
            "a=x\u{7f}",
        ] {
            assert_eq!(bounded_tracestate(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_run_joins_its_callers_trace_or_starts_its_own_and_a_fork_links_back() {
        let parent = TraceParent::parse(GOOD).unwrap();
        let joined = RunTrace::start(Some((parent, Some("rojo=1".into()))));
        assert_eq!(joined.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(joined.parent_span_id.as_deref(), Some("00f067aa0ba902b7"));
        assert_ne!(joined.span_id, "00f067aa0ba902b7");
        let header = joined.traceparent();
        assert_eq!(
            TraceParent::parse(&header).unwrap().trace_id,
            parent.trace_id
        );

        let own = RunTrace::start(None);
        let other = RunTrace::start(None);
        assert_ne!(own.trace_id, other.trace_id);
        assert!(TraceParent::parse(&own.traceparent()).is_some());

        let fork = RunTrace::linked_to(&joined);
        assert_ne!(fork.trace_id, joined.trace_id);
        assert_eq!(fork.parent_span_id, None);
        let link = fork.link.clone().unwrap();
        assert_eq!(
            (link.trace_id, link.span_id),
            (joined.trace_id.clone(), joined.span_id.clone())
        );

        assert_eq!(RunTrace::from_json(&fork.to_json()), Some(fork));
        assert_eq!(
            RunTrace::from_json("{\"trace_id\":\"x\",\"span_id\":\"y\",\"sampled\":true}"),
            None
        );
        assert_eq!(RunTrace::from_json("not json"), None);
    }
}
