//! Retry policies, and the one retry loop model calls use ([`with_retries`]): [`RetryModel`](super::RetryModel)
//! and the HTTP providers' driver both run it.

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{ConfigCode, ConfigError, NoeticError};

/// The cap on a single backoff delay when the policy sets none.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(30);

/// How the delay between attempts grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backoff {
    /// Always `initial_delay`.
    Fixed,
    /// `initial_delay * (k + 1)` after failed attempt `k` (0-based).
    Linear,
    /// `initial_delay * 2^k` after failed attempt `k` (0-based).
    Exponential,
}

/// How often and how patiently a `run` step retries.
///
/// The delay after failed attempt `k` (0-based) is given by [`Backoff`], capped by `max_delay` (30 s when unset).
/// There is no delay after the last attempt. Cancellation is never retried and interrupts a delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Total attempts, including the first (at least 1).
    pub max_attempts: u32,
    /// Growth of the delay.
    pub backoff: Backoff,
    /// The base delay.
    pub initial_delay: Duration,
    /// The cap on any one delay; `None` means 30 s.
    pub max_delay: Option<Duration>,
}

impl RetryPolicy {
    /// A policy with `max_attempts` attempts, the given backoff and base delay, and the default cap.
    pub fn new(max_attempts: u32, backoff: Backoff, initial_delay: Duration) -> Self {
        RetryPolicy { max_attempts, backoff, initial_delay, max_delay: None }
    }

    /// Sets the cap on any one delay.
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = Some(max_delay);
        self
    }

    /// The delay after failed attempt `attempt` (0-based), before the cap-free growth overflows.
    pub fn delay(&self, attempt: u32) -> Duration {
        let cap = self.max_delay.unwrap_or(DEFAULT_MAX_DELAY);
        let factor: u32 = match self.backoff {
            Backoff::Fixed => 1,
            Backoff::Linear => attempt.saturating_add(1),
            Backoff::Exponential => 1u32.checked_shl(attempt).unwrap_or(u32::MAX),
        };
        self.initial_delay.checked_mul(factor).unwrap_or(cap).min(cap)
    }

    /// Checks the policy: it must allow at least one attempt. `step_id` names the step in the error.
    pub fn validate(&self, step_id: &str) -> Result<(), ConfigError> {
        if self.max_attempts < 1 {
            return Err(ConfigError::new(
                ConfigCode::InvalidRetryPolicy,
                format!("run step '{step_id}' has a retry policy with max_attempts 0, so it would never run"),
                "set max_attempts to at least 1 (1 = no retries)",
            ));
        }
        Ok(())
    }
}

/// How long to wait after failed attempt `failed` (0-based) before the next one, or `None` to give up: the error
/// is not retryable, the attempts are used up, or the provider asked (`Retry-After`) to wait longer than the
/// policy's longest delay — then the caller decides, rather than the loop sleeping for minutes. A shorter
/// `Retry-After` wins over the backoff when it is longer.
pub fn retry_delay(policy: &RetryPolicy, failed: u32, error: &NoeticError) -> Option<Duration> {
    if failed.saturating_add(1) >= policy.max_attempts.max(1) || !error.is_retryable() {
        return None;
    }
    (asked_within_cap(policy, error) != Some(false)).then(|| backoff_after(policy, failed, error))
}

/// For a rate limit that says how long to wait: whether that is within the policy's longest delay.
fn asked_within_cap(policy: &RetryPolicy, error: &NoeticError) -> Option<bool> {
    match error {
        NoeticError::ModelRateLimit { retry_after_ms: Some(ms), .. } => {
            Some(Duration::from_millis(*ms) <= policy.max_delay.unwrap_or(DEFAULT_MAX_DELAY))
        }
        _ => None,
    }
}

tokio::task_local! {
    /// Set while an attempt of a [`with_retries`] loop runs, so a loop inside it (a provider's own, under a
    /// [`RetryModel`](super::RetryModel)) makes one attempt instead of multiplying the retries.
    static RETRYING: ();
}

