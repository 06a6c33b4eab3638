//! Retries with backoff and `Retry-After`, for calls that have not handed anything to the caller yet.

use std::future::Future;
use std::time::Duration;

use noetic_core::NoeticError;
pub use noetic_core::model::DEFAULT_MAX_DELAY;
use noetic_core::model::RetryPolicy;

/// How long to wait after failed attempt `failed` (0-based) before the next one, or `None` to give up: the error
/// is not retryable, the attempts are used up, or the provider asked (`Retry-After`) to wait longer than the
/// policy's longest delay — then the caller decides, rather than this client sleeping for minutes.
pub fn retry_delay(policy: &RetryPolicy, failed: u32, error: &NoeticError) -> Option<Duration> {
    if failed.saturating_add(1) >= policy.max_attempts.max(1) || !error.is_retryable() {
        return None;
    }
    let backoff = policy.delay(failed);
    match error {
        NoeticError::ModelRateLimit { retry_after_ms: Some(ms), .. } => {
            let asked = Duration::from_millis(*ms);
            (asked <= policy.max_delay.unwrap_or(DEFAULT_MAX_DELAY)).then(|| backoff.max(asked))
        }
        _ => Some(backoff),
    }
}

/// Runs `attempt` until it succeeds, fails for good, or the policy's attempts are used up (see
/// [`retry_delay`]). `target` names what is called, for the log line of each retry.
pub async fn with_retries<T, F, Fut>(policy: &RetryPolicy, target: &str, mut attempt: F) -> Result<T, NoeticError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, NoeticError>>,
{
    let mut failed = 0;
    loop {
        let error = match attempt().await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        let Some(delay) = retry_delay(policy, failed, &error) else { return Err(error) };
        tracing::debug!(attempt = failed + 1, ?delay, %error, target, "model call failed; retrying");
        tokio::time::sleep(delay).await;
        failed += 1;
    }
}

#[cfg(test)]
mod tests {
    use noetic_core::model::Backoff;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn failed(retryable: bool) -> NoeticError {
        NoeticError::ModelFailed { message: String::new(), status: None, raw: None, retryable, source: None }
    }

    fn rate_limit(ms: Option<u64>) -> NoeticError {
        NoeticError::ModelRateLimit { step_id: String::new(), retry_after_ms: ms, message: None }
    }

    #[test]
    fn retries_follow_the_backoff_until_the_attempts_are_used() {
        let policy = RetryPolicy::new(3, Backoff::Exponential, 10 * MS);
        assert_eq!(retry_delay(&policy, 0, &failed(true)), Some(10 * MS));
        assert_eq!(retry_delay(&policy, 1, &failed(true)), Some(20 * MS));
        assert_eq!(retry_delay(&policy, 2, &failed(true)), None, "no sleep after the last attempt");
        assert_eq!(retry_delay(&policy, 0, &failed(false)), None);
        assert_eq!(retry_delay(&policy, 0, &NoeticError::cancelled("stop")), None);
    }

    #[test]
    fn retry_after_is_waited_when_longer_than_the_backoff_and_within_the_cap() {
        let policy = RetryPolicy::new(3, Backoff::Fixed, 10 * MS).max_delay(Duration::from_secs(2));
        assert_eq!(retry_delay(&policy, 0, &rate_limit(Some(1500))), Some(1500 * MS));
        assert_eq!(retry_delay(&policy, 0, &rate_limit(Some(1))), Some(10 * MS));
        assert_eq!(retry_delay(&policy, 0, &rate_limit(None)), Some(10 * MS));
        assert_eq!(retry_delay(&policy, 0, &rate_limit(Some(60_000))), None, "longer than the cap: the caller decides");
        let uncapped = RetryPolicy::new(3, Backoff::Fixed, 10 * MS);
        assert_eq!(retry_delay(&uncapped, 0, &rate_limit(Some(30_000))), Some(30_000 * MS));
        assert_eq!(retry_delay(&uncapped, 0, &rate_limit(Some(30_001))), None, "30 s when the policy sets no cap");
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_are_repeated_until_one_succeeds_or_they_run_out() {
        let policy = RetryPolicy::new(3, Backoff::Fixed, 10 * MS);
        let mut calls = 0;
        let outcome = with_retries(&policy, "test", || {
            calls += 1;
            let result = if calls < 3 { Err(failed(true)) } else { Ok(calls) };
            async move { result }
        })
        .await;
        assert_eq!(outcome.ok(), Some(3));
        let mut calls = 0;
        let outcome: Result<(), _> = with_retries(&policy, "test", || {
            calls += 1;
            async { Err(failed(true)) }
        })
        .await;
        assert!(outcome.is_err());
        assert_eq!(calls, 3);
    }
}
