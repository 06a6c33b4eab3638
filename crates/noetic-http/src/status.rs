//! HTTP error statuses → typed errors: the skeleton every provider shares (which statuses mean what, which are
//! retried, the rate limit's wait), so a provider writes only its words.

use std::time::Duration;

use noetic_core::NoeticError;
use serde_json::Value;

use crate::retry_after::MAX_RETRY_AFTER;

/// A non-success response, as a provider's status mapping sees it.
#[derive(Debug, Clone, Copy)]
pub struct HttpFailure<'a> {
    /// The HTTP status.
    pub status: u16,
    /// How long the server asked to wait (`retry-after-ms` / `Retry-After`), if it said.
    pub retry_after: Option<Duration>,
    /// The error body, as text.
    pub raw: &'a str,
    /// True when a key was sent (to tell a missing key from a wrong one).
    pub key_sent: bool,
    /// The variable to tell the user to set.
    pub key_env: &'a str,
    /// Where the request went.
    pub endpoint: &'a str,
    /// The step that made the request ([`ModelRequest::step_id`](noetic_core::model::ModelRequest::step_id);
    /// empty when none did), named in the errors built from the failure.
    pub step_id: &'a str,
}

/// What a status means, whatever the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusClass {
    /// 401 and no key was sent.
    KeyMissing,
    /// 401 with a key.
    KeyRejected,
    /// 403.
    Forbidden,
    /// 429: a rate limit (unless the provider knows better, e.g. an exhausted quota).
    RateLimited,
    /// 404.
    NotFound,
    /// 529: overloaded.
    Overloaded,
    /// 408, 409, other 5xx: worth trying again.
    ServerError,
    /// Any other status: the request itself was refused.
    Rejected,
}

impl StatusClass {
    /// The class of `status`; `key_sent` tells [`StatusClass::KeyMissing`] from [`StatusClass::KeyRejected`].
    pub fn of(status: u16, key_sent: bool) -> Self {
        match status {
            401 if key_sent => StatusClass::KeyRejected,
            401 => StatusClass::KeyMissing,
            403 => StatusClass::Forbidden,
            429 => StatusClass::RateLimited,
            404 => StatusClass::NotFound,
            529 => StatusClass::Overloaded,
            408 | 409 | 500..=599 => StatusClass::ServerError,
            _ => StatusClass::Rejected,
        }
    }

    /// True when the same request may succeed later.
    pub fn retryable(self) -> bool {
        matches!(self, StatusClass::RateLimited | StatusClass::Overloaded | StatusClass::ServerError)
    }
}

impl HttpFailure<'_> {
    /// The status's class.
    pub fn class(&self) -> StatusClass {
        StatusClass::of(self.status, self.key_sent)
    }

    /// A [`NoeticError::ModelFailed`] carrying the status and the raw body, retryable as its class is.
    pub fn failed(&self, message: String) -> NoeticError {
        self.failed_as(message, self.class().retryable())
    }

    /// A [`NoeticError::ModelFailed`] carrying the status and the raw body.
    pub fn failed_as(&self, message: String, retryable: bool) -> NoeticError {
        NoeticError::ModelFailed {
            message,
            status: Some(self.status),
            raw: Some(self.raw.to_owned()),
            retryable,
            source: None,
        }
    }

    /// A [`NoeticError::ModelRateLimit`] of the failure's step, with the server's wait (at most
    /// [`MAX_RETRY_AFTER`]) and its words.
    pub fn rate_limited(&self, said: String) -> NoeticError {
        tracing::warn!(status = self.status, body = %said, retry_after = ?self.retry_after, "rate limited by the provider");
        NoeticError::ModelRateLimit {
            step_id: self.step_id.to_owned(),
            retry_after_ms: self
                .retry_after
                .map(|d| u64::try_from(d.min(MAX_RETRY_AFTER).as_millis()).unwrap_or(u64::MAX)),
            message: Some(said),
        }
    }

    /// The context-length error when a 400, 413 or 422 says the request is too long for the model's window (the
    /// runtime then compacts the history and retries once); `message`, `kind` and `error` are the provider's
    /// error object's.
    pub fn context_refusal(&self, message: &str, kind: Option<&str>, error: &Value) -> Option<NoeticError> {
        if !matches!(self.status, 400 | 413 | 422) {
            return None;
        }
        noetic_core::model::context_refusal(self.step_id, message, kind, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limits_overload_and_server_errors_are_retryable_and_client_errors_are_not() {
        for status in [408, 409, 429, 500, 502, 503, 529] {
            assert!(StatusClass::of(status, true).retryable(), "{status}");
        }
        for status in [400, 401, 403, 404, 413, 422] {
            assert!(!StatusClass::of(status, true).retryable(), "{status}");
        }
        assert_eq!(StatusClass::of(401, false), StatusClass::KeyMissing);
    }

    #[test]
    fn a_rate_limit_carries_the_wait_clamped_to_a_day() {
        let failure = HttpFailure {
            status: 429,
            retry_after: Some(Duration::MAX),
            raw: "{}",
            key_sent: true,
            key_env: "K",
            endpoint: "http://x",
            step_id: "ask",
        };
        assert!(matches!(
            failure.rate_limited("slow".into()),
            NoeticError::ModelRateLimit { retry_after_ms: Some(86_400_000), step_id, .. } if step_id == "ask"
        ));
    }
}
