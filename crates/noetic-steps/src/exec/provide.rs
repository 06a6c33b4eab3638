//! Executes `provide` steps.

use super::execute_in as exec;
use crate::context::Context;
use crate::error::NoeticError;
use crate::layer::Outcome;
use crate::step::StepProvide;

pub(super) async fn execute<I: Send + 'static, O: Send + 'static>(
    s: &StepProvide<I, O>,
    input: I,
    ctx: &Context,
) -> Result<O, NoeticError> {
    let inner = ctx.with_layers(&s.memory).nested();
    let mut initialised = 0;
    let mut result = Ok(());
    for layer in &s.memory {
        if let Err(e) = layer.init(&inner).await {
            result = Err(e);
            break;
        }
        initialised += 1;
    }
    let result = match result {
        Ok(()) => exec(&s.child, input, &inner).await,
        Err(e) => Err(e),
    };
    let outcome = Outcome::of(&result);
    let ready = &s.memory[..initialised];
    for layer in ready {
        if let Err(e) = layer.on_complete(&inner, outcome).await {
            tracing::warn!(step_id = %s.id, layer = layer.id(), error = %e, "on_complete of a provided layer failed");
        }
    }
    for layer in ready.iter().rev() {
        if let Err(e) = layer.dispose(&inner).await {
            tracing::warn!(step_id = %s.id, layer = layer.id(), error = %e, "dispose of a provided layer failed");
        }
    }
    result
}
