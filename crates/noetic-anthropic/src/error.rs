//! Provider errors → [`NoeticError`]: HTTP statuses (over `noetic-http`'s skeleton) and Anthropic error objects.
//!
//! Pure functions, so every mapping is unit-tested without a server.

use std::time::Duration;

use noetic_core::NoeticError;
use noetic_http::{HttpFailure, StatusClass};
use serde_json::Value;

/// The environment variable holding the API key, named in authentication errors.
pub const API_KEY_VAR: &str = "ANTHROPIC_API_KEY";

/// The error for a non-2xx response with status `status` and body `body`.
///
/// * 401 / 403 → a non-retryable [`NoeticError::ModelFailed`] that names `ANTHROPIC_API_KEY` and quotes the
///   provider's message (`key_sent` says whether a key was sent at all, to tell "missing" from "wrong").
/// * 429 → [`NoeticError::ModelRateLimit`] with `retry_after`, at most a day (its `step_id` is empty: no step
///   is known here; the client names the request's step).
/// * 408, 409, 5xx and 529 (overloaded) → a retryable `ModelFailed`.
/// * Anything else (400 invalid request, 404 unknown model, 413 too large …) → a non-retryable `ModelFailed` with
///   the provider's message and the raw body.
pub fn error_from_status(status: u16, retry_after: Option<Duration>, body: &str, key_sent: bool) -> NoeticError {
    error_from_failure(&HttpFailure {
        status,
        retry_after,
        raw: body,
        key_sent,
        key_env: API_KEY_VAR,
        endpoint: "",
        step_id: "",
    })
}

/// [`error_from_status`] over `noetic-http`'s skeleton: Anthropic's words for each [`StatusClass`].
pub(crate) fn error_from_failure(failure: &HttpFailure<'_>) -> NoeticError {
    let (status, body, env) = (failure.status, failure.raw, failure.key_env);
    let parsed: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let (kind, provider) = provider_message(&parsed, body);
    if let Some(refused) = failure.context_refusal(&provider, parsed["error"]["type"].as_str(), &parsed["error"]) {
        return refused;
    }
    let message = match failure.class() {
        StatusClass::KeyMissing => format!(
            "Anthropic rejected the request because no API key was sent (HTTP 401{kind}: {provider}); set {env} or \
             pass a key with AnthropicConfig::api_key"
        ),
        StatusClass::KeyRejected => format!(
            "Anthropic rejected the API key (HTTP 401{kind}: {provider}); check that {env} holds a valid, active key"
        ),
        StatusClass::Forbidden => format!(
            "Anthropic refused the request (HTTP 403{kind}: {provider}); check that the key in {env} has access to \
             this model and workspace"
        ),
        StatusClass::RateLimited => return failure.rate_limited(provider),
        StatusClass::Overloaded => {
            format!("Anthropic is overloaded (HTTP 529{kind}: {provider}); try again later or lower the request rate")
        }
        StatusClass::ServerError => {
            format!("Anthropic returned a server error (HTTP {status}{kind}: {provider}); try again later")
        }
        StatusClass::NotFound => format!(
            "Anthropic did not find the resource (HTTP 404{kind}: {provider}); check the model id and the base URL"
        ),
        StatusClass::Rejected => {
            format!("Anthropic rejected the request (HTTP {status}{kind}: {provider}); the raw body is attached")
        }
    };
    failure.failed(message)
}

/// The error an Anthropic error object (`{"type": "error", "error": {"type", "message"}}`) stands for, or `None`
/// when `value` is not one. Used for error objects that arrive with a 2xx status or inside a stream: rate-limit
/// and overload errors are marked retryable so a caller that has received nothing yet may try again. A rate limit's
/// `step_id` is empty (see `error_from_body_of` for a request's step).
pub fn error_from_body(status: Option<u16>, value: &Value, raw: &str) -> Option<NoeticError> {
    error_from_body_of("", status, value, raw)
}

