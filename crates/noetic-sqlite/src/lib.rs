//! # noetic-sqlite — durable noetic sessions on SQLite
//!
//! (This file is `SqliteStore`, the store the runtime uses until it moves to the session log (#30); it is deleted
//! then rather than split now. The log store, `SqliteLogStore`, lives in `log/`, split by concern.)
//!
//! [`SqliteStore`] implements [`SessionStore`]: a runtime built with
//! `Runtime::builder().store(Arc::new(SqliteStore::open(path)?))` keeps every session in one SQLite file
//! (embedded and bundled: no system library, no server) and a session survives its process. A turn a killed
//! process left is resumed with `Session::resume` (see the `noetic` crate's `agent` docs).
//!
//! * **Durability.** WAL mode. [`Durability::Process`] (the default, `synchronous=NORMAL`) survives a killed
//!   process; [`Durability::PowerLoss`] (`synchronous=FULL`) also survives a power cut, at the cost of an fsync
//!   per commit.
//! * **Schema.** Versioned with `PRAGMA user_version`; older files are migrated in place when opened, a file
//!   from a newer version is refused (nothing is written), as is a file that is not SQLite. A file the session log
//!   has been added to (version 6, [`LOG_SCHEMA_VERSION`]) is opened as it is: this store keeps to its own tables.
//! * **One owner.** Opening a session takes it for this process (pid, host, process start time in the
//!   `sessions` row); another live process opening it gets an error naming the owner. An owner that died is
//!   taken over, so no manual cleanup is ever needed.
//! * **Any process may steer or stop.** [`SessionStore::steer_elsewhere`] and [`SessionStore::request_stop`]
//!   work from a process that does not own the session; the owner takes them at its next checkpoint. That check
//!   costs one `PRAGMA data_version` read when no other connection wrote since the last one.
//! * **Atomic commits.** A turn's commit (new items, injected steering messages leaving the queue, the
//!   journal) is one transaction.
//!
//! [`SqliteLogStore`] is the session log (`noetic::agent::log`) on the same kind of file: one writer thread with
//! group commit, reads off the async runtime, appends by other processes heard within about 100 ms. Opening it
//! on a file of this store migrates every session into the log once ([`log`] has how each session maps to
//! entries). The runtime does not use it yet.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use noetic::NoeticError;
use noetic::agent::{
    BatchPolicy, Inbox, JournalWrite, LayerStateWrite, SessionSnapshot, SessionStore, SessionSummary, SteerMessage,
    SteeringMode, StoreCommit, StoredSession, UnfinishedTurn, out_of_order, parse_setting, setting_text, thread_scope,
};
use noetic::model::Item;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Transaction, params};

pub mod log;
mod process;
mod schema;

use process::Owner;

pub use log::SqliteLogStore;
pub use schema::{LOG_SCHEMA_VERSION, SCHEMA_VERSION};

/// Raw access for tests: files in older layouts, statements the store would never run.
#[doc(hidden)]
pub mod testing {
    use std::path::Path;

    /// Creates a file with the version 1 schema, as the first release wrote it.
    pub fn create_v1(path: &Path) -> rusqlite::Result<()> {
        let conn = rusqlite::Connection::open(path)?;
        conn.execute_batch(super::schema::V1)?;
        conn.pragma_update(None, "user_version", 1)
    }

    /// Creates a file with the schema of `version` (1 to 5, the versions before the session log), as that
    /// release wrote it.
    pub fn create(path: &Path, version: i64) -> rusqlite::Result<()> {
        let mut conn = rusqlite::Connection::open(path)?;
        super::schema::migrate_to(&mut conn, 0, version.min(super::SCHEMA_VERSION))
    }

    /// The file's schema version (`PRAGMA user_version`).
    pub fn user_version(path: &Path) -> rusqlite::Result<i64> {
        rusqlite::Connection::open(path)?.query_row("PRAGMA user_version", [], |r| r.get(0))
    }

    /// Takes the file's write lock and keeps it until the returned connection is dropped (a writer that must
    /// wait for it queues what it is asked meanwhile).
    pub fn write_lock(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
        let conn = rusqlite::Connection::open(path)?;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        Ok(conn)
    }

