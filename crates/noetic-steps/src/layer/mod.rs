//! Memory layers: pluggable components that see every execution's lifecycle.
//!
//! A layer ([`MemoryLayer`]) has an id, a [`Slot`] (lower runs first), a [`Scope`], a token [`Budget`] and per-hook
//! [`HookTimeouts`]. What it does comes in four small traits, each optional: [`Recall`], [`Gates`], [`Lifecycle`]
//! and [`Persistence`]. The runtime calls the hooks through [`lifecycle`]:
//!
//! | hook | trait | when |
//! |---|---|---|
//! | `init` | [`Lifecycle`] | a session turn (or [`run`](crate::run)) starts; a `provide` step starts |
//! | `recall` | [`Recall`] | before every model request of an `llm` step; the output goes before the history |
//! | `before_tool_call` | [`Gates`] | before each tool call (model-driven or a `tool` step); may rewrite its arguments ([`ToolCallAction`]) |
//! | `after_model_call` | [`Gates`] | after each model response, before its tool calls run |
//! | `store` | [`Recall`] | when an `llm` step accepts its final response |
//! | `on_spawn` / `on_return` | [`Lifecycle`] | a `spawn` child or a fork path starts / succeeds |
//! | `on_complete` + `dispose` | [`Lifecycle`] | any execution ends (root, spawn child, fork path, provide), whatever the outcome |
//! | `save_state` / `load_state` | [`Persistence`] | a session kept in a store ends a turn / opens |
//!
//! Layer state lives in the layer, keyed by [`ScopeKey`]; [`LayerState`] is a ready-made store.

mod action;
mod allot;
mod hooks;
pub mod lifecycle;
mod state;

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use action::{MAX_REWRITES, Rewrite, ToolCallAction};
pub use allot::{Allotter, check_minimums};
pub use hooks::{Gates, Lifecycle, Persistence, Recall};
pub use state::{LayerState, ScopeKey};

use crate::error::NoeticError;
use crate::model::ModelResponse;

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

/// How an execution ended, as told to [`Lifecycle::on_complete`].
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

/// How long each hook may run before it is cancelled (`None` = no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookTimeouts {
    /// `init`.
    pub init: Option<Duration>,
    /// `recall`.
    pub recall: Option<Duration>,
    /// `store`.
    pub store: Option<Duration>,
    /// `before_tool_call`.
    pub before_tool_call: Option<Duration>,
    /// `after_model_call`.
    pub after_model_call: Option<Duration>,
    /// `on_spawn`.
    pub on_spawn: Option<Duration>,
    /// `on_return`.
    pub on_return: Option<Duration>,
    /// `on_complete`.
    pub on_complete: Option<Duration>,
    /// `dispose`.
    pub dispose: Option<Duration>,
}

impl Default for HookTimeouts {
    fn default() -> Self {
        let s = |secs| Some(Duration::from_secs(secs));
        HookTimeouts {
            init: s(10),
            recall: s(5),
            store: s(30),
            before_tool_call: s(5),
            after_model_call: s(10),
            on_spawn: s(10),
            on_return: s(10),
            on_complete: s(30),
            dispose: s(5),
        }
    }
}

/// What a failing or timed-out gating hook (`before_tool_call`, `after_model_call`) counts as.
/// A [`ConfigError`](crate::ConfigError) always fails the step, whatever the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookErrorPolicy {
    /// The layer abstains (its decision is left out).
    #[default]
    Abstain,
    /// The layer denies (fail closed).
    Deny,
}

/// The two gating hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hook {
    /// Before a tool call runs.
    BeforeToolCall,
    /// After a model response arrives.
    AfterModelCall,
}

/// A pending tool call, as gating hooks see it.
#[derive(Debug, Clone, Copy)]
pub struct ToolCallParams<'a> {
    /// The call id (the step id for a `tool` step).
    pub call_id: &'a str,
    /// The tool's name.
    pub name: &'a str,
    /// The arguments (parsed JSON).
    pub args: &'a Value,
}

/// A model response, as gating hooks see it.
#[derive(Debug, Clone, Copy)]
pub struct ModelCallParams<'a> {
    /// The `llm` step that called the model.
    pub step_id: &'a str,
    /// The model id.
    pub model: &'a str,
    /// The response.
    pub response: &'a ModelResponse,
}