/// [`error_from_body`] for a request made by the step `step_id`, which a rate limit names.
pub(crate) fn error_from_body_of(step_id: &str, status: Option<u16>, value: &Value, raw: &str) -> Option<NoeticError> {
    if value["type"] != "error" && !value["error"].is_object() {
        return None;
    }
    let (kind, provider) = provider_message(value, raw);
    let error_type = value["error"]["type"].as_str().unwrap_or_default();
    if error_type == "rate_limit_error" {
        tracing::warn!(provider_message = %provider, "Anthropic rate limit error object");
        return Some(NoeticError::ModelRateLimit {
            step_id: step_id.to_owned(),
            retry_after_ms: None,
            message: Some(provider.to_string()),
        });
    }
    let retryable = matches!(error_type, "overloaded_error" | "api_error" | "timeout_error");
    Some(NoeticError::ModelFailed {
        message: format!("Anthropic returned an error{kind}: {provider}"),
        status,
        raw: Some(raw.to_owned()),
        retryable,
        source: None,
    })
}

/// ` (error type)` and the provider's message from an error body; the body itself when it has no message.
fn provider_message(value: &Value, raw: &str) -> (String, String) {
    let error = &value["error"];
    let kind = error["type"].as_str().map(|t| format!(" {t}")).unwrap_or_default();
    let message = error["message"]
        .as_str()
        .or_else(|| value["message"].as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| if raw.trim().is_empty() { "empty body".to_owned() } else { shorten(raw) });
    (kind, message)
}

/// At most 300 characters of `text`, for messages.
fn shorten(text: &str) -> String {
    let mut out: String = text.trim().chars().take(300).collect();
    if text.trim().chars().count() > 300 {
        out.push('…');
    }
    out
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_prompt_too_long_for_the_window_is_a_context_length_error() {
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#;
        assert!(matches!(
            error_from_status(400, None, body, true),
            NoeticError::ContextLengthExceeded { requested: Some(208_310), limit: Some(200_000), .. }
        ));
        let other =
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}"#;
        assert!(matches!(error_from_status(400, None, other, true), NoeticError::ModelFailed { .. }));
    }

    fn message_of(e: &NoeticError) -> String {
        match e {
            NoeticError::ModelFailed { message, .. } => message.clone(),
            other => panic!("expected ModelFailed, got {other:?}"),
        }
    }

    #[test]
    fn authentication_errors_name_the_key_variable_and_quote_the_provider() {
        let body = r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
        for (status, sent) in [(401, true), (401, false), (403, true)] {
            let e = error_from_status(status, None, body, sent);
            let m = message_of(&e);
            assert!(m.contains("ANTHROPIC_API_KEY") && m.contains("invalid x-api-key"), "{m}");
            assert!(!e.is_retryable());
        }
        assert!(message_of(&error_from_status(401, None, body, false)).contains("no API key was sent"));
    }

    #[test]
    fn rate_limits_carry_the_retry_after() {
        let e = error_from_status(429, Some(Duration::from_secs(2)), "{}", true);
        assert!(matches!(e, NoeticError::ModelRateLimit { retry_after_ms: Some(2000), .. }));
        let forever = error_from_status(429, Some(Duration::MAX), "{}", true);
        assert!(matches!(forever, NoeticError::ModelRateLimit { retry_after_ms: Some(86_400_000), .. }));
    }

    #[test]
    fn overload_server_errors_and_timeouts_are_retryable_and_client_errors_are_not() {
        for status in [408, 409, 500, 502, 503, 529] {
            assert!(error_from_status(status, None, "", true).is_retryable(), "{status}");
        }
        for status in [400, 404, 413, 422] {
            assert!(!error_from_status(status, None, "", true).is_retryable(), "{status}");
        }
        assert!(message_of(&error_from_status(529, None, "", true)).contains("overloaded"));
    }

    #[test]
    fn error_objects_are_recognised_and_others_are_not() {
        assert!(error_from_body(None, &json!({"type": "message"}), "").is_none());
        let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        let e = error_from_body(Some(200), &overloaded, "raw");
        assert!(e.as_ref().is_some_and(NoeticError::is_retryable));
        assert!(message_of(&e.unwrap_or_else(|| NoeticError::other("none"))).contains("Overloaded"));
        let limited = json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}});
        assert!(matches!(error_from_body(None, &limited, ""), Some(NoeticError::ModelRateLimit { .. })));
    }
}
