//! Layer state keyed by scope.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::Scope;
use crate::context::{Context, ExecutionId, lock};

/// Whose state: one execution, a thread, a resource, or everyone.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "scope", content = "key", rename_all = "snake_case")]
pub enum ScopeKey {
    /// One execution.
    Execution(ExecutionId),
    /// A conversation thread.
    Thread(Arc<str>),
    /// A resource.
    Resource(Arc<str>),
    /// Global.
    Global,
}

impl ScopeKey {
    /// The key a layer with `scope` uses in `ctx`: a thread falls back to the execution, a resource to the thread.
    pub fn for_context(ctx: &Context, scope: Scope) -> ScopeKey {
        let thread = || ctx.thread_id().map(|t| ScopeKey::Thread(Arc::from(t)));
        let execution = || ScopeKey::Execution(ctx.execution_id());
        match scope {
            Scope::Execution => execution(),
            Scope::Thread => thread().unwrap_or_else(execution),
            Scope::Resource => {
                ctx.resource_id().map(|r| ScopeKey::Resource(Arc::from(r))).or_else(thread).unwrap_or_else(execution)
            }
            Scope::Global => ScopeKey::Global,
        }
    }

    /// The name a session store keeps state for this key under (`thread:<id>`, `resource:<id>`, `global`);
    /// `None` for an execution, whose state never outlives it.
    pub fn store_name(&self) -> Option<String> {
        match self {
            ScopeKey::Execution(_) => None,
            ScopeKey::Thread(id) => Some(format!("thread:{id}")),
            ScopeKey::Resource(id) => Some(format!("resource:{id}")),
            ScopeKey::Global => Some("global".to_owned()),
        }
    }
}

/// A map from scope key to a layer's state, each entry behind its own lock so long-lived holders (an async
/// judge call) can keep writing to the state they started with.
pub struct LayerState<T> {
    entries: Mutex<HashMap<ScopeKey, Arc<Mutex<T>>>>,
}

impl<T> Default for LayerState<T> {
    fn default() -> Self {
        LayerState { entries: Mutex::new(HashMap::new()) }
    }
}

impl<T: Default> LayerState<T> {
    /// The entry for `key`, created with `T::default()` if missing.
    pub fn entry(&self, key: &ScopeKey) -> Arc<Mutex<T>> {
        lock(&self.entries).entry(key.clone()).or_default().clone()
    }
}

impl<T> LayerState<T> {
    /// The entry for `key`, if any.
    pub fn get(&self, key: &ScopeKey) -> Option<Arc<Mutex<T>>> {
        lock(&self.entries).get(key).cloned()
    }

    /// Sets the entry for `key`.
    pub fn insert(&self, key: ScopeKey, value: T) {
        lock(&self.entries).insert(key, Arc::new(Mutex::new(value)));
    }

    /// Removes the entry for `key`.
    pub fn remove(&self, key: &ScopeKey) -> Option<Arc<Mutex<T>>> {
        lock(&self.entries).remove(key)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
