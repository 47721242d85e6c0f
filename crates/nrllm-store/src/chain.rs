//! The tamper-evident decision log. Each run's events form a chain: every event row stores its
//! predecessor's MAC and its own, an HMAC-SHA-256 over the row's stored columns, its run and that
//! predecessor, keyed by the audit key — a secret kept outside the database ([`AuditKey`]). The
//! run keeps its key's id and a keyed head (its last sequence and last MAC), so that editing,
//! inserting, copying or deleting a row anywhere in a run's log — its end included — breaks
//! verification, even for someone who can write the database and recompute hashes, as long as
//! they do not have the key.
//!
//! Two older forms stay readable: runs chained with plain SHA-256 (before the key) verify by that
//! rule and are reported as such, and rows written before the chain existed are reported as
//! unchained, never as valid. A run that began after the key came into use (the key's anchor)
//! and carries neither is reported broken.

use std::path::Path;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::secret::new_secret;

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

/// Feeds `row` of run `run_id`, following `prev`, to `update` under `label`. Every field is
/// length-prefixed, so no two different rows can be written as the same bytes.
fn encode_row(
    mut update: impl FnMut(&[u8]),
    label: &[u8],
    run_id: &str,
    prev: &str,
    row: &ChainRow,
) {
    let mut field = |bytes: &[u8]| {
        update(&(bytes.len() as u64).to_be_bytes());
        update(bytes);
    };
    field(label);
    field(run_id.as_bytes());
    field(prev.as_bytes());
    field(&row.sequence.to_be_bytes());
    field(row.kind.as_bytes());
    field(optional(row.round).as_bytes());
    field(optional(row.duration_ms).as_bytes());
    field(row.payload.as_bytes());
    field(&row.created_at_ms.to_be_bytes());
}

/// The plain SHA-256 of a row of run `run_id` that follows `prev_hash`: the chain's first form,
/// kept to verify runs written before the audit key.
pub fn row_hash(run_id: &str, prev_hash: &str, row: &ChainRow) -> String {
    let mut hasher = Sha256::new();
    encode_row(
        |bytes| hasher.update(bytes),
        b"nrllm-event-v1",
        run_id,
        prev_hash,
        row,
    );
    const_hex::encode(hasher.finalize())
}

fn optional(value: Option<i64>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

/// The secret the log's MACs are keyed by: 32 bytes that never enter the database. The store
/// finds it in a file beside an SQLite database (created with mode 0600 on first open), or is
/// given it ([`crate::db::DbOptions::audit_key`]); instances sharing a Postgres database share
/// it by setting. Its id (a MAC of a fixed text, so it says nothing of the key) is stored with
/// each run, so that a run checked with another key is told apart from a tampered one.
#[derive(Clone)]
pub struct AuditKey {
    /// HMAC-SHA-256 with the key already mixed in: each MAC starts from a copy.
    keyed: Arc<Hmac<Sha256>>,
    id: Arc<str>,
}

impl std::fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuditKey({})", self.id)
    }
}

/// Why an audit key could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum AuditKeyError {
    #[error("the audit key must be 64 hexadecimal characters (32 bytes), e.g. from `openssl rand -hex 32`")]
    Malformed,
    #[error("cannot read the audit key file `{path}`: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot create the audit key file `{path}`: {source}")]
    Create {
        path: String,
        source: std::io::Error,
    },
    #[error("the audit key file `{path}` does not hold a key: it must be 64 hexadecimal characters (32 bytes)")]
    NotAKey { path: String },
}

/// Bytes in an audit key.
const KEY_BYTES: usize = 32;

impl AuditKey {
    /// The key made of `bytes`.
    pub fn from_bytes(bytes: &[u8; KEY_BYTES]) -> AuditKey {
        let keyed = Hmac::<Sha256>::new_from_slice(bytes).expect("HMAC takes any key length");
        let mut id = keyed.clone();
        id.update(b"nrllm-audit-key-id");
        let id = const_hex::encode(&id.finalize().into_bytes()[..8]);
        AuditKey {
            keyed: Arc::new(keyed),
            id: Arc::from(id),
        }
    }

    /// The key written as 64 hexadecimal characters (surrounding white space ignored).
    pub fn from_hex(text: &str) -> Result<AuditKey, AuditKeyError> {
        let mut bytes = [0u8; KEY_BYTES];
        const_hex::decode_to_slice(text.trim(), &mut bytes)
            .map_err(|_| AuditKeyError::Malformed)?;
        Ok(AuditKey::from_bytes(&bytes))
    }

