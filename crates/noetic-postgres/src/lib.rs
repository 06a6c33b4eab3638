//! # noetic-postgres — noetic sessions shared by many workers through PostgreSQL
//!
//! (This file is `PgStore`, the synchronous store with its own thread pool that the runtime uses until it moves to
//! the session log (#30); it is deleted then rather than split now. The async log store, `PgLogStore`, lives in
//! `log/`, split by concern.)
//!
//! [`PgStore`] implements [`SessionStore`] for several worker processes (on one machine or many) that share one
//! database, typically behind a load balancer: any worker accepts any session's messages, a session's turn runs on
//! exactly one worker at a time, steering sent through any worker reaches the turn wherever it runs, and when a
//! worker dies another takes its unfinished turns over from the journal (SPEC 6).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! let store = Arc::new(noetic_postgres::PgStore::connect("postgres://noetic:noetic@127.0.0.1:54329/noetic")?);
//! # let model: Arc<dyn noetic::model::Model> = Arc::new(noetic::model::ScriptedModel::new([]));
//! let runtime = noetic::agent::Runtime::builder().model(model).store(store).build()?;
//! # Ok(()) }
//! ```
//!
//! ## The session log
//!
//! [`PgLogStore`] is the session log's store (`noetic::agent::log::LogStore` with `Leases`, issue #30) on the async
//! driver `tokio-postgres` with a `deadpool-postgres` pool: group commit, LISTEN/NOTIFY on a reconnecting tokio
//! task, leases on the database's clock, and the conversion of existing sessions into logs (schema version 3); see
//! [`log`]. The runtime does not use it yet: [`PgStore`] stays its store until it does, and works on a database
//! the log store migrated.
//!
//! ## Leases
//!
//! A session is not owned by a process for as long as it is open (as with `noetic-sqlite`) but **turn by turn**:
//! starting or resuming a turn takes the session's lease — `owner` (this worker's id) and `lease_until` in its
//! row — and the turn's end gives it up. Acquisition is one transaction that locks the row (`SELECT … FOR UPDATE`)
//! and takes the lease when nobody holds it, this worker holds it, or its holder let it expire; otherwise the
//! caller learns who runs the turn and a message it carried is queued for that turn in the same transaction, so a
//! message never falls between a turn ending on one worker and one starting on another. Every time comes from the
//! database's clock (`now()`), so workers' clocks do not matter.
//!
//! While a turn runs, a heartbeat thread renews the leases this worker holds every third of the lease time
//! (default 15 s, [`PgOptions::lease`]). A lease that could not be renewed (another worker took the session after
//! it expired, or the database was unreachable for longer than the lease) is *lost*: the turn stops at its next
//! checkpoint without writing anything more, and every commit is fenced anyway — it is refused unless this worker
//! holds the lease (or nobody does) and the commit continues the stored conversation exactly.
//!
//! ## Steering across workers
//!
//! A message for a session whose turn runs on another worker is inserted into the queue marked `from_elsewhere`
//! and announced with `NOTIFY noetic_steer` (payload: the lease holder's id and the key). Each worker keeps one
//! connection listening; a notification for it marks the session, and the turn's next checkpoint reads the
//! marked messages (one query, only when marked). Without notifications (the listening connection dropped), each
//! running session is also checked once per [`PgOptions::fallback_poll`] (default 1 s). A stop asked through any
//! worker clears the queue and sets `stop_requested` the same way.
//!
//! ## Takeover
//!
//! A worker killed mid-turn leaves its lease to expire and its turn's journal in the row.
//! [`SessionStore::orphaned`] lists sessions with a journal, or with queued messages no turn took, and no live
//! lease; `noetic serve` checks it
//! periodically and resumes them with `Session::resume`, whose lease transaction lets exactly one worker win.
//! The resume follows SPEC 6.3: no journaled model response requested again, no completed tool call re-run, an
//! interrupted call gets the interrupted result.
//!
//! ## Connections
//!
//! The store's methods are synchronous (the seam is), so the queries run on a small pool of connection threads
//! ([`PgOptions::connections`], default 4) using the synchronous `postgres` client, and the caller waits for the
//! answer — on a loopback database, a few hundred microseconds per call, at turn boundaries and checkpoints only.
//! A dropped connection fails the call in progress with a typed error; the next call reconnects.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use noetic::NoeticError;
use noetic::agent::{
    BatchPolicy, Inbox, JournalWrite, LayerStateWrite, Observed, SessionSnapshot, SessionStore, SessionSummary,
    SteerMessage, SteeringMode, StoreCommit, StoredSession, TurnLease, UnfinishedTurn, out_of_order, parse_setting,
    setting_text, thread_scope,
};
use noetic::model::Item;
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls, Statement};

pub mod log;
mod schema;

/// For tests: a database as an earlier version left it, a database of one's own.
#[doc(hidden)]
pub mod testing {
    pub use crate::log::testing::{Throwaway, client, create_at_version, server_url};

    /// Creates the version 1 schema, as the first release wrote it, in the database `client` is connected to.
    pub fn create_v1(client: &mut postgres::Client) -> Result<(), postgres::Error> {
        client.batch_execute(super::schema::V1)?;
        client.batch_execute(
            "CREATE TABLE noetic_schema (version INTEGER NOT NULL); INSERT INTO noetic_schema VALUES (1)",
        )
    }
}

pub use log::{PgLogOptions, PgLogStats, PgLogStore};
pub use schema::{LOG_SCHEMA_VERSION, SCHEMA_VERSION};

/// The channel workers listen on for steering and stops meant for them.
const CHANNEL: &str = "noetic_steer";

/// How a [`PgStore`] runs.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// How long a turn's lease lasts without a heartbeat: after a worker dies, its turns are taken over this long
    /// after its last renewal. Default 15 s.
    pub lease: Duration,
    /// Connections running the store's queries. Default 4.
    pub connections: usize,
    /// How often a running session's inbox is read even without a notification. Default 1 s.
    pub fallback_poll: Duration,
    /// How long connecting may take. Default 5 s.
    pub connect_timeout: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            lease: Duration::from_secs(15),
            connections: 4,
            fallback_poll: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// One job for a connection thread, given its connection slot.
type Job = Box<dyn FnOnce(&mut Slot<'_>) + Send>;

/// A connection thread's connection: made on first use and again after it dropped.
struct Slot<'a> {
    shared: &'a Shared,
    conn: Option<Conn>,
}

