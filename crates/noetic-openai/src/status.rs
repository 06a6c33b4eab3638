//! HTTP error statuses → typed errors: this server family's words over `noetic-http`'s skeleton ([`HttpFailure`],
//! [`StatusClass`]). Pure functions (`Retry-After` is read by `noetic-http`).

use noetic_core::NoeticError;
use noetic_http::{HttpFailure, StatusClass};

use crate::wire::{ProviderError, quote};

/// The typed error for a non-success HTTP status.
///
/// 401/403 name the key variable; 429 is a rate limit (a quota error is not: waiting does not help); 408, 409 and
/// 5xx are retryable; other statuses are not.
pub(crate) fn status_error(failure: &HttpFailure<'_>) -> NoeticError {
    let (status, raw, env) = (failure.status, failure.raw, failure.key_env);
    let provider = ProviderError::in_body(raw);
    let said = provider.as_ref().map(|e| quote(&e.message)).unwrap_or_else(|| quote(raw));
    let said = if said.is_empty() { "no details given".to_owned() } else { said };
    // A request too long for the model's window: the runtime compacts the history and retries once.
    if let Some(provider) = &provider {
        let body: serde_json::Value = serde_json::from_str(raw).unwrap_or_default();
        if let Some(refused) = failure.context_refusal(&provider.message, provider.kind.as_deref(), &body["error"]) {
            return refused;
        }
    }
    let message = match failure.class() {
        StatusClass::KeyRejected => format!(
            "the provider rejected the API key (HTTP 401: {said}); set {env} to a valid key for {}",
            failure.endpoint
        ),
        StatusClass::KeyMissing => format!(
            "the provider requires an API key and none was sent (HTTP 401: {said}); set {env} or pass one with \
             OpenAiConfig::api_key"
        ),
        StatusClass::Forbidden => format!(
            "the provider refused the request (HTTP 403: {said}); check that the key in {env} is allowed to use this \
             model"
        ),
        StatusClass::RateLimited if provider.as_ref().and_then(|e| e.kind.as_deref()) == Some("insufficient_quota") => {
            return failure.failed_as(
                format!("the account has no quota left (HTTP 429: {said}); add credits or use another key in {env}"),
                false,
            );
        }
        StatusClass::RateLimited => return failure.rate_limited(said),
        StatusClass::NotFound => {
            format!("not found (HTTP 404: {said}); check the model id and that the base URL ends in /v1")
        }
        StatusClass::ServerError | StatusClass::Overloaded => {
            format!("the provider failed (HTTP {status}: {said}); try again later")
        }
        StatusClass::Rejected => format!("the provider rejected the request (HTTP {status}: {said})"),
    };
    failure.failed(message)
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;

    const KEY: HttpFailure<'static> = HttpFailure {
        status: 0,
        retry_after: None,
        raw: "",
        key_sent: true,
        key_env: "OPENROUTER_API_KEY",
        endpoint: "http://x/v1",
        step_id: "",
    };

    fn status_error(status: u16, retry_after_ms: Option<u64>, raw: &str, key: &HttpFailure<'_>) -> NoeticError {
        let retry_after = retry_after_ms.map(std::time::Duration::from_millis);
        super::status_error(&HttpFailure { status, retry_after, raw, ..*key })
    }

    #[test]
    fn auth_errors_name_the_key_variable_and_are_not_retryable() {
        let raw = r#"{"error":{"message":"No auth credentials found","code":401}}"#;
        match status_error(401, None, raw, &KEY) {
            NoeticError::ModelFailed { message, retryable: false, status: Some(401), .. } => {
                assert!(message.contains("OPENROUTER_API_KEY") && message.contains("No auth credentials found"));
            }
            other => panic!("unexpected {other:?}"),
        }
        let no_key = HttpFailure { key_sent: false, ..KEY };
        assert!(status_error(401, None, "", &no_key).to_string().contains("none was sent"));
    }

    #[test]
    fn a_request_too_long_for_the_window_is_a_context_length_error_from_openai_and_llama_cpp() {
        let openai = r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        assert!(matches!(
            status_error(400, None, openai, &KEY),
            NoeticError::ContextLengthExceeded { requested: Some(130_532), limit: Some(128_000), .. }
        ));
        let llama = r#"{"error":{"code":400,"message":"request (6010 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":6010,"n_ctx":4096}}"#;
        assert!(matches!(
            status_error(400, None, llama, &KEY),
            NoeticError::ContextLengthExceeded { requested: Some(6_010), limit: Some(4_096), .. }
        ));
        assert!(matches!(
            status_error(400, None, r#"{"error":{"message":"bad"}}"#, &KEY),
            NoeticError::ModelFailed { .. }
        ));
    }

    #[test]
    fn rate_limits_quota_and_server_errors_are_classified() {
        assert!(matches!(
            status_error(429, Some(20), "{}", &KEY),
            NoeticError::ModelRateLimit { retry_after_ms: Some(20), .. }
        ));
        let slow_down = r#"{"error":{"message":"Rate limit reached for requests","type":"requests"}}"#;
        let limited = status_error(429, None, slow_down, &KEY);
        assert!(
            matches!(&limited, NoeticError::ModelRateLimit { message: Some(m), .. } if m.contains("Rate limit reached")),
            "the provider's words are kept: {limited:?}"
        );
        assert!(limited.to_string().contains("Rate limit reached"));
        let quota = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        assert!(!status_error(429, None, quota, &KEY).is_retryable());
        assert!(status_error(503, None, "upstream down", &KEY).is_retryable());
        assert!(!status_error(400, None, "bad", &KEY).is_retryable());
    }
}
