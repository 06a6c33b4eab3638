//! What every handler does first: check the session key, open the session, and say a session's or the queue's
//! refusal as an API error.

use axum::http::StatusCode;
use noetic::agent::{Session, SessionError, SteerError};

use crate::AppState;
use crate::error::ApiError;

/// The longest session key the API accepts.
pub const MAX_KEY_LEN: usize = 128;

/// Session keys are short and plain, so they are safe in URLs, logs and the page; a key made only of dots is
/// refused because a browser (or curl) drops `.` and `..` path segments, so that session could not be reached.
pub(crate) fn check_key(key: &str) -> Result<(), ApiError> {
    let ok = !key.is_empty()
        && key.len() <= MAX_KEY_LEN
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !key.bytes().all(|b| b == b'.');
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "invalid_session_key",
            format!(
                "a session key is 1 to {MAX_KEY_LEN} characters of A-Z, a-z, 0-9, '-', '_' and '.', and not only dots"
            ),
        ))
    }
}

pub(crate) async fn session(state: &AppState, key: &str) -> Result<Session, ApiError> {
    check_key(key)?;
    state.runtime.open(key).await.map_err(|e| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "session_unavailable", format!("session '{key}': {e}"))
    })
}

pub(crate) fn session_error(key: &str, e: SessionError) -> ApiError {
    match e {
        SessionError::Busy { .. } | SessionError::BusyElsewhere { .. } => {
            ApiError::new(StatusCode::CONFLICT, "busy", e.to_string())
        }
        SessionError::Unfinished { .. } => ApiError::new(StatusCode::CONFLICT, "unfinished_turn", e.to_string()),
        SessionError::Paused { .. } => ApiError::new(StatusCode::CONFLICT, "budget_paused", e.to_string()),
        SessionError::InvalidBudget { .. } => ApiError::bad_request("invalid_budget", e.to_string()),
        SessionError::InvalidTitle { .. } => ApiError::bad_request("invalid_title", e.to_string()),
        other => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "session_unavailable", format!("session '{key}': {other}"))
        }
    }
}

pub(crate) fn steer_error(e: SteerError) -> ApiError {
    match e {
        SteerError::QueueFull { .. } => ApiError::new(StatusCode::TOO_MANY_REQUESTS, "queue_full", e.to_string()),
        SteerError::Empty => ApiError::bad_request("empty_message", e.to_string()),
        other => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", other.to_string()),
    }
}

/// The answer to a request that would start work while the server shuts down.
pub(crate) fn shutting_down() -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", "the server is shutting down; try another worker")
}
