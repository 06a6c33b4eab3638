//! # noetic-sqlite — durable noetic sessions on SQLite
//!
//! [`SqliteLogStore`] is the session log (`noetic::agent::log`) in one SQLite file (embedded and bundled: no system
//! library, no server): a runtime built with `Runtime::builder().log_store(Arc::new(SqliteLogStore::open(path).await?))`
//! keeps every session there, and a session survives its process; a turn a killed process left is resumed with
//! `Session::resume` (see the `noetic` crate's `agent` docs).
//!
//! * **Durability.** WAL mode. [`Durability::Process`] (the default, `synchronous=NORMAL`) survives a killed
//!   process; [`Durability::PowerLoss`] (`synchronous=FULL`) also survives a power cut, at the cost of an fsync
//!   per group commit.
//! * **Schema.** Versioned with `PRAGMA user_version` ([`LOG_SCHEMA_VERSION`]); files of the store before the log
//!   (versions 1 to 5) are migrated into logs once, in place; a file from a newer version is refused (nothing is
//!   written), as is a file that is not SQLite.
//! * **Several processes.** One writer thread per store with group commit, reads off the async runtime, appends by
//!   other processes on the file heard within about 100 ms, and leases so that a session's turn runs in one process
//!   at a time ([`log`] has the details).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::Connection;

pub mod log;
mod process;
mod schema;

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
