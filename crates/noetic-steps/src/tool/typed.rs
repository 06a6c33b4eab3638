//! Typed tools: a plain async function over `serde` + `schemars` types becomes a [`Tool`].

use std::marker::PhantomData;
use std::sync::Arc;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Schema, Tool, ToolContext, ToolError, ToolMemory, ToolOutput};
use crate::error::{ConfigCode, ConfigError};

type TypedHandler<A, R> = Arc<dyn Fn(A, ToolContext) -> BoxFuture<'static, Result<R, ToolError>> + Send + Sync>;

/// A tool over typed arguments `A` and result `R`; schemas are derived with `schemars`.
pub struct TypedTool<A, R> {
    name: String,
    description: String,
    input: Schema,
    output: Schema,
    needs_approval: bool,
    idempotent: bool,
    concurrent: bool,
    memory: Option<ToolMemory>,
    handler: TypedHandler<A, R>,
    _types: PhantomData<fn(A) -> R>,
}

/// Makes a typed tool from an async function.
///
/// ```
/// use noetic::tool::{tool_fn, ToolError};
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Add { a: i64, b: i64 }
///
/// #[derive(Serialize, JsonSchema)]
/// struct Sum { sum: i64 }
///
/// let add = tool_fn("add", "Adds two integers.", |args: Add, _tcx| async move {
///     Ok::<_, ToolError>(Sum { sum: args.a + args.b })
/// })
/// .unwrap();
/// # let _ = add;
/// ```
pub fn tool_fn<A, R, F, Fut>(
    name: impl Into<String>,
    description: impl Into<String>,
    f: F,
) -> Result<TypedTool<A, R>, ConfigError>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    R: Serialize + JsonSchema + Send + 'static,
    F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
{
    let name = name.into();
    if name.trim().is_empty() {
        return Err(ConfigError::new(ConfigCode::EmptyToolName, "a tool has an empty name", "give the tool a name"));
    }
    Ok(TypedTool {
        name,
        description: description.into(),
        input: Schema::new(schemars::schema_for!(A).to_value())?,
        output: Schema::new(schemars::schema_for!(R).to_value())?,
        needs_approval: false,
        idempotent: false,
        concurrent: false,
        memory: None,
        handler: Arc::new(move |a, tcx| Box::pin(f(a, tcx))),
        _types: PhantomData,
    })
}

impl<A, R> TypedTool<A, R> {
    /// Require approval before each call.
    pub fn needs_approval(mut self, yes: bool) -> Self {
        self.needs_approval = yes;
        self
    }

    /// Declares that running a call twice is harmless (see [`Tool::idempotent`]).
    pub fn idempotent(mut self, yes: bool) -> Self {
        self.idempotent = yes;
        self
    }

    /// Declares that calls of this tool may run together with other such calls (see [`Tool::concurrent`]).
    pub fn concurrent(mut self) -> Self {
        self.concurrent = true;
        self
    }

    /// Declares memory shown to the model while the tool is in scope (see [`ToolMemory`]).
    pub fn memory(mut self, memory: ToolMemory) -> Self {
        self.memory = Some(memory);
        self
    }
}

impl<A, R> Tool for TypedTool<A, R>
where
    A: DeserializeOwned + Send + 'static,
    R: Serialize + Send + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> &Schema {
        &self.input
    }

    fn output_schema(&self) -> Option<&Schema> {
        Some(&self.output)
    }

    fn needs_approval(&self) -> bool {
        self.needs_approval
    }

    fn idempotent(&self) -> bool {
        self.idempotent
    }

    fn concurrent(&self) -> bool {
        self.concurrent
    }

    fn memory(&self) -> Option<&ToolMemory> {
        self.memory.as_ref()
    }

    fn call(&self, args: Value, tcx: ToolContext) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let handler = self.handler.clone();
        let name = self.name.clone();
        Box::pin(async move {
            let args: A = serde_json::from_value(args)
                .map_err(|e| ToolError::new(format!("arguments for '{name}' do not fit its parameters: {e}")))?;
            let result = handler(args, tcx).await?;
            let value = serde_json::to_value(result)
                .map_err(|e| ToolError::new(format!("the result of '{name}' is not JSON: {e}")))?;
            Ok(value.into())
        })
    }
}