    /// A new random key, kept nowhere (a database that lives no longer than its process).
    pub fn generate() -> AuditKey {
        AuditKey::from_hex(&new_secret()).expect("a fresh secret is 32 bytes of hex")
    }

    /// The key in the file at `path`, made there (mode 0600, its folder too) if there is none,
    /// and whether it was made now. Two processes opening the same new file agree on one key.
    pub fn load_or_create(path: &Path) -> Result<(AuditKey, bool), AuditKeyError> {
        let shown = path.display().to_string();
        let read = |path: &Path| match std::fs::read_to_string(path) {
            Ok(text) => AuditKey::from_hex(&text)
                .map(Some)
                .map_err(|_| AuditKeyError::NotAKey {
                    path: shown.clone(),
                }),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(AuditKeyError::Read {
                path: shown.clone(),
                source,
            }),
        };
        if let Some(key) = read(path)? {
            return Ok((key, false));
        }
        let create = |source| AuditKeyError::Create {
            path: shown.clone(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(create)?;
        }
        // Written under a name of its own and linked into place: the file is never seen half
        // written, and of two processes racing, the one that links second reads the first's.
        let draft = path.with_extension(format!("new-{}", std::process::id()));
        let written = write_private(&draft, &new_secret());
        let linked = written.and_then(|()| {
            std::fs::hard_link(&draft, path).or_else(|err| match err.kind() {
                std::io::ErrorKind::AlreadyExists => Err(err),
                // A file system without hard links: moved into place instead.
                _ if !path.exists() => std::fs::rename(&draft, path),
                _ => Err(err),
            })
        });
        let _ = std::fs::remove_file(&draft);
        match linked {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err(create(err)),
        }
        match read(path)? {
            Some(key) => Ok((key, true)),
            None => Err(AuditKeyError::NotAKey { path: shown }),
        }
    }

    /// The key's id, as runs store it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The MAC of `parts`, each length-prefixed.
    fn mac(&self, parts: &[&[u8]]) -> String {
        let mut mac = Hmac::clone(&self.keyed);
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        const_hex::encode(mac.finalize().into_bytes())
    }

    /// The MAC of a row of run `run_id` that follows `prev`.
    pub fn row_mac(&self, run_id: &str, prev: &str, row: &ChainRow) -> String {
        let mut mac = Hmac::clone(&self.keyed);
        encode_row(
            |bytes| mac.update(bytes),
            b"nrllm-event-v2",
            run_id,
            prev,
            row,
        );
        const_hex::encode(mac.finalize().into_bytes())
    }

    /// The keyed head of run `run_id` whose log ends at `last_sequence` with MAC `last_mac`.
    pub fn head_mac(&self, run_id: &str, last_sequence: i64, last_mac: &str) -> String {
        self.mac(&[
            b"nrllm-head-v2",
            run_id.as_bytes(),
            &last_sequence.to_be_bytes(),
            last_mac.as_bytes(),
        ])
    }

    /// The MAC of the anchor that says this key came into use at `since_ms`.
    pub fn anchor_mac(&self, since_ms: i64) -> String {
        self.mac(&[
            b"nrllm-anchor-v2",
            self.id.as_bytes(),
            &since_ms.to_be_bytes(),
        ])
    }
}

/// Writes `text` to a new file at `path` that only its owner may read.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(text.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

/// What the store keeps of a run beside its rows, for verifying them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSeal {
    /// The id of the key the run's log is keyed by (none: an older form).
    pub key_id: Option<String>,
    /// The keyed head: its last sequence and last MAC under that key.
    pub head: Option<String>,
    /// The run's last sequence, as the run row says.
    pub last_sequence: i64,
    /// When the run began, from its id (a UUIDv7 carries its creation time), if it says.
    pub began_ms: Option<i64>,
}

/// What verifying one run's log found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum ChainVerdict {
    /// Every row holds its MAC under this instance's key, up to the run's keyed head.
    Verified { events: usize },
    /// Every row chains to the one before by plain SHA-256: the form before the audit key, which
    /// shows accidents but not a writer who recomputes the hashes.
    Unkeyed { events: usize },
    /// The first row that does not hold: its sequence, and why.
    Broken { sequence: i64, reason: String },
    /// The log ends before the run's last sequence (rows were deleted from its end).
    Truncated { last: i64, expected: i64 },
    /// The log ends at `last`, but the run's keyed head says otherwise: rows were deleted from
    /// its end and the run's last sequence lowered to match, or the head was rewritten.
    HeadMismatch { last: i64 },
    /// The run is keyed by another key than this instance's: nothing can be said of it here.
    OtherKey { key_id: String, ours: String },
    /// Rows written before the log was chained (an older version); nothing to verify them by.
    Unchained { events: usize },
}

