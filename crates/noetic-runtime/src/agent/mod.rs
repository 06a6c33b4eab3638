//! Agent sessions: a [`Runtime`] holds the model, tools, layers and the agent step; each [`Session`] keeps one
//! conversation and runs one [`Turn`] at a time.
//!
//! ```
//! use std::sync::Arc;
//! use noetic::agent::Runtime;
//! use noetic::model::{ModelResponse, ScriptedModel};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = ScriptedModel::new([ModelResponse::text("Hello!")]);
//! let runtime = Runtime::builder().model(Arc::new(model)).build()?;
//! let session = runtime.session("user-42");
//! let answer = session.send("hi").await?.await?;
//! assert_eq!(answer, "Hello!");
//! assert_eq!(session.history().len(), 2);
//! # Ok(())
//! # }
//! ```

mod builder;
mod bus;
mod checkpoint;
pub mod log;
mod log_chain;
mod log_events;
mod log_hub;
mod log_lease;
mod log_writer;
mod logged;
mod persist;
mod queue;
mod replies;
mod session;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

pub use builder::{RuntimeBuilder, default_agent};
pub use bus::{DEFAULT_TRANSCRIPTION_TIMEOUT, Delivery, InboundMessage, MessageBus, STOP_COMMAND, Transcriber};
pub(crate) use checkpoint::SessionSettings;
pub use checkpoint::{BatchPolicy, SKIPPED_RESULT, TurnSteering};
pub use log_lease::DEFAULT_LEASE_TERM;
pub use queue::{DEFAULT_QUEUE_CAPACITY, MessageId, SteerError, SteerMessage, SteeringMode, SteeringQueue};
pub use replies::{BusReplies, BusReply, DEFAULT_REPLY_CAPACITY, TryRecvError};
pub use session::{MAX_TITLE_CHARS, Routed, SESSION_EVENT_LOG_CAPACITY, Session, SessionError, Turn, check_title};

/// A unit enum setting's serde name (`one-at-a-time`, `skip-remaining` …), as a store keeps it in a text column.
pub fn setting_text<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

/// Reads back what [`setting_text`] wrote.
pub fn parse_setting<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
}

/// The scope name a session's thread state is kept under (what [`ScopeKey::store_name`] gives for the session's
/// thread): `thread:<key>`.
///
/// [`ScopeKey::store_name`]: crate::layer::ScopeKey::store_name
pub fn thread_scope(key: &str) -> String {
    format!("thread:{key}")
}

use crate::error::{ConfigCode, ConfigError, NoeticError};
use crate::layer::MemoryLayer;
use crate::scope::InScope;
use crate::step::Step;
use crate::sync::{CachePadded, Spread};

/// The model id the default agent uses.
pub const DEFAULT_MODEL: &str = "openai/gpt-4o-mini";

pub(crate) struct RuntimeInner {
    /// The model id the runtime was built with (what `Session::compact` asks for by default).
    pub(crate) model_id: Arc<str>,
    pub(crate) layers: Vec<Arc<dyn MemoryLayer>>,
    /// Copies of the services and layers, one per group of threads: each turn's context starts from its thread's,
    /// so turns running at once on different cores do not all write the same reference counts.
    pub(crate) shared: Spread<Shared>,
    pub(crate) agent: Step<String, String>,
    /// The steering mode and queue capacity new sessions start with.
    default_mode: SteeringMode,
    default_capacity: usize,
    pub(crate) batch_policy: BatchPolicy,
    /// The budget sessions without one of their own are held to.
    pub(crate) default_budget: crate::budget::Budget,
    /// Read-mostly: looking a session up takes the read lock, so lookups never serialise turns; each session's
    /// conversation, queue and settings sit behind locks of their own.
    sessions: RwLock<HashMap<Arc<str>, Arc<session::SessionState>>>,
    /// The session logs sessions are kept in (see [`log`]).
    pub(crate) log_store: Option<Arc<dyn log::LogStore>>,
    /// Its appends, told to each open session's writer.
    log_hub: Option<Arc<log_hub::LogHub>>,
    /// This process's name in a shared log's leases.
    pub(crate) worker: Arc<str>,
    /// How long a lease lasts without renewal.
    pub(crate) lease_term: std::time::Duration,
    /// How many idle sessions stay in memory (with a log store); beyond it the least recently used go.
    max_idle_sessions: Option<usize>,
    /// What signs each turn's last ledger entry ([`RuntimeBuilder::ledger_key`]).
    pub(crate) ledger_key: Option<Arc<ed25519_dalek::SigningKey>>,
    /// A logical clock: each session use takes the next tick.
    clock: AtomicU64,
    /// What the log store keeps of global layer state (loaded once per runtime).
    pub(crate) global_layers: persist::Kept,
    /// Held while the global layer state is read, so concurrent first turns read it once.
    pub(crate) global_load: tokio::sync::Mutex<()>,
}

