//! The tamper-evident decision log: each run's events form a hash chain. Every event row stores
//! its predecessor's hash and its own, a SHA-256 over the row's stored columns and that
//! predecessor hash, so editing, inserting or deleting a row anywhere in a run's log breaks
//! verification at that row — and a log that stops before the run's last sequence is reported
//! too. Rows written before the chain existed (no hash) are reported as unchained, never as valid.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// The first event of a run chains to this.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One stored event row, as the chain covers it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainRow {
    pub sequence: i64,
    pub kind: String,
    pub round: Option<i64>,
    pub duration_ms: Option<i64>,
    pub payload: String,
    pub created_at_ms: i64,
    pub prev_hash: Option<String>,
    pub hash: Option<String>,
}

/// The hash of a row of run `run_id` that follows `prev_hash`. Every field is length-prefixed,
/// so no two different rows can be written as the same bytes.
pub fn row_hash(run_id: &str, prev_hash: &str, row: &ChainRow) -> String {
    let mut hasher = Sha256::new();
    let mut field = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_be_bytes());
        hasher.update(bytes);
    };
    field(b"nrllm-event-v1");
    field(run_id.as_bytes());
    field(prev_hash.as_bytes());
    field(&row.sequence.to_be_bytes());
    field(row.kind.as_bytes());
    field(optional(row.round).as_bytes());
    field(optional(row.duration_ms).as_bytes());
    field(row.payload.as_bytes());
    field(&row.created_at_ms.to_be_bytes());
    const_hex::encode(hasher.finalize())
}

fn optional(value: Option<i64>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

/// What verifying one run's log found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum ChainVerdict {
    /// Every row chains to the one before, up to the run's last sequence.
    Verified { events: usize },
    /// The first row that does not hold: its sequence, and why.
    Broken { sequence: i64, reason: String },
    /// The log ends before the run's last sequence (rows were deleted from its end).
    Truncated { last: i64, expected: i64 },
    /// Rows written before the log was chained (an older version); nothing to verify them by.
    Unchained { events: usize },
}

impl ChainVerdict {
    pub fn is_verified(&self) -> bool {
        matches!(self, ChainVerdict::Verified { .. })
    }

    /// One line for an operator.
    pub fn describe(&self) -> String {
        match self {
            ChainVerdict::Verified { events } => format!("log verified ({events} steps)"),
            ChainVerdict::Broken { sequence, reason } => {
                format!("log broken at step {sequence}: {reason}")
            }
            ChainVerdict::Truncated { last, expected } => {
                format!("log incomplete: it ends at step {last}, the run's last step is {expected}")
            }
            ChainVerdict::Unchained { events } => {
                format!("log not chained ({events} steps written before the log was chained)")
            }
        }
    }
}

/// Checks a run's rows, in sequence order, against the run's last sequence. Rows without a hash
/// at the start of the log were written before the log was chained; the chain starts after them.
pub fn verify(run_id: &str, rows: &[ChainRow], last_sequence: i64) -> ChainVerdict {
    let unchained = rows.iter().take_while(|row| row.hash.is_none()).count();
    let mut prev = GENESIS.to_owned();
    for (expected, (index, row)) in (1..).zip(rows.iter().enumerate()) {
        let broken = |reason: &str| ChainVerdict::Broken {
            sequence: row.sequence,
            reason: reason.to_owned(),
        };
        if row.sequence != expected {
            return broken("a step is missing before it");
        }
        if index < unchained {
            continue;
        }
        let (Some(stored_prev), Some(stored)) = (&row.prev_hash, &row.hash) else {
            return broken("it carries no hash");
        };
        if *stored_prev != prev {
            return broken("it does not follow the step before it");
        }
        if *stored != row_hash(run_id, &prev, row) {
            return broken("its content was changed after it was written");
        }
        prev = stored.clone();
    }
    let last = rows.last().map_or(0, |row| row.sequence);
    if last < last_sequence {
        return ChainVerdict::Truncated {
            last,
            expected: last_sequence,
        };
    }
    if unchained > 0 {
        return ChainVerdict::Unchained { events: unchained };
    }
    ChainVerdict::Verified { events: rows.len() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(run_id: &str, n: i64) -> Vec<ChainRow> {
        let mut prev = GENESIS.to_owned();
        (1..=n)
            .map(|sequence| {
                let mut row = ChainRow {
                    sequence,
                    kind: "tool".into(),
                    round: Some(1),
                    duration_ms: None,
                    payload: format!("{{\"n\":{sequence}}}"),
                    created_at_ms: 1000 + sequence,
                    prev_hash: Some(prev.clone()),
                    hash: None,
                };
                let hash = row_hash(run_id, &prev, &row);
                row.hash = Some(hash.clone());
                prev = hash;
                row
            })
            .collect()
    }

    #[test]
    fn an_intact_log_verifies_and_every_kind_of_edit_is_found_at_its_row() {
        let rows = chain("r", 5);
        assert_eq!(verify("r", &rows, 5), ChainVerdict::Verified { events: 5 });
        assert!(
            !verify("other run", &rows, 5).is_verified(),
            "bound to its run"
        );

        let mut edited = rows.clone();
        edited[2].payload = "{\"n\":99}".into();
        assert!(matches!(
            verify("r", &edited, 5),
            ChainVerdict::Broken { sequence: 3, .. }
        ));

        let mut rehashed = edited.clone();
        rehashed[2].hash = Some(row_hash(
            "r",
            rehashed[2].prev_hash.as_deref().unwrap(),
            &rehashed[2],
        ));
        assert!(
            matches!(
                verify("r", &rehashed, 5),
                ChainVerdict::Broken { sequence: 4, .. }
            ),
            "re-hashing the edited row breaks the next link"
        );

        let mut removed = rows.clone();
        removed.remove(1);
        assert!(matches!(
            verify("r", &removed, 5),
            ChainVerdict::Broken { sequence: 3, .. }
        ));

        let mut kind = rows.clone();
        kind[0].kind = "approval_decided".into();
        assert!(matches!(
            verify("r", &kind, 5),
            ChainVerdict::Broken { sequence: 1, .. }
        ));

        assert_eq!(
            verify("r", &rows[..3], 5),
            ChainVerdict::Truncated {
                last: 3,
                expected: 5
            }
        );
        let mut bare = rows.clone();
        for row in &mut bare {
            row.hash = None;
            row.prev_hash = None;
        }
        assert_eq!(verify("r", &bare, 5), ChainVerdict::Unchained { events: 5 });
        assert_eq!(verify("r", &[], 0), ChainVerdict::Verified { events: 0 });
    }
}
