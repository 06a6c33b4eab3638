//! `run` steps: retries, backoff delays, cancellation, panics.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic::prelude::*;
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

/// A run step that always fails, recording when each attempt started (relative to `origin`).
fn failing(policy: RetryPolicy, log: Arc<Mutex<Vec<Duration>>>, origin: Instant) -> Step<u32, u32> {
    Step::run("flaky", move |_: u32, _ctx| {
        let log = log.clone();
        async move {
            log.lock().unwrap().push(origin.elapsed());
            Err(NoeticError::other("nope"))
        }
    })
    .retry(policy)
    .build()
    .unwrap()
}

fn gaps(times: &[Duration]) -> Vec<Duration> {
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

async fn attempt_gaps(policy: RetryPolicy) -> (Vec<Duration>, Duration, NoeticError) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let origin = Instant::now();
    let err = failing(policy, log.clone(), origin).execute(1, &StepContext::new()).await.unwrap_err();
    let times = log.lock().unwrap().clone();
    let finished_after_last_attempt = origin.elapsed() - *times.last().unwrap();
    (gaps(&times), finished_after_last_attempt, err)
}

#[tokio::test(start_paused = true)]
async fn fixed_backoff_waits_the_same_delay_between_attempts() {
    let (gaps, _, _) = attempt_gaps(RetryPolicy::new(3, Backoff::Fixed, 10 * MS)).await;
    assert_eq!(gaps, vec![10 * MS, 10 * MS]);
}

#[tokio::test(start_paused = true)]
async fn linear_backoff_grows_by_the_initial_delay() {
    let (gaps, _, _) = attempt_gaps(RetryPolicy::new(4, Backoff::Linear, 10 * MS)).await;
    assert_eq!(gaps, vec![10 * MS, 20 * MS, 30 * MS]);
}

#[tokio::test(start_paused = true)]
async fn exponential_backoff_doubles_and_is_capped_by_max_delay() {
    let policy = RetryPolicy::new(5, Backoff::Exponential, 100 * MS).max_delay(500 * MS);
    let (gaps, _, _) = attempt_gaps(policy).await;
    assert_eq!(gaps, vec![100 * MS, 200 * MS, 400 * MS, 500 * MS]);
}

#[tokio::test(start_paused = true)]
async fn backoff_is_capped_at_thirty_seconds_by_default() {
    let (gaps, _, _) = attempt_gaps(RetryPolicy::new(3, Backoff::Exponential, Duration::from_secs(20))).await;
    assert_eq!(gaps, vec![Duration::from_secs(20), Duration::from_secs(30)]);
}

