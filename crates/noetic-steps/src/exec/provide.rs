//! Executes `provide` steps.

use super::execute_in as exec;
use crate::error::NoeticError;
use crate::layer::Outcome;
use crate::scope::StepContext;
use crate::step::StepProvide;

pub(super) async fn execute<I: Send + 'static, O: Send + 'static>(
    s: &StepProvide<I, O>,
    input: I,
    ctx: &StepContext,
) -> Result<O, NoeticError> {
    let inner = ctx.with_layers(&s.memory).nested();
    let mut initialised = 0;
    let mut result = Ok(());
    for layer in &s.memory {
        let Some(hooks) = layer.as_lifecycle() else {
            initialised += 1;
            continue;
        };
        if let Err(e) = hooks.init(&inner.hooks()).await {
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
        let Some(hooks) = layer.as_lifecycle() else { continue };
        if let Err(e) = hooks.on_complete(&inner.hooks(), outcome).await {
            tracing::warn!(step_id = %s.id, layer = layer.id(), error = %e, "on_complete of a provided layer failed");
        }
    }
    for layer in ready.iter().rev() {
        let Some(hooks) = layer.as_lifecycle() else { continue };
        if let Err(e) = hooks.dispose(&inner.hooks()).await {
            tracing::warn!(step_id = %s.id, layer = layer.id(), error = %e, "dispose of a provided layer failed");
        }
    }
    result
}
