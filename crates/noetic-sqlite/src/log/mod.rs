//! The session log on SQLite ([`SqliteLogStore`]): `noetic::agent::log::LogStore` on one file.
//!
//! # Threads and connections
//!
//! * **One writer thread** owns the write connection. Appends, deletes and snapshots reach it over a channel and are
//!   answered through oneshot channels, so no tokio worker ever waits on SQLite. It takes every request queued when
//!   it looks (group commit): one `BEGIN IMMEDIATE`, each append checked against where its log ends *inside* that
//!   transaction (one that fails is answered with its own [`StoreError::Conflict`] and the others go on; each
//!   request is a savepoint of its own, unless it is alone: then a failure rolls the transaction back), one
//!   `COMMIT`, then every answer. A commit answers only what it made
//!   durable. The caller of a request alone in flight looks for its answer (yielding between looks) before its
//!   worker may sleep: waking a sleeping worker from the writer thread costs as much as the commit
//!   (`noetic_core::handoff`). After a commit the thread looks for the next request for a moment (`writer::LOOK`,
//!   yielding its core between looks) before it sleeps: a turn's next write usually comes within it, and waking a
//!   sleeping thread costs more. The thread ends when the last handle on the store is dropped: dropping the
//!   channel's sender lets it finish its queue and exit, so `Drop` does no I/O. Between transactions it keeps each session's end and
//!   summary and the append counter, so an append reads nothing back first; they are forgotten when
//!   `PRAGMA data_version` says another connection committed, and when a transaction fails.
//! * **A turn's lease and its start are one commit.** A lease taken for a turn ([`LogStore::take_lease`]) is
//!   answered at once and its transaction kept open (up to 5 ms) for the holder's next write, the turn's start,
//!   which then commits with it. That is safe because the open transaction holds the file's write lock: no other
//!   process takes the lease meanwhile, and one killed before the commit leaves neither the lease nor the start.
//!   Requests of other sessions that arrive meanwhile join the transaction and commit it at once.
//! * **Reads** (`read`, `last`, `list`, `snapshot`) run on tokio's blocking pool (`spawn_blocking`) on read-only
//!   connections kept for the next read; WAL lets them run beside the writer.
//! * **Other processes.** Every append takes the next value of one counter (one more than the highest any
//!   session's row holds or a deleted one held) and stores it, with the writing store's id, in its session's row. Every ~100 ms the writer thread reads `PRAGMA data_version` on its
//!   connection, which moves only when *another* connection committed; when it moved, the sessions whose counter
//!   passed the last one seen and that another store wrote are announced to [`LogStore::watch`]. A store's own
//!   appends are announced when they commit, once.
//! * **Durability.** WAL; [`Durability::Process`] (`synchronous=NORMAL`) survives a killed process,
//!   [`Durability::PowerLoss`] (`synchronous=FULL`) a power cut, at an fsync per group commit.
//! * **Sharing.** Several processes may share a file's sessions (two chats, a chat and `noetic sessions steer`,
//!   `noetic serve` beside a chat): the store has [`Leases`], as PostgreSQL does, so a session's turn runs in one
//!   process at a time and the others steer or stop it by appending. A lease names the process that took it; one
//!   whose process is gone on this host (killed) holds nothing, so its turn is resumed at once (see `leases.rs`).
//!
//! # Migration of older files (schema 1–5 → 6)
//!
//! Opening the store on a file of the store before the log (schema versions 1 to 5) migrates it to the newest of
//! those first, then adds the log's tables and converts every session into a log, in one transaction, once
//! (`PRAGMA user_version` 6). A file of a newer version is refused and left untouched. Each session becomes:
//!
//! 1. [`Entry::Settings`] with its steering mode, queue capacity and batch policy;
//! 2. if it has turns (its turn count `T`, or 1 when it has items and no count): [`Entry::TurnStarted`] of turn `T`
//!    with a new execution id and no input, [`Entry::Appended`] with the whole conversation, then
//!    * when the old row had an unfinished turn (a journal): an [`Entry::Appended`] with the interrupted result
//!      (`noetic::turn::interrupted_result`) for every tool call of the conversation that has no result, and
//!      [`Entry::TurnEnded`] as [`TurnOutcome::Discarded`]. **The old journal cannot be replayed by the log's
//!      runtime: a turn an older version left unfinished is given up**, every open call getting the interrupted
//!      result;
//!    * otherwise [`Entry::TurnEnded`] as [`TurnOutcome::Completed`] with the text of the last assistant message
//!      (empty when there is none);
//! 3. each queued steering message, in queue order: [`Entry::MessageAccepted`];
//! 4. each ledger entry, in order: [`Entry::Decision`] without a turn. A row that is not a ledger entry fails the
//!    migration with an error naming the session and the row, and nothing is written;
//! 5. each layer state of scope `thread:<key>`: [`Entry::LayerState`] in the log of `<key>` (a log of its own when
//!    the session has no row); a state of any other scope (`global`, a resource) goes to the log of the key
//!    `scope:<scope>`.
//!
//! Every entry of a migrated session carries the time of the session's last write, and the sessions keep their
//! order in the list. The old tables stay as they were; nothing reads or writes them after the migration.
//!
//! [`Entry::Settings`]: noetic_runtime::agent::log::Entry::Settings
//! [`Entry::TurnStarted`]: noetic_runtime::agent::log::Entry::TurnStarted
//! [`Entry::Appended`]: noetic_runtime::agent::log::Entry::Appended
//! [`Entry::TurnEnded`]: noetic_runtime::agent::log::Entry::TurnEnded
//! [`Entry::MessageAccepted`]: noetic_runtime::agent::log::Entry::MessageAccepted
//! [`Entry::Decision`]: noetic_runtime::agent::log::Entry::Decision
//! [`Entry::LayerState`]: noetic_runtime::agent::log::Entry::LayerState
//! [`TurnOutcome::Discarded`]: noetic_runtime::agent::log::TurnOutcome::Discarded
//! [`TurnOutcome::Completed`]: noetic_runtime::agent::log::TurnOutcome::Completed

