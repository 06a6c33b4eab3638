//! Executes `every` steps.

use std::time::Duration;

use crate::context::EventKind;
use crate::error::NoeticError;
use crate::scope::StepContext;
use crate::step::{EveryOnError, StepEvery};

/// A uniform draw in `interval ± jitter`, clamped at zero.
fn park_duration(s: &StepEvery<impl Sized>, rng: &mut fastrand::Rng) -> Duration {
    if s.jitter.is_zero() {
        return s.interval;
    }
    let low = s.interval.as_secs_f64() - s.jitter.as_secs_f64();
    let secs = low + rng.f64() * 2.0 * s.jitter.as_secs_f64();
    Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(s.interval)
}

pub(super) async fn execute<I: Send + 'static, O>(
    s: &StepEvery<I>,
    input: I,
    ctx: &StepContext,
) -> Result<O, NoeticError> {
    let mut rng = fastrand::Rng::new();
    loop {
        ctx.check_cancelled()?;
        if let Err(error) = (s.body)((s.clone_input)(&input), ctx.nested()).await {
            if s.on_error == EveryOnError::Fail || error.is_cancelled() {
                return Err(error);
            }
            tracing::warn!(step_id = %s.id, %error, "every: iteration failed; continuing");
            ctx.emit(|| EventKind::EveryIterationError { step_id: s.id.clone(), error });
        }
        ctx.check_cancelled()?;
        let park = park_duration(s, &mut rng);
        let wake = async {
            match &s.wake_on {
                Some(handle) => handle.notify().notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = ctx.cancelled() => return Err(ctx.cancelled_error()),
            () = tokio::time::sleep(park) => {}
            () = wake => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::Step;

    #[test]
    fn park_durations_stay_within_jitter_bounds_and_never_go_negative() {
        let body = Step::run("b", |(): (), _| async { Ok(()) }).build().unwrap_or_else(|e| unreachable!("{e}"));
        let Step::<(), ()>::Every(s) =
            Step::every("e", body, 100.0).jitter(30.0).build().unwrap_or_else(|e| unreachable!("{e}"))
        else {
            unreachable!()
        };
        let mut rng = fastrand::Rng::with_seed(7);
        let draws: Vec<Duration> = (0..2000).map(|_| park_duration(&s, &mut rng)).collect();
        assert!(draws.iter().all(|d| *d >= Duration::from_millis(70) && *d <= Duration::from_millis(130)));
        let (lo, hi) = (draws.iter().min().copied(), draws.iter().max().copied());
        assert!(
            lo < Some(Duration::from_millis(75)) && hi > Some(Duration::from_millis(125)),
            "spread covers the range"
        );
        let body = Step::run("b", |(): (), _| async { Ok(()) }).build().unwrap_or_else(|e| unreachable!("{e}"));
        let Step::<(), ()>::Every(s) =
            Step::every("e", body, 10.0).jitter(50.0).build().unwrap_or_else(|e| unreachable!("{e}"))
        else {
            unreachable!()
        };
        assert!((0..2000).map(|_| park_duration(&s, &mut rng)).any(|d| d.is_zero()), "clamped at zero");
    }
}
