//! `spawn`: run a child step in an isolated context.

use std::sync::Arc;
use std::time::Duration;

use super::{Step, validate_id};
use crate::error::{ConfigCode, ConfigError};
use crate::layer::MemoryLayer;

/// A `spawn` step: the child gets a fresh execution id, an empty item log, the given memory layers (else the
/// parent's), and is cancelled with [`NoeticError::Timeout`](crate::NoeticError::Timeout) when it outlives
/// `timeout`. Its token usage is added to the parent's when it succeeds.
pub struct StepSpawn<I, O> {
    pub(crate) id: Arc<str>,
    pub(crate) child: Step<I, O>,
    pub(crate) memory: Option<Vec<Arc<dyn MemoryLayer>>>,
    pub(crate) timeout: Option<Duration>,
}

/// Builds a `spawn` step.
pub struct SpawnBuilder<I, O> {
    id: String,
    child: Step<I, O>,
    memory: Option<Vec<Arc<dyn MemoryLayer>>>,
    timeout: Option<Duration>,
}

impl<I: Send + 'static, O: Send + 'static> Step<I, O> {
    /// A step that runs `child` in an isolated context.
    pub fn spawn(id: impl Into<String>, child: Step<I, O>) -> SpawnBuilder<I, O> {
        SpawnBuilder { id: id.into(), child, memory: None, timeout: None }
    }
}

impl<I: Send + 'static, O: Send + 'static> SpawnBuilder<I, O> {
    /// Spawn-local memory layers; the parent's layers are then not in scope in the child.
    pub fn memory(mut self, layers: impl IntoIterator<Item = Arc<dyn MemoryLayer>>) -> Self {
        self.memory = Some(layers.into_iter().collect());
        self
    }

    /// Cancels the child and fails the spawn when the child runs longer than this.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Validates and builds the step.
    pub fn build(self) -> Result<Step<I, O>, ConfigError> {
        let id = validate_id(&self.id, "spawn")?;
        if self.timeout == Some(Duration::ZERO) {
            return Err(ConfigError::new(
                ConfigCode::InvalidTimeout,
                format!("spawn step '{id}' has a zero timeout, so its child could never run"),
                "give a positive timeout, or none for no limit",
            ));
        }
        Ok(Step::Spawn(Arc::new(StepSpawn { id, child: self.child, memory: self.memory, timeout: self.timeout })))
    }
}
