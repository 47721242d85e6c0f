//! The error every server function returns. It carries only text that is safe to show an operator;
//! internal causes (SQL, I/O) are logged on the server by [`AppError::internal`] and never sent.

use leptos::server_fn::codec::JsonEncoding;
use leptos::server_fn::error::{FromServerFnError, ServerFnErrorErr};
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
        }
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
