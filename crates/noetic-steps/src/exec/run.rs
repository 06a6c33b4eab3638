//! Executes `run` steps: attempts, backoff, cancellation.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::Poll;

use super::{guard, guard_async, step_failed};
use crate::context::{Context, EventKind, MAX_DEPTH, StepKind};
use crate::error::{NoeticError, panicked};
use crate::model::{as_retry_attempt, backoff_after};
use crate::scope::StepContext;
use crate::step::{StepFuture, StepRun};

/// What starting a step and polling it once gave.
pub(super) enum Started<O, F> {
    /// It finished at its first poll.
    Done(Result<O, NoeticError>),
    /// It is running: the rest of it.
    Running(F),
}

/// Starts a `run` step without retries in `ctx`, as `dispatch_run` runs it (the same checks, events and errors),
/// and polls the function's future once in `cx`; a step that finishes there needs no future of its own. The
/// caller has just seen `ctx` not cancelled (a fork path's fresh context, with no await since).
pub(super) fn start<I, O: Send + 'static>(
    s: &Arc<StepRun<I, O>>,
    input: I,
    ctx: &StepContext,
    cx: &mut std::task::Context<'_>,
) -> Started<O, impl Future<Output = Result<O, NoeticError>> + Send + use<I, O>> {
    let kind = StepKind::Run;
    if ctx.depth() >= MAX_DEPTH {
        let e = NoeticError::DepthExceeded { step_id: s.id.to_string(), depth: ctx.depth(), limit: MAX_DEPTH };
        return Started::Done(Err(e));
    }
    ctx.emit(|| EventKind::StepStarted { step_id: s.id.clone(), kind });
    // What `guard` does, written out: this runs once per path of a fork, and `guard` is not always inlined.
    let failed = |p: Box<dyn Any + Send>| Started::Done(finish(s, ctx, Err(panicked(&s.id, "execute function", &*p))));
    let mut fut = match catch_unwind(AssertUnwindSafe(|| (s.execute)(input, ctx.nested()))) {
        Ok(fut) => fut,
        Err(p) => return failed(p),
    };
    match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
        Ok(Poll::Ready(r)) => Started::Done(finish(s, ctx, r)),
        Ok(Poll::Pending) => Started::Running(rest(s.clone(), fut, ctx.clone())),
        Err(p) => failed(p),
    }
}

/// A started `run` step's future after its first poll.
async fn rest<I, O>(s: Arc<StepRun<I, O>>, fut: StepFuture<O>, ctx: StepContext) -> Result<O, NoeticError> {
    let r = ctx.run_cancellable(guard_async(&s.id, "execute function", fut)).await;
    finish(&s, &ctx, r)
}

/// A `run` step's outcome as `dispatch_run` gives it, with its event.
fn finish<I, O>(s: &StepRun<I, O>, ctx: &Context, r: Result<O, NoeticError>) -> Result<O, NoeticError> {
    let kind = StepKind::Run;
    let r = r.map_err(|e| step_failed(&s.id, e, false));
    match &r {
        Ok(_) => ctx.emit(|| EventKind::StepCompleted { step_id: s.id.clone(), kind }),
        Err(e) => ctx.emit(|| EventKind::StepFailed { step_id: s.id.clone(), kind, error: e.clone() }),
    }
    r
}

async fn attempt<I, O>(s: &StepRun<I, O>, input: I, ctx: &StepContext) -> Result<O, NoeticError> {
    // The closure may panic before it returns its future, or while the future runs: both become errors.
    let fut = guard(&s.id, "execute function", || (s.execute)(input, ctx.nested()))?;
    ctx.run_cancellable(guard_async(&s.id, "execute function", fut)).await
}

pub(super) async fn execute<I, O>(s: &StepRun<I, O>, input: I, ctx: &StepContext) -> Result<O, NoeticError> {
    if s.retry.is_none() {
        return attempt(s, input, ctx).await.map_err(|e| step_failed(&s.id, e, false));
    }
    // Boxed: the retry loop's backoff timer is large, and a step without retries should not carry it.
    Box::pin(retrying(s, input, ctx)).await
}

/// Runs attempts by the step's retry policy.
async fn retrying<I, O>(s: &StepRun<I, O>, input: I, ctx: &StepContext) -> Result<O, NoeticError> {
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
        // A retry loop inside the attempt (a provider's, a `RetryModel`'s) makes one attempt: this policy decides.
        let error = match as_retry_attempt(attempt(s, this_input, ctx)).await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_cancelled() => return Err(e),
            Err(e) => e,
        };
        if last {
            return Err(step_failed(&s.id, error, attempts > 1));
        }
        let delay = backoff_after(policy, k, &error);
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
