//! Opening the write connection: refusing what is not a noetic file (or a newer one) before anything is written,
//! WAL and the durability's `synchronous`, then migrating older schemas.

use std::path::Path;
use std::time::Duration;

use noetic_runtime::agent::log::StoreError;
use rusqlite::{Connection, OpenFlags};

use super::{failed, migrate};
use crate::schema::LOG_SCHEMA_VERSION;
use crate::{Durability, wal};

/// A file without a noetic schema version that already has tables is another program's database: nothing is
/// changed in it (not even its journal mode).
fn refuse_foreign(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let doing = "checking that the file is a noetic database";
    let sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name LIMIT 4";
    let mut stmt = conn.prepare(sql).map_err(|e| failed(path, doing, e))?;
    let tables: Vec<String> =
        stmt.query_map([], |r| r.get(0)).and_then(Iterator::collect).map_err(|e| failed(path, doing, e))?;
    if tables.is_empty() {
        return Ok(());
    }
    Err(StoreError::Refused {
        message: format!(
            "session store {}: not a noetic database (it has another program's tables: {}, and no noetic schema \
             version); give a new file or a noetic database (nothing was changed)",
            path.display(),
            tables.join(", ")
        ),
    })
}

pub(super) fn open_connection(path: &Path, durability: Durability) -> Result<Connection, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::unavailable(format!("creating the directory of {} (check the path)", path.display()), e)
        })?;
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(path, flags).map_err(|e| failed(path, "opening the file", e))?;
    if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
        return Err(StoreError::Refused {
            message: format!(
                "session store {}: the file is read-only; make it writable or use another file",
                path.display()
            ),
        });
    }
    conn.busy_timeout(Duration::from_secs(5)).map_err(|e| failed(path, "setting the busy timeout", e))?;
    // Read before anything is written: a file that is not SQLite fails here, a newer one is refused untouched.
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| failed(path, "reading the schema version", e))?;
    if version > LOG_SCHEMA_VERSION {
        return Err(StoreError::Refused {
            message: format!(
                "session store {}: its schema is version {version}, newer than this noetic supports \
                 ({LOG_SCHEMA_VERSION}); upgrade noetic or use another file (nothing was changed)",
                path.display()
            ),
        });
    }
    if version == 0 {
        refuse_foreign(&conn, path)?;
    }
    let journal = wal(&conn).map_err(|e| failed(path, "switching to WAL", e))?;
    if !journal.eq_ignore_ascii_case("wal") {
        tracing::warn!(path = %path.display(), journal, "the session log could not switch to WAL mode");
    }
    let sync = match durability {
        Durability::Process => "NORMAL",
        Durability::PowerLoss => "FULL",
    };
    conn.execute_batch(&format!("PRAGMA synchronous={sync};")).map_err(|e| failed(path, "setting pragmas", e))?;
    // Room for every statement the writer runs, so the ones of each append stay prepared.
    conn.set_prepared_statement_cache_capacity(64);
    migrate::to_log(&mut conn, path)?;
    Ok(conn)
}
