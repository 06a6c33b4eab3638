//! Executes `branch` steps.

use super::{execute as exec, guard, step_failed};
use crate::error::NoeticError;
use crate::scope::StepContext;
use crate::step::StepBranch;

pub(super) async fn execute<I: Send + 'static, O: Send + 'static>(
    s: &StepBranch<I, O>,
    input: I,
    ctx: &StepContext,
) -> Result<O, NoeticError> {
    let chosen = guard(&s.id, "route function", || (s.route)(&input, ctx)).map_err(|e| step_failed(&s.id, e, false))?;
    match (chosen, s.passthrough) {
        (Some(step), _) => exec(&step, input, &ctx.nested()).await,
        (None, Some(identity)) => Ok(identity(input)),
        (None, None) => Err(step_failed(&s.id, NoeticError::other("the route chose no step"), false)),
    }
}
