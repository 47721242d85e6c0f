//! Limits on logins, run starts and anonymous bodies; tokens shown once.

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::num::NonZeroU32;

/// Rate limits: logins per client address and per user name from one address, run starts per
/// user. Nothing an unauthenticated caller sends keys a limiter unbounded: names are cut to
/// [`LOGIN_NAME_CHARS`] first, the address is checked first, and idle keys are forgotten
/// ([`Limits::forget_idle`], every [`FORGET_IDLE_EVERY`]).
pub struct Limits {
    pub run_starts: DefaultKeyedRateLimiter<String>,
    pub run_starts_per_minute: u32,
    /// By the name tried and the address it came from: failures from elsewhere never lock a
    /// user out.
    pub(super) logins_per_user: DefaultKeyedRateLimiter<(String, Option<std::net::IpAddr>)>,
    pub(super) logins_per_address: DefaultKeyedRateLimiter<std::net::IpAddr>,
}

/// The longest login name kept (a user's name is at most 64 characters; a longer one matches
/// nobody): what keys a limiter and reaches the log.
pub const LOGIN_NAME_CHARS: usize = 64;

/// How often the limiters forget keys whose limits have refilled.
pub const FORGET_IDLE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// A login name as the server keeps it: trimmed, and cut to [`LOGIN_NAME_CHARS`] characters
/// (one character more, so that a longer name never equals a real one).
pub fn login_name(name: &str) -> String {
    name.trim().chars().take(LOGIN_NAME_CHARS + 1).collect()
}

/// The largest body a request of someone not logged in may carry (a login form is far smaller).
pub const ANONYMOUS_BODY_BYTES: usize = 16 * 1024;

/// Login attempts one user name, or one client address, may make per minute.
pub const LOGINS_PER_MINUTE_PER_USER: u32 = 5;

pub const LOGINS_PER_MINUTE_PER_ADDRESS: u32 = 20;

impl Limits {
    pub fn new(run_starts_per_minute: u32) -> Limits {
        let per_minute = |n: u32| Quota::per_minute(NonZeroU32::new(n.max(1)).expect("at least 1"));
        Limits {
            run_starts: RateLimiter::keyed(per_minute(run_starts_per_minute)),
            run_starts_per_minute,
            logins_per_user: RateLimiter::keyed(per_minute(LOGINS_PER_MINUTE_PER_USER)),
            logins_per_address: RateLimiter::keyed(per_minute(LOGINS_PER_MINUTE_PER_ADDRESS)),
        }
    }

    /// Whether a login attempt for `name` (as [`login_name`] keeps it) from `peer` may go on:
    /// the address's limit first, then the name's from that address.
    pub fn login_allowed(&self, name: &str, peer: Option<std::net::IpAddr>) -> bool {
        if peer.is_some_and(|ip| self.logins_per_address.check_key(&ip).is_err()) {
            return false;
        }
        self.logins_per_user
            .check_key(&(name.to_lowercase(), peer))
            .is_ok()
    }

    /// Forgets keys whose limits have refilled, so names tried by a guesser do not pile up.
    pub fn forget_idle(&self) {
        self.run_starts.retain_recent();
        self.logins_per_user.retain_recent();
        self.logins_per_address.retain_recent();
    }
}

/// API tokens just created, kept two minutes in memory so that the admin page can show each to
/// the admin who created it (the database keeps only its hash). The page's address names one by
/// a random id, never by the token.
#[derive(Default)]
pub struct ShownTokens {
    pub(super) shown:
        std::sync::Mutex<std::collections::HashMap<String, (String, String, String, i64)>>,
}

pub(super) const SHOWN_FOR_MS: i64 = 2 * 60 * 1000;

impl ShownTokens {
    /// Keeps `token` (named `name`) for `admin`; the id to show it by.
    pub fn put(&self, admin: &str, name: &str, token: &str) -> String {
        let id = nrllm_store::accounts::new_secret();
        let now = nrllm_core::clock::now_ms();
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        shown.retain(|_, (_, _, _, at)| now - *at < SHOWN_FOR_MS);
        shown.insert(
            id.clone(),
            (admin.to_owned(), name.to_owned(), token.to_owned(), now),
        );
        id
    }

    /// The token's name and the token, if `id` is one `admin` created in the last two minutes.
    pub fn get(&self, id: &str, admin: &str) -> Option<(String, String)> {
        let now = nrllm_core::clock::now_ms();
        let shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        shown
            .get(id)
            .filter(|(by, _, _, at)| by == admin && now - *at < SHOWN_FOR_MS)
            .map(|(_, name, token, _)| (name.clone(), token.clone()))
    }
}
