//! What a step runs in: a [`Context`] and, typed, the services, the memory layers and the tools in scope.
//!
//! A [`Context`] is identity, cancellation, the item log and events; tools receive it. The interpreter passes a
//! [`StepContext`], which adds what steps use: the [`Services`] (the model, the approver …) and a session turn's
//! [`TurnServices`], the [`LayerStack`] whose hooks they run — each hook gets a [`HookContext`], the context and
//! the services — and the [`Tools`] an `llm` step offers the model. This module sits above the layer and tool
//! modules, so it names their types; a `StepContext` dereferences to its `Context`.
//!
//! ```
//! use noetic::prelude::*;
//! use noetic::{StepContext, model::Item};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A run step gets the step context it runs in; through it, the context's item log.
//! let step = Step::run("note", |text: String, ctx: StepContext| async move {
//!     ctx.push_item(Item::user(text));
//!     Ok(ctx.item_count())
//! })
//! .build()?;
//! let ctx = StepContext::builder().items(vec![Item::user("hi")]).build();
//! assert_eq!(step.execute("there".to_owned(), &ctx).await?, 2);
//! assert!(ctx.layers().is_empty() && ctx.tools().is_empty());
//! # Ok(())
//! # }
//! ```

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, LazyLock};

use tokio_util::sync::CancellationToken;

use crate::context::{Approver, Context, ContextBuilder, EventSink, ExecutionId, HookContext, Services, TurnServices};
use crate::layer::{LayerStack, MemoryLayer};
use crate::model::{History, Item, Model};
use crate::sync::CachePadded;
use crate::tool::{Tool, ToolSet, ToolSource, Tools, add_tool_memory_to};

/// The services, the memory layers and the tools in scope: one allocation, shared by every step context that has the
/// same (a runtime keeps one per thread, alone on its cache lines, so threads do not write one reference count).
#[derive(Clone, Default)]
pub struct InScope {
    layers: LayerStack,
    tools: Tools,
    services: Services,
}

impl InScope {
    /// `layers` and `tools` in scope, no services (the memory `tools` declare is not added here: see
    /// [`StepContextBuilder::tools`]).
    pub fn new(layers: LayerStack, tools: Tools) -> Self {
        InScope { layers, tools, services: Services::default() }
    }

    /// The same with `services`.
    pub fn with_services(self, services: Services) -> Self {
        InScope { services, ..self }
    }

    /// The services.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// The memory layers, in slot order.
    pub fn layers(&self) -> &LayerStack {
        &self.layers
    }

    /// The tools (the fixed ones and the sources).
    pub fn tools(&self) -> &Tools {
        &self.tools
    }

    /// A copy whose fixed tools have reference counts of their own (a runtime's per-thread copy).
    pub fn replica(&self) -> InScope {
        InScope { layers: self.layers.clone(), tools: self.tools.replica(), services: self.services.clone() }
    }
}

/// Nothing in scope: what a step context made without layers or tools reads (it holds no reference to it, so its
/// clones write no reference count).
static NOTHING: LazyLock<InScope> = LazyLock::new(InScope::default);

/// What a step runs in: its [`Context`] (what [`Deref`] gives), the services, and the memory layers and tools in
/// scope. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct StepContext {
    ctx: Context,
    /// `None`: nothing in scope.
    parts: Option<Arc<CachePadded<InScope>>>,
    /// The session turn's own services (none outside a session turn); its spawned children and fork paths share
    /// them.
    turn: Option<Arc<TurnServices>>,
}

impl StepContext {
    /// A root step context: a new context ([`Context::new`]), no layers, no tools.
    pub fn new() -> Self {
        StepContext::from(Context::new())
    }

    /// Starts building a root step context: its context's parts, and the layers and tools in scope.
    pub fn builder() -> StepContextBuilder {
        StepContextBuilder::default()
    }

    /// `ctx` with `parts` in scope (a runtime's per-thread copy, say).
    pub fn of(ctx: Context, parts: Arc<CachePadded<InScope>>) -> Self {
        StepContext { ctx, parts: Some(parts), turn: None }
    }

    /// The same, in a session turn with `turn`'s steering, journal, records and meter.
    #[doc(hidden)]
    pub fn in_turn(self, turn: TurnServices) -> Self {
        StepContext { turn: Some(Arc::new(turn)), ..self }
    }

