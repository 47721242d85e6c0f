//! Decisions offered away from the app's pages: a signed link in a mail sent to one person, a
//! button in a chat channel that whoever may decide can press. An offer is made for one turn (the
//! digest it carries), says what it decides (approve or deny the whole turn), when it stops
//! counting, and, for a link, the one person it was sent to. It moves a run like any button: the
//! claim asks the authority ([`crate::authority::Act::Offered`]: the caller's role, four-eyes,
//! and that the caller is the offer's recipient), checks the digest, and exactly one claim wins.
//!
//! Who signed the offer and whether it was used before are the web layer's to check (it holds
//! the key and the record of uses); whoever presses it never chooses its recipient or its verdict
//! beyond what was signed.

use crate::submit::Submission;
use crate::turn_verdict::BulkVerdict;

/// Where an offer was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// A link in a mail to one person.
    Email,
    /// A button in a chat channel.
    Slack,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Email => "email",
            Channel::Slack => "slack",
        }
    }

    pub fn parse(text: &str) -> Option<Channel> {
        [Channel::Email, Channel::Slack]
            .into_iter()
            .find(|channel| channel.as_str() == text)
    }
}

/// A decision on a run's whole turn, offered through `channel`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    pub channel: Channel,
    pub verdict: BulkVerdict,
    /// The only person who may use it (a mail's recipient); `None`: anyone the authority lets
    /// decide the run (a channel's button, pressed by a mapped user).
    pub recipient: Option<String>,
    /// From this instant on it decides nothing.
    pub expires_at_ms: i64,
}

impl Offer {
    /// Whether it decides nothing any more at `now_ms`.
    pub fn has_expired(&self, now_ms: i64) -> bool {
        self.expires_at_ms <= now_ms
    }

    /// The form the offer amounts to: the turn's own button for the same verdict, a denial
    /// saying where it came from (the model reads it).
    pub fn submission(&self) -> Submission {
        let reason = format!("Denied from {}.", self.channel.label());
        self.verdict.submission(Some(&reason))
    }
}

impl Channel {
    /// How a sentence names it.
    pub fn label(self) -> &'static str {
        match self {
            Channel::Email => "an email link",
            Channel::Slack => "Slack",
        }
    }
}

/// How long a decision link counts when its turn has no approval deadline.
pub const MAX_OFFER_MS: i64 = 7 * 24 * 3_600_000;

/// When an offer made at `now_ms` for a turn with `deadline_ms` stops counting: with the turn's
/// deadline, and never later than seven days on.
pub fn offer_expiry(now_ms: i64, deadline_ms: Option<i64>) -> i64 {
    let longest = now_ms.saturating_add(MAX_OFFER_MS);
    deadline_ms.map_or(longest, |deadline| deadline.min(longest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offer_ends_with_its_turn_and_never_after_seven_days() {
        assert_eq!(offer_expiry(1_000, None), 1_000 + MAX_OFFER_MS);
        assert_eq!(offer_expiry(1_000, Some(5_000)), 5_000);
        assert_eq!(
            offer_expiry(1_000, Some(i64::MAX)),
            1_000 + MAX_OFFER_MS,
            "a far deadline is cut to seven days"
        );
    }

    #[test]
    fn a_denial_says_where_it_came_from_and_an_approval_says_nothing() {
        let offer = |verdict| Offer {
            channel: Channel::Slack,
            verdict,
            recipient: None,
            expires_at_ms: 0,
        };
        let denied = offer(BulkVerdict::DenyAll).submission();
        assert_eq!(denied.decision, "deny_all");
        assert_eq!(denied.reason.as_deref(), Some("Denied from Slack."));
        let approved = offer(BulkVerdict::ApproveAll).submission();
        assert_eq!(approved.decision, "approve_all");
        assert_eq!(approved.reason, None);
        for channel in [Channel::Email, Channel::Slack] {
            assert_eq!(Channel::parse(channel.as_str()), Some(channel));
        }
        assert_eq!(Channel::parse("pigeon"), None);
    }
}