impl ChainVerdict {
    /// The log holds under this instance's key.
    pub fn is_verified(&self) -> bool {
        matches!(self, ChainVerdict::Verified { .. })
    }

    /// The log shows tampering (or a key that is not this instance's): `verify` fails.
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            ChainVerdict::Broken { .. }
                | ChainVerdict::Truncated { .. }
                | ChainVerdict::HeadMismatch { .. }
                | ChainVerdict::OtherKey { .. }
        )
    }

    /// One line for an operator.
    pub fn describe(&self) -> String {
        match self {
            ChainVerdict::Verified { events } => format!("log verified ({events} steps)"),
            ChainVerdict::Unkeyed { events } => format!(
                "log chained without the audit key ({events} steps, written before the key; \
                 checked by the older, unkeyed rule)"
            ),
            ChainVerdict::Broken { sequence, reason } => {
                format!("log broken at step {sequence}: {reason}")
            }
            ChainVerdict::Truncated { last, expected } => {
                format!("log incomplete: it ends at step {last}, the run's last step is {expected}")
            }
            ChainVerdict::HeadMismatch { last } => format!(
                "log incomplete: it ends at step {last}, but the run's keyed head does not; \
                 steps were removed from its end"
            ),
            ChainVerdict::OtherKey { key_id, ours } => format!(
                "log keyed by another audit key (id {key_id}; this instance's key is {ours}): \
                 it cannot be checked here"
            ),
            ChainVerdict::Unchained { events } => {
                format!("log not chained ({events} steps written before the log was chained)")
            }
        }
    }
}

/// Checks a run's rows, in sequence order, against what the run keeps of them (`seal`), with
/// `key`; `since_ms` is when `key` came into use here (its anchor), if known.
pub fn verify(
    key: &AuditKey,
    since_ms: Option<i64>,
    run_id: &str,
    rows: &[ChainRow],
    seal: &RunSeal,
) -> ChainVerdict {
    let Some(key_id) = &seal.key_id else {
        if rows.is_empty() && seal.last_sequence == 0 {
            return ChainVerdict::Verified { events: 0 };
        }
        let began_after_key =
            matches!((since_ms, seal.began_ms), (Some(since), Some(began)) if began >= since);
        if began_after_key {
            return ChainVerdict::Broken {
                sequence: rows.first().map_or(1, |row| row.sequence),
                reason: "the run began after the audit key came into use, yet its log carries \
                         no keyed MAC"
                    .into(),
            };
        }
        return verify_unkeyed(run_id, rows, seal.last_sequence);
    };
    if key_id.as_str() != key.id() {
        return ChainVerdict::OtherKey {
            key_id: key_id.clone(),
            ours: key.id().to_owned(),
        };
    }
    let keyed = Rule {
        missing: "it carries no MAC",
        changed: "its content was changed after it was written, or it was copied from another run",
    };
    let mac = |prev: &str, row: &ChainRow| key.row_mac(run_id, prev, row);
    let (last, prev) = match walk(rows, 0, seal.last_sequence, keyed, mac) {
        Ok(end) => end,
        Err(verdict) => return verdict,
    };
    if seal.head.as_deref() != Some(key.head_mac(run_id, last, &prev).as_str()) {
        return ChainVerdict::HeadMismatch { last };
    }
    ChainVerdict::Verified { events: rows.len() }
}

/// The older rule: rows without a hash at the start of the log were written before the log was
/// chained; the chain of plain SHA-256 starts after them.
fn verify_unkeyed(run_id: &str, rows: &[ChainRow], last_sequence: i64) -> ChainVerdict {
    let unchained = rows.iter().take_while(|row| row.hash.is_none()).count();
    let plain = Rule {
        missing: "it carries no hash",
        changed: "its content was changed after it was written",
    };
    let hash = |prev: &str, row: &ChainRow| row_hash(run_id, prev, row);
    match walk(rows, unchained, last_sequence, plain, hash) {
        Err(verdict) => verdict,
        Ok(_) if unchained > 0 => ChainVerdict::Unchained { events: unchained },
        Ok(_) => ChainVerdict::Unkeyed { events: rows.len() },
    }
}

/// What a row is told under one form of the chain when it lacks a MAC (or hash), or holds another.
struct Rule {
    missing: &'static str,
    changed: &'static str,
}

