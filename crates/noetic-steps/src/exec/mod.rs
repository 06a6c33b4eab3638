//! The interpreter: one function, [`execute`], that runs any step.
//!
//! Every step, whatever its kind, first checks the nesting depth and cancellation, emits `step_started`, runs,
//! and emits `step_completed` or `step_failed`. Composite steps run their children one level deeper through
//! [`execute`] again; the recursion goes through a boxed future.

mod branch;
mod durable;
mod every;
mod fork;
mod llm;
mod llm_model;
mod loop_;
mod provide;
mod run;
mod spawn;
mod tool;
mod tool_group;

use std::sync::Arc;

use futures::future::BoxFuture;
use tracing::Instrument;

use crate::context::{EventKind, MAX_DEPTH, StepKind};
use crate::error::NoeticError;
use crate::scope::StepContext;
use crate::step::{Step, StepFuture, StepRun};

/// Runs `step` on `input` in `ctx`.
pub fn execute<I: Send + 'static, O: Send + 'static>(step: &Step<I, O>, input: I, ctx: &StepContext) -> StepFuture<O> {
    let ctx = ctx.clone();
    // Without a subscriber the step runs exactly as it would without traces.
    if crate::trace::on() {
        let step = step.clone();
        return Box::pin(async move { traced(&step, input, ctx).await });
    }
    if let Step::Run(run) = step {
        // A `run` step's future is a fraction of the largest kind's (an `llm` step's), which `dispatch` is sized
        // for; boxing its own keeps a fork of many `run` paths from allocating and copying that much per path.
        return Box::pin(dispatch_run(run.clone(), input, ctx));
    }
    let step = step.clone();
    Box::pin(async move { dispatch(&step, input, ctx).await })
}

/// [`dispatch`] for a `run` step: the same checks and events.
async fn dispatch_run<I: Send + 'static, O: Send + 'static>(
    s: Arc<StepRun<I, O>>,
    input: I,
    ctx: StepContext,
) -> Result<O, NoeticError> {
    let kind = StepKind::Run;
    if ctx.depth() >= MAX_DEPTH {
        return Err(NoeticError::DepthExceeded { step_id: s.id.to_string(), depth: ctx.depth(), limit: MAX_DEPTH });
    }
    ctx.check_cancelled()?;
    ctx.emit(|| EventKind::StepStarted { step_id: s.id.clone(), kind });
    let result = run::execute(&s, input, &ctx).await;
    match &result {
        Ok(_) => ctx.emit(|| EventKind::StepCompleted { step_id: s.id.clone(), kind }),
        Err(e) => ctx.emit(|| EventKind::StepFailed { step_id: s.id.clone(), kind, error: e.clone() }),
    }
    result
}

/// [`execute`] for a caller that awaits the step while it holds it (a composite step running its children, a
/// turn running its agent): the step is borrowed, not cloned, so running it writes no reference count that every
/// turn on every thread shares.
pub(crate) fn execute_in<'a, I: Send + 'static, O: Send + 'static>(
    step: &'a Step<I, O>,
    input: I,
    ctx: &StepContext,
) -> BoxFuture<'a, Result<O, NoeticError>> {
    let ctx = ctx.clone();
    if crate::trace::on() {
        return Box::pin(traced(step, input, ctx));
    }
    Box::pin(dispatch(step, input, ctx))
}

/// Runs the step in its span. Kept out of line so the untraced path stays as small as it was.
#[inline(never)]
async fn traced<I: Send + 'static, O: Send + 'static>(
    step: &Step<I, O>,
    input: I,
    ctx: StepContext,
) -> Result<O, NoeticError> {
    // Opened at the first poll, so its parent is the span the caller runs in (a fork's paths and a spawned child
    // are polled inside their step's span).
    let span = step_span(step);
    let result = dispatch(step, input, ctx).instrument(span.clone()).await;
    if let Err(e) = &result {
        crate::trace::fail_with(&span, e);
    }
    result
}

/// The step's span (see [`crate::trace`]); a disabled span when no subscriber wants it.
fn step_span<I, O>(step: &Step<I, O>) -> tracing::Span {
    let kind = step.kind().as_str();
    tracing::info_span!(
        "step",
        otel.name = format_args!("step {kind}"),
        noetic.step.kind = kind,
        noetic.step.id = step.id(),
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

async fn dispatch<I: Send + 'static, O: Send + 'static>(
    step: &Step<I, O>,
    input: I,
    ctx: StepContext,
) -> Result<O, NoeticError> {
    if ctx.depth() >= MAX_DEPTH {
        return Err(NoeticError::DepthExceeded { step_id: step.id().to_owned(), depth: ctx.depth(), limit: MAX_DEPTH });
    }
    ctx.check_cancelled()?;
    let kind = step.kind();
    let emits = match step {
        // The probe is made only when somebody listens: its id is a reference count every turn would write.
        Step::Llm(s) => {
            ctx.events().is_active() && s.emit.allows(&EventKind::StepStarted { step_id: step.id_arc().clone(), kind })
        }
        _ => true,
    };
    if emits {
        ctx.emit(|| EventKind::StepStarted { step_id: step.id_arc().clone(), kind });
    }
    let result = match step {
        Step::Run(s) => run::execute(s, input, &ctx).await,
        Step::Llm(s) => llm::execute(s, input, &ctx).await,
        Step::Tool(s) => tool::execute(s, input, &ctx).await,
        Step::Branch(s) => branch::execute(s, input, &ctx).await,
        Step::Fork(s) => fork::execute(s, input, &ctx).await,
        Step::Spawn(s) => spawn::execute(s, input, &ctx).await,
        Step::Provide(s) => provide::execute(s, input, &ctx).await,
        Step::Loop(s) => loop_::execute(s, input, &ctx).await,
        Step::Every(s) => every::execute(s, input, &ctx).await,
    };
    if emits {
        let step_id = step.id_arc();
        match &result {
            Ok(_) => ctx.emit(|| EventKind::StepCompleted { step_id: step_id.clone(), kind }),
            Err(e) => ctx.emit(|| EventKind::StepFailed { step_id: step_id.clone(), kind, error: e.clone() }),
        }
    }
    result
}

pub use crate::error::{guard, guard_async};

/// Wraps an error from user code as a failure of `step_id` (cancellation passes through unchanged).
pub(crate) fn step_failed(step_id: &str, cause: NoeticError, retries_exhausted: bool) -> NoeticError {
    if cause.is_cancelled() {
        return cause;
    }
    NoeticError::StepFailed { step_id: step_id.to_owned(), cause: Box::new(cause), retries_exhausted }
}

impl<I: Send + 'static, O: Send + 'static> Step<I, O> {
    /// Runs the step on `input` in `ctx` (the interpreter implements the step's own method, so the step layer
    /// needs no import of it).
    pub async fn execute(&self, input: I, ctx: &StepContext) -> Result<O, NoeticError> {
        execute(self, input, ctx).await
    }
}