/// The runtime's services, and the layers and tools in scope, as a turn's step context holds them (one copy of
/// [`RuntimeInner::shared`]).
pub(crate) type Shared = Arc<CachePadded<InScope>>;

/// A copy with reference counts of its own.
fn replica(in_scope: &InScope) -> Shared {
    Arc::new(CachePadded::new(in_scope.replica()))
}

/// The first thread's copy: the services, layers and tools in scope shared with `in_scope`, not copied (the copies
/// [`replica`] makes for other threads only read `in_scope`'s counts, once each).
fn first(in_scope: &InScope) -> Shared {
    Arc::new(CachePadded::new(in_scope.clone()))
}

/// Runs agent sessions. Cheap to clone. Build one with [`Runtime::builder`] (a [`RuntimeBuilder`]); open a
/// [`Session`] with [`Runtime::session`]; each [`Session::send`] starts a [`Turn`].
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
    handles: Handles,
}

/// A strong reference to a runtime that a running turn holds: one of its [`Handles`]. Cloning it writes a count
/// of its thread's copy, not the runtime's own, which every turn on every thread would write.
pub(crate) type TurnHandle = Arc<CachePadded<Arc<RuntimeInner>>>;

/// Per-thread strong references to a runtime, for its turns (see `sync::Spread`). The runtime's handles hold
/// them beside it — in it, they would keep it alive forever.
pub(crate) type Handles = Arc<Spread<TurnHandle>>;

impl Runtime {
    /// Starts building a runtime: a [`RuntimeBuilder`].
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// The [`Session`] with this key: in memory, else new. With a log store, its log is read at its first use
    /// ([`Runtime::open`] reads it now, and says when it cannot).
    pub fn session(&self, key: &str) -> Session {
        Session::new(self.inner.clone(), self.handles.clone(), state_of(&self.inner, key))
    }

    /// The [`Session`] with this key, its log read (see [`RuntimeBuilder::log_store`]): what [`Session::history`],
    /// [`Session::queued`] and the other plain reads show is what the log holds. Without a log store this is
    /// [`Runtime::session`]. A log that cannot be read is an error ([`NoeticError`]); the next open reads it again.
    pub async fn open(&self, key: &str) -> Result<Session, NoeticError> {
        let state = state_of(&self.inner, key);
        let session = Session::new(self.inner.clone(), self.handles.clone(), state.clone());
        if let Err(message) = state.open_log().await {
            forget_unopened(&self.inner, &state);
            return Err(NoeticError::other(message));
        }
        Ok(session)
    }