    /// Runs `sql` on the file.
    pub fn execute(path: &Path, sql: &str) -> rusqlite::Result<()> {
        rusqlite::Connection::open(path)?.execute_batch(sql)
    }
}

/// What a commit survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// A killed process loses nothing committed (`synchronous=NORMAL` in WAL mode); a power cut may lose the
    /// last commits.
    #[default]
    Process,
    /// A power cut loses nothing committed either (`synchronous=FULL`: an fsync per commit).
    PowerLoss,
}

/// Sessions in one SQLite file. Cheap to share (`Arc`); every call is one transaction.
pub struct SqliteStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    owner: Owner,
    /// Per session: the connection's `data_version` when its inbox was last read (nothing new while it is equal).
    inbox_seen: Mutex<std::collections::HashMap<String, i64>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.path).finish_non_exhaustive()
    }
}

/// A session row's owner columns: pid, host, process start time (all `NULL` when nobody owns it).
type StoredOwner = (Option<i64>, Option<String>, Option<i64>);

fn millis(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn from_millis(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// What to do about an SQLite error.
fn hint(e: &rusqlite::Error) -> &'static str {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => {
            "the file is not an SQLite database (or is encrypted/corrupt); point --db at another file or move this one away"
        }
        Some(rusqlite::ErrorCode::ReadOnly) => "the file is read-only; make it writable or use another --db",
        Some(rusqlite::ErrorCode::DiskFull) => "the disk is full; free space and try again",
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            "another process holds the database for too long; try again"
        }
        Some(rusqlite::ErrorCode::CannotOpen) => "the file cannot be opened; check the path and its directory",
        _ => "check the file and the disk",
    }
}

/// An SQLite error on `path`, with what to do.
fn db_error(path: &Path, doing: &str, e: &rusqlite::Error) -> NoeticError {
    NoeticError::other(format!("session store {}: {doing} failed: {e}; {}", path.display(), hint(e)))
}

