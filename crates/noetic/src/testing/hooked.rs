//! A memory session-log store with hooks around its calls: what a test store that fails, holds back, counts or
//! records a session's writes and reads needs, without writing out the whole [`LogStore`] seam each time.

use futures::future::BoxFuture;
use tokio::sync::broadcast;

use crate::agent::log::{
    Append, Appended, Leases, LogStore, MemoryLogStore, Record, SessionLine, Snapshot, StoreError,
};

/// Which read a [`StoreHooks::read`] hook is told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadCall {
    /// [`LogStore::read`]: a session's entries.
    Entries,
    /// [`LogStore::last`]: a session's last position.
    Last,
    /// [`LogStore::snapshot`]: a session's snapshot.
    Snapshot,
}

/// Which lease call a [`StoreHooks::lease`] hook is told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseCall {
    /// [`Leases::acquire`].
    Acquire,
    /// [`Leases::release`].
    Release,
    /// [`Leases::holder`].
    Holder,
}

/// What a [`HookedLogStore`] does around its memory store's calls. Every method has a default that does nothing.
pub trait StoreHooks: Send + Sync + 'static {
    /// Before an append reaches the store: an error fails it (nothing is written); the future may wait.
    fn commit<'a>(&'a self, _append: Append<'a>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// After an append landed, `last` its last position.
    fn committed(&self, _append: Append<'_>, _last: u64) {}

    /// Before a read of `key`: an error fails it; the future may wait.
    fn read<'a>(&'a self, _call: ReadCall, _key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// Before a lease call.
    fn lease(&self, _call: LeaseCall) {}

    /// True (the default) for a store with leases, as a shared log has ([`LogStore::leases`]).
    fn leased(&self) -> bool {
        true
    }
}

/// A [`MemoryLogStore`] whose calls go through `hooks` first.
///
/// ```
/// use noetic::agent::log::{Append, Expect, LogStore, StoreError};
/// use noetic::testing::{HookedLogStore, StoreHooks};
///
/// /// A disk that is full.
/// #[derive(Default)]
/// struct Full;
///
/// impl StoreHooks for Full {
///     fn commit<'a>(&'a self, _: Append<'a>) -> futures::future::BoxFuture<'a, Result<(), StoreError>> {
///         Box::pin(async { Err(StoreError::unavailable("appending", "disk full".to_owned())) })
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = HookedLogStore::<Full>::default();
/// assert!(store.append("s", Expect::At(0), &[]).await.is_err());
/// assert_eq!(store.last("s").await.unwrap(), 0);
/// # }
/// ```
#[derive(Default, Clone)]
pub struct HookedLogStore<H> {
    /// The store the calls reach.
    pub inner: MemoryLogStore,
    /// What runs around them.
    pub hooks: H,
}

impl<H: StoreHooks> LogStore for HookedLogStore<H> {
    fn commit<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            self.hooks.commit(append).await?;
            let last = self.inner.commit(append).await?;
            self.hooks.committed(append, last);
            Ok(last)
        })
    }

    fn read<'a>(&'a self, key: &'a str, after: u64, limit: usize) -> BoxFuture<'a, Result<Vec<Record>, StoreError>> {
        Box::pin(async move {
            self.hooks.read(ReadCall::Entries, key).await?;
            self.inner.read(key, after, limit).await
        })
    }

    fn last<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            self.hooks.read(ReadCall::Last, key).await?;
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
            self.hooks.read(ReadCall::Snapshot, key).await?;
            self.inner.snapshot(key).await
        })
    }

    fn leases(&self) -> Option<&dyn Leases> {
        if self.hooks.leased() { Some(self) } else { None }
    }
}

impl<H: StoreHooks> Leases for HookedLogStore<H> {
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        term: std::time::Duration,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        self.hooks.lease(LeaseCall::Acquire);
        Leases::acquire(&self.inner, key, holder, term)
    }

    fn release<'a>(&'a self, key: &'a str, holder: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        self.hooks.lease(LeaseCall::Release);
        Leases::release(&self.inner, key, holder)
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        self.hooks.lease(LeaseCall::Holder);
        Leases::holder(&self.inner, key)
    }
}
