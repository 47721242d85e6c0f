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
