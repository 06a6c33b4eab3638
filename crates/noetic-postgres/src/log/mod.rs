//! Session logs in PostgreSQL: [`PgLogStore`], the [`LogStore`] (with [`Leases`]) that several workers share, on
//! the async driver `tokio-postgres` with a `deadpool-postgres` pool. Every method is a future that does its I/O on
//! the driver's sockets; nothing blocks a tokio worker, nothing runs on threads of its own.
//!
//! ```no_run
//! # async fn demo() -> Result<(), noetic::agent::log::StoreError> {
//! use noetic::agent::log::{Entry, Expect, LogStore};
//! let store = noetic_postgres::PgLogStore::connect("postgres://noetic:noetic@127.0.0.1:54329/noetic").await?;
//! let stop = Entry::StopRequested { reason: "enough".into() };
//! let last = store.append("session-1", Expect::End, &[stop]).await?;
//! assert_eq!(store.read("session-1", last - 1, 10).await?.len(), 1);
//! # Ok(()) }
//! ```
//!
//! # Tables (schema version 4)
//!
//! `noetic_log` holds one row per append (`session`, `pos` — its first entry's position —, and its entries'
//! JSON from [`noetic_runtime::agent::log::encode`], one per line; a tool call's entries are one row); `noetic_log_sessions` one row per session: where its log ends (`last`), its
//! [`Summary`](noetic_runtime::agent::log::Summary) as JSON, a number from a global sequence taken at every append (the
//! list's order, newest first), the transaction that appended last (`written_by`, for watchers catching up) and
//! the database's time of that append; its pages keep half their room for the rows' updates (`fillfactor`, set
//! on connecting where the user may alter the tables: a storage setting, not a schema version). Snapshots and
//! leases have a table each. A session exists while it has
//! entries; deleting it removes its rows from all four. An entry's time ([`Record::at`]) is the appending worker's
//! clock (it is encoded in the entry); the list's `updated_at` is the database's. Keys are at most
//! [`MAX_KEY_BYTES`] bytes without NUL characters (a primary key and a notification's payload hold them).
//!
//! # Group commit
//!
//! Appends go through one writer task per store object. It takes every append request queued when it is free (up
//! to [`PgLogOptions::max_batch`]), and writes them in one transaction: one statement creates or locks the
//! summary rows of all their sessions (in key order, so writers never deadlock), the fencing of each request is
//! decided against what it returned (each stale one answered with its own [`StoreError::Conflict`], the others
//! going ahead; two requests for one session in one batch apply in arrival order), and one statement inserts all
//! entries, updates the summaries and sends the notifications, pipelined with the `COMMIT`: two round trips, and a
//! thousand sessions appending at once share them. The common cases take one: a batch of appends that continue
//! where this writer last saw their sessions committed (it remembers each session's end, summary and append
//! counter) is one statement, a transaction of its own, fenced by the append counters — any append by anyone
//! since, or a delete, changes one, and the statement then writes nothing and the batch transaction decides
//! instead. For one session the statement updates its row where the counter still holds; for several it locks
//! their rows in key order and writes only when every counter holds (each summary row is written once, where the
//! batch transaction writes it twice).
//! Those one-statement appends run on the store object's listening connection while it listens (see *Watching*):
//! their own notifications then come back with their answers, on the socket being read for them, where on a
//! connection of their own each woke the listening connection's task and its server process once more (an append
//! took ~280 µs that way on a 2-core machine, ~175 µs this way); the batch transaction, reads and leases use the
//! pool. [`PgLogStore::stats`] counts transactions and appends, and those written on the listening connection.
//! A connection that drops before the commit is retried once on another; one that drops during the commit leaves
//! it unknown whether the batch was written, and every request in it is answered so ([`StoreError::Unavailable`]):
//! the writer reads [`LogStore::last`] and decides. When a statement on the listening connection fails without an
//! answer, the writer first ends that connection's server process (it can then commit nothing more) and reads the
//! statement's fence: a counter that still holds means nothing was written, and the batch transaction writes the
//! batch instead.
//!
//! # Watching
//!
//! An append is announced in its own transaction with `NOTIFY noetic_log` (payload: the store object's id and, per
//! session, the new last position and the key; a statement's sessions share as few notifications as hold them, see
//! `announce`), so other workers hear it when it commits; appends through the same store object are
//! broadcast at once, without waiting for the notification. Each store object keeps one connection listening,
//! driven by a tokio task, which reconnects by itself with backoff (0.1 s doubling to 5 s) when it drops or stops
//! answering the check it gets every 5 s. Appends committed while it was away are not lost: the task remembers a
//! snapshot of the database (`pg_current_snapshot()`) taken at a point all of whose notifications it had
//! received, and after listening again broadcasts every session whose last append is not visible in that snapshot
//! (possibly some it had heard of already: a watcher sees the same `last` twice, which is harmless).
//!
//! # Leases
//!
//! `noetic_log_leases` holds a holder and `lease_until` per key; taking, renewing and reading compare with the
//! database's `now()`, so the workers' clocks do not matter. A zero term lapses at once.
//!
//! # Migration from schema versions 1–2
//!
//! Connecting to a database that the store before the session log made (versions 1–2) adds the log's tables and converts every
//! session into log entries, in one transaction under the migration lock, once:
//!
//! 1. an [`Entry::Settings`](noetic_runtime::agent::log::Entry::Settings) with the session's mode, capacity and batch
//!    policy;
//! 2. when the session had turns (T ≥ 1, or items with T = 0, which count as turn 1): `TurnStarted { turn: T,
//!    input: "" }` with a new execution id, one `Appended { turn: T }` with the whole history, then — if the old
//!    row held an unfinished turn's journal — an `Appended` with the interrupted result
//!    ([`noetic_steps::turn::interrupted_result`]) for every tool call of the history without a result and `TurnEnded {
//!    outcome: Discarded }`, else `TurnEnded { outcome: Completed { answer } }` with the text of the last assistant
//!    message (or ""). The old journal cannot be replayed by the log's runtime: a turn the old version left
//!    unfinished is given up, every open call getting the interrupted result;
//! 3. each queued message, in queue order: `MessageAccepted`;
//! 4. each ledger entry, in order: `Decision { turn: None }`;
//! 5. each layer state: scope `thread:<key>` in the log of `key`, any other scope (global, a resource) in the log
//!    of the key `scope:<scope>`: `LayerState`.
//!
//! Entries carry the old row's `updated_at` as their time, and the list keeps the old order. A row that does not
//! read (an item, a queued message, a ledger entry, a layer state, a setting) fails the migration naming the
//! session and the row, and nothing is written. The old tables stay as they were, unused. A database of a version newer than
//! [`crate::LOG_SCHEMA_VERSION`] is refused untouched. Version 3 needs PostgreSQL 13 or newer.

