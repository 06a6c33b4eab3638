//! Memory a tool declares (SPEC 5.5): an `init` and a `recall`, which the runtime turns into a memory layer so the
//! tool's state is shown to the model while the tool is in scope.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use noetic::tool::{FnTool, ToolMemory};
//! use serde_json::json;
//!
//! // A to-do tool whose list the model sees before every model call.
//! let todos = Arc::new(Mutex::new(Vec::<String>::new()));
//! let shown = todos.clone();
//! let added = todos.clone();
//! let tool = FnTool::builder("add_todo", "Adds an item to the to-do list.")
//!     .input_schema(json!({"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}))
//!     .memory(ToolMemory::new(
//!         move || shown.clone(),
//!         |list: &Arc<Mutex<Vec<String>>>| {
//!             let list = list.lock().ok()?;
//!             (!list.is_empty()).then(|| format!("To-do list:\n- {}", list.join("\n- ")))
//!         },
//!     ))
//!     .handler(move |args, _| {
//!         let added = added.clone();
//!         async move {
//!             let item = args["item"].as_str().unwrap_or_default().to_owned();
//!             added.lock().map_err(|_| noetic::tool::ToolError::new("the list is poisoned"))?.push(item);
//!             Ok(json!("added"))
//!         }
//!     })
//!     .build()
//!     .unwrap();
//! # let _ = tool;
//! ```

use std::any::Any;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::Tool;
use crate::context::{Context, HookContext};
use crate::error::NoeticError;
use crate::layer::{self, LayerStack, LayerState, Lifecycle, MemoryLayer, Scope, ScopeKey, Slot};
use crate::model::Item;

/// The slot of tool-declared memory layers: after the steering layer (90) and working memory (100).
pub const TOOL_MEMORY_SLOT: Slot = Slot(110);

type State = Arc<dyn Any + Send + Sync>;
type Init = Arc<dyn Fn() -> State + Send + Sync>;
type Recall = Arc<dyn Fn(&State) -> Option<String> + Send + Sync>;

/// A tool's memory declaration: `init` makes the state at the start of each execution, `recall` turns it into text
/// for the model (a developer message), or nothing.
#[derive(Clone)]
pub struct ToolMemory {
    id: Option<String>,
    init: Init,
    recall: Recall,
}

impl fmt::Debug for ToolMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolMemory").field("id", &self.id).finish_non_exhaustive()
    }
}

impl ToolMemory {
    /// A declaration with an `init` making the state and a `recall` reading it.
    pub fn new<S, I, R>(init: I, recall: R) -> Self
    where
        S: Send + Sync + 'static,
        I: Fn() -> S + Send + Sync + 'static,
        R: Fn(&S) -> Option<String> + Send + Sync + 'static,
    {
        ToolMemory {
            id: None,
            init: Arc::new(move || Arc::new(init()) as State),
            recall: Arc::new(move |state| state.downcast_ref::<S>().and_then(&recall)),
        }
    }

    /// Names the memory (default: the tool's name). Tools declaring the same id share one layer: the first
    /// declaration in tool order is used.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
}

/// The layer a [`ToolMemory`] becomes: id `tool:<memory id>`, slot 110, scope execution.
pub struct ToolMemoryLayer {
    layer_id: String,
    memory: ToolMemory,
    states: LayerState<Option<State>>,
}

impl ToolMemoryLayer {
    fn state(&self, ctx: &Context) -> Result<State, NoeticError> {
        let entry = self.states.entry(&ScopeKey::for_context(ctx, Scope::Execution));
        let mut slot = crate::context::lock(&entry);
        if let Some(state) = slot.as_ref() {
            return Ok(state.clone());
        }
        let state = std::panic::catch_unwind(AssertUnwindSafe(|| (self.memory.init)()))
            .map_err(|_| NoeticError::other(format!("the init of tool memory '{}' panicked", self.layer_id)))?;
        *slot = Some(state.clone());
        Ok(state)
    }
}

impl MemoryLayer for ToolMemoryLayer {
    fn id(&self) -> &str {
        &self.layer_id
    }

    fn slot(&self) -> Slot {
        TOOL_MEMORY_SLOT
    }

    fn scope(&self) -> Scope {
        Scope::Execution
    }

    fn as_recall(&self) -> Option<&dyn layer::Recall> {
        Some(self)
    }

    fn as_lifecycle(&self) -> Option<&dyn Lifecycle> {
        Some(self)
    }
}

/// Sets up the memory's state for an execution, and lets it go when the execution ends.
impl Lifecycle for ToolMemoryLayer {
    fn init<'a>(&'a self, ctx: &'a HookContext<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async move { self.state(ctx).map(|_| ()) })
    }

    fn dispose<'a>(&'a self, ctx: &'a HookContext<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async move {
            self.states.remove(&ScopeKey::for_context(ctx, Scope::Execution));
            Ok(())
        })
    }
}

/// Shows the memory's state to the model.
impl layer::Recall for ToolMemoryLayer {
    fn recall<'a>(&'a self, ctx: &'a HookContext<'a>, _budget: u32) -> BoxFuture<'a, Result<Vec<Item>, NoeticError>> {
        Box::pin(async move {
            // A nested execution that skipped init gets its state here.
            let state = self.state(ctx)?;
            let text = std::panic::catch_unwind(AssertUnwindSafe(|| (self.memory.recall)(&state)))
                .map_err(|_| NoeticError::other(format!("the recall of tool memory '{}' panicked", self.layer_id)))?;
            Ok(text.map(Item::developer).into_iter().collect())
        })
    }
}

/// The memory layers `tools` declare, one per unique memory id (the first declaration wins), in tool order.
pub fn tool_memory_layers(tools: &[Arc<dyn Tool>]) -> Vec<Arc<dyn MemoryLayer>> {
    let mut layers = Vec::new();
    add_tool_memory_layers(&mut layers, tools);
    layers
}

/// Adds to `layers` the memory layers `tools` declare whose ids it does not hold yet (a layer given with a tool's
/// memory id stands); nothing changes, and nothing is allocated, when no tool declares memory.
pub fn add_tool_memory_to(layers: &mut LayerStack, tools: &[Arc<dyn Tool>]) {
    if tools.iter().all(|t| t.memory().is_none()) {
        return;
    }
    let mut all: Vec<Arc<dyn MemoryLayer>> = layers.to_vec();
    add_tool_memory_layers(&mut all, tools);
    *layers = LayerStack::new(all);
}

/// Adds the memory layers `tools` declare (each tool with a memory) to `layers`.
pub fn add_tool_memory_layers(layers: &mut Vec<Arc<dyn MemoryLayer>>, tools: &[Arc<dyn Tool>]) {
    for tool in tools {
        let Some(memory) = tool.memory() else { continue };
        let id = memory.id.as_deref().unwrap_or(tool.name());
        if layers.iter().any(|l| l.id().strip_prefix("tool:") == Some(id)) {
            continue;
        }
        let layer_id = format!("tool:{id}");
        layers.push(Arc::new(ToolMemoryLayer { layer_id, memory: memory.clone(), states: LayerState::default() }));
    }
}
