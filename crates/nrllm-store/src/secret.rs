//! Random secrets (session ids, tokens, login links, the audit key) and their stored form.

use sha2::{Digest, Sha256};

/// A fresh random secret: 32 bytes as 64 hex characters.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    const_hex::encode(bytes)
}

/// The stored form of a secret.
pub fn secret_hash(secret: &str) -> String {
    const_hex::encode(Sha256::digest(secret.as_bytes()))
}