    /// Deletes the session `key`: from memory (also while somebody follows its events: they hear no more) and from
    /// its log. True when there was one to delete; [`SessionError::Busy`] while a turn runs in it here (stop it
    /// first), [`SessionError::Store`] when its store fails.
    pub async fn delete_session(&self, key: &str) -> Result<bool, SessionError> {
        let failed = |message: String| SessionError::Store { session: key.to_owned(), message };
        let known = self.inner.sessions.read().unwrap_or_else(PoisonError::into_inner).get(key).cloned();
        if let Some(state) = &known {
            // Marked gone under the conversation lock, so a handle in use finds a fresh state from now on.
            if !state.forget() {
                return Err(SessionError::Busy { session: key.to_owned() });
            }
            let mut sessions = self.inner.sessions.write().unwrap_or_else(PoisonError::into_inner);
            if sessions.get(key).is_some_and(|s| Arc::ptr_eq(s, state)) {
                sessions.remove(key);
            }
        }
        if let Some(log) = &self.inner.log_store {
            return log.delete(key).await.map_err(|e| failed(e.to_string()));
        }
        Ok(known.is_some())
    }

    /// Drops the idle session `key` from memory (its log keeps it); the next [`Runtime::open`] for the key reads it
    /// again. Returns false (and keeps it) when a turn runs, somebody follows its events, or it is not in memory.
    /// Without a log store this is a [`NoeticError::Config`] ([`ConfigError`]): the conversation would be lost.
    pub fn evict(&self, key: &str) -> Result<bool, NoeticError> {
        if self.inner.log_store.is_none() {
            return Err(NoeticError::Config(ConfigError::new(
                ConfigCode::MissingArchive,
                format!("cannot evict session '{key}': the runtime keeps no session log, so it would be lost"),
                "build the runtime with .log_store(...)",
            )));
        }
        let Some(state) = self.inner.sessions.read().unwrap_or_else(PoisonError::into_inner).get(key).cloned() else {
            return Ok(false);
        };
        Ok(evict_state(&self.inner, &state))
    }

    /// The runtime's session log store, if it has one ([`RuntimeBuilder::log_store`]).
    pub fn log_store(&self) -> Option<&Arc<dyn log::LogStore>> {
        self.inner.log_store.as_ref()
    }

    /// This process's name among workers sharing a log store ([`RuntimeBuilder::worker_id`]).
    pub fn worker_id(&self) -> &str {
        &self.inner.worker
    }

    /// The model id the runtime was built with ([`RuntimeBuilder::model_id`]), else the default one.
    pub fn model_id(&self) -> &str {
        &self.inner.model_id
    }

