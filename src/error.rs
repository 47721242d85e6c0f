//! The error every server function returns. It carries only text that is safe to show an operator;
//! internal causes (SQL, I/O) are logged on the server by [`AppError::internal`] and never sent.

use leptos::server_fn::codec::JsonEncoding;
use leptos::server_fn::error::{FromServerFnError, ServerFnErrorErr};
use leptos::server_fn::Encodes;
use serde::{Deserialize, Serialize};

/// A failure a browser or API client may see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum AppError {
    /// The request was malformed; the message names the field.
    #[error("{0}")]
    BadRequest(String),
    /// One field's value is not acceptable; shown next to that field.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// The thing asked for does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request lost a race or came too late (for example, a run already decided).
    #[error("{0}")]
    Conflict(String),
    /// Something failed on the server; the cause is in the server's log.
    #[error("Something went wrong on the server; the details are in the server log.")]
    Internal,
    /// The request or response could not be carried (network, encoding).
    #[error("The request could not be completed: {0}")]
    Transport(String),
    /// The server cannot take this now (it is shutting down); try again shortly.
    #[error("{0}")]
    Unavailable(String),
    /// Nobody is logged in (or the API token is missing).
    #[error("{0}")]
    Unauthorized(String),
    /// The caller may not do this (their role, or four-eyes); the message says why.
    #[error("{0}")]
    Forbidden(String),
    /// Too many requests of this kind in a short time; try again later.
    #[error("{0}")]
    TooManyRequests(String),
}

impl AppError {
    /// Logs `cause` on the server and returns the safe, generic error for the client.
    #[cfg(feature = "ssr")]
    pub fn internal(context: &str, cause: impl std::fmt::Display) -> AppError {
        tracing::error!(%cause, "{context}");
        AppError::Internal
    }

    /// A field's value is not acceptable.
    pub fn invalid(field: &str, message: impl Into<String>) -> AppError {
        AppError::Invalid {
            field: field.to_owned(),
            message: message.into(),
        }
    }

    /// The field this error is about, if it is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            AppError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }

