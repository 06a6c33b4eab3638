//! Memory layers: pluggable components that see every execution's lifecycle.
//!
//! A layer has an id, a [`Slot`] (lower runs first), a [`Scope`] and a token [`Budget`]. The hooks here are the
//! lifecycle ones `provide` and executions call; the gating hooks (`before_tool_call`, `after_model_call`) and
//! recall/store arrive with the steering layer.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::context::Context;
use crate::error::NoeticError;

/// Where a layer runs relative to others: lower slots run first. Ties keep insertion order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Slot(pub u32);

impl Slot {
    /// Reminders.
    pub const REMINDER: Slot = Slot(80);
    /// The steering layer: before everything else, so policy precedes side effects.
    pub const STEERING: Slot = Slot(90);
    /// Working memory (the default slot).
    pub const WORKING_MEMORY: Slot = Slot(100);
    /// Layers declared by tools.
    pub const TOOL_MEMORY: Slot = Slot(110);
    /// Entity memory.
    pub const ENTITY: Slot = Slot(150);
    /// Observations.
    pub const OBSERVATIONS: Slot = Slot(200);
    /// Procedural memory.
    pub const PROCEDURAL: Slot = Slot(250);
    /// Episodic memory.
    pub const EPISODIC: Slot = Slot(300);
    /// Retrieval-augmented context.
    pub const RAG: Slot = Slot(350);
    /// Semantic recall.
    pub const SEMANTIC_RECALL: Slot = Slot(400);
}

/// How long a layer's state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// One execution; fresh state each run.
    #[default]
    Execution,
    /// A conversation thread.
    Thread,
    /// A resource (user, project), across threads.
    Resource,
    /// Everything.
    Global,
}

/// A layer's share of the model's context window, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// Tokens the layer is guaranteed.
    pub min: u32,
    /// Tokens the layer may use at most.
    pub max: u32,
}

impl Default for Budget {
    fn default() -> Self {
        Budget { min: 0, max: u32::MAX }
    }
}

/// How an execution ended, as told to [`MemoryLayer::on_complete`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The execution returned a value.
    Success,
    /// The execution failed with an error.
    Failure,
    /// The execution was cancelled.
    Aborted,
}

impl Outcome {
    /// The outcome of a result.
    pub fn of<T>(result: &Result<T, NoeticError>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(e) if e.is_cancelled() => Outcome::Aborted,
            Err(_) => Outcome::Failure,
        }
    }
}

/// A memory layer. Every hook is optional.
pub trait MemoryLayer: Send + Sync + 'static {
    /// Unique id within the layers in scope; a provided layer with the same id replaces an outer one.
    fn id(&self) -> &str;

    /// Run order; lower first.
    fn slot(&self) -> Slot {
        Slot::WORKING_MEMORY
    }

    /// State lifetime.
    fn scope(&self) -> Scope {
        Scope::Execution
    }

    /// Context-window budget.
    fn budget(&self) -> Budget {
        Budget::default()
    }

    /// Called once before the layer is first used in an execution.
    fn init<'a>(&'a self, _ctx: &'a Context) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async { Ok(()) })
    }

    /// Called when an execution that used the layer ends, whatever the outcome.
    fn on_complete<'a>(&'a self, _ctx: &'a Context, _outcome: Outcome) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async { Ok(()) })
    }

    /// Called last, after [`MemoryLayer::on_complete`], to release resources.
    fn dispose<'a>(&'a self, _ctx: &'a Context) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async { Ok(()) })
    }
}

/// The layers in scope, sorted by slot (stable). Cheap to clone.
#[derive(Clone, Default)]
pub struct LayerStack(Arc<[Arc<dyn MemoryLayer>]>);

impl LayerStack {
    /// Sorts `layers` by slot, keeping insertion order for ties.
    pub fn new(layers: impl IntoIterator<Item = Arc<dyn MemoryLayer>>) -> Self {
        let mut v: Vec<_> = layers.into_iter().collect();
        v.sort_by_key(|l| l.slot());
        LayerStack(v.into())
    }

    /// These layers minus any whose id is in `provided`, plus `provided`, sorted by slot.
    pub fn merged(&self, provided: &[Arc<dyn MemoryLayer>]) -> Self {
        if provided.is_empty() {
            return self.clone();
        }
        let kept = self.0.iter().filter(|l| !provided.iter().any(|p| p.id() == l.id())).cloned();
        LayerStack::new(kept.chain(provided.iter().cloned()))
    }

    /// The layer with this id.
    pub fn get(&self, id: &str) -> Option<&Arc<dyn MemoryLayer>> {
        self.0.iter().find(|l| l.id() == id)
    }
}

impl Deref for LayerStack {
    type Target = [Arc<dyn MemoryLayer>];

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl fmt::Debug for LayerStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter().map(|l| (l.id(), l.slot().0))).finish()
    }
}