fn json_error(path: &Path, what: &str, e: &serde_json::Error) -> NoeticError {
    NoeticError::other(format!(
        "session store {}: a stored {what} is unreadable ({e}); the file was written by an incompatible version or \
         damaged",
        path.display()
    ))
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path`, surviving a killed process ([`Durability::Process`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, NoeticError> {
        Self::open_with(path, Durability::Process)
    }

    /// Opens (creating if needed) the store at `path` with the given durability. A file that is not SQLite, is
    /// from a newer schema or is read-only is an error naming it; nothing is written to it.
    pub fn open_with(path: impl AsRef<Path>, durability: Durability) -> Result<Self, NoeticError> {
        let path = path.as_ref().to_owned();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                NoeticError::other(format!(
                    "session store {}: cannot create its directory: {e}; check the path",
                    path.display()
                ))
            })?;
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&path, flags).map_err(|e| db_error(&path, "opening", &e))?;
        if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
            return Err(NoeticError::other(format!(
                "session store {}: the file is read-only; make it writable or use another --db",
                path.display()
            )));
        }
        conn.busy_timeout(Duration::from_secs(5)).map_err(|e| db_error(&path, "setting the busy timeout", &e))?;
        // Reading the schema version first: a file that is not SQLite fails here, before anything is written.
        let version: i64 =
            conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(|e| db_error(&path, "reading", &e))?;
        // Version 6 only adds the session log's tables, which this store neither reads nor writes.
        if version > LOG_SCHEMA_VERSION {
            return Err(NoeticError::other(format!(
                "session store {}: its schema is version {version}, newer than this noetic supports \
                 ({LOG_SCHEMA_VERSION}); upgrade noetic or use another --db (nothing was changed)",
                path.display()
            )));
        }
        let journal = wal(&conn).map_err(|e| db_error(&path, "switching to WAL", &e))?;
        if !journal.eq_ignore_ascii_case("wal") {
            tracing::warn!(path = %path.display(), journal, "the session store could not switch to WAL mode");
        }
        let sync = match durability {
            Durability::Process => "NORMAL",
            Durability::PowerLoss => "FULL",
        };
        conn.execute_batch(&format!("PRAGMA synchronous={sync}; PRAGMA foreign_keys=ON;"))
            .map_err(|e| db_error(&path, "setting pragmas", &e))?;
        let mut conn = conn;
        schema::migrate(&mut conn, version).map_err(|e| db_error(&path, "migrating the schema", &e))?;
        Ok(SqliteStore { path, conn: Mutex::new(conn), owner: Owner::this_process(), inbox_seen: Mutex::default() })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open file (after migration: [`SCHEMA_VERSION`], or [`LOG_SCHEMA_VERSION`] once a
    /// [`SqliteLogStore`] has opened it).
    pub fn schema_version(&self) -> Result<i64, NoeticError> {
        self.with(|conn| conn.query_row("PRAGMA user_version", [], |r| r.get(0)), "reading the schema version")
    }

    /// Reads a session without taking ownership (for listings and `sessions show`).
    pub fn peek(&self, key: &str) -> Result<Option<StoredSession>, NoeticError> {
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(|e| db_error(&self.path, "reading", &e))?;
        let stored = self.read(&tx, key)?;
        tx.commit().map_err(|e| db_error(&self.path, "reading", &e))?;
        Ok(stored)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn with<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>, doing: &str) -> Result<T, NoeticError> {
        f(&self.lock()).map_err(|e| db_error(&self.path, doing, &e))
    }

    /// Runs `f` in one immediate transaction (the write lock taken up front, so two processes never interleave).
    fn write<T>(
        &self,
        doing: &str,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, NoeticError>,
    ) -> Result<T, NoeticError> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| db_error(&self.path, doing, &e))?;
        let value = f(&tx)?;
        tx.commit().map_err(|e| db_error(&self.path, doing, &e))?;
        Ok(value)
    }

    /// Makes sure the session's row exists. A row this process creates for its own session (`own`) names it as
    /// the owner, so a session is owned from its first write, not only once reopened; one created to queue a
    /// message from elsewhere has no owner.
    fn ensure(&self, tx: &Transaction<'_>, key: &str, own: bool) -> Result<(), NoeticError> {
        let (pid, host, started) = if own {
            (Some(i64::from(self.owner.pid)), Some(self.owner.host.as_str()), Some(self.owner.started))
        } else {
            (None, None, None)
        };
        tx.execute(
            "INSERT INTO sessions (key, mode, capacity, batch_policy, turns, items, updated_ms, owner_pid, owner_host,
                                   owner_started)
             VALUES (?1, ?2, ?3, ?4, 0, 0, ?5, ?6, ?7, ?8) ON CONFLICT(key) DO NOTHING",
            params![
                key,
                setting_text(&SteeringMode::default()),
                noetic::agent::DEFAULT_QUEUE_CAPACITY as i64,
                setting_text(&BatchPolicy::default()),
                millis(SystemTime::now()),
                pid,
                host,
                started
            ],
        )
        .map_err(|e| db_error(&self.path, "creating the session", &e))?;
        Ok(())
    }

    /// The session's owner columns (pid, host, start time); `None` when there is no such session.
    fn owner_of(&self, tx: &Transaction<'_>, key: &str) -> Result<Option<StoredOwner>, NoeticError> {
        tx.query_row("SELECT owner_pid, owner_host, owner_started FROM sessions WHERE key = ?1", params![key], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()
        .map_err(|e| db_error(&self.path, "reading the session's owner", &e))
    }

    fn read(&self, tx: &Transaction<'_>, key: &str) -> Result<Option<StoredSession>, NoeticError> {
        let row = tx
            .query_row(
                "SELECT mode, capacity, batch_policy, turns, journal_step, journal_core FROM sessions WHERE key = ?1",
                params![key],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, Option<String>>(5)?,
                    ))
                },
            )
            .optional()
            .map_err(|e| db_error(&self.path, "reading the session", &e))?;
        let Some((mode, capacity, policy, turns, step, core)) = row else { return Ok(None) };
        let mut history = Vec::new();
        {
            let mut stmt = tx
                .prepare_cached("SELECT item FROM items WHERE session = ?1 ORDER BY seq")
                .map_err(|e| db_error(&self.path, "reading the conversation", &e))?;
            let rows = stmt
                .query_map(params![key], |r| r.get::<_, String>(0))
                .map_err(|e| db_error(&self.path, "reading the conversation", &e))?;
            for row in rows {
                let text = row.map_err(|e| db_error(&self.path, "reading the conversation", &e))?;
                history.push(serde_json::from_str::<Item>(&text).map_err(|e| json_error(&self.path, "item", &e))?);
            }
        }
        let mut queued = Vec::new();
        {
            let mut stmt = tx
                .prepare_cached("SELECT message FROM queue WHERE session = ?1 ORDER BY pos")
                .map_err(|e| db_error(&self.path, "reading the steering queue", &e))?;
            let rows = stmt
                .query_map(params![key], |r| r.get::<_, String>(0))
                .map_err(|e| db_error(&self.path, "reading the steering queue", &e))?;
            for row in rows {
                let text = row.map_err(|e| db_error(&self.path, "reading the steering queue", &e))?;
                queued.push(
                    serde_json::from_str::<SteerMessage>(&text)
                        .map_err(|e| json_error(&self.path, "steering message", &e))?,
                );
            }
        }
        let snapshot = SessionSnapshot {
            key: key.to_owned(),
            history,
            queued,
            turns: u64::try_from(turns).unwrap_or(0),
            mode: parse_setting(&mode).map_err(|e| json_error(&self.path, "steering mode", &e))?,
            capacity: usize::try_from(capacity).unwrap_or(1),
            batch_policy: parse_setting(&policy).map_err(|e| json_error(&self.path, "batch policy", &e))?,
        };
        let unfinished = step.zip(core).map(|(step_id, core)| UnfinishedTurn { step_id, core });
        Ok(Some(StoredSession { snapshot, unfinished }))
    }
}

/// Switches the file to WAL mode (a no-op when it is already in it). The switch needs the file to itself: when
/// another process is creating or opening the same file at that moment, it is retried for up to five seconds.
pub(crate) fn wal(conn: &Connection) -> rusqlite::Result<String> {
    let current: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    if current.eq_ignore_ascii_case("wal") {
        return Ok(current);
    }
    let mut tries = 0;
    loop {
        match conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)) {
            Err(e)
                if tries < 500
                    && matches!(
                        e.sqlite_error_code(),
                        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                    ) =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

impl SessionStore for SqliteStore {
    fn open(&self, key: &str) -> Result<Option<StoredSession>, NoeticError> {
        self.write("opening the session", |tx| {
            let owner = self.owner_of(tx, key)?;
            if let Some((Some(pid), Some(host), started)) = owner {
                let pid = u32::try_from(pid).unwrap_or(0);
                let started = started.unwrap_or(0);
                let mine = pid == self.owner.pid && host == self.owner.host && started == self.owner.started;
                if !mine && !Owner::is_gone(pid, &host, started) {
                    return Err(NoeticError::other(format!(
                        "session '{key}' is busy in process {pid} on {host} (store {}); stop that process or use \
                         another session",
                        self.path.display()
                    )));
                }
            }
            let stored = self.read(tx, key)?;
            if stored.is_some() {
                // Messages other processes queued are loaded with the queue: this owner has them now. A stop asked
                // of a previous owner that never saw it has nothing left to stop.
                tx.execute(
                    "UPDATE sessions SET owner_pid = ?2, owner_host = ?3, owner_started = ?4, stop_requested = NULL
                     WHERE key = ?1",
                    params![key, i64::from(self.owner.pid), self.owner.host, self.owner.started],
                )
                .map_err(|e| db_error(&self.path, "taking the session", &e))?;
                tx.execute(
                    "UPDATE queue SET from_elsewhere = 0 WHERE session = ?1 AND from_elsewhere = 1",
                    params![key],
                )
                .map_err(|e| db_error(&self.path, "taking the session", &e))?;
            }
            Ok(stored)
        })
    }

    fn close(&self, key: &str) {
        self.inbox_seen.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
        let released = self.write("giving up the session", |tx| {
            tx.execute(
                "UPDATE sessions SET owner_pid = NULL, owner_host = NULL, owner_started = NULL
                 WHERE key = ?1 AND owner_pid = ?2 AND owner_host = ?3",
                params![key, i64::from(self.owner.pid), self.owner.host],
            )
            .map_err(|e| db_error(&self.path, "giving up the session", &e))
        });
        if let Err(e) = released {
            tracing::warn!(session = key, error = %e, "could not give up the session (it is taken over when this process ends)");
        }
    }

    fn commit(&self, key: &str, commit: StoreCommit<'_>) -> Result<(), NoeticError> {
        self.write("committing the turn", |tx| {
            {
                let mut insert = tx
                    .prepare_cached("INSERT INTO items (session, seq, item) VALUES (?1, ?2, ?3)")
                    .map_err(|e| db_error(&self.path, "appending items", &e))?;
                for (i, item) in commit.items.iter().enumerate() {
                    let text = serde_json::to_string(item).map_err(|e| json_error(&self.path, "item", &e))?;
                    let seq = i64::try_from(commit.first + i).unwrap_or(i64::MAX);
                    if let Err(e) = insert.execute(params![key, seq, text]) {
                        if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) {
                            // The item's place is taken: this commit does not continue the stored conversation.
                            let held: i64 = tx
                                .query_row("SELECT items FROM sessions WHERE key = ?1", params![key], |r| r.get(0))
                                .unwrap_or(0);
                            return Err(out_of_order(key, usize::try_from(held).unwrap_or(0), commit.first));
                        }
                        return Err(db_error(&self.path, "appending items", &e));
                    }
                }
            }
            if !commit.ledger.is_empty() {
                let mut insert = tx
                    .prepare_cached(
                        "INSERT INTO ledger (session, seq, entry)
                         VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM ledger WHERE session = ?1), ?2)",
                    )
                    .map_err(|e| db_error(&self.path, "appending to the ledger", &e))?;
                for entry in commit.ledger {
                    insert
                        .execute(params![key, entry])
                        .map_err(|e| db_error(&self.path, "appending to the ledger", &e))?;
                }
            }
            if !commit.injected.is_empty() {
                let mut delete = tx
                    .prepare_cached("DELETE FROM queue WHERE session = ?1 AND id = ?2")
                    .map_err(|e| db_error(&self.path, "removing injected messages", &e))?;
                for id in commit.injected {
                    delete
                        .execute(params![key, id])
                        .map_err(|e| db_error(&self.path, "removing injected messages", &e))?;
                }
            }
            let first = i64::try_from(commit.first).unwrap_or(i64::MAX);
            let count = i64::try_from(commit.first + commit.items.len()).unwrap_or(i64::MAX);
            let now = millis(SystemTime::now());
            // One statement checks that the commit continues the stored conversation and moves it on: the
            // items above are rolled back with the transaction when it does not.
            let (step, core, keep) = match commit.journal {
                JournalWrite::Keep => (None, None, true),
                JournalWrite::Save { step_id, core } => (Some(step_id), Some(core), false),
                JournalWrite::Clear => (None, None, false),
            };
            let update = |tx: &Transaction<'_>| {
                tx.prepare_cached(
                    "UPDATE sessions SET items = ?3, updated_ms = ?4,
                         journal_step = CASE WHEN ?7 THEN journal_step ELSE ?5 END,
                         journal_core = CASE WHEN ?7 THEN journal_core ELSE ?6 END
                     WHERE key = ?1 AND items = ?2",
                )
                .and_then(|mut stmt| stmt.execute(params![key, first, count, now, step, core, keep]))
                .map_err(|e| db_error(&self.path, "writing the journal", &e))
            };
            if update(tx)? == 1 {
                return Ok(());
            }
            let held: Option<i64> = tx
                .query_row("SELECT items FROM sessions WHERE key = ?1", params![key], |r| r.get(0))
                .optional()
                .map_err(|e| db_error(&self.path, "reading the conversation length", &e))?;
            match held {
                // A new session: create its row, then the same update.
                None if commit.first == 0 => {
                    self.ensure(tx, key, true)?;
                    update(tx)?;
                    Ok(())
                }
                held => Err(out_of_order(key, usize::try_from(held.unwrap_or(0)).unwrap_or(0), commit.first)),
            }
        })
    }

    fn push_message(&self, key: &str, message: &SteerMessage) -> Result<(), NoeticError> {
        self.write("queueing a steering message", |tx| {
            self.ensure(tx, key, true)?;
            let text = serde_json::to_string(message).map_err(|e| json_error(&self.path, "steering message", &e))?;
            tx.execute(
                "INSERT INTO queue (session, pos, id, message)
                 VALUES (?1, (SELECT COALESCE(MAX(pos), 0) + 1 FROM queue WHERE session = ?1), ?2, ?3)",
                params![key, message.id.to_string(), text],
            )
            .map_err(|e| db_error(&self.path, "queueing a steering message", &e))?;
            tx.execute("UPDATE sessions SET updated_ms = ?2 WHERE key = ?1", params![key, millis(SystemTime::now())])
                .map_err(|e| db_error(&self.path, "queueing a steering message", &e))?;
            Ok(())
        })
    }

    fn remove_messages(&self, key: &str, ids: Option<&[String]>) -> Result<(), NoeticError> {
        self.write("removing steering messages", |tx| {
            match ids {
                None => tx.execute("DELETE FROM queue WHERE session = ?1", params![key]).map(|_| ()),
                Some(ids) => ids.iter().try_for_each(|id| {
                    tx.execute("DELETE FROM queue WHERE session = ?1 AND id = ?2", params![key, id]).map(|_| ())
                }),
            }
            .map_err(|e| db_error(&self.path, "removing steering messages", &e))
        })
    }

    fn save_settings(
        &self,
        key: &str,
        mode: SteeringMode,
        capacity: usize,
        batch_policy: BatchPolicy,
        turns: u64,
    ) -> Result<(), NoeticError> {
        self.write("saving the session's settings", |tx| {
            self.ensure(tx, key, true)?;
            tx.execute(
                "UPDATE sessions SET mode = ?2, capacity = ?3, batch_policy = ?4, turns = ?5, updated_ms = ?6 WHERE key = ?1",
                params![
                    key,
                    setting_text(&mode),
                    i64::try_from(capacity).unwrap_or(i64::MAX),
                    setting_text(&batch_policy),
                    i64::try_from(turns).unwrap_or(i64::MAX),
                    millis(SystemTime::now())
                ],
            )
            .map_err(|e| db_error(&self.path, "saving the session's settings", &e))?;
            Ok(())
        })
    }

    fn list(&self) -> Result<Vec<SessionSummary>, NoeticError> {
        self.with(
            |conn| {
                let mut stmt = conn.prepare(
                    "SELECT key, turns, items, (SELECT COUNT(*) FROM queue q WHERE q.session = s.key),
                            journal_core IS NOT NULL, updated_ms
                     FROM sessions s ORDER BY updated_ms DESC, key",
                )?;
                let rows = stmt.query_map([], |r| {
                    Ok(SessionSummary {
                        key: r.get(0)?,
                        turns: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                        items: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                        queued: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
                        unfinished: r.get(4)?,
                        updated_at: from_millis(r.get(5)?),
                    })
                })?;
                rows.collect()
            },
            "listing sessions",
        )
    }

    fn delete(&self, key: &str) -> Result<bool, NoeticError> {
        self.write("deleting the session", |tx| {
            let run = |sql: &str| tx.execute(sql, params![key]).map_err(|e| db_error(&self.path, "deleting", &e));
            run("DELETE FROM items WHERE session = ?1")?;
            run("DELETE FROM queue WHERE session = ?1")?;
            run("DELETE FROM ledger WHERE session = ?1")?;
            tx.execute("DELETE FROM layer_state WHERE scope = ?1", params![thread_scope(key)])
                .map_err(|e| db_error(&self.path, "deleting", &e))?;
            Ok(run("DELETE FROM sessions WHERE key = ?1")? > 0)
        })
    }

    fn steer_elsewhere(&self, key: &str, message: &SteerMessage) -> Result<(), NoeticError> {
        if message.text.trim().is_empty() {
            return Err(NoeticError::other("a steering message must not be empty"));
        }
        self.write("queueing a steering message", |tx| {
            self.ensure(tx, key, false)?;
            let (queued, capacity): (i64, i64) = tx
                .query_row(
                    "SELECT (SELECT COUNT(*) FROM queue WHERE session = ?1), capacity FROM sessions WHERE key = ?1",
                    params![key],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .map_err(|e| db_error(&self.path, "queueing a steering message", &e))?;
            if queued >= capacity {
                return Err(NoeticError::other(format!(
                    "the steering queue of session '{key}' is full ({capacity} messages); wait for the agent to reach \
                     a checkpoint or stop the turn"
                )));
            }
            let text = serde_json::to_string(message).map_err(|e| json_error(&self.path, "steering message", &e))?;
            tx.execute(
                "INSERT INTO queue (session, pos, id, message, from_elsewhere)
                 VALUES (?1, (SELECT COALESCE(MAX(pos), 0) + 1 FROM queue WHERE session = ?1), ?2, ?3, 1)",
                params![key, message.id.to_string(), text],
            )
            .map_err(|e| db_error(&self.path, "queueing a steering message", &e))?;
            tx.execute("UPDATE sessions SET updated_ms = ?2 WHERE key = ?1", params![key, millis(SystemTime::now())])
                .map_err(|e| db_error(&self.path, "queueing a steering message", &e))?;
            Ok(())
        })
    }

    fn request_stop(&self, key: &str, reason: &str) -> Result<bool, NoeticError> {
        self.write("asking the session to stop", |tx| {
            let owner = self.owner_of(tx, key)?;
            let Some(owner) = owner else { return Ok(false) };
            tx.execute("DELETE FROM queue WHERE session = ?1", params![key])
                .map_err(|e| db_error(&self.path, "clearing the steering queue", &e))?;
            // A live owner cancels its turn at its next checkpoint; with none, clearing the queue is the whole stop.
            if let (Some(pid), Some(host), started) = owner
                && !Owner::is_gone(u32::try_from(pid).unwrap_or(0), &host, started.unwrap_or(0))
            {
                tx.execute("UPDATE sessions SET stop_requested = ?2 WHERE key = ?1", params![key, reason])
                    .map_err(|e| db_error(&self.path, "asking the session to stop", &e))?;
            }
            Ok(true)
        })
    }

    /// This process owns the sessions it opened for as long as it has them open, idle or not: messages other
    /// processes queue for an idle one wait for it (see [`SessionStore::orphaned`] for who looks).
    fn take_idle_inbox(&self, key: &str) -> Result<Inbox, NoeticError> {
        self.take_inbox(key)
    }

    /// Sessions this process owns (or nobody does) with messages other processes queued for them, to run with
    /// `Session::continue_session` — `noetic serve` looks every few seconds. A turn a dead process left is not
    /// listed: whoever opens the session next is offered it.
    fn orphaned(&self) -> Result<Vec<String>, NoeticError> {
        self.with(
            |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT DISTINCT q.session FROM queue q JOIN sessions s ON s.key = q.session
                     WHERE q.from_elsewhere = 1
                       AND (s.owner_pid IS NULL OR (s.owner_pid = ?1 AND s.owner_host = ?2 AND s.owner_started = ?3))",
                )?;
                let owner = &self.owner;
                let rows = stmt.query_map(params![i64::from(owner.pid), owner.host, owner.started], |r| r.get(0))?;
                rows.collect()
            },
            "looking for messages queued for idle sessions",
        )
    }

    fn take_inbox(&self, key: &str) -> Result<Inbox, NoeticError> {
        let doing = "taking steering from other processes";
        let mut conn = self.lock();
        let version: i64 =
            conn.query_row("PRAGMA data_version", [], |r| r.get(0)).map_err(|e| db_error(&self.path, doing, &e))?;
        if self.inbox_seen.lock().unwrap_or_else(PoisonError::into_inner).get(key) == Some(&version) {
            return Ok(Inbox::default());
        }
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| db_error(&self.path, doing, &e))?;
        let mut inbox = Inbox::default();
        {
            let mut stmt = tx
                .prepare_cached("SELECT message FROM queue WHERE session = ?1 AND from_elsewhere = 1 ORDER BY pos")
                .map_err(|e| db_error(&self.path, doing, &e))?;
            let rows =
                stmt.query_map(params![key], |r| r.get::<_, String>(0)).map_err(|e| db_error(&self.path, doing, &e))?;
            for row in rows {
                let text = row.map_err(|e| db_error(&self.path, doing, &e))?;
                inbox.messages.push(
                    serde_json::from_str::<SteerMessage>(&text)
                        .map_err(|e| json_error(&self.path, "steering message", &e))?,
                );
            }
        }
        inbox.stop = tx
            .query_row("SELECT stop_requested FROM sessions WHERE key = ?1", params![key], |r| {
                r.get::<_, Option<String>>(0)
            })
            .optional()
            .map_err(|e| db_error(&self.path, doing, &e))?
            .flatten();
        if !inbox.messages.is_empty() {
            tx.execute("UPDATE queue SET from_elsewhere = 0 WHERE session = ?1 AND from_elsewhere = 1", params![key])
                .map_err(|e| db_error(&self.path, doing, &e))?;
            let mut stmt = tx
                .prepare_cached("SELECT id FROM queue WHERE session = ?1 ORDER BY pos")
                .map_err(|e| db_error(&self.path, doing, &e))?;
            inbox.order = stmt
                .query_map(params![key], |r| r.get::<_, String>(0))
                .and_then(Iterator::collect)
                .map_err(|e| db_error(&self.path, doing, &e))?;
        }
        if inbox.stop.is_some() {
            tx.execute("UPDATE sessions SET stop_requested = NULL WHERE key = ?1", params![key])
                .map_err(|e| db_error(&self.path, doing, &e))?;
        }
        tx.commit().map_err(|e| db_error(&self.path, doing, &e))?;
        // Only what was read and committed counts as seen: a failed read is tried again at the next checkpoint.
        self.inbox_seen.lock().unwrap_or_else(PoisonError::into_inner).insert(key.to_owned(), version);
        Ok(inbox)
    }

    fn ledger(&self, key: &str) -> Result<Vec<String>, NoeticError> {
        self.with(
            |conn| {
                let mut stmt = conn.prepare_cached("SELECT entry FROM ledger WHERE session = ?1 ORDER BY seq")?;
                let rows = stmt.query_map(params![key], |r| r.get::<_, String>(0))?;
                rows.collect()
            },
            "reading the ledger",
        )
    }

    fn layer_states(&self, scope: &str) -> Result<Vec<(String, String)>, NoeticError> {
        self.with(
            |conn| {
                let mut stmt = conn.prepare_cached("SELECT layer, state FROM layer_state WHERE scope = ?1")?;
                let rows = stmt.query_map(params![scope], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
                rows.collect()
            },
            "reading the layers' state",
        )
    }

    fn save_layer_states(&self, writes: &[LayerStateWrite<'_>]) -> Result<(), NoeticError> {
        let doing = "saving the layers' state";
        self.write(doing, |tx| {
            for w in writes {
                let done = match w.state {
                    Some(state) => tx.execute(
                        "INSERT INTO layer_state (scope, layer, state, updated_ms) VALUES (?1, ?2, ?3, ?4) \
                         ON CONFLICT (scope, layer) DO UPDATE SET state = excluded.state, updated_ms = excluded.updated_ms",
                        params![w.scope, w.layer, state, millis(SystemTime::now())],
                    ),
                    None => tx.execute("DELETE FROM layer_state WHERE scope = ?1 AND layer = ?2", params![w.scope, w.layer]),
                };
                done.map_err(|e| db_error(&self.path, doing, &e))?;
            }
            Ok(())
        })
    }
}
