//! `provide`: run a child step with more memory layers in scope.

use std::sync::Arc;

use super::{Step, validate_id};
use crate::error::{ConfigCode, ConfigError};
use crate::layer::MemoryLayer;

/// A `provide` step: the child runs in the same context with `memory` added to the layers in scope (a provided
/// layer replaces an outer one with the same id). Provided layers are initialised before the child and
/// completed and disposed after it; the outer layers are in scope again afterwards.
pub struct StepProvide<I, O> {
    pub(crate) id: Arc<str>,
    pub(crate) child: Step<I, O>,
    pub(crate) memory: Vec<Arc<dyn MemoryLayer>>,
}

/// Builds a `provide` step.
pub struct ProvideBuilder<I, O> {
    id: String,
    child: Step<I, O>,
    memory: Vec<Arc<dyn MemoryLayer>>,
}

impl<I: Send + 'static, O: Send + 'static> Step<I, O> {
    /// A step that runs `child` with the given layers in scope.
    pub fn provide(
        id: impl Into<String>,
        child: Step<I, O>,
        memory: impl IntoIterator<Item = Arc<dyn MemoryLayer>>,
    ) -> ProvideBuilder<I, O> {
        ProvideBuilder { id: id.into(), child, memory: memory.into_iter().collect() }
    }
}

impl<I: Send + 'static, O: Send + 'static> ProvideBuilder<I, O> {
    /// Validates and builds the step.
    pub fn build(self) -> Result<Step<I, O>, ConfigError> {
        let id = validate_id(&self.id, "provide")?;
        if self.memory.is_empty() {
            return Err(ConfigError::new(
                ConfigCode::MissingContextLayers,
                format!("provide step '{id}' provides no memory layers"),
                "pass at least one layer, or run the child directly",
            ));
        }
        Ok(Step::Provide(Arc::new(StepProvide { id, child: self.child, memory: self.memory })))
    }
}
