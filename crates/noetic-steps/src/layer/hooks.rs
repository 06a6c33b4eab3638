//! What a layer does, one small trait per purpose: [`Recall`] (context for the model, and what it answered),
//! [`Gates`] (tool calls and model responses), [`Lifecycle`] (an execution's start and end, spawned children) and
//! [`Persistence`] (state that outlives the process). A layer implements the ones it uses and returns itself from
//! the matching accessor of [`MemoryLayer`](super::MemoryLayer); the runtime never calls a layer for a purpose it
//! lacks. Every method has a default that does nothing.
//!
//! A hook receives a [`HookContext`]: the execution's context (ids, cancellation, the item log, events — it
//! dereferences to a [`Context`](crate::context::Context)) and the services the hook may call on, typed: the model
//! (an LLM judge's), the session's records (a ledger's), the turn's budget meter, the session's key.

use futures::future::BoxFuture;

use super::{ModelCallParams, Outcome, ScopeKey, ToolCallAction, ToolCallParams};
use crate::context::HookContext;
use crate::decision::SteeringDecision;
use crate::error::NoeticError;
use crate::model::{Item, ModelResponse};

/// Context for the model before every request of an `llm` step, and the response it accepted.
pub trait Recall: Send + Sync {
    /// Context for the model, placed before the history; at most `budget` tokens (estimated as chars / 4; a
    /// model whose window is known offers the share the allocation gives the layer — see `noetic::window`).
    fn recall<'a>(&'a self, _ctx: &'a HookContext<'a>, _budget: u32) -> BoxFuture<'a, Result<Vec<Item>, NoeticError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// [`Recall::recall`] when the layer can answer at once: `Some` is its answer, and `recall` is not called.
    /// The default, `None`, always calls `recall`. A layer whose recall never waits implements it, so a model
    /// request makes no future (no allocation) for the layer.
    fn recall_now(&self, _ctx: &HookContext<'_>, _budget: u32) -> Option<Result<Vec<Item>, NoeticError>> {
        None
    }

    /// Sees the response an `llm` step accepted.
    fn store<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        _response: &'a ModelResponse,
    ) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async { Ok(()) })
    }
}

/// Decisions on every tool call before it runs and every model response before its tool calls run.
pub trait Gates: Send + Sync {
    /// Gates a tool call: allow, guide, deny, or rewrite its arguments (see [`ToolCallAction`]; a
    /// [`SteeringDecision`] converts with `.into()`).
    fn before_tool_call<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        _call: ToolCallParams<'a>,
    ) -> BoxFuture<'a, Result<ToolCallAction, NoeticError>> {
        Box::pin(async { Ok(ToolCallAction::Allow) })
    }

    /// [`Gates::before_tool_call`] when the layer can decide at once: `Some` is its decision, and
    /// `before_tool_call` is not called. The default, `None`, always calls `before_tool_call`.
    fn before_tool_call_now(
        &self,
        _ctx: &HookContext<'_>,
        _call: ToolCallParams<'_>,
    ) -> Option<Result<ToolCallAction, NoeticError>> {
        None
    }

    /// Reviews a model response.
    fn after_model_call<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        _call: ModelCallParams<'a>,
    ) -> BoxFuture<'a, Result<SteeringDecision, NoeticError>> {
        Box::pin(async { Ok(SteeringDecision::allow()) })
    }

    /// [`Gates::after_model_call`] when the layer can decide at once: `Some` is its decision, and
    /// `after_model_call` is not called. The default, `None`, always calls `after_model_call`.
    fn after_model_call_now(
        &self,
        _ctx: &HookContext<'_>,
        _call: ModelCallParams<'_>,
    ) -> Option<Result<SteeringDecision, NoeticError>> {
        None
    }
}

/// An execution's start and end, and the spawned children and fork paths it starts.
pub trait Lifecycle: Send + Sync {
    /// Called once before the layer is first used in an execution.
    fn init<'a>(&'a self, _ctx: &'a HookContext<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async { Ok(()) })
    }

    /// A spawned child or fork path starts: set up the child's state from the parent's; the returned items open
    /// the child's conversation.
    fn on_spawn<'a>(
        &'a self,
        _parent: &'a HookContext<'a>,
        _child: &'a HookContext<'a>,
    ) -> BoxFuture<'a, Result<Vec<Item>, NoeticError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// A spawned child or fork path succeeded: merge its state back into the parent's.
    fn on_return<'a>(
        &'a self,
        _parent: &'a HookContext<'a>,
        _child: &'a HookContext<'a>,
    ) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async { Ok(()) })
    }

    /// Called when an execution that used the layer ends, whatever the outcome.
    fn on_complete<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        _outcome: Outcome,
    ) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async { Ok(()) })
    }

    /// Called last, after [`Lifecycle::on_complete`], to release resources.
    fn dispose<'a>(&'a self, _ctx: &'a HookContext<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async { Ok(()) })
    }
}

/// The layer's state, read by programs and kept by session stores.
pub trait Persistence: Send + Sync {
    /// A copy of the layer's state for `key`, for [`get_layer_state`](crate::layer::lifecycle::get_layer_state).
    fn state(&self, _key: &ScopeKey) -> Option<Box<dyn std::any::Any + Send>> {
        None
    }

    /// The layer's state for `key` as JSON, for a session store to keep (SPEC 6.1: the state of layers whose scope
    /// is not `execution` outlives the process). Called when a turn of a session kept in a store ends, with the
    /// session's thread key — for every layer, whatever its scope, since a layer may keep per-thread data of its
    /// own (the steering layer's carry-over of undelivered verdicts) — and, for a layer of
    /// [`Scope::Global`](super::Scope::Global), with [`ScopeKey::Global`]. `None`: nothing to keep for `key` (what
    /// was kept before is deleted). The default keeps nothing.
    fn save_state(&self, _key: &ScopeKey) -> Option<serde_json::Value> {
        None
    }

    /// Restores what [`Persistence::save_state`] returned for `key`, replacing what the layer holds for it. Called
    /// before the first turn of a session opened from a store (again when another process changed the session),
    /// and once per runtime for global state. An error fails the turn: the layer's state could not be restored.
    fn load_state(&self, _key: &ScopeKey, _state: serde_json::Value) -> Result<(), NoeticError> {
        Ok(())
    }
}