    /// What is in scope.
    fn in_scope(&self) -> &InScope {
        match &self.parts {
            Some(parts) => parts,
            None => &NOTHING,
        }
    }

    /// The same parts, in a new allocation with `layers` instead.
    fn with_parts(&self, ctx: Context, layers: LayerStack) -> StepContext {
        let scope = self.in_scope();
        let parts = InScope { layers, tools: scope.tools.clone(), services: scope.services.clone() };
        StepContext { ctx, parts: Some(Arc::new(CachePadded::new(parts))), turn: self.turn.clone() }
    }

    /// A child's step context: `ctx` with this one's parts and turn.
    fn with_ctx(&self, ctx: Context) -> StepContext {
        StepContext { ctx, parts: self.parts.clone(), turn: self.turn.clone() }
    }

    /// The context: what tools receive.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// What memory layers' hooks receive: the context and the services.
    pub fn hooks(&self) -> HookContext<'_> {
        HookContext::new(&self.ctx, self.services(), self.turn.as_deref())
    }

    /// The services (the model, the approver …).
    pub fn services(&self) -> &Services {
        match &self.parts {
            Some(parts) => &parts.services,
            None => &crate::context::NO_SERVICES,
        }
    }

    /// The memory layers in scope, in slot order.
    pub fn layers(&self) -> &LayerStack {
        &self.in_scope().layers
    }

    /// The tools in scope now (the fixed ones and each source's).
    pub fn tools(&self) -> ToolSet {
        self.in_scope().tools.snapshot()
    }

    /// [`StepContext::tools`], borrowed when they are a fixed set (no clone: its reference counts are the runtime's,
    /// which every turn would write).
    pub(crate) fn tools_now(&self) -> Cow<'_, ToolSet> {
        self.in_scope().tools.now()
    }

    /// A fork path's step context: [`Context::fork_child`], the same layers and tools.
    pub fn fork_child(&self) -> StepContext {
        self.with_ctx(self.ctx.fork_child())
    }

    /// [`StepContext::fork_child`], made in `spare`'s context allocation when `spare` is a finished fork path of
    /// this step context that nothing else holds (see `Context::fork_child_reusing`).
    pub(crate) fn fork_child_reusing(&self, spare: Option<StepContext>) -> StepContext {
        fn same<T>(a: &Option<Arc<T>>, b: &Option<Arc<T>>) -> bool {
            match (a, b) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (a, b) => a.is_none() && b.is_none(),
            }
        }
        match spare {
            // The spare's parts and turn are this one's: kept as they are, so no reference count is written.
            Some(StepContext { ctx, parts, turn }) if same(&parts, &self.parts) && same(&turn, &self.turn) => {
                StepContext { ctx: self.ctx.fork_child_reusing(Some(ctx)), parts, turn }
            }
            _ => self.fork_child(),
        }
    }

    /// A spawned step's step context: [`Context::spawn_child`] with `items`, the given layers, the same tools.
    pub fn spawn_child(&self, items: Vec<Item>, layers: LayerStack) -> StepContext {
        self.with_parts(self.ctx.spawn_child(items), layers)
    }

    /// A spawned step's step context with this one's layers and tools in scope (shared, not copied).
    pub(crate) fn spawn_child_in_scope(&self, items: Vec<Item>) -> StepContext {
        self.with_ctx(self.ctx.spawn_child(items))
    }

    /// The same context with more memory layers in scope (a provided layer replaces one with the same id).
    pub fn with_layers(&self, provided: &[Arc<dyn MemoryLayer>]) -> StepContext {
        if provided.is_empty() {
            return self.clone();
        }
        self.with_parts(self.ctx.clone(), self.layers().merged(provided))
    }

    /// The same step context, one nesting level deeper (used for the children of composite steps).
    pub(crate) fn nested(&self) -> StepContext {
        self.with_ctx(self.ctx.nested())
    }
}

impl Default for StepContext {
    fn default() -> Self {
        StepContext::new()
    }
}

impl From<Context> for StepContext {
    /// `ctx` with no layers and no tools in scope.
    fn from(ctx: Context) -> Self {
        StepContext { ctx, parts: None, turn: None }
    }
}

impl Deref for StepContext {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.ctx
    }
}

impl<'a> From<&'a StepContext> for HookContext<'a> {
    /// What hooks called in `ctx` receive ([`StepContext::hooks`]).
    fn from(ctx: &'a StepContext) -> Self {
        ctx.hooks()
    }
}

