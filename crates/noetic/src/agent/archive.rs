//! Evicting idle sessions from memory and restoring them: the [`SessionArchive`] hook.
//!
//! A runtime with an archive may drop an idle session from memory ([`Runtime::evict`](super::Runtime::evict),
//! or automatically beyond [`RuntimeBuilder::max_idle_sessions`](super::RuntimeBuilder::max_idle_sessions)); the
//! next [`Runtime::session`](super::Runtime::session) for its key recreates it from what the archive kept: its
//! history, its queued steering messages, its settings and its turn count. A durable store implements the hook
//! over its database; [`MemoryArchive`] keeps snapshots in memory (tests, examples).
//!
//! The hook is synchronous on purpose: restoring happens inside `Runtime::session`, which is not async, and it is
//! a cold path (an open, an eviction) — never a per-call cost.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::{BatchPolicy, SteerMessage, SteeringMode};
use crate::context::lock;
use crate::error::NoeticError;
use crate::model::Item;

/// Everything an idle session is, as an archive keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSnapshot {
    /// The session key.
    pub key: String,
    /// The conversation, oldest first.
    pub history: Vec<Item>,
    /// Steering messages still queued, oldest first (with their ids: they keep them across the eviction).
    pub queued: Vec<SteerMessage>,
    /// Turns started so far (the next turn's number is one more).
    pub turns: u64,
    /// The session's dequeue mode.
    pub mode: SteeringMode,
    /// The session's queue capacity.
    pub capacity: usize,
    /// The session's batch policy.
    pub batch_policy: BatchPolicy,
}

/// Where evicted sessions go and come back from.
pub trait SessionArchive: Send + Sync + 'static {
    /// Keeps `snapshot` (replacing an older one of the same key). An error keeps the session in memory.
    fn save(&self, snapshot: &SessionSnapshot) -> Result<(), NoeticError>;

    /// The snapshot kept for `key`, if any.
    fn load(&self, key: &str) -> Result<Option<SessionSnapshot>, NoeticError>;
}

/// A [`SessionArchive`] in memory: snapshots survive the eviction, not the process.
#[derive(Debug, Default)]
pub struct MemoryArchive {
    snapshots: Mutex<HashMap<String, SessionSnapshot>>,
}

impl MemoryArchive {
    /// An empty archive.
    pub fn new() -> Self {
        MemoryArchive::default()
    }

    /// How many sessions it holds.
    pub fn len(&self) -> usize {
        lock(&self.snapshots).len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl SessionArchive for MemoryArchive {
    fn save(&self, snapshot: &SessionSnapshot) -> Result<(), NoeticError> {
        lock(&self.snapshots).insert(snapshot.key.clone(), snapshot.clone());
        Ok(())
    }

    fn load(&self, key: &str) -> Result<Option<SessionSnapshot>, NoeticError> {
        Ok(lock(&self.snapshots).get(key).cloned())
    }
}
