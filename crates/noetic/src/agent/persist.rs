//! Layer state that outlives the process (SPEC 6.1): what the runtime's layers keep for a session's thread, and
//! what layers of global scope keep for everyone, saved in the session store when a turn ends and brought back
//! before the first turn that needs it.
//!
//! A session loads its thread's states once (again after another process changed the session: see
//! `SessionState::apply_stored`); a runtime loads global states once. Each save writes only the states that
//! changed since they were loaded or last saved (compared by a hash of their JSON), so a layer that keeps
//! nothing costs one call to [`MemoryLayer::save_state`] per turn and no write.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use super::log::Entry;
use super::store::{LayerStateWrite, SessionStore};
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

/// One stored session's layer state: where it is kept, whose it is, and what is known of it.
#[derive(Clone, Copy)]
pub(crate) struct Session<'a> {
    /// The session's store.
    pub(crate) store: &'a dyn SessionStore,
    /// The runtime's layers.
    pub(crate) layers: &'a [Arc<dyn MemoryLayer>],
    /// The session's key (its thread).
    pub(crate) thread: &'a str,
    /// What is known of the thread's saved states.
    pub(crate) session: &'a Kept,
    /// What is known of the global ones (the runtime's).
    pub(crate) global: &'a Kept,
}

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

/// Brings the saved states of `thread` (and, once per runtime, global ones) into the layers, unless they were
/// loaded already. An error (the store cannot be read, a state is unreadable or its layer refuses it) leaves
/// them to load again at the next turn.
pub(crate) fn load(to: &Session<'_>) -> Result<(), NoeticError> {
    let Session { store, layers, thread, session, global } = *to;
    if layers.is_empty() {
        return Ok(());
    }
    load_scope(store, layers, &ScopeKey::Thread(Arc::from(thread)), session, |_| true)?;
    if layers.iter().any(is_global) {
        load_scope(store, layers, &ScopeKey::Global, global, is_global)?;
    }
    Ok(())
}

fn load_scope(
    store: &dyn SessionStore,
    layers: &[Arc<dyn MemoryLayer>],
    key: &ScopeKey,
    kept: &Kept,
    include: impl Fn(&Arc<dyn MemoryLayer>) -> bool,
) -> Result<(), NoeticError> {
    let mut guard = lock(&kept.0);
    if guard.is_some() {
        return Ok(());
    }
    let Some(name) = key.store_name() else { return Ok(()) };
    let saved = store.layer_states(&name)?;
    let mut hashes = HashMap::new();
    for (id, json) in saved {
        // A state whose layer this runtime does not have stays as it is in the store.
        let Some(layer) = distinct(layers).find(|l| l.id() == id && include(l)) else { continue };
        let value: serde_json::Value = serde_json::from_str(&json).map_err(|e| {
            NoeticError::other(format!(
                "the saved state of layer '{id}' for {name} is not JSON ({e}); the store was written by something \
                 else — delete the session or that row"
            ))
        })?;
        layer.load_state(key, value).map_err(|e| {
            NoeticError::other(format!("layer '{id}' could not restore its saved state for {name}: {e}"))
        })?;
        hashes.insert(id, hash(&json));
    }
    *guard = Some(hashes);
    Ok(())
}

/// Saves what changed in the layers' states of `thread` (and global ones) since they were loaded or last saved.
/// On an error nothing is marked saved, so the next turn's end writes it again.
pub(crate) fn save(from: &Session<'_>) -> Result<(), NoeticError> {
    let Session { store, layers, thread, session, global } = *from;
    if layers.is_empty() {
        return Ok(());
    }
    let mut session_kept = lock(&session.0);
    // The runtime-wide lock only when a layer keeps global state: other turns never wait on each other here.
    let mut none = None;
    let mut global_guard = layers.iter().any(is_global).then(|| lock(&global.0));
    let global_kept = match global_guard.as_deref_mut() {
        Some(kept) => kept,
        None => &mut none,
    };
    let keys = [ScopeKey::Thread(Arc::from(thread)), ScopeKey::Global];
    let names: Vec<String> = keys.iter().map(|k| k.store_name().unwrap_or_default()).collect();
    let kept: [&mut Option<HashMap<String, u64>>; 2] = [&mut *session_kept, global_kept];
    // (scope index, layer id, new JSON or None to delete)
    let mut changes: Vec<(usize, &str, Option<String>)> = Vec::new();
    for (at, key) in keys.iter().enumerate() {
        // Never loaded: writing would replace what the store keeps without having read it.
        let Some(hashes) = kept[at].as_ref() else { continue };
        let global_only = matches!(key, ScopeKey::Global);
        for layer in distinct(layers).filter(|l| !global_only || is_global(l)) {
            let json = layer.save_state(key).map(|v| v.to_string());
            if hashes.get(layer.id()).copied() != json.as_deref().map(hash) {
                changes.push((at, layer.id(), json));
            }
        }
    }
    if changes.is_empty() {
        return Ok(());
    }
    let writes: Vec<LayerStateWrite<'_>> = changes
        .iter()
        .map(|(at, layer, state)| LayerStateWrite { scope: &names[*at], layer, state: state.as_deref() })
        .collect();
    store.save_layer_states(&writes)?;
    for (at, layer, state) in &changes {
        if let Some(hashes) = kept[*at].as_mut() {
            match state {
                Some(json) => hashes.insert((*layer).to_owned(), hash(json)),
                None => hashes.remove(*layer),
            };
        }
    }
    Ok(())
}

/// Brings the thread's layer states a session log holds (`saved`, by layer id) into the layers, unless they were
/// loaded already. Global layer state is not kept in a session's log.
pub(crate) fn load_logged(
    layers: &[Arc<dyn MemoryLayer>],
    thread: &str,
    kept: &Kept,
    saved: Option<&BTreeMap<String, serde_json::Value>>,
) -> Result<(), NoeticError> {
    let mut guard = lock(&kept.0);
    if guard.is_some() || layers.is_empty() {
        return Ok(());
    }
    let key = ScopeKey::Thread(Arc::from(thread));
    let mut hashes = HashMap::new();
    for (id, value) in saved.into_iter().flatten() {
        let Some(layer) = distinct(layers).find(|l| l.id() == id) else { continue };
        layer.load_state(&key, value.clone()).map_err(|e| {
            NoeticError::other(format!("layer '{id}' could not restore its saved state for session '{thread}': {e}"))
        })?;
        hashes.insert(id.clone(), hash(&value.to_string()));
    }
    *guard = Some(hashes);
    Ok(())
}

/// The thread's layer states that changed since they were loaded or last saved, as session log entries (marked
/// saved: the caller appends them with the turn's end).
pub(crate) fn logged_changes(layers: &[Arc<dyn MemoryLayer>], thread: &str, kept: &Kept) -> Vec<Entry> {
    let mut guard = lock(&kept.0);
    let Some(hashes) = guard.as_mut() else { return Vec::new() };
    let key = ScopeKey::Thread(Arc::from(thread));
    let Some(scope) = key.store_name() else { return Vec::new() };
    let mut entries = Vec::new();
    for layer in distinct(layers) {
        let state = layer.save_state(&key);
        let json = state.as_ref().map(serde_json::Value::to_string);
        if hashes.get(layer.id()).copied() == json.as_deref().map(hash) {
            continue;
        }
        match &json {
            Some(json) => hashes.insert(layer.id().to_owned(), hash(json)),
            None => hashes.remove(layer.id()),
        };
        entries.push(Entry::LayerState { scope: scope.clone(), layer: layer.id().to_owned(), state });
    }
    entries
}