/// The one retry loop: runs `attempt` until it succeeds, fails for good, or the policy's attempts are used up
/// (see [`retry_delay`]). `target` names what is called, for the log line of each retry.
///
/// Loops do not nest: inside an attempt of another `with_retries` (a provider's retries under a
/// [`RetryModel`](super::RetryModel)), `attempt` runs once and the outer loop's policy decides alone.
pub async fn with_retries<T, F, Fut>(policy: &RetryPolicy, target: &str, mut attempt: F) -> Result<T, NoeticError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, NoeticError>>,
{
    if RETRYING.try_with(|()| ()).is_ok() {
        return attempt().await;
    }
    let mut failed = 0;
    loop {
        let error = match RETRYING.scope((), RETRYING.sync_scope((), &mut attempt)).await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        let Some(delay) = retry_delay(policy, failed, &error) else { return Err(error) };
        tracing::debug!(attempt = failed + 1, ?delay, %error, target, "model call failed; retrying");
        tokio::time::sleep(delay).await;
        failed += 1;
    }
}

/// Runs `attempt` as one attempt of a retry loop of the caller's own (a `run` step's `.retry(..)`): a
/// [`with_retries`] loop inside it — a provider's, a [`RetryModel`](super::RetryModel)'s — makes one attempt, so the
/// caller's policy decides alone instead of the two multiplying.
pub async fn as_retry_attempt<F: Future>(attempt: F) -> F::Output {
    RETRYING.scope((), attempt).await
}

/// How long a retry loop of the caller's own waits after attempt `failed` (from 0) ended in `error`: the policy's
/// backoff, or a rate limit's `retry_after` when it is longer and within the policy's longest delay.
pub fn backoff_after(policy: &RetryPolicy, failed: u32, error: &NoeticError) -> Duration {
    let backoff = policy.delay(failed);
    match error {
        NoeticError::ModelRateLimit { retry_after_ms: Some(ms), .. }
            if asked_within_cap(policy, error) == Some(true) =>
        {
            backoff.max(Duration::from_millis(*ms))
        }
        _ => backoff,
    }
}

#[cfg(test)]
mod tests {
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

    #[tokio::test(start_paused = true)]
    async fn a_loop_inside_another_loops_attempt_makes_one_attempt_per_outer_attempt() {
        let counter = std::sync::atomic::AtomicU32::new(0);
        let calls = &counter;
        let outer = RetryPolicy::new(2, Backoff::Fixed, 10 * MS);
        let inner = RetryPolicy::new(3, Backoff::Fixed, 10 * MS);
        let outcome: Result<(), _> = with_retries(&outer, "outer", || {
            with_retries(&inner, "inner", move || {
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { Err(failed(true)) }
            })
        })
        .await;
        assert!(outcome.is_err());
        assert_eq!(counter.into_inner(), 2, "the outer policy's 2 attempts, not 2 × 3");
    }

    #[test]
    fn delays_follow_the_backoff_and_respect_the_cap() {
        let exp = RetryPolicy::new(5, Backoff::Exponential, 100 * MS).max_delay(500 * MS);
        let got: Vec<_> = (0..4).map(|k| exp.delay(k)).collect();
        assert_eq!(got, vec![100 * MS, 200 * MS, 400 * MS, 500 * MS]);
        let lin = RetryPolicy::new(3, Backoff::Linear, 10 * MS);
        assert_eq!((lin.delay(0), lin.delay(1)), (10 * MS, 20 * MS));
        let fixed = RetryPolicy::new(3, Backoff::Fixed, 10 * MS);
        assert_eq!((fixed.delay(0), fixed.delay(7)), (10 * MS, 10 * MS));
    }

    #[test]
    fn huge_exponents_saturate_at_the_default_cap() {
        let exp = RetryPolicy::new(100, Backoff::Exponential, Duration::from_secs(1));
        assert_eq!(exp.delay(63), DEFAULT_MAX_DELAY);
        assert_eq!(exp.delay(u32::MAX), DEFAULT_MAX_DELAY);
    }
}
