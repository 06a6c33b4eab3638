//! The store seam of session logs: small async traits a database implements (see the [module docs](super)).

use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use tokio::sync::broadcast;

use super::entry::{DecodeError, Entry, Record};
use super::summary::Summary;

/// Where an append must land.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Right after this position (the last one the writer has seen; 0 for an empty log): a writer that missed an
    /// append is refused ([`StoreError::Conflict`]), reads what it missed and decides again. This fences a stale
    /// owner: whoever takes a session over appends first.
    At(u64),
    /// Wherever the log ends: for facts any process may add at any time (a message accepted, a stop asked for),
    /// whose place is the order in which the store took them.
    End,
}

/// Why a store could not do what was asked. Nothing of a failed call was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An append expected the log to end at `expected`, and it ends at `actual`: someone else appended meanwhile.
    #[error(
        "session '{key}': the log ends at {actual}, not at {expected}; another process wrote to it — read what it \
         wrote and try again"
    )]
    Conflict {
        /// The session.
        key: String,
        /// Where the writer thought the log ended.
        expected: u64,
        /// Where it ends.
        actual: u64,
    },
    /// The store cannot be reached or failed; the cause is kept.
    #[error("the session store failed while {doing}: {source}")]
    Unavailable {
        /// What the store was doing.
        doing: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An entry cannot be read.
    #[error("session '{key}', entry {pos}: {source}")]
    Corrupt {
        /// The session.
        key: String,
        /// The entry's position.
        pos: u64,
        /// Why.
        #[source]
        source: DecodeError,
    },
    /// The request cannot be done as asked (an invalid key, an empty append, a lease held by another).
    #[error("{message}")]
    Refused {
        /// What is wrong and what to do.
        message: String,
    },
}

impl StoreError {
    /// [`StoreError::Unavailable`] with this cause.
    pub fn unavailable(doing: impl Into<String>, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        StoreError::Unavailable { doing: doing.into(), source: source.into() }
    }
}

/// An append another writer (possibly another process) made: `key`'s log now ends at `last`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The session.
    pub key: String,
    /// Its log's last position.
    pub last: u64,
}

/// One line of a store's session list, kept by the store as entries are appended ([`Summary::apply`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLine {
    /// The session.
    pub key: String,
    /// Its log's last position.
    pub last: u64,
    /// The counts the summary keeps.
    pub summary: Summary,
    /// The last append.
    pub updated_at: SystemTime,
}

/// A projection of a log up to a position, saved so that opening a long session reads the snapshot and the entries
/// after it instead of the whole log. Its bytes are the library's to encode ([`super::Projection`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The position it reflects.
    pub pos: u64,
    /// The encoded projection.
    pub bytes: Vec<u8>,
}

/// Session logs: append, read, be told of appends, list, delete, snapshot. Every method is async and does its I/O
/// off the caller's tokio worker (on the store's own connection pool or thread).
///
/// A store implements one write, [`LogStore::commit`], which carries the lease release a turn's last append asks
/// for; callers use [`LogStore::append`] and [`LogStore::append_and_release`], which make the [`Append`].
pub trait LogStore: Send + Sync + 'static {
    /// Makes `append`, all or nothing: its entries go on its key's log (created by its first append) where its
    /// `expect` says, and when it names a holder to `release`, that holder's lease of the key is given up in the
    /// same step, only if the entries land (a store without leases has none to give up). Returns the position of
    /// the last entry. An empty append is refused.
    fn commit<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<u64, StoreError>>;

    /// Appends `entries` to `key`'s log where `expect` says; returns the position of the last one
    /// ([`LogStore::commit`] without a release).
    fn append<'a>(
        &'a self,
        key: &'a str,
        expect: Expect,
        entries: &'a [Entry],
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        self.commit(Append { key, expect, entries, release: None })
    }

    /// Up to `limit` entries of `key`'s log after position `after`, in order (none for a log it does not hold).
    fn read<'a>(&'a self, key: &'a str, after: u64, limit: usize) -> BoxFuture<'a, Result<Vec<Record>, StoreError>>;

    /// Where `key`'s log ends (0: empty or unknown).
    fn last<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<u64, StoreError>>;

    /// Appends from now on, by any writer the store can hear of (other processes included, for a store several
    /// share). A receiver that lags is told so and reads the logs it cares about again.
    fn watch(&self) -> broadcast::Receiver<Appended>;

    /// Every session, most recently appended to first.
    fn list(&self) -> BoxFuture<'_, Result<Vec<SessionLine>, StoreError>>;

    /// Deletes `key`'s log, its snapshot and its lease; false when there was none.
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Saves a snapshot of `key`'s projection (replacing an older one).
    fn save_snapshot<'a>(&'a self, key: &'a str, snapshot: Snapshot) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The newest snapshot of `key`, if any.
    fn snapshot<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Snapshot>, StoreError>>;

    /// Leases, for a store several processes share (`None`: one process owns what it opens).
    fn leases(&self) -> Option<&dyn Leases> {
        None
    }

    /// Takes `key`'s lease for `holder` as [`Leases::acquire`] does and says where the log ends once it is held,
    /// so a holder that has read everything need not read again; `Ok(None)` for a store without leases. A store
    /// may do both in one transaction (the default acquires, then asks [`LogStore::last`]).
    fn take_lease<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        term: Duration,
    ) -> BoxFuture<'a, Result<Option<Taken>, StoreError>> {
        Box::pin(async move {
            let Some(leases) = self.leases() else { return Ok(None) };
            if let Some(other) = leases.acquire(key, holder, term).await? {
                return Ok(Some(Taken::Elsewhere(other)));
            }
            match self.last(key).await {
                Ok(last) => Ok(Some(Taken::Held { last })),
                Err(e) => {
                    // Not held by a caller that cannot go on with it.
                    if let Err(release) = leases.release(key, holder).await {
                        tracing::warn!(session = %key, error = %release, "could not give the session's lease up (it runs out)");
                    }
                    Err(e)
                }
            }
        })
    }

    /// Appends as [`LogStore::append`] does and, when the append lands, gives up `holder`'s lease of `key` in the
    /// same step (a turn's last write: [`LogStore::commit`] with a release).
    fn append_and_release<'a>(
        &'a self,
        key: &'a str,
        expect: Expect,
        entries: &'a [Entry],
        holder: &'a str,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        self.commit(Append { key, expect, entries, release: Some(holder) })
    }
}

/// One write to a session log, as [`LogStore::commit`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct Append<'a> {
    /// The session.
    pub key: &'a str,
    /// Where the entries must land.
    pub expect: Expect,
    /// The entries, in order.
    pub entries: &'a [Entry],
    /// The holder whose lease of the session this write gives up when it lands (a turn's last write), if any.
    pub release: Option<&'a str>,
}

/// What [`LogStore::take_lease`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// The caller holds the lease now; the log ends at `last`.
    Held {
        /// Where the log ends.
        last: u64,
    },
    /// Another holder, named, holds it.
    Elsewhere(String),
}

/// Who holds a session's turn, for stores several processes share: one holder at a time, for a term it renews.
pub trait Leases: Send + Sync {
    /// Takes `key` for `holder` for `term` if nobody holds it or the holder's term ran out; `Ok(None)` when it is
    /// taken, `Ok(Some(holder))` naming who holds it otherwise. Renewing one's own lease is taking it again.
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        term: Duration,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>>;

    /// Gives `key` up if `holder` holds it.
    fn release<'a>(&'a self, key: &'a str, holder: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Who holds `key` now (a live term).
    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<String>, StoreError>>;
}
