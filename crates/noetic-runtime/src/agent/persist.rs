//! Layer state that outlives the process (SPEC 6.1): what the runtime's layers keep for a session's thread, logged
//! in the session's log with the turn's end, and what layers of global scope keep for everyone, logged in the log
//! [`GLOBAL_LOG`] when a turn ends; brought back before the first turn that needs it.
//!
//! A session loads its thread's states once (again after another process's turn changed them); a runtime loads
//! global states once, before its first turn. Each save writes only the states that changed since they were loaded
//! or last saved (compared by a hash of their JSON), so a layer that keeps nothing costs one call to
//! [`Persistence::save_state`](crate::layer::Persistence::save_state) per turn and no write (a layer without
//! `Persistence` none). Several processes sharing a store share the global states: each loads them once, and the
//! last turn to end wins.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use super::RuntimeInner;
use super::log::{Entry, Expect, Projection};
use crate::context::lock;
use crate::error::NoeticError;
use crate::layer::{MemoryLayer, Scope, ScopeKey};

/// What one scope's saved states are known to be: `None` until they were loaded; then, per layer id, the hash of
/// the JSON the store holds.
#[derive(Default)]
pub(crate) struct Kept(Mutex<Option<HashMap<String, u64>>>);

impl Kept {
    /// Forgets what was loaded: the next turn loads again (another process changed the session).
    pub(crate) fn reset(&self) {
        *lock(&self.0) = None;
    }
}

/// The log that keeps the states of layers of global scope (its entries are [`Entry::LayerState`] of scope
/// `global`).
pub(crate) const GLOBAL_LOG: &str = "scope:global";

fn hash(json: &str) -> u64 {
    let mut h = DefaultHasher::new();
    json.hash(&mut h);
    h.finish()
}

fn is_global(layer: &Arc<dyn MemoryLayer>) -> bool {
    layer.scope() == Scope::Global
}

/// Layers once each, by id (the first with an id wins, as in a layer stack). A runtime has a handful of layers:
/// looking back costs less than a set.
fn distinct(layers: &[Arc<dyn MemoryLayer>]) -> impl Iterator<Item = &Arc<dyn MemoryLayer>> {
    layers.iter().enumerate().filter(|(i, l)| !layers[..*i].iter().any(|e| e.id() == l.id())).map(|(_, l)| l)
}

/// Brings the layer states `saved` (by layer id, as a log's projection holds them for `key`) into the layers that
/// `include` picks, unless they were loaded already.
fn load_scope(
    layers: &[Arc<dyn MemoryLayer>],
    key: &ScopeKey,
    kept: &Kept,
    saved: Option<&BTreeMap<String, serde_json::Value>>,
    include: impl Fn(&Arc<dyn MemoryLayer>) -> bool,
) -> Result<(), NoeticError> {
    let mut guard = lock(&kept.0);
    if guard.is_some() || layers.is_empty() {
        return Ok(());
    }
    let name = key.store_name().unwrap_or_default();
    let mut hashes = HashMap::new();
    for (id, value) in saved.into_iter().flatten() {
        // A state whose layer this runtime does not have stays as it is in the log.
        let Some(layer) = distinct(layers).find(|l| l.id() == id && include(l)) else { continue };
        // A layer that no longer keeps state takes nothing, and its old state is deleted at the next save.
        if let Some(persistence) = layer.as_persistence() {
            persistence.load_state(key, value.clone()).map_err(|e| {
                NoeticError::other(format!("layer '{id}' could not restore its saved state for {name}: {e}"))
            })?;
        }
        hashes.insert(id.clone(), hash(&value.to_string()));
    }
    *guard = Some(hashes);
    Ok(())
}

