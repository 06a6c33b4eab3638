//! Executes `spawn` steps.

use super::execute as exec;
use crate::error::NoeticError;
use crate::layer::{LayerStack, Outcome, lifecycle};
use crate::scope::StepContext;
use crate::step::StepSpawn;

pub(super) async fn execute<I: Send + 'static, O: Send + 'static>(
    s: &StepSpawn<I, O>,
    input: I,
    ctx: &StepContext,
) -> Result<O, NoeticError> {
    let child = match &s.memory {
        Some(layers) => ctx.spawn_child(Vec::new(), LayerStack::new(layers.iter().cloned())),
        None => ctx.spawn_child_in_scope(Vec::new()),
    };
    let opening = lifecycle::spawn(&ctx.hooks(), &child.hooks(), child.layers()).await?;
    child.extend_items(opening);
    let result = run_child(s, input, &child).await;
    if result.is_ok() {
        lifecycle::return_(&ctx.hooks(), &child.hooks(), child.layers()).await;
        ctx.add_usage(&child.usage(), child.cost());
    }
    let completed = lifecycle::complete(&child.hooks(), child.layers(), Outcome::of(&result)).await;
    result.and_then(|v| completed.map(|()| v))
}

async fn run_child<I: Send + 'static, O: Send + 'static>(
    s: &StepSpawn<I, O>,
    input: I,
    child: &StepContext,
) -> Result<O, NoeticError> {
    let mut run = exec(&s.child, input, child);
    match s.timeout {
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
                    Err(NoeticError::Timeout { step_id: s.id.to_string(), after })
                }
            }
        }
    }
}
