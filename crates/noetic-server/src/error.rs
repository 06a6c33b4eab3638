//! The API's errors: every failure is a JSON body `{"error": {"code", "message"}}` with a fitting status.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An API error: a status, a stable code a program can match, and a message that says what to do.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into() }
    }

    /// 400: the request is wrong.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 404: no such thing.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    /// 500: the server failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stable code (`invalid_json`, `queue_full`, …).
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// What went wrong and what to do.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body =
            crate::bodies::Error { error: crate::bodies::ErrorDetail { code: self.code, message: self.message } };
        (self.status, Json(body)).into_response()
    }
}

/// The body-read timeout's error, when it is what failed `error`.
fn body_timed_out<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyTimedOut> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(timed_out) = e.downcast_ref::<BodyTimedOut>() {
            return Some(timed_out);
        }
        cause = e.source();
    }
    None
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        if let Some(timed_out) = body_timed_out(&rejection) {
            return ApiError::new(StatusCode::REQUEST_TIMEOUT, "body_timeout", timed_out.to_string());
        }
        match rejection {
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as JSON with the header Content-Type: application/json",
            ),
            JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "the request body is larger than the server accepts; send a shorter message",
            ),
            other => ApiError::bad_request(
                "invalid_json",
                format!("the body is not the JSON expected: {}", other.body_text()),
            ),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::bad_request("invalid_query", format!("the query string is not valid: {}", rejection.body_text()))
    }
}

/// A request body did not arrive within the body-read timeout (the handler's extractor answers 408).
#[derive(Debug)]
pub(crate) struct BodyTimedOut(pub(crate) Duration);

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive within {} ms of its head; send it faster or in a smaller request",
            self.0.as_millis()
        )
    }
}

impl std::error::Error for BodyTimedOut {}
