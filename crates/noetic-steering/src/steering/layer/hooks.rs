//! The steering layer's hooks: recall delivers async feedback, the gates evaluate the rules (see `gate`), the
//! lifecycle gives spawned children and fork paths states of their own and seals an ended execution's, and
//! persistence keeps what outlives the process.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::{RECENT_PER_GROUP, SteeringLayer};
use crate::context::{HookContext, lock};
use crate::error::NoeticError;
use crate::layer::{
    Gates, Hook, Lifecycle, ModelCallParams, Outcome, Persistence, Recall, Scope, ScopeKey, ToolCallAction,
    ToolCallParams,
};
use crate::model::Item;
use crate::steering::feedback::{self, Feedback, Forward, Inner};
use crate::steering::ledger::{Ledger, LedgerEntry, LedgerKind};
use crate::steering::rules::HookParams;
use crate::steering::{SteeringAction, SteeringDecision};

/// What the layer keeps in a session store for one scope key (see [`Persistence::save_state`]).
#[derive(Serialize, Deserialize)]
struct Saved {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ledger: Vec<LedgerEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pending: Vec<Feedback>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    carried: Vec<Feedback>,
}

/// Whether a layer of `scope` keeps its own state under `key` in a session (a thread stands in for a resource when
/// the session names none).
fn owns(scope: Scope, key: &ScopeKey) -> bool {
    matches!(
        (scope, key),
        (Scope::Thread | Scope::Resource, ScopeKey::Thread(_))
            | (Scope::Resource, ScopeKey::Resource(_))
            | (Scope::Global, ScopeKey::Global)
    )
}

/// Recall delivers what async judges queued; it never waits.
impl Recall for SteeringLayer {
    fn recall<'a>(&'a self, ctx: &'a HookContext<'a>, budget: u32) -> BoxFuture<'a, Result<Vec<Item>, NoeticError>> {
        Box::pin(std::future::ready(self.recall_at_once(ctx, budget)))
    }

    /// Recall never waits: it takes what async judges already queued.
    fn recall_now(&self, ctx: &HookContext<'_>, budget: u32) -> Option<Result<Vec<Item>, NoeticError>> {
        Some(self.recall_at_once(ctx, budget))
    }
}

/// The rules of each hook, evaluated as `gate` describes.
impl Gates for SteeringLayer {
    /// A hook whose live rules are all predicates decides at once (with no shadow rules).
    fn before_tool_call_now(
        &self,
        ctx: &HookContext<'_>,
        call: ToolCallParams<'_>,
    ) -> Option<Result<ToolCallAction, NoeticError>> {
        self.answers_at_once(Hook::BeforeToolCall)
            .then(|| self.gate_now(ctx, HookParams::BeforeToolCall(call)).map(Into::into))
    }

    /// A hook whose live rules are all predicates decides at once (with no shadow rules).
    fn after_model_call_now(
        &self,
        ctx: &HookContext<'_>,
        call: ModelCallParams<'_>,
    ) -> Option<Result<SteeringDecision, NoeticError>> {
        self.answers_at_once(Hook::AfterModelCall).then(|| self.gate_now(ctx, HookParams::AfterModelCall(call)))
    }

    fn before_tool_call<'a>(
        &'a self,
        ctx: &'a HookContext<'a>,
        call: ToolCallParams<'a>,
    ) -> BoxFuture<'a, Result<ToolCallAction, NoeticError>> {
        let params = HookParams::BeforeToolCall(call);
        if self.answers_at_once(Hook::BeforeToolCall) {
            return Box::pin(std::future::ready(self.gate_now(ctx, params).map(Into::into)));
        }
        Box::pin(async move { self.gate(ctx, params).await.map(Into::into) })
    }

    fn after_model_call<'a>(
        &'a self,
        ctx: &'a HookContext<'a>,
        call: ModelCallParams<'a>,
    ) -> BoxFuture<'a, Result<SteeringDecision, NoeticError>> {
        let params = HookParams::AfterModelCall(call);
        if self.answers_at_once(Hook::AfterModelCall) {
            return Box::pin(std::future::ready(self.gate_now(ctx, params)));
        }
        Box::pin(self.gate(ctx, params))
    }
}