mod announce;
mod convert;
mod errors;
mod listen;
mod migrate;
mod queries;
#[doc(hidden)]
pub mod testing;
mod writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use futures::future::BoxFuture;
use noetic_runtime::agent::log::{
    Append, Appended, Leases, LogStore, Record, SessionLine, Snapshot, StoreError, SummaryChange, Taken, encode_row,
};
use tokio::sync::{broadcast, mpsc, oneshot};

use errors::{describe, pool_error};

/// How many appends a watcher may fall behind by before it is told it lagged.
const WATCH_CAPACITY: usize = 4096;

/// The longest session key the store keeps (a key is a primary key and part of a notification's payload).
pub const MAX_KEY_BYTES: usize = 1024;

/// How a [`PgLogStore`] runs.
#[derive(Debug, Clone)]
pub struct PgLogOptions {
    /// The pool's connections (reads, lists, leases and the writer's transactions). Default 8.
    pub connections: usize,
    /// How long connecting may take. Default 5 s.
    pub connect_timeout: Duration,
    /// The most append requests one transaction takes. Default 1024.
    pub max_batch: usize,
}

impl Default for PgLogOptions {
    fn default() -> Self {
        PgLogOptions { connections: 8, connect_timeout: Duration::from_secs(5), max_batch: 1024 }
    }
}

/// What a store object has done so far (for tests and benchmarks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PgLogStats {
    /// Transactions the writer committed.
    pub transactions: u64,
    /// Appends those transactions wrote.
    pub appends: u64,
    /// Times the listening connection started listening (1 after connecting; each reconnection adds 1).
    pub listening: u64,
    /// Sessions broadcast after a reconnection because an append may have been missed while away.
    pub caught_up: u64,
    /// Of the transactions, those written on the listening connection (the one-statement appends of sessions the
    /// writer knows, while it listens; their notifications come back with their answers).
    pub on_listening_connection: u64,
}

