//! `tool`: one direct tool call as a step.

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{Step, validate_id};
use crate::error::ConfigError;
use crate::tool::Tool;

/// A `tool` step: preset arguments are merged over the input (preset wins), the result is validated and
/// gated, then the tool runs and its output is validated.
pub struct StepTool<I, O> {
    pub(crate) id: Arc<str>,
    pub(crate) tool: Arc<dyn Tool>,
    pub(crate) args: Map<String, Value>,
    pub(crate) to_json: fn(I) -> Result<Value, serde_json::Error>,
    pub(crate) from_json: fn(Value) -> Result<O, serde_json::Error>,
}

impl<I, O> StepTool<I, O> {
    /// The tool.
    pub fn tool(&self) -> &Arc<dyn Tool> {
        &self.tool
    }
}

/// Builds a `tool` step.
pub struct ToolStepBuilder<I, O> {
    id: String,
    tool: Arc<dyn Tool>,
    args: Map<String, Value>,
    to_json: fn(I) -> Result<Value, serde_json::Error>,
    from_json: fn(Value) -> Result<O, serde_json::Error>,
}

impl<I: Serialize + Send + 'static, O: DeserializeOwned + Send + 'static> Step<I, O> {
    /// A step that calls `tool` with the input (serialised to a JSON object) as arguments.
    pub fn tool(id: impl Into<String>, tool: Arc<dyn Tool>) -> ToolStepBuilder<I, O> {
        ToolStepBuilder {
            id: id.into(),
            tool,
            args: Map::new(),
            to_json: serde_json::to_value::<I>,
            from_json: serde_json::from_value::<O>,
        }
    }
}

impl<I: Send + 'static, O: Send + 'static> ToolStepBuilder<I, O> {
    /// Preset arguments; they override fields of the same name in the input.
    pub fn args(mut self, args: Map<String, Value>) -> Self {
        self.args = args;
        self
    }

    /// Validates and builds the step.
    pub fn build(self) -> Result<Step<I, O>, ConfigError> {
        let id = validate_id(&self.id, "tool")?;
        Ok(Step::Tool(Arc::new(StepTool {
            id,
            tool: self.tool,
            args: self.args,
            to_json: self.to_json,
            from_json: self.from_json,
        })))
    }
}