mod checkpoint;
mod convert;
mod heads;
mod leases;
mod migrate;
mod open;
mod read;
mod request;
mod tables;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::SystemTime;

use futures::future::BoxFuture;
use noetic_runtime::agent::log::{
    Append, Appended, Leases, LogStore, Record, SessionLine, Snapshot, StoreError, SummaryChange, Taken, encode_row,
};
use rusqlite::Connection;
use tokio::sync::{broadcast, oneshot};

use crate::Durability;
use read::ReadPool;
use request::{Reply, Request};

/// How many appends a watcher may fall behind by before it is told it lagged.
const WATCH_CAPACITY: usize = 1024;

/// Session logs in one SQLite file (see the [module docs](self)). Cloning gives another handle on the same store
/// (the same writer thread); a second [`SqliteLogStore::open`] of the same file is another writer, as another
/// process would be, and hears this one's appends through the file.
///
/// ```
/// # async fn example() -> Result<(), noetic::agent::log::StoreError> {
/// use noetic::agent::log::{Entry, Expect, LogStore};
/// use noetic_sqlite::SqliteLogStore;
///
/// let dir = std::env::temp_dir().join(format!("noetic-log-doc-{}", std::process::id()));
/// let store = SqliteLogStore::open(dir.join("noetic.db")).await?;
/// let stop = Entry::StopRequested { reason: "done for today".into() };
/// let last = store.append("chat", Expect::End, &[stop]).await?;
/// assert_eq!(store.read("chat", last - 1, 10).await?.len(), 1);
/// # store.delete("chat").await?;
/// # Ok(())
/// # }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(example()).unwrap();
/// ```
#[derive(Clone)]
pub struct SqliteLogStore {
    inner: Arc<Shared>,
}

/// What every handle shares. Dropping the last one closes the writer's channel; the connections close on the
/// writer thread or on the blocking pool, never here.
struct Shared {
    path: PathBuf,
    requests: mpsc::Sender<Request>,
    appended: broadcast::Sender<Appended>,
    readers: Arc<ReadPool>,
    commits: Arc<AtomicU64>,
    /// Requests sent to the writer and not yet answered.
    in_flight: noetic_core::handoff::InFlight,
}