/// The counters behind [`PgLogStats`].
#[derive(Debug, Default)]
struct Counters {
    transactions: AtomicU64,
    appends: AtomicU64,
    listening: AtomicU64,
    caught_up: AtomicU64,
    on_listening_connection: AtomicU64,
}

/// Session logs in a PostgreSQL database that several workers share (see the [module docs](self)). Cloning gives
/// another handle on the same store object; every [`PgLogStore::connect`] makes a new one (as another worker has).
#[derive(Clone)]
pub struct PgLogStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    target: String,
    id: String,
    appends: mpsc::Sender<writer::Request>,
    appended: broadcast::Sender<Appended>,
    counters: Arc<Counters>,
    /// Appends handed to the writer and not yet answered (a lone one's caller looks for its answer).
    in_flight: noetic_core::handoff::InFlight,
    /// Dropped with the store: the listening task ends.
    _listening: oneshot::Sender<()>,
}

impl std::fmt::Debug for PgLogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLogStore").field("target", &self.inner.target).field("id", &self.inner.id).finish()
    }
}

impl PgLogStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db`) with the default options,
    /// migrates its schema to version 4 and starts the store's writer and listening tasks on the current tokio
    /// runtime.
    pub async fn connect(url: &str) -> Result<PgLogStore, StoreError> {
        PgLogStore::connect_with(url, PgLogOptions::default()).await
    }

    /// Connects with `options`. A URL that does not parse, a database that cannot be reached or refuses the
    /// credentials, or one written by a newer noetic is an error saying what to do; nothing is written then.
    pub async fn connect_with(url: &str, options: PgLogOptions) -> Result<PgLogStore, StoreError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| StoreError::Refused {
            message: format!(
                "'{}' is not a PostgreSQL URL ({e}); write postgres://user:password@host:port/database",
                url.split('@').next_back().unwrap_or("")
            ),
        })?;
        if options.connections == 0 || options.max_batch == 0 {
            return Err(StoreError::Refused {
                message: "a PostgreSQL log store needs at least one connection and a batch of at least one".into(),
            });
        }
        config.connect_timeout(options.connect_timeout);
        let id = format!("{:016x}", fastrand::u64(..));
        let target = describe(&config);
        // Operators see whose connections these are (`pg_stat_activity.application_name`).
        config.application_name(format!("noetic-log {id}"));
        let manager = Manager::from_config(
            config.clone(),
            tokio_postgres::NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(options.connections)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| StoreError::unavailable(format!("making a connection pool for {target}"), e))?;
        let mut client = pool.get().await.map_err(|e| pool_error(&target, "connecting", e))?;
        migrate::migrate(&mut client, &target).await?;
        drop(client);

        let counters = Arc::new(Counters::default());
        let appended = broadcast::channel(WATCH_CAPACITY).0;
        let (appends, queue) = mpsc::channel(options.max_batch.saturating_mul(4));
        // The listening connection, published while it listens: the writer's one-statement appends run on it.
        let listening_client = tokio::sync::watch::Sender::new(None);
        let writer = writer::Writer {
            pool: pool.clone(),
            target: target.clone(),
            id: id.clone(),
            appended: appended.clone(),
            counters: counters.clone(),
            max_batch: options.max_batch,
            known: std::collections::HashMap::new(),
            listening: listening_client.subscribe(),
            listening_statements: None,
        };
        tokio::spawn(writer.run(queue));
        let (listening, closing) = oneshot::channel();
        config.application_name(format!("noetic-listen {id}"));
        let listener = listen::Listener {
            config,
            target: target.clone(),
            id: id.clone(),
            appended: appended.clone(),
            counters: counters.clone(),
            client: listening_client,
        };
        let (ready, listening_now) = oneshot::channel();
        tokio::spawn(listener.run(closing, ready));
        // Appends from now on are heard: the store is not handed out before its connection listens.
        match tokio::time::timeout(options.connect_timeout * 2, listening_now).await {
            Ok(Ok(())) => {}
            _ => {
                return Err(StoreError::unavailable(
                    format!("listening for appends on {target}"),
                    "the listening connection could not be made; check that the server is up and accepts one more \
                     connection",
                ));
            }
        }
        Ok(PgLogStore {
            inner: Arc::new(Inner {
                pool,
                target,
                id,
                appends,
                appended,
                counters,
                in_flight: noetic_core::handoff::InFlight::default(),
                _listening: listening,
            }),
        })
    }

    /// This store object's id: in its notifications' payloads and in its connections' `application_name`
    /// (`noetic-log <id>` for the pool's, `noetic-listen <id>` for the listening one).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Where the database is (`postgres://user@host:port/db`, no password).
    pub fn target(&self) -> &str {
        &self.inner.target
    }

    /// What the store object has done so far.
    pub fn stats(&self) -> PgLogStats {
        let c = &self.inner.counters;
        PgLogStats {
            transactions: c.transactions.load(Ordering::Relaxed),
            appends: c.appends.load(Ordering::Relaxed),
            listening: c.listening.load(Ordering::Relaxed),
            caught_up: c.caught_up.load(Ordering::Relaxed),
            on_listening_connection: c.on_listening_connection.load(Ordering::Relaxed),
        }
    }

    async fn append_now(&self, append: Append<'_>) -> Result<u64, StoreError> {
        let Append { key, expect, entries, release } = append;
        if entries.is_empty() {
            return Err(StoreError::Refused { message: format!("session '{key}': nothing to append") });
        }
        if !storable(key) {
            return Err(StoreError::Refused {
                message: format!(
                    "a session key of {} bytes{} cannot be stored; use a key of at most {MAX_KEY_BYTES} bytes \
                     without NUL characters",
                    key.len(),
                    if key.contains('\0') { " with a NUL character" } else { "" }
                ),
            });
        }
        let at = SystemTime::now();
        let row = encode_row(key, entries, at)?;
        let (reply, answer) = oneshot::channel();
        let (key, change, release) = (key.to_owned(), SummaryChange::of(entries), release.map(str::to_owned));
        let count = entries.len() as u64;
        let request = writer::Request { key: key.clone(), expect, change, row, count, release, reply };
        let stopped = || {
            StoreError::unavailable(
                format!("appending to session '{key}'"),
                format!("the store's writer task for {} has stopped (its tokio runtime shut down)", self.target()),
            )
        };
        let sent = self.inner.in_flight.sent();
        self.inner.appends.send(request).await.map_err(|_| stopped())?;
        sent.wait(answer).await.ok_or_else(stopped)?
    }
}