    /// A copy of a layer's state for an execution (e.g. `get_layer_state::<`[`SteeringState`](crate::steering::SteeringState)`>(id, "steering")`);
    /// a turn's [`ExecutionId`](crate::context::ExecutionId) is [`Turn::execution_id`] (and on its `turn_started`
    /// event). Finished executions stay readable for
    /// layers that keep them (the steering layer keeps the last 64).
    pub fn get_layer_state<T: 'static>(&self, execution_id: crate::context::ExecutionId, layer_id: &str) -> Option<T> {
        let layers = crate::layer::LayerStack::new(self.inner.layers.iter().cloned());
        crate::layer::lifecycle::get_layer_state(&layers, execution_id, layer_id)
    }

    /// Number of sessions in memory.
    pub fn session_count(&self) -> usize {
        self.inner.sessions.read().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// The live state of `key`: in memory (touched), else new (kept in the runtime's log store, if it has one).
pub(crate) fn state_of(inner: &RuntimeInner, key: &str) -> Arc<session::SessionState> {
    let now = tick(inner);
    let known = inner.sessions.read().unwrap_or_else(PoisonError::into_inner).get(key).cloned();
    if let Some(state) = known {
        state.touch(now);
        return state;
    }
    let mut sessions = inner.sessions.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(state) = sessions.get(key) {
        state.touch(now);
        return state.clone();
    }
    let settings = || SessionSettings::new(inner.default_mode, inner.default_capacity, inner.batch_policy);
    let state = match inner.log_store.as_ref().zip(inner.log_hub.as_ref()) {
        Some((log, hub)) => session::SessionState::new(Arc::from(key), settings()).with_log(log.clone(), hub.clone()),
        None => session::SessionState::new(Arc::from(key), settings()),
    };
    let state = Arc::new(state);
    state.touch(now);
    sessions.insert(state.key().clone(), state.clone());
    state
}

/// Drops a state whose log could not be read (and says so to handles on it), so that the next use reads the log
/// again instead of keeping the failure.
pub(crate) fn forget_unopened(inner: &RuntimeInner, state: &Arc<session::SessionState>) {
    if !state.forget() {
        return;
    }
    let mut sessions = inner.sessions.write().unwrap_or_else(PoisonError::into_inner);
    if sessions.get(state.key()).is_some_and(|s| Arc::ptr_eq(s, state)) {
        sessions.remove(state.key());
    }
}

/// The runtime's next logical time; always 0 when nothing is ever evicted (the clock only orders evictions), so
/// that turns on many cores do not all write one shared counter.
pub(crate) fn tick(inner: &RuntimeInner) -> u64 {
    if inner.max_idle_sessions.is_none() {
        return 0;
    }
    inner.clock.fetch_add(1, Ordering::Relaxed) + 1
}

/// Drops one session from memory if it is idle and unwatched (its log holds everything).
fn evict_state(inner: &RuntimeInner, state: &Arc<session::SessionState>) -> bool {
    if !state.evict() {
        return false;
    }
    let mut sessions = inner.sessions.write().unwrap_or_else(PoisonError::into_inner);
    if sessions.get(state.key()).is_some_and(|s| Arc::ptr_eq(s, state)) {
        sessions.remove(state.key());
    }
    true
}

/// Evicts the least recently used idle sessions while more than the limit are in memory.
pub(crate) fn evict_over_limit(inner: &RuntimeInner) {
    let Some(limit) = inner.max_idle_sessions else { return };
    let candidates: Vec<Arc<session::SessionState>> = {
        let sessions = inner.sessions.read().unwrap_or_else(PoisonError::into_inner);
        if sessions.len() <= limit {
            return;
        }
        let mut all: Vec<_> = sessions.values().cloned().collect();
        all.sort_by_key(|s| s.last_used());
        all
    };
    let mut in_memory = candidates.len();
    for state in candidates {
        if in_memory <= limit {
            break;
        }
        if evict_state(inner, &state) {
            in_memory -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::{ModelResponse, ScriptedModel};

    #[tokio::test]
    async fn a_running_turn_holds_the_runtime_through_its_threads_handle_not_the_runtimes_own_count() {
        let model = ScriptedModel::new([]);
        let first = model.push_held(ModelResponse::text("one"));
        let second = model.push_held(ModelResponse::text("two"));
        let runtime = Runtime::builder().model(Arc::new(model)).build().unwrap();
        let session = runtime.session("s");
        let turn = session.send("go").await.unwrap();
        first.entered().await;
        // This thread's handle was made at its first turn; the turn holds it (the spread holds it too).
        assert_eq!(Arc::strong_count(runtime.handles.local()), 2, "the turn holds its thread's handle");
        first.release();
        assert_eq!(turn.await.unwrap(), "one");
        session.idle().await;
        assert_eq!(Arc::strong_count(runtime.handles.local()), 1, "the ended turn let its handle go");
        let idle = Arc::strong_count(&runtime.inner);
        let turn = session.send("again").await.unwrap();
        second.entered().await;
        assert_eq!(Arc::strong_count(&runtime.inner), idle, "the turn cloned the runtime");
        second.release();
        assert_eq!(turn.await.unwrap(), "two");
        // The handles keep the runtime alive for a turn still running after every handle is dropped.
        let model = ScriptedModel::new([]);
        let held = model.push_held(ModelResponse::text("after"));
        let runtime = Runtime::builder().model(Arc::new(model)).build().unwrap();
        let weak = Arc::downgrade(&runtime.inner);
        let turn = runtime.session("s").send("go").await.unwrap();
        drop(runtime);
        held.entered().await;
        assert!(weak.upgrade().is_some(), "the runtime went away under a running turn");
        held.release();
        assert_eq!(turn.await.unwrap(), "after");
        assert!(weak.upgrade().is_none(), "the runtime outlived its last handle and turn");
    }
}