    /// The HTTP status API clients get for this error.
    pub fn status(&self) -> http::StatusCode {
        match self {
            AppError::BadRequest(_) | AppError::Invalid { .. } => http::StatusCode::BAD_REQUEST,
            AppError::NotFound(_) => http::StatusCode::NOT_FOUND,
            AppError::Conflict(_) => http::StatusCode::CONFLICT,
            AppError::Internal => http::StatusCode::INTERNAL_SERVER_ERROR,
            AppError::Transport(_) => http::StatusCode::BAD_GATEWAY,
            AppError::Unavailable(_) => http::StatusCode::SERVICE_UNAVAILABLE,
            AppError::Unauthorized(_) => http::StatusCode::UNAUTHORIZED,
            AppError::Forbidden(_) => http::StatusCode::FORBIDDEN,
            AppError::TooManyRequests(_) => http::StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// The error as a form post's redirect carries it in its URL (`__err`; the server signs it
    /// on the way out): what [`AppError::from_url_query`] reads.
    pub fn to_url_query(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE
            .encode(serde_json::to_vec(self).unwrap_or_default())
    }

    /// The error a form post left in its redirect URL (`__err`), if any.
    pub fn from_url_query(encoded: &str) -> Option<AppError> {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::URL_SAFE
            .decode(encoded)
            .ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

impl FromServerFnError for AppError {
    type Encoder = JsonEncoding;

    /// Encodes the error for the response — the one place where every server function's error
    /// passes, so its HTTP status ([`AppError::status`]) is set here, on the server.
    fn ser(&self) -> leptos::server_fn::Bytes {
        #[cfg(feature = "ssr")]
        crate::server::accept::set_error_status(self.status());
        <JsonEncoding as Encodes<AppError>>::encode(self)
            .unwrap_or_else(|_| leptos::server_fn::Bytes::from_static(br#""Internal""#))
    }

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        match value {
            ServerFnErrorErr::Args(message)
            | ServerFnErrorErr::MissingArg(message)
            | ServerFnErrorErr::Deserialization(message) => {
                AppError::BadRequest(format!("The request is not valid: {message}"))
            }
            ServerFnErrorErr::Request(message) | ServerFnErrorErr::Response(message) => {
                AppError::Transport(message)
            }
            other => {
                #[cfg(feature = "ssr")]
                tracing::error!(cause = %other, "server function machinery failed");
                let _ = other;
                AppError::Internal
            }
        }
    }
}

/// The runtime's errors as a browser or API client sees them: each kind of failure maps to one
/// [`AppError`] (and so to one HTTP status) here, and nowhere else. Internal causes are logged.
#[cfg(feature = "ssr")]
mod from_runtime {
    use nrllm_core::authority::Refusal;
    use nrllm_core::decision::DecisionError;
    use nrllm_core::rules::RuleError;
    use nrllm_core::run_service::{ResumeError, RetryError, ServiceError};
    use nrllm_core::run_store::StoreError;

    use super::AppError;

    impl From<ResumeError> for AppError {
        fn from(err: ResumeError) -> AppError {
            match err {
                ResumeError::NotFound(id) => AppError::NotFound(format!("There is no run {id}.")),
                ResumeError::NotWaiting(_)
                | ResumeError::Expired(_)
                | ResumeError::OfferExpired(_)
                | ResumeError::Stale
                | ResumeError::TargetChanged(_)
                | ResumeError::NewerVersion(_)
                | ResumeError::StateCorrupted => AppError::Conflict(err.to_string()),
                ResumeError::InvalidDecision(DecisionError::EditNotJson {
                    call_id,
                    tool,
                    message,
                }) => AppError::invalid(
                    &format!("arguments of {tool} ({call_id})"),
                    format!("not valid JSON ({message})"),
                ),
                ResumeError::InvalidDecision(
                    DecisionError::NoQuestion
                    | DecisionError::UndecidedCalls { .. }
                    | DecisionError::WaitsForBudget
                    | DecisionError::WaitsForReply { .. }
                    | DecisionError::NoBudgetWait,
                ) => AppError::Conflict(err.to_string()),
                ResumeError::InvalidDecision(DecisionError::NotDeclinable) => {
                    AppError::invalid("action", err.to_string())
                }
                ResumeError::InvalidDecision(DecisionError::RaiseTooSmall { .. }) => {
                    AppError::invalid("raise_to", err.to_string())
                }
                ResumeError::InvalidDecision(DecisionError::WouldDiscard(_)) => {
                    AppError::BadRequest(err.to_string())
                }
                ResumeError::InvalidDecision(DecisionError::InvalidArguments {
                    call_id,
                    tool,
                    field,
                    message,
                }) => AppError::invalid(
                    &format!("arguments of {tool} ({call_id})"),
                    format!("field `{field}`: {message}"),
                ),
                ResumeError::InvalidDecision(
                    DecisionError::InvalidAnswer { field, message }
                    | DecisionError::InvalidField { field, message },
                ) => AppError::invalid(&field, message),
                ResumeError::InvalidDecision(other) => {
                    AppError::invalid("calls", other.to_string())
                }
                ResumeError::Unavailable(message) => AppError::Conflict(message),
                ResumeError::Refused(refusal) => AppError::from(refusal),
                // Where a caller has no better answer for it (the server functions that decide
                // answer it as accepted, with the count): nothing was claimed.
                ResumeError::Counted(_) => AppError::Conflict(err.to_string()),
                ResumeError::Store(store) => AppError::from(store),
            }
        }
    }

    impl From<RetryError> for AppError {
        fn from(err: RetryError) -> AppError {
            match err {
                RetryError::NotFound(id) => AppError::NotFound(format!("There is no run {id}.")),
                RetryError::NotRetryable(_) | RetryError::NoJournal => {
                    AppError::Conflict(err.to_string())
                }
                RetryError::Service(service) => AppError::from(service),
            }
        }
    }

    impl From<ServiceError> for AppError {
        fn from(err: ServiceError) -> AppError {
            match err {
                ServiceError::Configuration(message) => AppError::invalid("configuration", message),
                ServiceError::NotFound(message) => AppError::NotFound(message),
                ServiceError::InvalidRule(rule) => AppError::from(rule),
                ServiceError::Refused(refusal) => AppError::from(refusal),
                ServiceError::Store(store) => AppError::from(store),
            }
        }
    }

    impl From<RuleError> for AppError {
        fn from(RuleError::Invalid { field, message }: RuleError) -> AppError {
            AppError::invalid(&field, message)
        }
    }

    /// The authority's refusals: the caller's role or four-eyes is `403`; a run in the wrong
    /// state for the act, `409`.
    impl From<Refusal> for AppError {
        fn from(refusal: Refusal) -> AppError {
            match refusal {
                refusal @ Refusal::State(_) => AppError::Conflict(format!("{refusal}.")),
                refusal @ Refusal::Role { .. } => AppError::Forbidden(format!("{refusal}.")),
                refusal @ (Refusal::FourEyes { .. }
                | Refusal::Quorum { .. }
                | Refusal::NotRecipient { .. }) => AppError::Forbidden(refusal.to_string()),
            }
        }
    }

    impl From<StoreError> for AppError {
        fn from(err: StoreError) -> AppError {
            match err {
                StoreError::NotFound(id) => AppError::NotFound(format!("There is no run {id}.")),
                StoreError::InvalidTransition { status, action, .. } => {
                    AppError::Conflict(format!("The run is {status}; it cannot be {action}."))
                }
                StoreError::AlreadySettled { status, .. } => {
                    AppError::Conflict(format!("The run is already {status}."))
                }
                other => AppError::internal("the run store failed", other),
            }
        }
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::AppError;
    use nrllm_core::run_service::ResumeError;

    #[test]
    fn a_state_from_a_newer_server_is_a_conflict_that_says_so() {
        let err = AppError::from(ResumeError::NewerVersion(99));
        assert_eq!(err.status(), http::StatusCode::CONFLICT);
        assert!(
            err.to_string().contains("saved by a newer version"),
            "{err}"
        );
    }
}