impl Slot<'_> {
    fn get(&mut self) -> Result<&mut Conn, NoeticError> {
        if self.conn.as_ref().is_some_and(|c| c.client.is_closed()) {
            self.conn = None;
        }
        if self.conn.is_none() {
            let client = self.shared.connect()?;
            self.conn = Some(Conn { client, statements: HashMap::new() });
        }
        self.conn.as_mut().ok_or_else(|| NoeticError::other("no database connection"))
    }

    /// Runs `f` on the connection; when the connection turns out to have dropped before `f` could change anything
    /// (the server restarted, the network cut it), once more on a new one.
    fn run<T>(&mut self, f: &mut impl FnMut(&mut Conn) -> Result<T, Fail>) -> Result<T, Fail> {
        let first = f(self.get()?);
        match first {
            Err(Fail::Db(e)) if connection_lost(&e) => {
                tracing::info!(error = %e, "a database connection dropped; reconnecting");
                self.conn = None;
                f(self.get()?)
            }
            other => other,
        }
    }
}

/// True when `e` says the connection is gone (closed, or ended by the server) rather than that a statement failed.
fn connection_lost(e: &postgres::Error) -> bool {
    e.is_closed()
        || e.code().is_some_and(|c| {
            let code = c.code();
            code.starts_with("08") || code.starts_with("57P")
        })
}

/// A connection with its prepared statements.
struct Conn {
    client: Client,
    statements: HashMap<&'static str, Statement>,
}

impl Conn {
    fn statement(&mut self, sql: &'static str) -> Result<Statement, postgres::Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql)?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>, Fail> {
        let statement = self.statement(sql)?;
        Ok(self.client.query(&statement, params)?)
    }

    fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Option<postgres::Row>, Fail> {
        let statement = self.statement(sql)?;
        Ok(self.client.query_opt(&statement, params)?)
    }

    fn execute(&mut self, sql: &'static str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> Result<u64, Fail> {
        let statement = self.statement(sql)?;
        Ok(self.client.execute(&statement, params)?)
    }

    /// Runs `f` in a transaction: committed when it succeeds, rolled back when it fails.
    fn transaction<T>(&mut self, f: impl FnOnce(&mut Conn) -> Result<T, Fail>) -> Result<T, Fail> {
        self.client.batch_execute("BEGIN")?;
        match f(self) {
            Ok(value) => {
                self.client.batch_execute("COMMIT").map_err(Fail::CommitUnknown)?;
                Ok(value)
            }
            Err(e) => {
                if !self.client.is_closed() {
                    let _ = self.client.batch_execute("ROLLBACK");
                }
                Err(e)
            }
        }
    }
}

/// Why a query failed: the database, the store's own check (already a message for the user), or a `COMMIT`
/// whose answer never came (it may or may not have taken effect: never retried).
enum Fail {
    Db(postgres::Error),
    Store(NoeticError),
    CommitUnknown(postgres::Error),
}

impl From<postgres::Error> for Fail {
    fn from(e: postgres::Error) -> Self {
        Fail::Db(e)
    }
}

impl From<NoeticError> for Fail {
    fn from(e: NoeticError) -> Self {
        Fail::Store(e)
    }
}

/// What the store's threads share with it.
struct Shared {
    /// Where the database is, without the password (for messages).
    target: String,
    config: postgres::Config,
    worker: String,
    options: PgOptions,
    /// Per session: the `version` this worker last read or wrote in step with (what memory holds). A session whose
    /// stored version differs was changed by another worker.
    seen: Mutex<HashMap<String, i64>>,
    /// Sessions whose lease this worker holds (a turn runs here).
    held: Mutex<HashSet<String>>,
    /// Held sessions whose lease was lost, with why: their turns stop at the next checkpoint.
    lost: Mutex<HashMap<String, String>>,
    /// Sessions a notification said have something in their inbox.
    notified: Mutex<HashSet<String>>,
    /// Incremented at every fallback poll (and when the listener reconnects): a session whose inbox was last read
    /// at an older tick is read again.
    tick: AtomicU64,
    inbox_read_at: Mutex<HashMap<String, u64>>,
    closing: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sessions in a PostgreSQL database, shared turn by turn with other workers. Cheap to share (`Arc`).
pub struct PgStore {
    shared: Arc<Shared>,
    jobs: Mutex<Option<SyncSender<Job>>>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("target", &self.shared.target)
            .field("worker", &self.shared.worker)
            .finish_non_exhaustive()
    }
}

/// `postgres://user@host:port/db` without the password.
fn describe(config: &postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("");
    let db = config.get_dbname().unwrap_or("");
    format!("postgres://{user}@{host}:{port}/{db}")
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned())
}

impl Shared {
    /// A database error, with what was being done and what to do.
    fn db_error(&self, doing: &str, e: &postgres::Error) -> NoeticError {
        let hint = if e.is_closed() || e.as_db_error().is_none() {
            "the connection to the database failed or dropped; check that the server is up (the next call reconnects)"
        } else {
            match e.code().map(postgres::error::SqlState::code) {
                Some("28P01" | "28000") => "the database refused the credentials; check the URL's user and password",
                Some("3D000") => "the database does not exist; create it or fix the URL",
                Some("53300") => "the server has too many connections; lower --connections or raise max_connections",
                Some(code) if code.starts_with("40") => "the transaction was rolled back by a conflict; try again",
                _ => "check the server's log",
            }
        };
        NoeticError::other(format!("session store {}: {doing} failed: {e}; {hint}", self.target))
    }

    fn fail(&self, doing: &str, fail: Fail) -> NoeticError {
        match fail {
            Fail::Db(e) => self.db_error(doing, &e),
            Fail::Store(e) => e,
            Fail::CommitUnknown(e) => NoeticError::other(format!(
                "session store {}: {doing} failed while committing: {e}; whether it took effect is unknown (the \
                 session is read again before its next turn)",
                self.target
            )),
        }
    }

    fn connect(&self) -> Result<Client, NoeticError> {
        self.config.connect(NoTls).map_err(|e| self.db_error("connecting", &e))
    }

    fn json_error(&self, what: &str, e: &serde_json::Error) -> NoeticError {
        NoeticError::other(format!(
            "session store {}: a stored {what} is unreadable ({e}); it was written by an incompatible version or damaged",
            self.target
        ))
    }

    /// Records a write this worker made in step with its memory: the session's new version is what memory holds,
    /// if memory held the version before it.
    fn wrote(&self, key: &str, version: i64) {
        let mut seen = lock(&self.seen);
        if seen.get(key).is_some_and(|v| *v == version - 1) || version == 1 {
            seen.insert(key.to_owned(), version);
        } else {
            seen.remove(key);
        }
    }