impl AsRef<Context> for StepContext {
    fn as_ref(&self) -> &Context {
        &self.ctx
    }
}

impl fmt::Debug for StepContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepContext").field("ctx", &self.ctx).field("layers", self.layers()).finish_non_exhaustive()
    }
}

/// Builds a root [`StepContext`]: what [`ContextBuilder`] sets, and the layers and tools.
#[derive(Default)]
pub struct StepContextBuilder {
    ctx: ContextBuilder,
    layers: LayerStack,
    tools: Tools,
    services: Services,
    turn: Option<TurnServices>,
}

impl StepContextBuilder {
    /// The context as `ctx` builds it (replacing what was set here before).
    pub fn context(mut self, ctx: ContextBuilder) -> Self {
        self.ctx = ctx;
        self
    }

    /// The conversation thread this execution belongs to (scopes `Thread` layer state).
    pub fn thread_id(mut self, id: impl Into<Arc<str>>) -> Self {
        self.ctx = self.ctx.thread_id(id);
        self
    }

    /// The resource (user, project …) this execution belongs to (scopes `Resource` layer state).
    pub fn resource_id(mut self, id: impl Into<Arc<str>>) -> Self {
        self.ctx = self.ctx.resource_id(id);
        self
    }

    /// The conversation so far.
    pub fn items(mut self, items: Vec<Item>) -> Self {
        self.ctx = self.ctx.items(items);
        self
    }

    /// The conversation so far, shared without copying.
    pub fn history(mut self, history: History) -> Self {
        self.ctx = self.ctx.history(history);
        self
    }

    /// Where events go.
    pub fn events(mut self, events: EventSink) -> Self {
        self.ctx = self.ctx.events(events);
        self
    }

    /// The model `llm` steps call.
    pub fn model(mut self, model: Arc<dyn Model>) -> Self {
        self.services.model = Some(model);
        self
    }

    /// The approver for tools that need approval.
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.services.approver = Some(approver);
        self
    }

    /// Whether traces record content — prompts, responses, tool arguments and results (default off: only sizes
    /// and ids; see [`crate::trace`]).
    pub fn capture_content(mut self, on: bool) -> Self {
        self.services.capture_content = on;
        self
    }

    /// Uses this execution id instead of a fresh one.
    pub fn execution_id(mut self, id: ExecutionId) -> Self {
        self.ctx = self.ctx.execution_id(id);
        self
    }

    /// Cancel the context when `token` is cancelled.
    pub fn cancel_with(mut self, token: &CancellationToken) -> Self {
        self.ctx = self.ctx.cancel_with(token);
        self
    }

    /// Model, approver and the rest at once (replacing what `model`, `approver` and `capture_content` set).
    pub fn services(mut self, services: Services) -> Self {
        self.services = services;
        self
    }

    /// A session turn's steering, journal, records and meter.
    #[doc(hidden)]
    pub fn turn_services(mut self, turn: TurnServices) -> Self {
        self.turn = Some(turn);
        self
    }

    /// Memory layers in scope for every step; a layer replaces one with the same id given before (a tool's
    /// declared memory, say).
    pub fn layers(mut self, layers: impl IntoIterator<Item = Arc<dyn MemoryLayer>>) -> Self {
        let layers: Vec<Arc<dyn MemoryLayer>> = layers.into_iter().collect();
        self.layers = self.layers.merged(&layers);
        self
    }

    /// Tools in scope. Memory they declare joins the layers (unless a layer with that id is there).
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        let tools: Vec<Arc<dyn Tool>> = tools.into_iter().collect();
        add_tool_memory_to(&mut self.layers, &tools);
        self.tools.add(tools);
        self
    }

    /// A source of tools that may change while the execution runs.
    pub fn tool_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.tools.add_source(source);
        self
    }

    /// Builds the step context.
    pub fn build(self) -> StepContext {
        let ctx = self.ctx.build();
        let turn = self.turn.map(Arc::new);
        if self.layers.is_empty() && self.tools.is_empty() && self.services.is_empty() {
            return StepContext { ctx, parts: None, turn };
        }
        let parts = InScope::new(self.layers, self.tools).with_services(self.services);
        StepContext { ctx, parts: Some(Arc::new(CachePadded::new(parts))), turn }
    }
}
