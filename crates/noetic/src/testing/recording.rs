//! A session-log store that remembers each append: the points a crash can cut a log at.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::broadcast;

use crate::agent::log::{
    Append, Appended, Entry, Expect, LogStore, MemoryLogStore, Record, SessionLine, Snapshot, StoreError,
};
use crate::context::lock;

/// A [`MemoryLogStore`] that keeps the entries of each append in order. A crash test runs a turn on it, then, for
/// every `n`, writes the first `n` appends into a fresh store and resumes there: a process that died after its
/// `n`-th write.
///
/// ```
/// use noetic::agent::log::{Expect, LogStore};
/// use noetic::testing::RecordingLogStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RecordingLogStore::default();
/// assert!(store.appends().is_empty());
/// let cut = store.cut(0).await?;
/// assert_eq!(cut.last("s").await?, 0);
/// # let _ = Expect::At(0);
/// # Ok(())
/// # }
/// ```
#[derive(Default, Clone)]
pub struct RecordingLogStore {
    inner: MemoryLogStore,
    appends: Arc<Mutex<Vec<Vec<Entry>>>>,
}

impl RecordingLogStore {
    /// The entries of each append so far, in order.
    pub fn appends(&self) -> Vec<Vec<Entry>> {
        lock(&self.appends).clone()
    }

    /// A fresh store holding the first `n` appends of session `s`'s log as one append (what a process that died
    /// after its `n`-th write left).
    pub async fn cut(&self, n: usize) -> Result<MemoryLogStore, StoreError> {
        let prefix: Vec<Entry> = self.appends().into_iter().take(n).flatten().collect();
        let store = MemoryLogStore::new();
        if !prefix.is_empty() {
            store.append("s", Expect::At(0), &prefix).await?;
        }
        Ok(store)
    }
}

impl LogStore for RecordingLogStore {
    fn commit<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            let last = self.inner.commit(append).await?;
            lock(&self.appends).push(append.entries.to_vec());
            Ok(last)
        })
    }
    fn read<'a>(&'a self, key: &'a str, after: u64, limit: usize) -> BoxFuture<'a, Result<Vec<Record>, StoreError>> {
        self.inner.read(key, after, limit)
    }
    fn last<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<u64, StoreError>> {
        self.inner.last(key)
    }
    fn watch(&self) -> broadcast::Receiver<Appended> {
        self.inner.watch()
    }
    fn list(&self) -> BoxFuture<'_, Result<Vec<SessionLine>, StoreError>> {
        self.inner.list()
    }
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.inner.delete(key)
    }
    fn save_snapshot<'a>(&'a self, key: &'a str, snapshot: Snapshot) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.save_snapshot(key, snapshot)
    }
    fn snapshot<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Snapshot>, StoreError>> {
        self.inner.snapshot(key)
    }
}
