//! Executes `spawn` steps.

use super::execute as exec;
use crate::context::Context;
use crate::error::NoeticError;
use crate::layer::LayerStack;
use crate::step::StepSpawn;

pub(super) async fn execute<I: Send + 'static, O: Send + 'static>(
    s: &StepSpawn<I, O>,
    input: I,
    ctx: &Context,
) -> Result<O, NoeticError> {
    let layers = match &s.memory {
        Some(layers) => LayerStack::new(layers.iter().cloned()),
        None => ctx.layers().clone(),
    };
    let child = ctx.spawn_child(Vec::new(), layers);
    let mut run = exec(&s.child, input, &child);
    let result = match s.timeout {
        None => run.await,
        Some(after) => {
            tokio::select! {
                biased;
                r = &mut run => r,
                () = tokio::time::sleep(after) => {
                    // Cancel before dropping the child's future, so its drop guards see the cancellation, and so
                    // anything it handed the token to (detached tasks, tool calls) stops too.
                    child.cancel(format!("spawn '{}' timed out after {} ms", s.id, after.as_millis()));
                    drop(run);
                    return Err(NoeticError::Timeout { step_id: s.id.to_string(), after });
                }
            }
        }
    };
    if result.is_ok() {
        ctx.add_usage(&child.usage(), child.cost());
    }
    result
}
