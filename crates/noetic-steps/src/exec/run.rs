//! Executes `run` steps: attempts, backoff, cancellation.

use super::{guard, guard_async, step_failed};
use crate::context::{Context, EventKind};
use crate::error::NoeticError;
use crate::step::StepRun;

async fn attempt<I, O>(s: &StepRun<I, O>, input: I, ctx: &Context) -> Result<O, NoeticError> {
    // The closure may panic before it returns its future, or while the future runs: both become errors.
    let fut = guard(&s.id, "execute function", || (s.execute)(input, ctx.nested()))?;
    ctx.run_cancellable(guard_async(&s.id, "execute function", fut)).await
}

pub(super) async fn execute<I, O>(s: &StepRun<I, O>, input: I, ctx: &Context) -> Result<O, NoeticError> {
    if s.retry.is_none() {
        return attempt(s, input, ctx).await.map_err(|e| step_failed(&s.id, e, false));
    }
    // Boxed: the retry loop's backoff timer is large, and a step without retries should not carry it.
    Box::pin(retrying(s, input, ctx)).await
}

/// Runs attempts by the step's retry policy.
async fn retrying<I, O>(s: &StepRun<I, O>, input: I, ctx: &Context) -> Result<O, NoeticError> {
    let Some((policy, clone_input)) = &s.retry else {
        return attempt(s, input, ctx).await.map_err(|e| step_failed(&s.id, e, false));
    };
    let attempts = policy.max_attempts.max(1);
    let mut input = Some(input);
    for k in 0..attempts {
        ctx.check_cancelled()?;
        let last = k + 1 == attempts;
        let this_input = match (&input, last) {
            (Some(_), true) => input.take(),
            (Some(i), false) => Some(clone_input(i)),
            (None, _) => None,
        };
        let Some(this_input) = this_input else { break };
        let error = match attempt(s, this_input, ctx).await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_cancelled() => return Err(e),
            Err(e) => e,
        };
        if last {
            return Err(step_failed(&s.id, error, attempts > 1));
        }
        let delay = policy.delay(k);
        ctx.emit(|| EventKind::RetryScheduled { step_id: s.id.clone(), attempt: k, delay, error: error.clone() });
        tracing::debug!(step_id = %s.id, attempt = k, ?delay, %error, "run step attempt failed; retrying");
        tokio::select! {
            biased;
            () = ctx.cancelled() => return Err(ctx.cancelled_error()),
            () = tokio::time::sleep(delay) => {}
        }
    }
    Err(step_failed(&s.id, NoeticError::other("no attempt was executed"), false))
}