    /// Forgets what memory holds of `key` (the next turn reads it again).
    fn stale(&self, key: &str) {
        lock(&self.seen).remove(key);
    }
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db`) with the default options and
    /// migrates its schema.
    pub fn connect(url: &str) -> Result<Self, NoeticError> {
        Self::connect_with(url, PgOptions::default())
    }

    /// Connects with `options`. A URL that does not parse, a database that cannot be reached or refuses the
    /// credentials, or one written by a newer noetic is an error saying what to do; nothing is written then.
    pub fn connect_with(url: &str, options: PgOptions) -> Result<Self, NoeticError> {
        let mut config: postgres::Config = url.parse().map_err(|e| {
            NoeticError::other(format!(
                "'{}' is not a PostgreSQL URL ({e}); write postgres://user:password@host:port/database",
                url.split('@').next_back().unwrap_or("")
            ))
        })?;
        config.connect_timeout(options.connect_timeout);

        if options.lease < Duration::from_millis(300) || options.connections == 0 {
            return Err(NoeticError::other(
                "a PostgreSQL store needs a lease of at least 300 ms and at least one connection",
            ));
        }
        let worker = format!("{}:{}:{:04x}", hostname(), std::process::id(), fastrand::u16(..));
        // Operators see which worker a connection belongs to (`pg_stat_activity.application_name`).
        let name: String = format!("noetic {worker}").chars().take(63).collect();
        config.application_name(&name);
        let shared = Arc::new(Shared {
            target: describe(&config),
            config,
            worker,
            options,
            seen: Mutex::default(),
            held: Mutex::default(),
            lost: Mutex::default(),
            notified: Mutex::default(),
            tick: AtomicU64::new(0),
            inbox_read_at: Mutex::default(),
            closing: AtomicBool::new(false),
        });
        // The synchronous client runs its own event loop, which may not start on a thread that drives async
        // tasks: connecting and migrating happen on a thread of their own, like every later query.
        // A client refused there is dropped there too: closing it also runs that event loop.
        let connecting = shared.clone();
        let first = std::thread::spawn(move || {
            let mut first = connecting.connect()?;
            match schema::migrate(&mut first).map_err(|e| connecting.db_error("migrating the schema", &e))? {
                schema::Migrated::Current => Ok(first),
                schema::Migrated::Newer(version) => Err(NoeticError::other(format!(
                    "session store {}: its schema is version {version}, newer than this noetic supports \
                     ({LOG_SCHEMA_VERSION}); upgrade noetic or use another database (nothing was changed)",
                    connecting.target
                ))),
            }
        })
        .join()
        .map_err(|_| NoeticError::other("the thread connecting to the database failed"))??;
        let (tx, rx) = mpsc::sync_channel::<Job>(256);
        let rx = Arc::new(Mutex::new(rx));
        let mut first = Some(first);
        for i in 0..shared.options.connections {
            let (shared, rx, client) = (shared.clone(), rx.clone(), first.take());
            std::thread::Builder::new()
                .name(format!("noetic-pg-{i}"))
                .spawn(move || connection_thread(&shared, &rx, client))
                .map_err(|e| NoeticError::other(format!("cannot start a database thread: {e}")))?;
        }
        let listener = shared.clone();
        std::thread::Builder::new()
            .name("noetic-pg-listen".to_owned())
            .spawn(move || listen_thread(&listener))
            .map_err(|e| NoeticError::other(format!("cannot start the listening thread: {e}")))?;
        let store = PgStore { shared, jobs: Mutex::new(Some(tx)) };
        let heartbeat = store.shared.clone();
        let jobs = lock(&store.jobs).clone();
        std::thread::Builder::new()
            .name("noetic-pg-heartbeat".to_owned())
            .spawn(move || {
                if let Some(jobs) = jobs {
                    heartbeat_thread(&heartbeat, &jobs);
                }
            })
            .map_err(|e| NoeticError::other(format!("cannot start the heartbeat thread: {e}")))?;
        Ok(store)
    }

    /// This worker's id, as lease owner (`host:pid:random`).
    pub fn worker_id(&self) -> &str {
        &self.shared.worker
    }

    /// Where the database is (`postgres://user@host:port/db`, no password).
    pub fn target(&self) -> &str {
        &self.shared.target
    }

    /// The lease time.
    pub fn lease(&self) -> Duration {
        self.shared.options.lease
    }

    /// The schema version of the database (after migration: [`SCHEMA_VERSION`], or [`LOG_SCHEMA_VERSION`] when a
    /// [`PgLogStore`] migrated it).
    pub fn schema_version(&self) -> Result<i32, NoeticError> {
        self.run("reading the schema version", |conn| {
            Ok(conn.query_opt("SELECT version FROM noetic_schema", &[])?.map_or(0, |r| r.get(0)))
        })
    }

    /// Reads a session without touching its lease or what this worker remembers of it (listings, `sessions show`).
    pub fn peek(&self, key: &str) -> Result<Option<StoredSession>, NoeticError> {
        let shared = self.shared.clone();
        let key = key.to_owned();
        self.run("reading the session", move |conn| Ok(read(&shared, conn, &key)?.map(|(s, _)| s)))
    }

    /// Who holds the lease on `key` while it is live: `None` when nobody runs a turn there.
    pub fn lease_holder(&self, key: &str) -> Result<Option<String>, NoeticError> {
        let key = key.to_owned();
        self.run("reading the session's lease", move |conn| {
            Ok(conn
                .query_opt(
                    "SELECT owner FROM noetic_sessions WHERE key = $1 AND owner IS NOT NULL AND lease_until > now()",
                    &[&key],
                )?
                .map(|r| r.get(0)))
        })
    }

    /// True when a notification said another worker left something for `key` (steering or a stop) that the turn
    /// running here has not read yet: its next checkpoint reads it. (Tests wait for it before letting the turn
    /// reach that checkpoint.)
    pub fn has_news(&self, key: &str) -> bool {
        lock(&self.shared.notified).contains(key)
    }

    /// Runs `f` on a pooled connection and waits for it.
    fn run<T: Send + 'static>(
        &self,
        doing: &'static str,
        mut f: impl FnMut(&mut Conn) -> Result<T, Fail> + Send + 'static,
    ) -> Result<T, NoeticError> {
        let (tx, rx) = mpsc::sync_channel(1);
        let shared = self.shared.clone();
        let job: Job = Box::new(move |slot| {
            let result = slot.run(&mut f).map_err(|fail| shared.fail(doing, fail));
            let _ = tx.send(result);
        });
        let sent = match &*lock(&self.jobs) {
            Some(jobs) => jobs.send(job).is_ok(),
            None => false,
        };
        if !sent {
            return Err(NoeticError::other(format!("session store {}: the store is closed", self.shared.target)));
        }
        rx.recv().unwrap_or_else(|_| {
            Err(NoeticError::other(format!(
                "session store {}: {doing} failed: the database thread ended",
                self.shared.target
            )))
        })
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::SeqCst);
        // The connection threads end when the last sender goes (the heartbeat's ends with it).
        lock(&self.jobs).take();
    }
}

