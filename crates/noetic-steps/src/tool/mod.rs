//! Tools: named functions a model (or a `tool` step) can call with JSON arguments.
//!
//! [`Tool`] is the object-safe interface; [`FnTool`] builds one from an async function over
//! `serde_json::Value`. Arguments are validated against the input [`Schema`] before the tool runs, and results
//! against the output schema after.

pub(crate) mod call;
mod memory;
mod output;
mod schema;
mod set;
mod typed;

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

pub use crate::context::{Approval, ApprovalRequest, Approver, FnApprover};
pub use memory::{TOOL_MEMORY_SLOT, ToolMemory, ToolMemoryLayer, tool_memory_layers};
pub use memory::{add_tool_memory_layers, add_tool_memory_to};
pub use output::ToolOutput;
pub use schema::Schema;
pub use set::Tools;
pub use set::{DynamicTools, ToolSet, ToolSource};
pub use typed::{TypedTool, tool_fn};

use crate::context::{Context, EventKind};
use crate::error::{ConfigCode, ConfigError};

/// What a tool sees while it runs.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The context of the step that called the tool; watch `ctx.cancelled()` in long-running tools.
    pub ctx: Context,
    /// The id of this call (the model's call id, or the step id for a `tool` step).
    pub call_id: Arc<str>,
    /// The tool's name.
    pub tool: Arc<str>,
    /// The tool's event schema, if it declares one; progress data is checked against it.
    pub event_schema: Option<Schema>,
}

impl ToolContext {
    /// Reports progress: emitted as a `tool_progress` event to whoever watches the execution. Data that breaks
    /// the tool's event schema is not emitted; the error says why.
    pub fn progress(&self, data: Value) -> Result<(), String> {
        if let Some(schema) = &self.event_schema {
            schema
                .validate(&data)
                .map_err(|p| format!("progress event of '{}' breaks its event schema: {p}", self.tool))?;
        }
        let (call_id, tool) = (&self.call_id, &self.tool);
        self.ctx.emit(|| EventKind::ToolProgress { call_id: call_id.clone(), tool: tool.clone(), data });
        Ok(())
    }
}

pub use crate::model::ToolErrorKind;

/// An error a tool returns. Its message is shown to the model, so say what went wrong and what to try instead;
/// its kind travels with the `tool_call_completed` event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// What kind of failure.
    pub kind: ToolErrorKind,
    /// What went wrong.
    pub message: String,
}

impl ToolError {
    /// A tool error with a message (kind [`ToolErrorKind::Failed`]).
    pub fn new(message: impl fmt::Display) -> Self {
        ToolError { kind: ToolErrorKind::Failed, message: message.to_string() }
    }

    /// A tool error of a kind.
    pub fn of(kind: ToolErrorKind, message: impl fmt::Display) -> Self {
        ToolError { kind, message: message.to_string() }
    }
}

/// A tool.
pub trait Tool: Send + Sync + 'static {
    /// The name the model calls it by.
    fn name(&self) -> &str;

    /// What it does, shown to the model.
    fn description(&self) -> &str;

    /// JSON Schema of the arguments.
    fn input_schema(&self) -> &Schema;

    /// JSON Schema of the result, if declared.
    fn output_schema(&self) -> Option<&Schema> {
        None
    }

    /// JSON Schema of the progress events the tool reports, if declared.
    fn event_schema(&self) -> Option<&Schema> {
        None
    }

    /// When true, each call waits for an approver's decision before running.
    fn needs_approval(&self) -> bool {
        false
    }

    /// True when running a call twice has the effect of running it once (a read, a lookup). A turn resumed after
    /// its process died runs such a call again if it was running; any other gets an interrupted result instead.
    fn idempotent(&self) -> bool {
        false
    }

    /// True when calls of this tool may run at the same time as other such calls (a read, a lookup: nothing a
    /// concurrent call could observe half done). An `llm` step with
    /// `parallel_tools` (`Step::llm(..).parallel_tools(n)`) above 1 runs consecutive calls of such tools
    /// together; a call of any other tool runs alone, in order. The default is false.
    fn concurrent(&self) -> bool {
        false
    }

    /// Lets the tool adjust its result item before it is appended to the conversation and emitted (add a note,
    /// trim a long output …). The default keeps it as it is.
    fn decorate_result(&self, result: crate::model::ToolResult) -> crate::model::ToolResult {
        result
    }

    /// Memory the tool declares: the runtime turns it into a memory layer (slot 110, scope execution) whose
    /// recall shows the tool's state to the model while the tool is in scope. The default declares none.
    fn memory(&self) -> Option<&ToolMemory> {
        None
    }

    /// Runs the tool on validated arguments. A JSON result converts with `.into()`; see [`ToolOutput`] for
    /// content blocks (images, resources) and structured data.
    fn call(&self, args: Value, tcx: ToolContext) -> BoxFuture<'static, Result<ToolOutput, ToolError>>;
}

type Handler = Arc<dyn Fn(Value, ToolContext) -> BoxFuture<'static, Result<ToolOutput, ToolError>> + Send + Sync>;