/// Walks `rows` in order, the first `unchained` only counted: each must be the next sequence and
/// hold `mac` of itself given the one before (said as `rule` says), and the log must reach
/// `last_sequence`. Its last sequence and last MAC, or the verdict on the first row (or end)
/// that does not hold.
fn walk(
    rows: &[ChainRow],
    unchained: usize,
    last_sequence: i64,
    rule: Rule,
    mac: impl Fn(&str, &ChainRow) -> String,
) -> Result<(i64, String), ChainVerdict> {
    let mut prev = GENESIS.to_owned();
    for (expected, (index, row)) in (1..).zip(rows.iter().enumerate()) {
        let broken = |reason: &str| ChainVerdict::Broken {
            sequence: row.sequence,
            reason: reason.to_owned(),
        };
        if row.sequence != expected {
            return Err(broken("a step is missing before it"));
        }
        if index < unchained {
            continue;
        }
        let (Some(stored_prev), Some(stored)) = (&row.prev_hash, &row.hash) else {
            return Err(broken(rule.missing));
        };
        if *stored_prev != prev {
            return Err(broken("it does not follow the step before it"));
        }
        if *stored != mac(&prev, row) {
            return Err(broken(rule.changed));
        }
        prev = stored.clone();
    }
    let last = rows.last().map_or(0, |row| row.sequence);
    if last < last_sequence {
        return Err(ChainVerdict::Truncated {
            last,
            expected: last_sequence,
        });
    }
    Ok((last, prev))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(sequence: i64) -> ChainRow {
        ChainRow {
            sequence,
            kind: "tool".into(),
            round: Some(1),
            duration_ms: None,
            payload: format!("{{\"n\":{sequence}}}"),
            created_at_ms: 1000 + sequence,
            prev_hash: None,
            hash: None,
        }
    }

    /// Chains `rows` by `mac` (each row's MAC given what it follows); the last MAC.
    fn chained(rows: &mut [ChainRow], mac: impl Fn(&str, &ChainRow) -> String) -> String {
        let mut prev = GENESIS.to_owned();
        for row in rows.iter_mut() {
            let hash = mac(&prev, row);
            row.prev_hash = Some(std::mem::replace(&mut prev, hash.clone()));
            row.hash = Some(hash);
        }
        prev
    }

    fn keyed(key: &AuditKey, run_id: &str, n: i64) -> (Vec<ChainRow>, RunSeal) {
        let mut rows: Vec<_> = (1..=n).map(row).collect();
        let last = chained(&mut rows, |prev, row| key.row_mac(run_id, prev, row));
        let seal = RunSeal {
            key_id: Some(key.id().to_owned()),
            head: Some(key.head_mac(run_id, n, &last)),
            last_sequence: n,
            began_ms: Some(5_000),
        };
        (rows, seal)
    }

    fn key() -> AuditKey {
        AuditKey::from_bytes(&[7; 32])
    }

    #[test]
    fn an_intact_keyed_log_verifies_and_is_bound_to_its_run_and_key() {
        let key = key();
        let (rows, seal) = keyed(&key, "r", 5);
        assert_eq!(
            verify(&key, Some(1_000), "r", &rows, &seal),
            ChainVerdict::Verified { events: 5 }
        );
        assert!(verify(&key, None, "other run", &rows, &seal).is_failure());
        let other = AuditKey::from_bytes(&[8; 32]);
        assert_ne!(other.id(), key.id());
        assert_eq!(
            verify(&other, None, "r", &rows, &seal),
            ChainVerdict::OtherKey {
                key_id: key.id().to_owned(),
                ours: other.id().to_owned()
            }
        );
        assert_eq!(AuditKey::from_hex(&"07".repeat(32)).unwrap().id(), key.id());
        assert!(AuditKey::from_hex("07").is_err());
        assert!(AuditKey::from_hex(&"zz".repeat(32)).is_err());
        assert!(
            !format!("{key:?}").contains("0707"),
            "the key is never printed"
        );
    }

    #[test]
    fn an_edit_is_found_at_its_row_even_when_every_later_hash_is_recomputed_without_the_key() {
        let key = key();
        let (rows, seal) = keyed(&key, "r", 5);
        let mut edited = rows.clone();
        edited[2].payload = "{\"n\":99}".into();
        assert!(matches!(
            verify(&key, None, "r", &edited, &seal),
            ChainVerdict::Broken { sequence: 3, .. }
        ));
        // The writer recomputes every MAC from the edited row on, with a key of their own (or
        // plain SHA-256): the first recomputed row does not hold under the real key.
        let guess = AuditKey::from_bytes(&[1; 32]);
        let mut forged = edited.clone();
        let mut prev = forged[1].hash.clone().unwrap();
        for row in &mut forged[2..] {
            let hash = guess.row_mac("r", &prev, row);
            row.prev_hash = Some(std::mem::replace(&mut prev, hash.clone()));
            row.hash = Some(hash);
        }
        let mut forged_seal = seal.clone();
        forged_seal.head = Some(guess.head_mac("r", 5, &prev));
        assert_eq!(
            verify(&key, None, "r", &forged, &forged_seal),
            ChainVerdict::Broken {
                sequence: 3,
                reason: "its content was changed after it was written, or it was copied from \
                         another run"
                    .into()
            }
        );
    }

    #[test]
    fn deleted_tail_rows_are_found_with_or_without_the_last_sequence_lowered() {
        let key = key();
        let (rows, seal) = keyed(&key, "r", 5);
        assert_eq!(
            verify(&key, None, "r", &rows[..3], &seal),
            ChainVerdict::Truncated {
                last: 3,
                expected: 5
            }
        );
        let lowered = RunSeal {
            last_sequence: 3,
            ..seal.clone()
        };
        assert_eq!(
            verify(&key, None, "r", &rows[..3], &lowered),
            ChainVerdict::HeadMismatch { last: 3 }
        );
        let headless = RunSeal { head: None, ..seal };
        assert!(verify(&key, None, "r", &rows, &headless).is_failure());
    }

    #[test]
    fn nulled_macs_and_a_row_from_another_run_are_found() {
        let key = key();
        let (rows, seal) = keyed(&key, "r", 4);
        let mut nulled = rows.clone();
        for row in &mut nulled {
            row.hash = None;
            row.prev_hash = None;
        }
        assert_eq!(
            verify(&key, None, "r", &nulled, &seal),
            ChainVerdict::Broken {
                sequence: 1,
                reason: "it carries no MAC".into()
            }
        );
        // Nulling the run's key id and head too: the run began after the key's anchor.
        let downgraded = RunSeal {
            key_id: None,
            head: None,
            ..seal.clone()
        };
        assert!(matches!(
            verify(&key, Some(4_000), "r", &nulled, &downgraded),
            ChainVerdict::Broken { sequence: 1, .. }
        ));

        let (other, _) = keyed(&key, "s", 4);
        let mut copied = rows.clone();
        copied[1] = other[1].clone();
        assert!(matches!(
            verify(&key, None, "r", &copied, &seal),
            ChainVerdict::Broken { sequence: 2, .. }
        ));
    }

    #[test]
    fn older_forms_verify_by_their_own_rule_and_say_so() {
        let key = key();
        let mut rows: Vec<_> = (1..=4).map(row).collect();
        chained(&mut rows, |prev, row| row_hash("r", prev, row));
        let seal = RunSeal {
            key_id: None,
            head: None,
            last_sequence: 4,
            began_ms: Some(1_000),
        };
        assert_eq!(
            verify(&key, Some(4_000), "r", &rows, &seal),
            ChainVerdict::Unkeyed { events: 4 }
        );
        let mut edited = rows.clone();
        edited[0].kind = "approval_decided".into();
        assert!(matches!(
            verify(&key, Some(4_000), "r", &edited, &seal),
            ChainVerdict::Broken { sequence: 1, .. }
        ));
        let mut removed = rows.clone();
        removed.remove(1);
        assert!(matches!(
            verify(&key, None, "r", &removed, &seal),
            ChainVerdict::Broken { sequence: 3, .. }
        ));
        let bare: Vec<_> = (1..=4).map(row).collect();
        assert_eq!(
            verify(&key, None, "r", &bare, &seal),
            ChainVerdict::Unchained { events: 4 }
        );
        let empty = RunSeal {
            last_sequence: 0,
            ..seal
        };
        assert_eq!(
            verify(&key, None, "r", &[], &empty),
            ChainVerdict::Verified { events: 0 }
        );
    }

    #[test]
    fn a_key_file_is_made_private_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("runs.db.audit-key");
        let (made, created) = AuditKey::load_or_create(&path).unwrap();
        assert!(created);
        let (read, created) = AuditKey::load_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(made.id(), read.id());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "not a key").unwrap();
        let err = AuditKey::load_or_create(&path).unwrap_err();
        assert!(err.to_string().contains("does not hold a key"), "{err}");
    }
}