/// The states of `key` that changed since they were loaded or last saved, among the layers `include` picks, as log
/// entries, with what to mark saved once they are written.
fn changes(
    layers: &[Arc<dyn MemoryLayer>],
    key: &ScopeKey,
    kept: &Kept,
    include: impl Fn(&Arc<dyn MemoryLayer>) -> bool,
) -> (Vec<Entry>, Vec<(String, Option<u64>)>) {
    let guard = lock(&kept.0);
    // Never loaded: writing would replace what the log keeps without having read it.
    let (Some(hashes), Some(scope)) = (guard.as_ref(), key.store_name()) else { return (Vec::new(), Vec::new()) };
    let (mut entries, mut marks) = (Vec::new(), Vec::new());
    for layer in distinct(layers).filter(|l| include(l)) {
        let state = layer.as_persistence().and_then(|p| p.save_state(key));
        let json = state.as_ref().map(serde_json::Value::to_string);
        let new = json.as_deref().map(hash);
        if hashes.get(layer.id()).copied() == new {
            continue;
        }
        marks.push((layer.id().to_owned(), new));
        entries.push(Entry::LayerState { scope: scope.clone(), layer: layer.id().to_owned(), state });
    }
    (entries, marks)
}

/// Marks states saved (see [`changes`]).
fn mark(kept: &Kept, marks: Vec<(String, Option<u64>)>) {
    if let Some(hashes) = lock(&kept.0).as_mut() {
        for (layer, new) in marks {
            match new {
                Some(h) => hashes.insert(layer, h),
                None => hashes.remove(&layer),
            };
        }
    }
}

/// Brings the thread's layer states a session log holds (`saved`, by layer id) into the layers, unless they were
/// loaded already.
pub(crate) fn load_thread(
    layers: &[Arc<dyn MemoryLayer>],
    thread: &str,
    kept: &Kept,
    saved: Option<&BTreeMap<String, serde_json::Value>>,
) -> Result<(), NoeticError> {
    load_scope(layers, &ScopeKey::Thread(Arc::from(thread)), kept, saved, |_| true)
}

/// The thread's layer states that changed since they were loaded or last saved, as session log entries (marked
/// saved: the caller appends them with the turn's end).
pub(crate) fn thread_changes(layers: &[Arc<dyn MemoryLayer>], thread: &str, kept: &Kept) -> Vec<Entry> {
    let (entries, marks) = changes(layers, &ScopeKey::Thread(Arc::from(thread)), kept, |_| true);
    mark(kept, marks);
    entries
}

/// Brings the global layer states the runtime's log store keeps into the layers, once per runtime (before its
/// first turn; concurrent first turns wait for one read). An error leaves them to load at the next turn.
pub(crate) async fn load_global(runtime: &RuntimeInner) -> Result<(), NoeticError> {
    let Some(store) = &runtime.log_store else { return Ok(()) };
    if !runtime.layers.iter().any(is_global) || lock(&runtime.global_layers.0).is_some() {
        return Ok(());
    }
    let _one_reader = runtime.global_load.lock().await;
    if lock(&runtime.global_layers.0).is_some() {
        return Ok(());
    }
    let projection = Projection::load(store.as_ref(), GLOBAL_LOG).await.map_err(|e| {
        NoeticError::with_source(format!("could not read the global layer states (the log '{GLOBAL_LOG}'): {e}"), e)
    })?;
    let saved = projection.layer_states.get("global");
    load_scope(&runtime.layers, &ScopeKey::Global, &runtime.global_layers, saved, is_global)
}

/// Logs the global layer states that changed since they were loaded or last saved (a failure is logged: they stay
/// unsaved, and the next turn's end writes them).
pub(crate) async fn save_global(runtime: &RuntimeInner) {
    let Some(store) = &runtime.log_store else { return };
    if !runtime.layers.iter().any(is_global) {
        return;
    }
    let (entries, marks) = changes(&runtime.layers, &ScopeKey::Global, &runtime.global_layers, is_global);
    if entries.is_empty() {
        return;
    }
    match store.append(GLOBAL_LOG, Expect::End, &entries).await {
        Ok(_) => mark(&runtime.global_layers, marks),
        Err(e) => tracing::error!(error = %e, "could not log the global layer states; the next turn's end tries again"),
    }
}
