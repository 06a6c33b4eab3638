//! Layer state keyed by scope.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::Scope;
use crate::context::{Context, ExecutionId, lock};
use crate::sync::CachePadded;

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
    #[inline]
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
/// judge call) can keep writing to the state they started with. The map is split in shards, each with a lock of
/// its own on cache lines of its own, so turns of different sessions looking up their state at once on different
/// cores rarely take the same lock (the global key has one shard, as its state is one).
pub struct LayerState<T> {
    shards: Box<[CachePadded<Mutex<Entries<T>>>]>,
}

/// Shards per layer state: enough that a few dozen cores rarely meet on one.
const SHARDS: usize = 32;

/// The entries, and the one last looked up: a layer's hooks ask for the same key several times per model call
/// and tool call (one execution's state), and comparing a key costs much less than hashing it.
struct Entries<T> {
    map: HashMap<ScopeKey, Arc<Mutex<T>>>,
    last: Option<(ScopeKey, Arc<Mutex<T>>)>,
}

impl<T> Entries<T> {
    fn last(&self, key: &ScopeKey) -> Option<Arc<Mutex<T>>> {
        self.last.as_ref().filter(|(k, _)| k == key).map(|(_, state)| state.clone())
    }

    fn remember(&mut self, key: &ScopeKey, state: &Arc<Mutex<T>>) {
        self.last = Some((key.clone(), state.clone()));
    }

    /// Drops the remembered entry if it is `key`'s (its entry is being replaced or removed).
    fn forget(&mut self, key: &ScopeKey) {
        if self.last.as_ref().is_some_and(|(k, _)| k == key) {
            self.last = None;
        }
    }
}

impl<T> Default for LayerState<T> {
    fn default() -> Self {
        let shard = || CachePadded::new(Mutex::new(Entries { map: HashMap::new(), last: None }));
        LayerState { shards: std::iter::repeat_with(shard).take(SHARDS).collect() }
    }
}

impl<T> LayerState<T> {
    /// The shard holding `key`: picked from bits that are already random (an execution id's) or from a cheap hash
    /// of a short name, so the choice costs less than the map's own hashing.
    fn shard(&self, key: &ScopeKey) -> std::sync::MutexGuard<'_, Entries<T>> {
        let spread = match key {
            ScopeKey::Execution(id) => id.as_uuid().as_u64_pair().1,
            ScopeKey::Thread(name) | ScopeKey::Resource(name) => {
                // FNV-1a.
                name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
            }
            ScopeKey::Global => 0,
        };
        lock(&self.shards[(spread as usize) % self.shards.len()])
    }
}

impl<T: Default> LayerState<T> {
    /// The entry for `key`, created with `T::default()` if missing.
    pub fn entry(&self, key: &ScopeKey) -> Arc<Mutex<T>> {
        let mut entries = self.shard(key);
        if let Some(state) = entries.last(key) {
            return state;
        }
        let state = entries.map.entry(key.clone()).or_default().clone();
        entries.remember(key, &state);
        state
    }
}

impl<T> LayerState<T> {
    /// The entry for `key`, if any.
    pub fn get(&self, key: &ScopeKey) -> Option<Arc<Mutex<T>>> {
        let mut entries = self.shard(key);
        if let Some(state) = entries.last(key) {
            return Some(state);
        }
        let state = entries.map.get(key).cloned()?;
        entries.remember(key, &state);
        Some(state)
    }

    /// Sets the entry for `key`.
    pub fn insert(&self, key: ScopeKey, value: T) {
        let mut entries = self.shard(&key);
        entries.forget(&key);
        entries.map.insert(key, Arc::new(Mutex::new(value)));
    }

    /// Removes the entry for `key`.
    pub fn remove(&self, key: &ScopeKey) -> Option<Arc<Mutex<T>>> {
        let mut entries = self.shard(key);
        entries.forget(key);
        entries.map.remove(key)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|shard| lock(shard).map.len()).sum()
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_entry_last_looked_up_is_never_one_that_was_replaced_or_removed() {
        let states: LayerState<u32> = LayerState::default();
        let (a, b) = (ScopeKey::Thread(Arc::from("a")), ScopeKey::Thread(Arc::from("b")));
        *lock(&states.entry(&a)) = 1;
        assert_eq!(*lock(&states.get(&a).unwrap()), 1);
        states.insert(a.clone(), 2);
        assert_eq!(*lock(&states.entry(&a)), 2, "replaced");
        assert!(states.get(&b).is_none());
        assert_eq!(*lock(&states.get(&a).unwrap()), 2);
        assert_eq!(*lock(&states.remove(&a).unwrap()), 2);
        assert!(states.get(&a).is_none(), "removed");
        assert_eq!(*lock(&states.entry(&a)), 0, "made again");
        assert_eq!(states.len(), 1);
    }

    #[test]
    fn keys_of_every_kind_spread_over_the_shards_and_each_finds_its_own_entry() {
        let states: LayerState<usize> = LayerState::default();
        let mut keys: Vec<ScopeKey> = (0..200).map(|_| ScopeKey::Execution(ExecutionId::new())).collect();
        keys.extend((0..200).map(|i| ScopeKey::Thread(Arc::from(format!("session-{i}")))));
        keys.extend((0..50).map(|i| ScopeKey::Resource(Arc::from(format!("user-{i}")))));
        keys.push(ScopeKey::Global);
        for (i, key) in keys.iter().enumerate() {
            *lock(&states.entry(key)) = i;
        }
        assert_eq!(states.len(), keys.len());
        let used = states.shards.iter().filter(|shard| !lock(shard).map.is_empty()).count();
        assert!(used > SHARDS / 2, "the keys landed on {used} of {SHARDS} shards");
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(*lock(&states.get(key).unwrap()), i, "{key:?}");
        }
        for key in keys.iter().step_by(2) {
            assert!(states.remove(key).is_some());
        }
        assert_eq!(states.len(), keys.len() / 2);
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(states.get(key).is_some(), i % 2 == 1, "{key:?}");
        }
    }
}