/// True when `key` can be a row's key and a notification's payload.
fn storable(key: &str) -> bool {
    key.len() <= MAX_KEY_BYTES && !key.contains('\0')
}

impl LogStore for PgLogStore {
    /// The release goes in the append's transaction (in its statement), only if the append passes its fence.
    fn commit<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(self.append_now(append))
    }

    fn read<'a>(&'a self, key: &'a str, after: u64, limit: usize) -> BoxFuture<'a, Result<Vec<Record>, StoreError>> {
        Box::pin(queries::read(&self.inner.pool, &self.inner.target, key, after, limit))
    }

    fn last<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(queries::last(&self.inner.pool, &self.inner.target, key))
    }

    fn watch(&self) -> broadcast::Receiver<Appended> {
        self.inner.appended.subscribe()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<SessionLine>, StoreError>> {
        Box::pin(queries::list(&self.inner.pool, &self.inner.target))
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(queries::delete(&self.inner.pool, &self.inner.target, key))
    }

    fn save_snapshot<'a>(&'a self, key: &'a str, snapshot: Snapshot) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(queries::save_snapshot(&self.inner.pool, &self.inner.target, key, snapshot))
    }

    fn snapshot<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Snapshot>, StoreError>> {
        Box::pin(queries::snapshot(&self.inner.pool, &self.inner.target, key))
    }

    fn leases(&self) -> Option<&dyn Leases> {
        Some(self)
    }

    /// One statement: the lease and where the log ends.
    fn take_lease<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        term: Duration,
    ) -> BoxFuture<'a, Result<Option<Taken>, StoreError>> {
        Box::pin(
            async move { queries::acquire(&self.inner.pool, &self.inner.target, key, holder, term).await.map(Some) },
        )
    }
}

impl Leases for PgLogStore {
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        term: Duration,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        Box::pin(async move {
            Ok(match queries::acquire(&self.inner.pool, &self.inner.target, key, holder, term).await? {
                Taken::Held { .. } => None,
                Taken::Elsewhere(other) => Some(other),
            })
        })
    }

    fn release<'a>(&'a self, key: &'a str, holder: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(queries::release(&self.inner.pool, &self.inner.target, key, holder))
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        Box::pin(queries::holder(&self.inner.pool, &self.inner.target, key))
    }
}
