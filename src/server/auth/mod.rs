//! Who is asking, and whether the request may change anything. One middleware runs before every
//! route:
//! - the `Host` must be one of `allowed_hosts` (a DNS-rebinding page reaches the server under a
//!   foreign name; it gets 403 and reads nothing);
//! - the caller is the user of the session cookie (HttpOnly, SameSite=Strict) or the API token of
//!   an `Authorization: Bearer` header; anybody else may only see the login pages (a page asks to
//!   log in, an API call gets 401);
//! - a request that changes state (any method but GET/HEAD/OPTIONS) from a browser must come from
//!   this site (`Sec-Fetch-Site`, `Origin`) and carry the CSRF token: the `csrf` field of a form,
//!   or the `x-csrf-token` header, equal to the HttpOnly `nrllm_csrf` cookie (double submit,
//!   rotated at every login). Requests with an API token, and JSON requests without a session
//!   cookie (a script logging in), carry no ambient credential and skip the token.
//!
//! Every refusal is 401 or 403 with a message saying what to do, and is logged. Roles are checked
//! where the action is ([`crate::server::request::require`]).

mod bootstrap;
mod checks;
mod guard;
mod limits;
mod signing;
#[cfg(test)]
mod tests;

pub use bootstrap::*;
pub use checks::*;
pub use guard::*;
pub use limits::*;
pub use signing::*;