/// A memory layer: its id and configuration, and what it does — each purpose a small trait of its own
/// ([`Recall`], [`Gates`], [`Lifecycle`], [`Persistence`]) that the layer implements and hands out from the
/// matching accessor (`None` by default: the runtime does not call the layer for that purpose).
///
/// The accessors must give the same answer for the layer's whole life: a [`LayerStack`] asks them once, when it is
/// made, to skip a hook no layer in it has.
///
/// ```
/// use noetic::layer::{MemoryLayer, Recall};
/// use noetic::model::Item;
/// use noetic::{HookContext, NoeticError};
///
/// /// Reminds the model of the date.
/// struct Today;
///
/// impl MemoryLayer for Today {
///     fn id(&self) -> &str {
///         "today"
///     }
///     fn as_recall(&self) -> Option<&dyn Recall> {
///         Some(self)
///     }
/// }
///
/// impl Recall for Today {
///     fn recall_now(&self, _ctx: &HookContext<'_>, _budget: u32) -> Option<Result<Vec<Item>, NoeticError>> {
///         Some(Ok(vec![Item::developer("Today is Thursday.")]))
///     }
/// }
/// ```
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

    /// Per-hook timeouts.
    fn timeouts(&self) -> HookTimeouts {
        HookTimeouts::default()
    }

    /// What a failing gating hook counts as.
    fn on_hook_error(&self) -> HookErrorPolicy {
        HookErrorPolicy::Abstain
    }

    /// The layer's recall and store hooks, if it has them.
    fn as_recall(&self) -> Option<&dyn Recall> {
        None
    }

    /// The layer's gating hooks, if it has them.
    fn as_gates(&self) -> Option<&dyn Gates> {
        None
    }

    /// The layer's lifecycle hooks, if it has them.
    fn as_lifecycle(&self) -> Option<&dyn Lifecycle> {
        None
    }

    /// The layer's state for programs and session stores, if it keeps any.
    fn as_persistence(&self) -> Option<&dyn Persistence> {
        None
    }
}

/// Which purposes the layers of a stack have between them (one bit each).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Purposes(u8);

impl Purposes {
    const RECALL: u8 = 1;
    const GATES: u8 = 2;
    const LIFECYCLE: u8 = 4;

    fn of(layer: &dyn MemoryLayer) -> Purposes {
        let bit = |has: bool, bit: u8| if has { bit } else { 0 };
        Purposes(
            bit(layer.as_recall().is_some(), Self::RECALL)
                | bit(layer.as_gates().is_some(), Self::GATES)
                | bit(layer.as_lifecycle().is_some(), Self::LIFECYCLE),
        )
    }
}

/// The layers in scope, sorted by slot (stable). Cheap to clone.
#[derive(Clone, Default)]
pub struct LayerStack {
    layers: Arc<[Arc<dyn MemoryLayer>]>,
    purposes: Purposes,
}

impl LayerStack {
    /// Sorts `layers` by slot, keeping insertion order for ties.
    pub fn new(layers: impl IntoIterator<Item = Arc<dyn MemoryLayer>>) -> Self {
        let mut v: Vec<_> = layers.into_iter().collect();
        v.sort_by_key(|l| l.slot());
        let purposes = Purposes(v.iter().fold(0, |bits, l| bits | Purposes::of(l.as_ref()).0));
        LayerStack { layers: v.into(), purposes }
    }

    /// True when a layer in the stack has [`Recall`] hooks.
    pub fn has_recall(&self) -> bool {
        self.purposes.0 & Purposes::RECALL != 0
    }

    /// True when a layer in the stack has [`Gates`].
    pub fn has_gates(&self) -> bool {
        self.purposes.0 & Purposes::GATES != 0
    }

    /// True when a layer in the stack has [`Lifecycle`] hooks.
    pub fn has_lifecycle(&self) -> bool {
        self.purposes.0 & Purposes::LIFECYCLE != 0
    }

    /// These layers minus any whose id is in `provided`, plus `provided`, sorted by slot.
    pub fn merged(&self, provided: &[Arc<dyn MemoryLayer>]) -> Self {
        if provided.is_empty() {
            return self.clone();
        }
        let kept = self.layers.iter().filter(|l| !provided.iter().any(|p| p.id() == l.id())).cloned();
        LayerStack::new(kept.chain(provided.iter().cloned()))
    }

    /// The layer with this id.
    pub fn get(&self, id: &str) -> Option<&Arc<dyn MemoryLayer>> {
        self.layers.iter().find(|l| l.id() == id)
    }
}

impl Deref for LayerStack {
    type Target = [Arc<dyn MemoryLayer>];

    fn deref(&self) -> &Self::Target {
        &self.layers
    }
}

impl fmt::Debug for LayerStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.layers.iter().map(|l| (l.id(), l.slot().0))).finish()
    }
}