/// A tool made from an async function over JSON values.
///
/// ```
/// use noetic::tool::{FnTool, Schema, ToolError};
/// use serde_json::json;
///
/// let echo = FnTool::builder("echo", "Returns its input.")
///     .input_schema(json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}))
///     .handler(|args, _tcx| async move { Ok::<_, ToolError>(args["text"].clone()) })
///     .build()
///     .unwrap();
/// # let _ = echo;
/// ```
#[derive(Clone)]
pub struct FnTool {
    name: String,
    description: String,
    input: Schema,
    output: Option<Schema>,
    events: Option<Schema>,
    needs_approval: bool,
    idempotent: bool,
    concurrent: bool,
    memory: Option<ToolMemory>,
    handler: Handler,
}

impl fmt::Debug for FnTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTool").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Builds a [`FnTool`].
pub struct FnToolBuilder {
    name: String,
    description: String,
    input: Value,
    output: Option<Value>,
    events: Option<Value>,
    needs_approval: bool,
    idempotent: bool,
    concurrent: bool,
    memory: Option<ToolMemory>,
    handler: Option<Handler>,
}

impl FnTool {
    /// Starts a tool with a name and a description. The input schema defaults to "any object".
    pub fn builder(name: impl Into<String>, description: impl Into<String>) -> FnToolBuilder {
        FnToolBuilder {
            name: name.into(),
            description: description.into(),
            input: serde_json::json!({"type": "object"}),
            output: None,
            events: None,
            needs_approval: false,
            idempotent: false,
            concurrent: false,
            memory: None,
            handler: None,
        }
    }
}

impl FnToolBuilder {
    /// JSON Schema of the arguments.
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input = schema;
        self
    }

    /// JSON Schema of the result.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output = Some(schema);
        self
    }

    /// JSON Schema of progress events.
    pub fn event_schema(mut self, schema: Value) -> Self {
        self.events = Some(schema);
        self
    }

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

    /// The function that does the work, returning a JSON value.
    pub fn handler<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        self.handler = Some(Arc::new(move |args, tcx| {
            let run = f(args, tcx);
            Box::pin(async move { run.await.map(ToolOutput::from) })
        }));
        self
    }

    /// The function that does the work, returning a [`ToolOutput`]: content blocks (text, JSON, images,
    /// resources) and structured data.
    ///
    /// ```
    /// use noetic::model::ContentBlock;
    /// use noetic::tool::{FnTool, ToolError, ToolOutput};
    ///
    /// let plot = FnTool::builder("plot", "Plots the sales of a month.")
    ///     .rich_handler(|_args, _tcx| async move {
    ///         Ok::<_, ToolError>(
    ///             ToolOutput::text("Sales per day in May:")
    ///                 .with_block(ContentBlock::image_url("image/png", "https://example.com/may.png")),
    ///         )
    ///     })
    ///     .build()
    ///     .unwrap();
    /// # let _ = plot;
    /// ```
    pub fn rich_handler<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        self.handler = Some(Arc::new(move |args, tcx| Box::pin(f(args, tcx))));
        self
    }

    /// Validates and builds: the name must be non-empty, a handler must be set and the schemas must compile.
    pub fn build(self) -> Result<FnTool, ConfigError> {
        if self.name.trim().is_empty() {
            return Err(ConfigError::new(
                ConfigCode::EmptyToolName,
                "a tool has an empty name",
                "give the tool a name",
            ));
        }
        let handler = self.handler.ok_or_else(|| {
            ConfigError::new(
                ConfigCode::MissingExecuteFunction,
                format!("tool '{}' has no handler", self.name),
                "call .handler(...) before .build()",
            )
        })?;
        Ok(FnTool {
            input: Schema::new(self.input)?,
            output: self.output.map(Schema::new).transpose()?,
            events: self.events.map(Schema::new).transpose()?,
            name: self.name,
            description: self.description,
            needs_approval: self.needs_approval,
            idempotent: self.idempotent,
            concurrent: self.concurrent,
            memory: self.memory,
            handler,
        })
    }
}

impl Tool for FnTool {
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
        self.output.as_ref()
    }

    fn event_schema(&self) -> Option<&Schema> {
        self.events.as_ref()
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
        (self.handler)(args, tcx)
    }
}

/// Fails with `DUPLICATE_TOOL_NAME` when two tools share a name: the model would be offered both specs while
/// only the first could ever run. `scope` names where the tools were given (for the message).
pub fn check_unique_names(tools: &[Arc<dyn Tool>], scope: &str) -> Result<(), ConfigError> {
    let mut seen = std::collections::HashSet::with_capacity(tools.len());
    for tool in tools {
        if !seen.insert(tool.name()) {
            return Err(ConfigError::new(
                ConfigCode::DuplicateToolName,
                format!("{scope} has two tools named '{}'", tool.name()),
                "give every tool a distinct name (prefix tools from different sources, e.g. 'server__tool')",
            ));
        }
    }
    Ok(())
}
