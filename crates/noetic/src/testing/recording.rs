//! A session-log store that remembers each append: the points a crash can cut a log at.

use std::sync::{Arc, Mutex};

use super::hooked::{HookedLogStore, StoreHooks};
use crate::agent::log::{Append, Entry, Expect, LogStore, MemoryLogStore, StoreError};
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
pub type RecordingLogStore = HookedLogStore<Recorder>;

/// What a [`RecordingLogStore`] keeps: the entries of each append, in order. A store without leases.
#[derive(Default, Clone)]
pub struct Recorder {
    appends: Arc<Mutex<Vec<Vec<Entry>>>>,
}

impl StoreHooks for Recorder {
    fn committed(&self, append: Append<'_>, _last: u64) {
        lock(&self.appends).push(append.entries.to_vec());
    }

    fn leased(&self) -> bool {
        false
    }
}

impl HookedLogStore<Recorder> {
    /// The entries of each append so far, in order.
    pub fn appends(&self) -> Vec<Vec<Entry>> {
        lock(&self.hooks.appends).clone()
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
