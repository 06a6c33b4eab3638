//! A session log store that fails on demand, for the tests of what a session does when its log cannot be written
//! ("disk full") or read ("database unreachable"), and that can hold an accepted message's append back (a write
//! still on its way to the store).
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use noetic::agent::log::{
    Append, Appended, Entry, Leases, LogStore, MemoryLogStore, Record, SessionLine, Snapshot, StoreError,
};
use tokio::sync::{Notify, broadcast};

/// A [`MemoryLogStore`] whose appends fail while `fail_writes` is set and whose reads fail while `fail_reads` is.
/// While `hold_messages` is set, an append with an accepted message notifies `held` and waits for `release`.
#[derive(Default)]
pub struct FlakyLog {
    pub inner: MemoryLogStore,
    pub fail_writes: AtomicBool,
    pub fail_reads: AtomicBool,
    pub hold_messages: AtomicBool,
    pub held: Notify,
    pub release: Notify,
}

fn failed(doing: &str, why: &str) -> StoreError {
    StoreError::unavailable(doing, why.to_owned())
}

impl FlakyLog {
    fn check(&self, flag: &AtomicBool, doing: &str, why: &str) -> Result<(), StoreError> {
        if flag.load(Ordering::SeqCst) { Err(failed(doing, why)) } else { Ok(()) }
    }
}

impl LogStore for FlakyLog {
    fn commit<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            self.check(&self.fail_writes, "appending", "disk full")?;
            if self.hold_messages.load(Ordering::SeqCst)
                && append.entries.iter().any(|e| matches!(e, Entry::MessageAccepted { .. }))
            {
                self.held.notify_one();
                self.release.notified().await;
            }
            self.inner.commit(append).await
        })
    }

    fn read<'a>(&'a self, key: &'a str, after: u64, limit: usize) -> BoxFuture<'a, Result<Vec<Record>, StoreError>> {
        Box::pin(async move {
            self.check(&self.fail_reads, "reading", "database unreachable")?;
            self.inner.read(key, after, limit).await
        })
    }

    fn last<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            self.check(&self.fail_reads, "reading", "database unreachable")?;
            self.inner.last(key).await
        })
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
        Box::pin(async move {
            self.check(&self.fail_reads, "reading", "database unreachable")?;
            self.inner.snapshot(key).await
        })
    }

    fn leases(&self) -> Option<&dyn Leases> {
        self.inner.leases()
    }
}
