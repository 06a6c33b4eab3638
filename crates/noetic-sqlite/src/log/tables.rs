//! The statements of the log's tables (schema version 6), shared by the writer thread, the readers and the
//! migration.

use std::path::Path;
use std::time::SystemTime;

use noetic_runtime::agent::log::{Record, RowReader, SessionLine, Snapshot, StoreError, Summary};
use rusqlite::{Connection, OptionalExtension, params};

use super::failed;
use crate::{from_millis, millis};

/// A position or count as SQLite stores it.
pub(crate) fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn uint(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// Where `key`'s log ends and its summary's JSON; `None` when there is no log.
pub(crate) fn head(conn: &Connection, key: &str) -> rusqlite::Result<Option<(u64, String)>> {
    conn.prepare_cached("SELECT last, summary FROM log_sessions WHERE key = ?1")?
        .query_row(params![key], |r| Ok((uint(r.get(0)?), r.get(1)?)))
        .optional()
}

/// Reads a stored summary.
pub(crate) fn summary(path: &Path, key: &str, json: &str) -> Result<Summary, StoreError> {
    serde_json::from_str(json).map_err(|e| {
        StoreError::unavailable(
            format!(
                "reading the summary of session '{key}' ({}; the row is damaged: delete the session or restore the \
                 file)",
                path.display()
            ),
            e,
        )
    })
}

/// The append counter, read inside the writer's transaction: the highest a session row holds, or a deleted one
/// held. An append writes only its own session's row (one page fewer per commit than a counter row of its own).
pub(crate) fn clock(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached(
        "SELECT MAX(COALESCE((SELECT MAX(counter) FROM log_sessions), 0),
                    (SELECT counter FROM log_clock WHERE id = 1))",
    )?
    .query_row([], |r| r.get(0))
}

/// Writes the row of an append ([`noetic_runtime::agent::log::encode_row`]: its entries one per line) whose first
/// entry is at `first`.
pub(crate) fn insert_row(conn: &Connection, key: &str, first: u64, text: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT INTO log_entries (session, pos, entry) VALUES (?1, ?2, ?3)")?
        .execute(params![key, int(first), text])
        .map(drop)
}

/// A session's row after an append.
pub(crate) struct Row<'a> {
    pub key: &'a str,
    pub last: u64,
    pub summary: &'a str,
    pub at: SystemTime,
    pub counter: i64,
    pub writer: &'a str,
}

/// Creates or updates the session's row.
pub(crate) fn put_session(conn: &Connection, row: &Row<'_>) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO log_sessions (key, last, summary, updated_ms, counter, writer) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (key) DO UPDATE SET last = excluded.last, summary = excluded.summary,
             updated_ms = excluded.updated_ms, counter = excluded.counter, writer = excluded.writer",
    )?
    .execute(params![row.key, int(row.last), row.summary, millis(row.at), row.counter, row.writer])
    .map(|_| ())
}

/// Deletes `key`'s log, summary and snapshot; false when there was no log. The counter its row held stays
/// taken (`log_clock`), so a later append never reuses it and other processes' watchers do not miss that append.
pub(crate) fn delete(conn: &Connection, key: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "UPDATE log_clock SET counter = MAX(counter, COALESCE((SELECT counter FROM log_sessions WHERE key = ?1), 0))
         WHERE id = 1",
    )?
    .execute(params![key])?;
    conn.prepare_cached("DELETE FROM log_entries WHERE session = ?1")?.execute(params![key])?;
    conn.prepare_cached("DELETE FROM log_snapshots WHERE session = ?1")?.execute(params![key])?;
    super::leases::forget(conn, key)?;
    Ok(conn.prepare_cached("DELETE FROM log_sessions WHERE key = ?1")?.execute(params![key])? > 0)
}

/// Replaces `key`'s snapshot.
pub(crate) fn put_snapshot(conn: &Connection, key: &str, snapshot: &Snapshot) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO log_snapshots (session, pos, bytes) VALUES (?1, ?2, ?3)
         ON CONFLICT (session) DO UPDATE SET pos = excluded.pos, bytes = excluded.bytes",
    )?
    .execute(params![key, int(snapshot.pos), snapshot.bytes])
    .map(|_| ())
}

/// Sessions whose counter passed `seen`: their key, last position, counter and writer, in counter order.
pub(crate) fn moved_since(conn: &Connection, seen: i64) -> rusqlite::Result<Vec<(String, u64, i64, String)>> {
    let mut stmt =
        conn.prepare_cached("SELECT key, last, counter, writer FROM log_sessions WHERE counter > ?1 ORDER BY counter")?;
    let rows = stmt.query_map(params![seen], |r| Ok((r.get(0)?, uint(r.get(1)?), r.get(2)?, r.get(3)?)))?;
    rows.collect()
}

/// Up to `limit` entries of `key` after `after`, decoded.
pub(crate) fn read(
    conn: &Connection,
    path: &Path,
    key: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<Record>, StoreError> {
    let doing = || format!("reading session '{key}'");
    // From the row holding the entry after `after` (a row holds one append); every row holds at least one entry,
    // so `limit` rows hold the `limit` entries wanted.
    let mut stmt = conn
        .prepare_cached(
            "SELECT pos, entry FROM log_entries WHERE session = ?1 AND pos >= COALESCE(
                 (SELECT MAX(pos) FROM log_entries WHERE session = ?1 AND pos <= ?2 + 1), ?2 + 1)
             ORDER BY pos LIMIT ?3",
        )
        .map_err(|e| failed(path, &doing(), e))?;
    let wanted = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut rows = stmt.query(params![key, int(after), wanted]).map_err(|e| failed(path, &doing(), e))?;
    let mut kept = RowReader::new(key, after, limit);
    while let Some(row) = rows.next().map_err(|e| failed(path, &doing(), e))? {
        let pos = uint(row.get(0).map_err(|e| failed(path, &doing(), e))?);
        let text =
            row.get_ref(1).and_then(|v| v.as_str().map_err(Into::into)).map_err(|e| failed(path, &doing(), e))?;
        if !kept.take(pos, text)? {
            break;
        }
    }
    Ok(kept.into_records())
}

/// Every session, the last appended to first.
pub(crate) fn list(conn: &Connection, path: &Path) -> Result<Vec<SessionLine>, StoreError> {
    let doing = "listing the session logs";
    let mut stmt = conn
        .prepare_cached("SELECT key, last, summary, updated_ms FROM log_sessions ORDER BY counter DESC")
        .map_err(|e| failed(path, doing, e))?;
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, uint(r.get(1)?), r.get::<_, String>(2)?, r.get(3)?)))
        .map_err(|e| failed(path, doing, e))?;
    let mut lines = Vec::new();
    for row in rows {
        let (key, last, json, updated_ms) = row.map_err(|e| failed(path, doing, e))?;
        let summary = summary(path, &key, &json)?;
        lines.push(SessionLine { key, last, summary, updated_at: from_millis(updated_ms) });
    }
    Ok(lines)
}

/// `key`'s snapshot, if any.
pub(crate) fn snapshot(conn: &Connection, path: &Path, key: &str) -> Result<Option<Snapshot>, StoreError> {
    conn.prepare_cached("SELECT pos, bytes FROM log_snapshots WHERE session = ?1")
        .and_then(|mut stmt| {
            stmt.query_row(params![key], |r| Ok(Snapshot { pos: uint(r.get(0)?), bytes: r.get(1)? })).optional()
        })
        .map_err(|e| failed(path, &format!("reading the snapshot of session '{key}'"), e))
}
