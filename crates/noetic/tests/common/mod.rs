//! What the store tests share: a store that fails on demand and counts the layer-state writes it is asked for.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use noetic::agent::{
    BatchPolicy, LayerStateWrite, MemoryStore, SessionStore, SessionSummary, SteerMessage, SteeringMode, StoreCommit,
    StoredSession,
};
use noetic::prelude::NoeticError;

/// A [`MemoryStore`] whose writes fail while `fail` is set ("disk full") and which counts layer-state writes.
#[derive(Default)]
pub struct ProbedStore {
    pub inner: MemoryStore,
    pub fail: AtomicBool,
    pub layer_writes: AtomicUsize,
}

impl ProbedStore {
    fn check(&self) -> Result<(), NoeticError> {
        if self.fail.load(Ordering::SeqCst) { Err(NoeticError::other("disk full")) } else { Ok(()) }
    }
}

impl SessionStore for ProbedStore {
    fn open(&self, key: &str) -> Result<Option<StoredSession>, NoeticError> {
        self.inner.open(key)
    }
    fn close(&self, key: &str) {
        self.inner.close(key);
    }
    fn commit(&self, key: &str, commit: StoreCommit<'_>) -> Result<(), NoeticError> {
        self.check()?;
        self.inner.commit(key, commit)
    }
    fn push_message(&self, key: &str, message: &SteerMessage) -> Result<(), NoeticError> {
        self.check()?;
        self.inner.push_message(key, message)
    }
    fn remove_messages(&self, key: &str, ids: Option<&[String]>) -> Result<(), NoeticError> {
        self.check()?;
        self.inner.remove_messages(key, ids)
    }
    fn save_settings(&self, key: &str, m: SteeringMode, c: usize, b: BatchPolicy, t: u64) -> Result<(), NoeticError> {
        self.check()?;
        self.inner.save_settings(key, m, c, b, t)
    }
    fn list(&self) -> Result<Vec<SessionSummary>, NoeticError> {
        self.inner.list()
    }
    fn delete(&self, key: &str) -> Result<bool, NoeticError> {
        self.inner.delete(key)
    }
    fn ledger(&self, key: &str) -> Result<Vec<String>, NoeticError> {
        self.inner.ledger(key)
    }
    fn layer_states(&self, scope: &str) -> Result<Vec<(String, String)>, NoeticError> {
        self.check()?;
        self.inner.layer_states(scope)
    }
    fn save_layer_states(&self, writes: &[LayerStateWrite<'_>]) -> Result<(), NoeticError> {
        self.check()?;
        self.layer_writes.fetch_add(writes.len(), Ordering::SeqCst);
        self.inner.save_layer_states(writes)
    }
}
