//! Retry policies for `run` steps.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{ConfigCode, ConfigError};

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

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

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