impl std::fmt::Debug for SqliteLogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteLogStore").field("path", &self.inner.path).finish_non_exhaustive()
    }
}

/// A failed SQLite call on `path`, with what it was doing and what to do.
pub(crate) fn failed(path: &Path, doing: &str, e: rusqlite::Error) -> StoreError {
    let hint = crate::hint(&e);
    StoreError::unavailable(format!("{doing} ({}; {hint})", path.display()), e)
}

/// The writer thread is gone (it only stops when the store is dropped, or if it failed to start).
fn writer_gone(path: &Path) -> StoreError {
    StoreError::unavailable(
        format!("writing to the session log ({})", path.display()),
        "the store's writer thread has stopped; open the store again",
    )
}

impl SqliteLogStore {
    /// Opens (creating if needed) the log store at `path`, surviving a killed process ([`Durability::Process`]).
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, Durability::Process).await
    }

    /// Opens (creating if needed) the log store at `path` with the given durability; migrates a file of an older
    /// schema (see the [module docs](self)). A file that is not SQLite, is read-only or is from a newer schema is
    /// an error naming it, and nothing is written to it. The file is opened and migrated on the store's writer
    /// thread, not on the caller's.
    pub async fn open_with(path: impl AsRef<Path>, durability: Durability) -> Result<Self, StoreError> {
        Self::open_lingering(path, durability, writer::LINGER).await
    }

    /// [`SqliteLogStore::open_with`], a lease taken for a turn waiting up to `linger` for the turn's start to
    /// share its commit (tests make it long, so that sharing does not depend on how fast the machine is).
    #[doc(hidden)]
    pub async fn open_lingering(
        path: impl AsRef<Path>,
        durability: Durability,
        linger: std::time::Duration,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref().to_owned();
        let (requests, queue) = mpsc::channel();
        let (ready, started) = oneshot::channel();
        let appended = broadcast::channel(WATCH_CAPACITY).0;
        let readers = Arc::new(ReadPool::new(path.clone()));
        let commits = Arc::new(AtomicU64::new(0));
        let setup = writer::Setup {
            path: path.clone(),
            durability,
            appended: appended.clone(),
            readers: readers.clone(),
            commits: commits.clone(),
            linger,
        };
        std::thread::Builder::new()
            .name("noetic-sqlite-log".into())
            .spawn(move || writer::run(setup, queue, ready))
            .map_err(|e| StoreError::unavailable("starting the session log's writer thread", e))?;
        started.await.map_err(|_| writer_gone(&path))??;
        let in_flight = noetic_core::handoff::InFlight::default();
        Ok(SqliteLogStore { inner: Arc::new(Shared { path, requests, appended, readers, commits, in_flight }) })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// How many write transactions the store has committed. With group commit, appends that arrive together share
    /// one, so under load this grows slower than the number of appends.
    pub fn commits(&self) -> u64 {
        self.inner.commits.load(Ordering::Relaxed)
    }

    /// Sends `request` (made with its reply channel) to the writer thread and waits for its answer.
    async fn ask<T>(&self, request: impl FnOnce(Reply<T>) -> Request) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        let sent = self.inner.in_flight.sent();
        self.inner.requests.send(request(reply)).map_err(|_| writer_gone(&self.inner.path))?;
        sent.wait(answer).await.ok_or_else(|| writer_gone(&self.inner.path))?
    }

    /// Appends `entries` (giving `release`'s lease up in the same transaction).
    async fn append_with(&self, append: Append<'_>) -> Result<u64, StoreError> {
        let Append { key, expect, entries, release } = append;
        if entries.is_empty() {
            return Err(StoreError::Refused { message: format!("session '{key}': nothing to append") });
        }
        // Encoding is done here, on the callers' threads, so the single writer only writes.
        let at = SystemTime::now();
        let row = encode_row(key, entries, at)?;
        let count = entries.len() as u64;
        let (key, change, release) = (key.to_owned(), SummaryChange::of(entries), release.map(str::to_owned));
        self.ask(|reply| Request::Append { key, expect, change, row, count, at, release, reply }).await
    }

    /// Runs `f` on a read connection on tokio's blocking pool.
    async fn reading<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            StoreError::unavailable(
                "reading the session log (SqliteLogStore reads on a tokio runtime's blocking pool)",
                e,
            )
        })?;
        let readers = self.inner.readers.clone();
        runtime
            .spawn_blocking(move || readers.with(f))
            .await
            .map_err(|e| StoreError::unavailable("reading the session log", e))?
    }
}