#[tokio::test(start_paused = true)]
async fn no_sleep_follows_the_last_attempt() {
    let (_, after_last, err) = attempt_gaps(RetryPolicy::new(3, Backoff::Fixed, 50 * MS)).await;
    assert_eq!(after_last, Duration::ZERO);
    match err {
        NoeticError::StepFailed { step_id, cause, retries_exhausted } => {
            assert_eq!(step_id, "flaky");
            assert!(retries_exhausted);
            assert_eq!(cause.to_string(), "nope");
        }
        other => panic!("expected StepFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn a_single_attempt_failure_is_not_marked_as_retries_exhausted() {
    let step = Step::run("once", |_: (), _| async { Err::<(), _>(NoeticError::other("bad")) }).build().unwrap();
    match step.execute((), &StepContext::new()).await.unwrap_err() {
        NoeticError::StepFailed { retries_exhausted, .. } => assert!(!retries_exhausted),
        other => panic!("expected StepFailed, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_later_attempt_can_succeed_and_each_attempt_gets_the_input() {
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let step = Step::run("eventually", move |x: String, _| {
        let n = c.fetch_add(1, Ordering::SeqCst);
        async move { if n < 2 { Err(NoeticError::other("not yet")) } else { Ok(format!("{x}!")) } }
    })
    .retry(RetryPolicy::new(5, Backoff::Fixed, MS))
    .build()
    .unwrap();
    assert_eq!(step.execute("hi".into(), &StepContext::new()).await.unwrap(), "hi!");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_error_is_never_retried() {
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let step = Step::run("cancelled", move |_: (), _| {
        c.fetch_add(1, Ordering::SeqCst);
        async { Err::<(), _>(NoeticError::cancelled("gone")) }
    })
    .retry(RetryPolicy::new(5, Backoff::Fixed, MS))
    .build()
    .unwrap();
    let err = step.execute((), &StepContext::new()).await.unwrap_err();
    assert!(matches!(err, NoeticError::Cancelled { reason: Some(ref r) } if r == "gone"), "{err:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn cancellation_interrupts_a_backoff_sleep() {
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let step = Step::run("slow-retry", move |_: (), _| {
        c.fetch_add(1, Ordering::SeqCst);
        async { Err::<(), _>(NoeticError::other("fail")) }
    })
    .retry(RetryPolicy::new(3, Backoff::Fixed, Duration::from_secs(60)))
    .build()
    .unwrap();
    let ctx = StepContext::new();
    let canceller = ctx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        canceller.cancel("user pressed stop");
    });
    let start = Instant::now();
    let err = step.execute((), &ctx).await.unwrap_err();
    assert!(matches!(err, NoeticError::Cancelled { reason: Some(ref r) } if r == "user pressed stop"), "{err:?}");
    assert_eq!(start.elapsed(), Duration::from_secs(1), "the 60 s backoff was cut short");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no attempt after cancellation");
}

#[tokio::test]
async fn a_cancelled_context_never_starts_the_step() {
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let step = Step::run("never", move |_: (), _| {
        c.fetch_add(1, Ordering::SeqCst);
        async { Ok(()) }
    })
    .build()
    .unwrap();
    let ctx = StepContext::new();
    ctx.cancel("before start");
    assert!(step.execute((), &ctx).await.unwrap_err().is_cancelled());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_running_step_stops_it_at_its_next_await() {
    let step = Step::run("hang", |_: (), _| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(())
    })
    .build()
    .unwrap();
    let ctx = StepContext::new();
    let canceller = ctx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        canceller.cancel("enough");
    });
    let start = Instant::now();
    assert!(step.execute((), &ctx).await.unwrap_err().is_cancelled());
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}

#[tokio::test]
async fn a_panicking_step_fails_instead_of_crashing_the_runtime() {
    let step = Step::run("boom", |x: u32, _| async move {
        if x > 0 {
            panic!("kaboom");
        }
        Ok(x)
    })
    .build()
    .unwrap();
    let err = step.execute(1, &StepContext::new()).await.unwrap_err();
    assert_eq!(err.kind(), "step_failed");
    assert!(err.to_string().contains("kaboom"), "{err}");
}

#[test]
fn a_policy_with_zero_attempts_is_rejected() {
    let err = Step::run("r", |x: u32, _| async move { Ok(x) })
        .retry(RetryPolicy::new(0, Backoff::Fixed, MS))
        .build()
        .unwrap_err();
    assert_eq!(err.code, ConfigCode::InvalidRetryPolicy);
}

/// A model that fails every call with a retryable error (or a rate limit asking for `retry_after_ms`), counting calls.
struct Failing {
    calls: Arc<AtomicU32>,
    retry_after_ms: Option<u64>,
}

impl noetic::model::Model for Failing {
    fn call(
        &self,
        _request: noetic::model::ModelRequest,
    ) -> futures::future::BoxFuture<'static, Result<noetic::model::ModelResponse, NoeticError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let error = match self.retry_after_ms {
            Some(ms) => NoeticError::ModelRateLimit { step_id: String::new(), retry_after_ms: Some(ms), message: None },
            None => NoeticError::ModelFailed {
                message: "overloaded".into(),
                status: Some(503),
                raw: None,
                retryable: true,
                source: None,
            },
        };
        Box::pin(async move { Err(error) })
    }
}

/// A `run` step with `policy` whose every attempt asks `model` once.
fn asking(policy: RetryPolicy, model: Arc<dyn noetic::model::Model>) -> Step<u32, u32> {
    Step::run("ask", move |_: u32, _ctx| {
        let model = model.clone();
        async move {
            model.call(noetic::model::ModelRequest::default()).await?;
            Ok(1)
        }
    })
    .retry(policy)
    .build()
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_retrying_run_step_around_a_retrying_model_makes_its_own_attempts_only() {
    use noetic::model::ModelExt;
    let calls = Arc::new(AtomicU32::new(0));
    let inner = Failing { calls: calls.clone(), retry_after_ms: None };
    let model = Arc::new(inner.with_retry(RetryPolicy::new(3, Backoff::Fixed, MS)));
    let step = asking(RetryPolicy::new(2, Backoff::Fixed, MS), model);
    let err = step.execute(0, &StepContext::new()).await.unwrap_err();
    assert!(err.to_string().contains("overloaded"), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the step's 2 attempts, not 2 × 3 requests");
}

#[tokio::test(start_paused = true)]
async fn a_retrying_run_step_waits_as_long_as_a_rate_limit_asks_within_its_longest_delay() {
    let calls = Arc::new(AtomicU32::new(0));
    let model = Arc::new(Failing { calls: calls.clone(), retry_after_ms: Some(400) });
    let step = asking(RetryPolicy::new(2, Backoff::Fixed, MS).max_delay(Duration::from_secs(1)), model.clone());
    let started = Instant::now();
    step.execute(0, &StepContext::new()).await.unwrap_err();
    assert_eq!((calls.load(Ordering::SeqCst), started.elapsed()), (2, Duration::from_millis(400)));

    // Asked to wait longer than the policy's longest delay: the step keeps its own backoff.
    let calls = Arc::new(AtomicU32::new(0));
    let model = Arc::new(Failing { calls: calls.clone(), retry_after_ms: Some(60_000) });
    let step = asking(RetryPolicy::new(2, Backoff::Fixed, MS).max_delay(Duration::from_secs(1)), model);
    let started = Instant::now();
    step.execute(0, &StepContext::new()).await.unwrap_err();
    assert_eq!((calls.load(Ordering::SeqCst), started.elapsed()), (2, MS));
}
