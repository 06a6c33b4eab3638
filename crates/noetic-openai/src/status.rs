//! HTTP error statuses → typed errors, and `Retry-After` parsing. Pure functions.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use noetic::NoeticError;

use crate::wire::{ProviderError, quote};

/// What an error message needs to know about the configuration.
pub(crate) struct KeyInfo<'a> {
    /// True when a key was sent.
    pub has_key: bool,
    /// The variable to tell the user to set.
    pub key_env: &'a str,
    /// Where the request went.
    pub endpoint: &'a str,
}

/// The typed error for a non-success HTTP status with body `raw`.
///
/// 401/403 name the key variable; 429 is a rate limit (a quota error is not: waiting does not help); 408, 409 and
/// 5xx are retryable; other statuses are not.
pub(crate) fn status_error(status: u16, retry_after_ms: Option<u64>, raw: &str, key: &KeyInfo<'_>) -> NoeticError {
    let provider = ProviderError::in_body(raw);
    let said = provider.as_ref().map(|e| quote(&e.message)).unwrap_or_else(|| quote(raw));
    let said = if said.is_empty() { "no details given".to_owned() } else { said };
    let failed = |message: String, retryable: bool| NoeticError::ModelFailed {
        message,
        status: Some(status),
        raw: Some(raw.to_owned()),
        retryable,
    };
    let env = key.key_env;
    match status {
        401 if key.has_key => failed(
            format!(
                "the provider rejected the API key (HTTP 401: {said}); set {env} to a valid key for {}",
                key.endpoint
            ),
            false,
        ),
        401 => failed(
            format!(
                "the provider requires an API key and none was sent (HTTP 401: {said}); set {env} or pass one \
                 with OpenAiConfig::api_key"
            ),
            false,
        ),
        403 => failed(
            format!(
                "the provider refused the request (HTTP 403: {said}); check that the key in {env} is allowed to use \
                 this model"
            ),
            false,
        ),
        429 if provider.as_ref().and_then(|e| e.kind.as_deref()) == Some("insufficient_quota") => failed(
            format!("the account has no quota left (HTTP 429: {said}); add credits or use another key in {env}"),
            false,
        ),
        429 => {
            tracing::warn!(status, body = %said, "rate limited by the provider");
            NoeticError::ModelRateLimit { step_id: String::new(), retry_after_ms, message: Some(said.to_string()) }
        }
        404 => {
            failed(format!("not found (HTTP 404: {said}); check the model id and that the base URL ends in /v1"), false)
        }
        408 | 409 | 500..=599 => failed(format!("the provider failed (HTTP {status}: {said}); try again later"), true),
        _ => failed(format!("the provider rejected the request (HTTP {status}: {said})"), false),
    }
}

/// How long the provider asked to wait: `retry-after-ms` (OpenAI), else `Retry-After` as seconds or an HTTP date
/// (relative to `now`).
pub(crate) fn retry_after_ms(retry_after_ms: Option<&str>, retry_after: Option<&str>, now: SystemTime) -> Option<u64> {
    if let Some(ms) = retry_after_ms.and_then(|v| v.trim().parse::<f64>().ok()).filter(|ms| ms.is_finite()) {
        return Some(ms.max(0.0).ceil() as u64);
    }
    let value = retry_after?.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return seconds.is_finite().then(|| (seconds.max(0.0) * 1000.0).ceil() as u64);
    }
    let at = http_date(value)?;
    let wait = at.duration_since(now).unwrap_or(Duration::ZERO);
    Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX))
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the form RFC 9110 requires senders to use.
pub(crate) fn http_date(text: &str) -> Option<SystemTime> {
    let (_, rest) = text.split_once(", ")?;
    let parts: Vec<&str> = rest.split(' ').collect();
    let [day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    let day: u32 = day.parse().ok()?;
    let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        .iter()
        .position(|m| m == month)? as u32
        + 1;
    let year: i64 = year.parse().ok()?;
    let mut hms = time.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 || hms.next().is_some() {
        return None;
    }
    let days = u64::try_from(days_from_civil(year, month, day)).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(days * 86_400 + h * 3600 + m * 60 + s))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;

    const KEY: KeyInfo<'static> = KeyInfo { has_key: true, key_env: "OPENROUTER_API_KEY", endpoint: "http://x/v1" };

    #[test]
    fn http_dates_parse_and_retry_after_prefers_milliseconds() {
        assert_eq!(http_date("Sun, 06 Nov 1994 08:49:37 GMT"), Some(UNIX_EPOCH + Duration::from_secs(784_111_777)));
        assert_eq!(http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(UNIX_EPOCH));
        assert_eq!(http_date("Sunday, 06-Nov-94 08:49:37 GMT"), None);
        let now = UNIX_EPOCH + Duration::from_secs(784_111_770);
        assert_eq!(retry_after_ms(None, Some("Sun, 06 Nov 1994 08:49:37 GMT"), now), Some(7000));
        assert_eq!(retry_after_ms(None, Some("Sun, 06 Nov 1994 08:49:37 GMT"), now + Duration::from_secs(60)), Some(0));
        assert_eq!(retry_after_ms(None, Some("2"), now), Some(2000));
        assert_eq!(retry_after_ms(Some("150.5"), Some("2"), now), Some(151));
        assert_eq!(retry_after_ms(None, Some("soon"), now), None);
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
        let no_key = KeyInfo { has_key: false, ..KEY };
        assert!(status_error(401, None, "", &no_key).to_string().contains("none was sent"));
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