impl LogStore for SqliteLogStore {
    /// The append and its release in one transaction: a turn's end and giving its session up are one commit.
    fn commit<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(self.append_with(append))
    }

    /// Taking the lease and reading where the log ends in one transaction on the writer thread, answered at once
    /// and kept open a moment (up to 5 ms) for the turn's start, so both are one commit.
    fn take_lease<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        term: std::time::Duration,
    ) -> BoxFuture<'a, Result<Option<Taken>, StoreError>> {
        let (key, op) = (key.to_owned(), leases::LeaseOp::Acquire { holder: holder.to_owned(), term });
        Box::pin(async move {
            Ok(Some(match self.ask(|reply| Request::Lease { key, op, turn: true, reply }).await? {
                (Some(other), _) => Taken::Elsewhere(other),
                (None, last) => Taken::Held { last },
            }))
        })
    }

    fn read<'a>(&'a self, key: &'a str, after: u64, limit: usize) -> BoxFuture<'a, Result<Vec<Record>, StoreError>> {
        let (key, path) = (key.to_owned(), self.inner.path.clone());
        Box::pin(self.reading(move |conn| tables::read(conn, &path, &key, after, limit)))
    }

    fn last<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<u64, StoreError>> {
        let (key, path) = (key.to_owned(), self.inner.path.clone());
        Box::pin(self.reading(move |conn| {
            tables::head(conn, &key)
                .map(|head| head.map_or(0, |(last, _)| last))
                .map_err(|e| failed(&path, &format!("reading where session '{key}' ends"), e))
        }))
    }

    fn leases(&self) -> Option<&dyn Leases> {
        Some(self)
    }

    fn watch(&self) -> broadcast::Receiver<Appended> {
        self.inner.appended.subscribe()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<SessionLine>, StoreError>> {
        let path = self.inner.path.clone();
        Box::pin(self.reading(move |conn| tables::list(conn, &path)))
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        let key = key.to_owned();
        Box::pin(self.ask(|reply| Request::Delete { key, reply }))
    }

    fn save_snapshot<'a>(&'a self, key: &'a str, snapshot: Snapshot) -> BoxFuture<'a, Result<(), StoreError>> {
        let key = key.to_owned();
        Box::pin(self.ask(|reply| Request::SaveSnapshot { key, snapshot, reply }))
    }

    fn snapshot<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Snapshot>, StoreError>> {
        let (key, path) = (key.to_owned(), self.inner.path.clone());
        Box::pin(self.reading(move |conn| tables::snapshot(conn, &path, &key)))
    }
}

impl Leases for SqliteLogStore {
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        term: std::time::Duration,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        let (key, op) = (key.to_owned(), leases::LeaseOp::Acquire { holder: holder.to_owned(), term });
        Box::pin(async move {
            self.ask(|reply| Request::Lease { key, op, turn: false, reply }).await.map(|(other, _)| other)
        })
    }

    fn release<'a>(&'a self, key: &'a str, holder: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        let (key, op) = (key.to_owned(), leases::LeaseOp::Release { holder: holder.to_owned() });
        Box::pin(async move { self.ask(|reply| Request::Lease { key, op, turn: false, reply }).await.map(drop) })
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        let (key, path) = (key.to_owned(), self.inner.path.clone());
        Box::pin(self.reading(move |conn| {
            leases::holder(conn, &key).map_err(|e| failed(&path, &format!("reading who holds session '{key}'"), e))
        }))
    }
}