fn connection_thread(shared: &Shared, jobs: &Mutex<Receiver<Job>>, client: Option<Client>) {
    let mut slot = Slot { shared, conn: client.map(|client| Conn { client, statements: HashMap::new() }) };
    loop {
        let job = match lock(jobs).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        job(&mut slot);
    }
}

/// Listens for notifications meant for this worker; reconnects when the connection drops.
fn listen_thread(shared: &Shared) {
    let mut backoff = Duration::from_millis(100);
    while !shared.closing.load(Ordering::SeqCst) {
        let mut client = match shared.connect().and_then(|mut c| {
            c.batch_execute(&format!("LISTEN {CHANNEL}")).map_err(|e| shared.db_error("listening", &e)).map(|()| c)
        }) {
            Ok(client) => client,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for steering from other workers; retrying");
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        backoff = Duration::from_millis(100);
        // Anything sent while not listening is found by reading every running session's inbox once.
        shared.tick.fetch_add(1, Ordering::SeqCst);
        loop {
            if shared.closing.load(Ordering::SeqCst) {
                return;
            }
            let mut notifications = client.notifications();
            let mut iter = notifications.timeout_iter(shared.options.fallback_poll);
            let mut got = false;
            loop {
                match iter.next() {
                    Ok(Some(n)) => {
                        got = true;
                        if let Some((worker, key)) = n.payload().split_once('\t')
                            && worker == shared.worker
                        {
                            lock(&shared.notified).insert(key.to_owned());
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "the listening connection dropped; reconnecting");
                        got = false;
                        break;
                    }
                }
            }
            drop(iter);
            drop(notifications);
            if client.is_closed() {
                break;
            }
            if !got {
                shared.tick.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// Renews the leases this worker holds every third of the lease time; marks them lost when it cannot.
fn heartbeat_thread(shared: &Arc<Shared>, jobs: &SyncSender<Job>) {
    let every = shared.options.lease / 3;
    let mut last_ok = Instant::now();
    while !shared.closing.load(Ordering::SeqCst) {
        std::thread::sleep(every);
        let keys: Vec<String> = lock(&shared.held).iter().cloned().collect();
        if keys.is_empty() {
            last_ok = Instant::now();
            continue;
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let (worker, lease_ms) = (shared.worker.clone(), millis(shared.options.lease));
        let asked = keys.clone();
        let job: Job = Box::new(move |slot| {
            let result = slot
                .run(&mut |conn: &mut Conn| {
                    conn.query(
                        "UPDATE noetic_sessions SET lease_until = now() + $2::float8 * interval '1 millisecond'
                         WHERE owner = $1 AND key = ANY($3) RETURNING key",
                        &[&worker, &lease_ms, &asked],
                    )
                })
                .map(|rows| rows.iter().map(|r| r.get::<_, String>(0)).collect::<HashSet<String>>())
                .map_err(|_| ());
            let _ = tx.send(result);
        });
        if jobs.send(job).is_err() {
            return;
        }
        match rx.recv() {
            Ok(Ok(renewed)) => {
                last_ok = Instant::now();
                let held = lock(&shared.held);
                let mut lost = lock(&shared.lost);
                for key in keys.iter().filter(|k| !renewed.contains(*k) && held.contains(*k)) {
                    tracing::warn!(session = %key, "the session's lease was taken by another worker");
                    lost.insert(key.clone(), format!("the lease on session '{key}' was taken by another worker"));
                }
            }
            _ if last_ok.elapsed() >= shared.options.lease => {
                let held = lock(&shared.held);
                let mut lost = lock(&shared.lost);
                for key in held.iter() {
                    lost.insert(
                        key.clone(),
                        format!(
                            "the lease on session '{key}' could not be renewed for {:?} (database unreachable); \
                             another worker may run it now",
                            last_ok.elapsed()
                        ),
                    );
                }
            }
            _ => {}
        }
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Reads a whole session and its version, consistently.
fn read(shared: &Shared, conn: &mut Conn, key: &str) -> Result<Option<(StoredSession, i64)>, Fail> {
    conn.transaction(|conn| {
        conn.client.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")?;
        read_in(shared, conn, key)
    })
}

/// Reads a whole session and its version in the caller's transaction.
fn read_in(shared: &Shared, conn: &mut Conn, key: &str) -> Result<Option<(StoredSession, i64)>, Fail> {
    {
        let Some(row) = conn.query_opt(
            "SELECT mode, capacity, batch_policy, turns, journal_step, journal_core, version
             FROM noetic_sessions WHERE key = $1",
            &[&key],
        )?
        else {
            return Ok(None);
        };
        let mut history = Vec::new();
        for r in conn.query("SELECT item FROM noetic_items WHERE session = $1 ORDER BY seq", &[&key])? {
            let text: String = r.get(0);
            history.push(serde_json::from_str::<Item>(&text).map_err(|e| shared.json_error("item", &e))?);
        }
        let mut queued = Vec::new();
        for r in conn.query("SELECT message FROM noetic_queue WHERE session = $1 ORDER BY pos", &[&key])? {
            let text: String = r.get(0);
            queued.push(
                serde_json::from_str::<SteerMessage>(&text).map_err(|e| shared.json_error("steering message", &e))?,
            );
        }
        let (mode, policy): (String, String) = (row.get(0), row.get(2));
        let snapshot = SessionSnapshot {
            key: key.to_owned(),
            history,
            queued,
            turns: u64::try_from(row.get::<_, i64>(3)).unwrap_or(0),
            mode: parse_setting(&mode).map_err(|e| shared.json_error("steering mode", &e))?,
            capacity: usize::try_from(row.get::<_, i64>(1)).unwrap_or(1),
            batch_policy: parse_setting(&policy).map_err(|e| shared.json_error("batch policy", &e))?,
        };
        let step: Option<String> = row.get(4);
        let core: Option<String> = row.get(5);
        let unfinished = step.zip(core).map(|(step_id, core)| UnfinishedTurn { step_id, core });
        Ok(Some((StoredSession { snapshot, unfinished }, row.get(6))))
    }
}

/// Creates the session's row if it has none (nobody holds it).
fn ensure(conn: &mut Conn, key: &str) -> Result<(), Fail> {
    conn.execute(
        "INSERT INTO noetic_sessions (key, mode, capacity, batch_policy) VALUES ($1, $2, $3, $4)
         ON CONFLICT (key) DO NOTHING",
        &[
            &key,
            &setting_text(&SteeringMode::default()),
            &count(noetic::agent::DEFAULT_QUEUE_CAPACITY),
            &setting_text(&BatchPolicy::default()),
        ],
    )?;
    Ok(())
}

/// The row's lease, locked for this transaction: `(owner, live, version)`; `None` when there is no such session.
fn lock_row(conn: &mut Conn, key: &str) -> Result<Option<(Option<String>, bool, i64)>, Fail> {
    Ok(conn
        .query_opt(
            "SELECT owner, COALESCE(lease_until > now(), FALSE), version FROM noetic_sessions WHERE key = $1 FOR UPDATE",
            &[&key],
        )?
        .map(|r| (r.get(0), r.get(1), r.get(2))))
}

/// Appends a message to the queue; returns the session's new version.
fn insert_message(conn: &mut Conn, key: &str, message: &str, id: &str, from_elsewhere: bool) -> Result<i64, Fail> {
    conn.execute(
        "INSERT INTO noetic_queue (session, pos, id, message, from_elsewhere)
         VALUES ($1, (SELECT COALESCE(MAX(pos), 0) + 1 FROM noetic_queue WHERE session = $1), $2, $3, $4)",
        &[&key, &id, &message, &from_elsewhere],
    )?;
    bump(conn, key)
}

/// Marks the session changed; returns its new version.
fn bump(conn: &mut Conn, key: &str) -> Result<i64, Fail> {
    Ok(conn
        .query_opt(
            "UPDATE noetic_sessions SET version = version + 1, updated_at = now() WHERE key = $1 RETURNING version",
            &[&key],
        )?
        .map_or(0, |r| r.get(0)))
}

fn notify(conn: &mut Conn, owner: &str, key: &str) -> Result<(), Fail> {
    conn.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &format!("{owner}\t{key}")])?;
    Ok(())
}

/// Takes the messages other workers queued for the lease holder (they become ordinary queued messages).
fn take_from_elsewhere(shared: &Shared, conn: &mut Conn, key: &str) -> Result<Vec<SteerMessage>, Fail> {
    let rows = conn.query(
        "UPDATE noetic_queue SET from_elsewhere = FALSE WHERE session = $1 AND from_elsewhere RETURNING pos, message",
        &[&key],
    )?;
    let mut rows: Vec<(i64, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    rows.sort_by_key(|(pos, _)| *pos);
    rows.into_iter()
        .map(|(_, text)| {
            serde_json::from_str::<SteerMessage>(&text)
                .map_err(|e| Fail::Store(shared.json_error("steering message", &e)))
        })
        .collect()
}

/// The ids of the messages queued for `key`, in the order they were accepted (by any worker).
fn queue_order(conn: &mut Conn, key: &str) -> Result<Vec<String>, Fail> {
    let rows = conn.query("SELECT id FROM noetic_queue WHERE session = $1 ORDER BY pos", &[&key])?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

impl PgStore {
    /// The lease transaction of [`SessionStore::begin_turn`] and [`SessionStore::begin_turn_or_queue`].
    fn take_lease(&self, key: &str, message: Option<&SteerMessage>) -> Result<TurnLease, NoeticError> {
        let message = message
            .map(|m| serde_json::to_string(m).map(|text| (m.id.to_string(), text)))
            .transpose()
            .map_err(|e| self.shared.json_error("steering message", &e))?;
        let (shared, key_owned) = (self.shared.clone(), key.to_owned());
        let lease_ms = millis(self.shared.options.lease);
        let outcome = self.run("taking the session's lease", move |conn| {
            let key = key_owned.as_str();
            conn.transaction(|conn| {
                let (row, created) = match lock_row(conn, key)? {
                    Some(row) => (row, false),
                    None => {
                        ensure(conn, key)?;
                        (lock_row(conn, key)?.unwrap_or((None, false, 1)), true)
                    }
                };
                let (owner, live, version) = row;
                if let Some(owner) = owner.filter(|o| live && *o != shared.worker) {
                    if let Some((id, text)) = &message {
                        insert_message(conn, key, text, id, true)?;
                        notify(conn, &owner, key)?;
                    }
                    return Ok((TurnLease::Elsewhere { owner }, None));
                }
                conn.execute(
                    "UPDATE noetic_sessions SET owner = $2, lease_until = now() + $3::float8 * interval '1 millisecond',
                         stop_requested = NULL
                     WHERE key = $1",
                    &[&key, &shared.worker, &lease_ms],
                )?;
                // Messages marked for a previous holder are this turn's now: memory has them, or gets them with
                // the session read below.
                conn.execute(
                    "UPDATE noetic_queue SET from_elsewhere = FALSE WHERE session = $1 AND from_elsewhere",
                    &[&key],
                )?;
                // A session this lease created holds nothing memory lacks.
                if created || lock(&shared.seen).get(key) == Some(&version) {
                    return Ok((TurnLease::Granted { refreshed: None }, Some(version)));
                }
                // Another worker changed the session since this one last saw it: read it under the row lock
                // (every writer takes it first), so nothing changes between the read and the lease.
                match read_in(&shared, conn, key)? {
                    Some((stored, version)) => Ok((TurnLease::Granted { refreshed: Some(stored) }, Some(version))),
                    None => Ok((TurnLease::Granted { refreshed: None }, Some(version))),
                }
            })
        })?;
        let (lease, version) = outcome;
        let Some(version) = version else {
            // The message went to another worker's turn: memory no longer holds what is stored.
            self.shared.stale(key);
            return Ok(lease);
        };
        lock(&self.shared.seen).insert(key.to_owned(), version);
        lock(&self.shared.held).insert(key.to_owned());
        lock(&self.shared.lost).remove(key);
        lock(&self.shared.notified).remove(key);
        Ok(lease)
    }
}

impl SessionStore for PgStore {
    fn open(&self, key: &str) -> Result<Option<StoredSession>, NoeticError> {
        let shared = self.shared.clone();
        let key_owned = key.to_owned();
        let stored = self.run("opening the session", move |conn| read(&shared, conn, &key_owned))?;
        Ok(stored.map(|(stored, version)| {
            lock(&self.shared.seen).insert(key.to_owned(), version);
            stored
        }))
    }

    fn close(&self, key: &str) {
        self.shared.stale(key);
        lock(&self.shared.inbox_read_at).remove(key);
    }

    fn commit(&self, key: &str, commit: StoreCommit<'_>) -> Result<(), NoeticError> {
        let items = commit
            .items
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<String>, _>>()
            .map_err(|e| self.shared.json_error("item", &e))?;
        let ledger = commit.ledger.to_vec();
        let injected = commit.injected.to_vec();
        let (step, core, keep) = match commit.journal {
            JournalWrite::Keep => (None, None, true),
            JournalWrite::Save { step_id, core } => (Some(step_id.to_owned()), Some(core.to_owned()), false),
            JournalWrite::Clear => (None, None, false),
        };
        let (first, shared, key_owned) = (commit.first, self.shared.clone(), key.to_owned());
        let version = self.run("committing the turn", move |conn| {
            let key = key_owned.as_str();
            // The usual case in one statement (one round trip, atomic on its own): the row exists, holds exactly
            // `first` items and no other live worker holds its lease. Anything else — a new session, a commit that
            // does not continue the conversation, a lost lease — writes nothing here and takes the transaction
            // below, which says what is wrong.
            let fast = conn.query_opt(
                "WITH s AS (
                     SELECT key FROM noetic_sessions
                     WHERE key = $1 AND items = $2
                       AND (owner IS NULL OR owner = $3 OR lease_until IS NULL OR lease_until <= now())
                     FOR UPDATE
                 ),
                 ins AS (
                     INSERT INTO noetic_items (session, seq, item)
                     SELECT $1, $2::bigint + ord - 1, item FROM s, unnest($4::text[]) WITH ORDINALITY AS t(item, ord)
                 ),
                 led AS (
                     INSERT INTO noetic_ledger (session, seq, entry)
                     SELECT $1, (SELECT COALESCE(MAX(seq), 0) FROM noetic_ledger WHERE session = $1) + ord, entry
                     FROM s, unnest($5::text[]) WITH ORDINALITY AS t(entry, ord)
                 ),
                 del AS (
                     DELETE FROM noetic_queue WHERE session = $1 AND id = ANY($6::text[]) AND EXISTS (SELECT 1 FROM s)
                 )
                 UPDATE noetic_sessions SET items = $2 + cardinality($4::text[]), updated_at = now(),
                     version = version + 1,
                     journal_step = CASE WHEN $9 THEN journal_step ELSE $7 END,
                     journal_core = CASE WHEN $9 THEN journal_core ELSE $8 END
                 WHERE key IN (SELECT key FROM s)
                 RETURNING version",
                &[&key, &count(first), &shared.worker, &items, &ledger, &injected, &step, &core, &keep],
            );
            match fast {
                Ok(Some(row)) => return Ok(row.get::<_, i64>(0)),
                Ok(None) => {}
                // A unique violation means another writer got in between: the transaction below says who.
                Err(Fail::Db(e)) if e.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION) => {}
                Err(e) => return Err(e),
            }
            conn.transaction(|conn| {
                let (owner, live, _) = match lock_row(conn, key)? {
                    Some(row) => row,
                    None if first == 0 => {
                        ensure(conn, key)?;
                        lock_row(conn, key)?.unwrap_or((None, false, 1))
                    }
                    None => return Err(Fail::Store(out_of_order(key, 0, first))),
                };
                if let Some(owner) = owner.filter(|o| live && *o != shared.worker) {
                    return Err(Fail::Store(NoeticError::other(format!(
                        "session '{key}': worker {owner} holds its lease now; this worker's turn lost it and stops \
                         (nothing more of it is written)"
                    ))));
                }
                let held: i64 = conn
                    .query_opt("SELECT items FROM noetic_sessions WHERE key = $1", &[&key])?
                    .map_or(0, |r| r.get(0));
                if held != count(first) {
                    return Err(Fail::Store(out_of_order(key, usize::try_from(held).unwrap_or(0), first)));
                }
                if !items.is_empty() {
                    conn.execute(
                        "INSERT INTO noetic_items (session, seq, item)
                         SELECT $1, $2::bigint + ord - 1, item FROM unnest($3::text[]) WITH ORDINALITY AS t(item, ord)",
                        &[&key, &count(first), &items],
                    )?;
                }
                if !ledger.is_empty() {
                    conn.execute(
                        "INSERT INTO noetic_ledger (session, seq, entry)
                         SELECT $1, (SELECT COALESCE(MAX(seq), 0) FROM noetic_ledger WHERE session = $1) + ord, entry
                         FROM unnest($2::text[]) WITH ORDINALITY AS t(entry, ord)",
                        &[&key, &ledger],
                    )?;
                }
                if !injected.is_empty() {
                    conn.execute("DELETE FROM noetic_queue WHERE session = $1 AND id = ANY($2)", &[&key, &injected])?;
                }
                let row = conn.query_opt(
                    "UPDATE noetic_sessions SET items = $2, updated_at = now(), version = version + 1,
                         journal_step = CASE WHEN $5 THEN journal_step ELSE $3 END,
                         journal_core = CASE WHEN $5 THEN journal_core ELSE $4 END
                     WHERE key = $1 RETURNING version",
                    &[&key, &count(first + items.len()), &step, &core, &keep],
                )?;
                Ok(row.map_or(0, |r| r.get::<_, i64>(0)))
            })
        })?;
        self.shared.wrote(key, version);
        Ok(())
    }

    fn push_message(&self, key: &str, message: &SteerMessage) -> Result<(), NoeticError> {
        let text = serde_json::to_string(message).map_err(|e| self.shared.json_error("steering message", &e))?;
        let (id, shared, key_owned) = (message.id.to_string(), self.shared.clone(), key.to_owned());
        let (version, mine) = self.run("queueing a steering message", move |conn| {
            let key = key_owned.as_str();
            conn.transaction(|conn| {
                ensure(conn, key)?;
                let (owner, live, _) = lock_row(conn, key)?.unwrap_or((None, false, 0));
                let mine = live && owner.as_deref() == Some(shared.worker.as_str());
                // Unless this worker runs the session's turn, the message is marked for whoever does (or will).
                let version = insert_message(conn, key, &text, &id, !mine)?;
                if let Some(owner) = owner.filter(|o| live && *o != shared.worker) {
                    notify(conn, &owner, key)?;
                    return Ok((version, false));
                }
                Ok((version, true))
            })
        })?;
        if mine {
            self.shared.wrote(key, version);
        } else {
            self.shared.stale(key);
        }
        Ok(())
    }

    fn remove_messages(&self, key: &str, ids: Option<&[String]>) -> Result<(), NoeticError> {
        let ids = ids.map(<[String]>::to_vec);
        let key_owned = key.to_owned();
        let version = self.run("removing steering messages", move |conn| {
            let key = key_owned.as_str();
            conn.transaction(|conn| {
                let removed = match &ids {
                    None => conn.execute("DELETE FROM noetic_queue WHERE session = $1", &[&key])?,
                    Some(ids) => {
                        conn.execute("DELETE FROM noetic_queue WHERE session = $1 AND id = ANY($2)", &[&key, ids])?
                    }
                };
                if removed == 0 { Ok(None) } else { bump(conn, key).map(Some) }
            })
        })?;
        if let Some(version) = version {
            self.shared.wrote(key, version);
        }
        Ok(())
    }

    fn save_settings(
        &self,
        key: &str,
        mode: SteeringMode,
        capacity: usize,
        batch_policy: BatchPolicy,
        turns: u64,
    ) -> Result<(), NoeticError> {
        let (mode, policy) = (setting_text(&mode), setting_text(&batch_policy));
        let (capacity, turns) = (count(capacity), i64::try_from(turns).unwrap_or(i64::MAX));
        let key_owned = key.to_owned();
        let version = self.run("saving the session's settings", move |conn| {
            let key = key_owned.as_str();
            conn.transaction(|conn| {
                ensure(conn, key)?;
                // The turn count only grows: a worker with an older copy never winds it back.
                Ok(conn
                    .query_opt(
                        "UPDATE noetic_sessions SET mode = $2, capacity = $3, batch_policy = $4,
                             turns = GREATEST(turns, $5), updated_at = now(), version = version + 1
                         WHERE key = $1 RETURNING version",
                        &[&key, &mode, &capacity, &policy, &turns],
                    )?
                    .map_or(0, |r| r.get::<_, i64>(0)))
            })
        })?;
        self.shared.wrote(key, version);
        Ok(())
    }

    fn list(&self) -> Result<Vec<SessionSummary>, NoeticError> {
        self.run("listing sessions", |conn| {
            let rows = conn.query(
                "SELECT key, turns, items, (SELECT COUNT(*) FROM noetic_queue q WHERE q.session = s.key),
                        journal_core IS NOT NULL, updated_at
                 FROM noetic_sessions s ORDER BY updated_at DESC, key",
                &[],
            )?;
            Ok(rows
                .iter()
                .map(|r| SessionSummary {
                    key: r.get(0),
                    turns: u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
                    items: u64::try_from(r.get::<_, i64>(2)).unwrap_or(0),
                    queued: u64::try_from(r.get::<_, i64>(3)).unwrap_or(0),
                    unfinished: r.get(4),
                    updated_at: r.get::<_, SystemTime>(5),
                })
                .collect())
        })
    }

    fn delete(&self, key: &str) -> Result<bool, NoeticError> {
        let key_owned = key.to_owned();
        let deleted = self.run("deleting the session", move |conn| {
            let key = key_owned.as_str();
            conn.transaction(|conn| {
                conn.execute("DELETE FROM noetic_items WHERE session = $1", &[&key])?;
                conn.execute("DELETE FROM noetic_queue WHERE session = $1", &[&key])?;
                conn.execute("DELETE FROM noetic_ledger WHERE session = $1", &[&key])?;
                conn.execute("DELETE FROM noetic_layer_state WHERE scope = $1", &[&thread_scope(key)])?;
                Ok(conn.execute("DELETE FROM noetic_sessions WHERE key = $1", &[&key])? > 0)
            })
        })?;
        self.shared.stale(key);
        Ok(deleted)
    }

    fn ledger(&self, key: &str) -> Result<Vec<String>, NoeticError> {
        let key = key.to_owned();
        self.run("reading the ledger", move |conn| {
            let rows = conn.query("SELECT entry FROM noetic_ledger WHERE session = $1 ORDER BY seq", &[&key])?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn layer_states(&self, scope: &str) -> Result<Vec<(String, String)>, NoeticError> {
        let scope = scope.to_owned();
        self.run("reading the layers' state", move |conn| {
            let rows = conn.query("SELECT layer, state FROM noetic_layer_state WHERE scope = $1", &[&scope])?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    /// A session thread's state is fenced like a commit: refused while another worker holds the session's lease.
    /// (It needs no version bump of its own: the turn that changed it committed items, which bumped the version,
    /// so the next worker to take the session reads it again.) Global state is last-writer-wins across workers.
    fn save_layer_states(&self, writes: &[LayerStateWrite<'_>]) -> Result<(), NoeticError> {
        let writes: Vec<(String, String, Option<String>)> =
            writes.iter().map(|w| (w.scope.to_owned(), w.layer.to_owned(), w.state.map(str::to_owned))).collect();
        let worker = self.shared.worker.clone();
        self.run("saving the layers' state", move |conn| {
            conn.transaction(|conn| {
                for (scope, layer, state) in &writes {
                    if let Some(key) = scope.strip_prefix("thread:")
                        && let Some((Some(owner), true, _)) = lock_row(conn, key)?
                        && owner != worker
                    {
                        return Err(Fail::Store(NoeticError::other(format!(
                            "the layers' state of session '{key}' was not saved: worker {owner} holds its lease now"
                        ))));
                    }
                    match state {
                        Some(state) => conn.execute(
                            "INSERT INTO noetic_layer_state (scope, layer, state) VALUES ($1, $2, $3)
                             ON CONFLICT (scope, layer) DO UPDATE SET state = EXCLUDED.state, updated_at = now()",
                            &[scope, layer, state],
                        )?,
                        None => conn.execute(
                            "DELETE FROM noetic_layer_state WHERE scope = $1 AND layer = $2",
                            &[scope, layer],
                        )?,
                    };
                }
                Ok(())
            })
        })
    }

    fn steer_elsewhere(&self, key: &str, message: &SteerMessage) -> Result<(), NoeticError> {
        if message.text.trim().is_empty() {
            return Err(NoeticError::other("a steering message must not be empty"));
        }
        let text = serde_json::to_string(message).map_err(|e| self.shared.json_error("steering message", &e))?;
        let (id, key_owned) = (message.id.to_string(), key.to_owned());
        self.run("queueing a steering message", move |conn| {
            let key = key_owned.as_str();
            conn.transaction(|conn| {
                ensure(conn, key)?;
                let (owner, live, _) = lock_row(conn, key)?.unwrap_or((None, false, 0));
                let row = conn.query_opt(
                    "SELECT (SELECT COUNT(*) FROM noetic_queue WHERE session = $1), capacity FROM noetic_sessions
                     WHERE key = $1",
                    &[&key],
                )?;
                let (queued, capacity): (i64, i64) = row.map_or((0, 1), |r| (r.get(0), r.get(1)));
                if queued >= capacity {
                    return Err(Fail::Store(NoeticError::other(format!(
                        "the steering queue of session '{key}' is full ({capacity} messages); wait for the agent to \
                         reach a checkpoint or stop the turn"
                    ))));
                }
                insert_message(conn, key, &text, &id, true)?;
                if let Some(owner) = owner.filter(|_| live) {
                    notify(conn, &owner, key)?;
                }
                Ok(())
            })
        })?;
        self.shared.stale(key);
        Ok(())
    }

    fn request_stop(&self, key: &str, reason: &str) -> Result<bool, NoeticError> {
        let (key_owned, reason) = (key.to_owned(), reason.to_owned());
        let found = self.run("asking the session to stop", move |conn| {
            let key = key_owned.as_str();
            conn.transaction(|conn| {
                let Some((owner, live, _)) = lock_row(conn, key)? else { return Ok(false) };
                conn.execute("DELETE FROM noetic_queue WHERE session = $1", &[&key])?;
                bump(conn, key)?;
                if let Some(owner) = owner.filter(|_| live) {
                    conn.execute("UPDATE noetic_sessions SET stop_requested = $2 WHERE key = $1", &[&key, &reason])?;
                    notify(conn, &owner, key)?;
                }
                Ok(true)
            })
        })?;
        self.shared.stale(key);
        Ok(found)
    }

    fn stop_elsewhere(&self, key: &str, reason: &str) -> Result<bool, NoeticError> {
        let (shared, key_owned, reason) = (self.shared.clone(), key.to_owned(), reason.to_owned());
        let stopped = self.run("stopping a turn on another worker", move |conn| {
            let key = key_owned.as_str();
            conn.transaction(|conn| {
                let Some((Some(owner), true, _)) = lock_row(conn, key)? else { return Ok(false) };
                if owner == shared.worker {
                    return Ok(false);
                }
                conn.execute("DELETE FROM noetic_queue WHERE session = $1", &[&key])?;
                bump(conn, key)?;
                conn.execute("UPDATE noetic_sessions SET stop_requested = $2 WHERE key = $1", &[&key, &reason])?;
                notify(conn, &owner, key)?;
                Ok(true)
            })
        })?;
        if stopped {
            self.shared.stale(key);
        }
        Ok(stopped)
    }

    fn take_inbox(&self, key: &str) -> Result<Inbox, NoeticError> {
        if let Some(reason) = lock(&self.shared.lost).remove(key) {
            lock(&self.shared.held).remove(key);
            return Ok(Inbox { lease_lost: Some(reason), ..Inbox::default() });
        }
        let tick = self.shared.tick.load(Ordering::SeqCst);
        let notified = lock(&self.shared.notified).remove(key);
        if !notified && lock(&self.shared.inbox_read_at).get(key) == Some(&tick) {
            return Ok(Inbox::default());
        }
        let (shared, key_owned) = (self.shared.clone(), key.to_owned());
        let inbox = self.run("taking steering from other workers", move |conn| {
            let key = key_owned.as_str();
            conn.transaction(|conn| {
                let Some((owner, live, _)) = lock_row(conn, key)? else { return Ok(Inbox::default()) };
                if !(live && owner.as_deref() == Some(shared.worker.as_str())) {
                    let reason = match owner.filter(|_| live) {
                        Some(owner) => format!("worker {owner} took session '{key}' over: this turn stops"),
                        None => format!("the lease on session '{key}' expired: this turn stops"),
                    };
                    return Ok(Inbox { lease_lost: Some(reason), ..Inbox::default() });
                }
                let messages = take_from_elsewhere(&shared, conn, key)?;
                let order = if messages.is_empty() { Vec::new() } else { queue_order(conn, key)? };
                let stop: Option<String> = conn
                    .query_opt("SELECT stop_requested FROM noetic_sessions WHERE key = $1", &[&key])?
                    .and_then(|r| r.get(0));
                if stop.is_some() {
                    conn.execute("UPDATE noetic_sessions SET stop_requested = NULL WHERE key = $1", &[&key])?;
                }
                Ok(Inbox { messages, stop, lease_lost: None, order })
            })
        });
        match inbox {
            Ok(inbox) => {
                lock(&self.shared.inbox_read_at).insert(key.to_owned(), tick);
                if inbox.lease_lost.is_some() {
                    lock(&self.shared.held).remove(key);
                }
                Ok(inbox)
            }
            Err(e) => {
                // Read again at the next checkpoint.
                if notified {
                    lock(&self.shared.notified).insert(key.to_owned());
                }
                Err(e)
            }
        }
    }

    fn begin_turn(&self, key: &str) -> Result<TurnLease, NoeticError> {
        self.take_lease(key, None)
    }

    fn begin_turn_or_queue(&self, key: &str, message: &SteerMessage) -> Result<TurnLease, NoeticError> {
        self.take_lease(key, Some(message))
    }

    fn end_turn(&self, key: &str) -> Result<Inbox, NoeticError> {
        lock(&self.shared.held).remove(key);
        lock(&self.shared.lost).remove(key);
        let (shared, key_owned) = (self.shared.clone(), key.to_owned());
        self.run("giving up the session's lease", move |conn| {
            let key = key_owned.as_str();
            conn.transaction(|conn| {
                let Some((owner, _, _)) = lock_row(conn, key)? else { return Ok(Inbox::default()) };
                if owner.as_deref() != Some(shared.worker.as_str()) {
                    return Ok(Inbox::default());
                }
                let messages = take_from_elsewhere(&shared, conn, key)?;
                let order = if messages.is_empty() { Vec::new() } else { queue_order(conn, key)? };
                conn.execute(
                    "UPDATE noetic_sessions SET owner = NULL, lease_until = NULL, stop_requested = NULL WHERE key = $1",
                    &[&key],
                )?;
                Ok(Inbox { messages, order, ..Inbox::default() })
            })
        })
    }

    fn observe(&self, key: &str) -> Result<Option<Observed>, NoeticError> {
        let (shared, key) = (self.shared.clone(), key.to_owned());
        self.run("reading the session", move |conn| {
            conn.transaction(|conn| {
                conn.client.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")?;
                let running_on = conn
                    .query_opt(
                        "SELECT owner FROM noetic_sessions WHERE key = $1 AND owner IS NOT NULL AND lease_until > now()",
                        &[&key],
                    )?
                    .map(|r| r.get(0));
                let stored = read_in(&shared, conn, &key)?.map(|(s, _)| s);
                Ok(Some(Observed { stored, running_on }))
            })
        })
    }

    fn orphaned(&self) -> Result<Vec<String>, NoeticError> {
        self.run("looking for turns left by dead workers", |conn| {
            // A turn left unfinished, or messages no turn took (a worker died before it could run them, or they
            // were steered into an idle session from outside a worker).
            let rows = conn.query(
                "SELECT key FROM noetic_sessions s
                 WHERE (lease_until IS NULL OR lease_until < now())
                   AND (journal_core IS NOT NULL OR EXISTS (SELECT 1 FROM noetic_queue q WHERE q.session = s.key))
                 ORDER BY updated_at LIMIT 100",
                &[],
            )?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }
}