impl Lifecycle for SteeringLayer {
    /// Makes the execution's state: an execution the layer is in scope of has one from its start, which is how
    /// `on_spawn` tells a parent that uses this layer from one that does not.
    fn init<'a>(&'a self, ctx: &'a HookContext<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        self.entry(ctx);
        Box::pin(std::future::ready(Ok(())))
    }

    fn on_spawn<'a>(
        &'a self,
        parent: &'a HookContext<'a>,
        child: &'a HookContext<'a>,
    ) -> BoxFuture<'a, Result<Vec<Item>, NoeticError>> {
        Box::pin(async move {
            // The parent's state, if the parent uses this layer (a spawn may bring its own layers): made by `init`,
            // by `on_spawn` for a parent that is itself a child, or by any hook the parent ran.
            let parent_state = self.states.get(&self.key(parent));
            let ledger = parent_state.as_ref().map(|s| lock(s).ledger.clone()).unwrap_or_default();
            lock(&self.children).insert(child.execution_id(), parent_state);
            self.states.insert(ScopeKey::Execution(child.execution_id()), Inner { ledger, ..Inner::default() });
            Ok(Vec::new())
        })
    }

    fn on_complete<'a>(&'a self, ctx: &'a HookContext<'a>, outcome: Outcome) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async move {
            let state = self.entry(ctx);
            let mut entry = LedgerEntry::new(LedgerKind::Custom, SteeringAction::Allow);
            entry.outcome = Some(outcome);
            ctx.record_ledger(&entry);
            lock(&state).ledger.push(entry, self.config.max_ledger_entries);
            Ok(())
        })
    }

    fn dispose<'a>(&'a self, ctx: &'a HookContext<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async move {
            let key @ ScopeKey::Execution(id) = self.key(ctx) else { return Ok(()) };
            let parent = if ctx.is_root() { None } else { lock(&self.children).remove(&id) };
            let Some(state) = self.states.remove(&key) else { return Ok(()) };
            let forward = match parent {
                Some(Some(parent)) => Some(Forward::Parent(parent)),
                _ => ctx.thread_id().map(|t| Forward::Thread(Arc::from(t))),
            };
            match forward {
                Some(forward) => feedback::seal(&state, forward, &self.carry),
                None if !lock(&state).pending.is_empty() => tracing::warn!(
                    execution = %id,
                    "undelivered steering feedback has no thread to go to; it stays in the execution's final state"
                ),
                None => {}
            }
            let mut recent = lock(self.recent(&id));
            recent.push_back((id, state));
            while recent.len() > RECENT_PER_GROUP {
                recent.pop_front();
            }
            Ok(())
        })
    }
}

impl Persistence for SteeringLayer {
    /// For the session's thread: the verdicts carried to its next execution and, with [`Scope::Thread`], the
    /// thread's ledger and undelivered feedback; for [`ScopeKey::Global`] (with [`Scope::Global`]), the global
    /// ledger and feedback. A configuration error an async judge hit is not kept: it fails the running process's
    /// next step.
    fn save_state(&self, key: &ScopeKey) -> Option<serde_json::Value> {
        let carried = match key {
            ScopeKey::Thread(thread) => self.carry.peek(thread),
            _ => Vec::new(),
        };
        let own = owns(self.config.scope, key).then(|| self.states.get(key)).flatten();
        let (ledger, pending) = match &own {
            Some(state) => {
                let inner = lock(state);
                (inner.ledger.entries().collect(), inner.pending.iter().cloned().collect())
            }
            None => (Vec::new(), Vec::new()),
        };
        if carried.is_empty() && own.is_none() {
            return None;
        }
        serde_json::to_value(Saved { ledger, pending, carried }).ok()
    }

    fn load_state(&self, key: &ScopeKey, state: serde_json::Value) -> Result<(), NoeticError> {
        let saved: Saved = serde_json::from_value(state)
            .map_err(|e| NoeticError::other(format!("the saved steering state is unreadable: {e}")))?;
        if !saved.pending.is_empty() || !saved.carried.is_empty() {
            self.feedback_possible.store(true, Ordering::Release);
        }
        if let ScopeKey::Thread(thread) = key {
            self.carry.restore(thread, saved.carried);
        }
        if owns(self.config.scope, key) {
            let ledger = Ledger::of(saved.ledger, self.config.max_ledger_entries);
            self.states.insert(key.clone(), Inner { ledger, pending: saved.pending.into(), ..Inner::default() });
        }
        Ok(())
    }

    fn state(&self, key: &ScopeKey) -> Option<Box<dyn std::any::Any + Send>> {
        self.lookup(key).map(|s| Box::new(Self::snapshot(&s)) as Box<dyn std::any::Any + Send>)
    }
}
