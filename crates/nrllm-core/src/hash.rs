//! Short content hashes: SHA-256 over parts separated by a NUL byte, as hex. Used where a value
//! must say "this is still exactly what the operator saw" (a preview's basis, a turn's digest).

use sha2::{Digest, Sha256};

/// The first `bytes` bytes of SHA-256 over `parts` (each followed by a NUL byte), as lowercase hex.
pub fn short_hash<'a>(parts: impl IntoIterator<Item = &'a [u8]>, bytes: usize) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
        hasher.update([0]);
    }
    const_hex::encode(&hasher.finalize()[..bytes.min(32)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_separated_so_moving_a_boundary_changes_the_hash() {
        let a = short_hash([b"ab".as_slice(), b"c".as_slice()], 8);
        let b = short_hash([b"a".as_slice(), b"bc".as_slice()], 8);
        assert_ne!(a, b);
        assert_eq!(a.len(), 16);
        assert_eq!(a, short_hash([b"ab".as_slice(), b"c".as_slice()], 8));
    }
}
