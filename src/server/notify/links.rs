//! Decision links: the *Approve* and *Deny* of a mail. A link's token names the run, the turn's
//! digest, the one person it was sent to, the verdict and when it expires, and is signed with the
//! server's link key (HMAC-SHA256, shared by every instance through the database): nobody can
//! make one, or change what one says, without the key. It travels in the query of `/decide`; the
//! page it opens never decides on a GET (mail scanners fetch links) and asks for one confirming
//! press. Each link decides once (its id is recorded when it does), and the claim it makes goes
//! through the core's authority like any button: the recipient alone may use it.

use base64::Engine as _;
use nrllm_core::moves::BulkVerdict;
use nrllm_core::offer::{Channel, Offer};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The longest token read (a real one is about 400 characters).
pub const MAX_TOKEN_CHARS: usize = 2_000;

/// What a link says, signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// The link's own id (each decides once).
    pub id: String,
    pub run: Uuid,
    pub digest: String,
    /// The user it was sent to.
    pub to: String,
    /// `approve_all` or `deny_all`.
    pub verdict: String,
    pub expires_at_ms: i64,
}

impl Link {
    /// A new link for `run`'s turn `digest`, sent to `to`.
    pub fn new(
        run: Uuid,
        digest: &str,
        to: &str,
        verdict: BulkVerdict,
        expires_at_ms: i64,
    ) -> Link {
        Link {
            id: nrllm_store::accounts::new_secret()[..32].to_owned(),
            run,
            digest: digest.to_owned(),
            to: to.to_owned(),
            verdict: verdict.button().to_owned(),
            expires_at_ms,
        }
    }

    /// The offer the link makes, for the core's claim.
    pub fn offer(&self) -> Option<Offer> {
        Some(Offer {
            channel: Channel::Email,
            verdict: BulkVerdict::parse(&self.verdict)?,
            recipient: Some(self.to.clone()),
            expires_at_ms: self.expires_at_ms,
        })
    }
}

/// Why a token was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("This link is not one this server made, or it was cut short: open the whole link from the mail, or decide on the run's page.")]
    Unreadable,
}

/// Signs and reads links.
#[derive(Clone)]
pub struct LinkKey(Vec<u8>);

impl LinkKey {
    pub fn new(key: &[u8]) -> LinkKey {
        LinkKey(key.to_vec())
    }

    /// The token of `link`: its JSON in URL-safe base64, a dot, the signature in hex.
    pub fn sign(&self, link: &Link) -> String {
        let body = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(link).expect("a link is plain data"));
        let signature = crate::server::auth::hmac_hex(&self.0, &body);
        format!("{body}.{signature}")
    }

    /// The link `token` says, if this key signed it (expiry and use are checked where it is
    /// used: the page says so rather than refusing to show).
    pub fn read(&self, token: &str) -> Result<Link, LinkError> {
        if token.len() > MAX_TOKEN_CHARS {
            return Err(LinkError::Unreadable);
        }
        let (body, signature) = token.trim().split_once('.').ok_or(LinkError::Unreadable)?;
        if !crate::server::auth::banner_signed(&self.0, body, Some(signature)) {
            return Err(LinkError::Unreadable);
        }
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| LinkError::Unreadable)?;
        serde_json::from_slice(&json).map_err(|_| LinkError::Unreadable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link() -> Link {
        Link::new(Uuid::new_v4(), "d1", "alice", BulkVerdict::ApproveAll, 99)
    }

    #[test]
    fn a_signed_link_reads_back_and_makes_its_recipient_s_offer() {
        let key = LinkKey::new(b"key");
        let link = link();
        let token = key.sign(&link);
        assert!(token.len() < 600, "{}", token.len());
        assert!(token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)));
        assert_eq!(key.read(&token), Ok(link.clone()));
        let offer = link.offer().unwrap();
        assert_eq!(offer.recipient.as_deref(), Some("alice"));
        assert_eq!(offer.verdict, BulkVerdict::ApproveAll);
        assert_eq!(offer.expires_at_ms, 99);
    }

    #[test]
    fn a_changed_or_foreign_or_cut_token_is_refused() {
        let key = LinkKey::new(b"key");
        let token = key.sign(&link());
        // Another recipient written into the body, the signature kept.
        let (body, signature) = token.split_once('.').unwrap();
        let mut forged = link();
        forged.to = "mallory".into();
        let forged_body = key.sign(&forged);
        let forged_body = forged_body.split_once('.').unwrap().0;
        assert_eq!(
            key.read(&format!("{forged_body}.{signature}")),
            Err(LinkError::Unreadable)
        );
        assert_eq!(
            LinkKey::new(b"other").read(&token),
            Err(LinkError::Unreadable)
        );
        assert_eq!(key.read(body), Err(LinkError::Unreadable));
        assert_eq!(
            key.read(&token[..token.len() - 2]),
            Err(LinkError::Unreadable)
        );
        assert_eq!(
            key.read(&"a".repeat(MAX_TOKEN_CHARS + 1)),
            Err(LinkError::Unreadable)
        );
        let mut bad_verdict = link();
        bad_verdict.verdict = "respond".into();
        assert_eq!(bad_verdict.offer(), None);
    }
}
