//! Leases on one file ([`noetic::agent::log::Leases`]): who runs each session's turn, so several processes can
//! share a file's sessions the way workers share PostgreSQL. A lease row names its holder, until when it holds,
//! and the process that took it: a holder whose process is gone on this host (a killed chat) holds nothing, so its
//! turn is resumed at once rather than after the term; a holder on another host (a file on a network share) holds
//! until its term runs out. Taking and giving up go through the writer thread (they write), reading who holds
//! through a read connection.

use std::time::{Duration, SystemTime};

use rusqlite::{Connection, OptionalExtension, params};

use crate::process::Owner;
use crate::{from_millis, millis};

/// What a lease request does.
#[derive(Debug)]
pub(crate) enum LeaseOp {
    /// Take (or renew) the lease for `holder` for `term`.
    Acquire { holder: String, term: Duration },
    /// Give it up if `holder` holds it.
    Release { holder: String },
}

/// A lease row: holder, until (ms), pid, host, process start.
type Held = (String, i64, i64, String, i64);

fn current(conn: &Connection, key: &str) -> rusqlite::Result<Option<Held>> {
    conn.prepare_cached("SELECT holder, until_ms, pid, host, started FROM log_leases WHERE session = ?1")?
        .query_row(params![key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .optional()
}

/// The holder of a row, if it still holds at `now`: its term has not run out and its process is not gone.
fn live(held: Held, now: SystemTime) -> Option<String> {
    let (holder, until, pid, host, started) = held;
    let gone = Owner::is_gone(u32::try_from(pid).unwrap_or(0), &host, started);
    (from_millis(until) > now && !gone).then_some(holder)
}

/// Who holds `key`'s lease now.
pub(crate) fn holder(conn: &Connection, key: &str) -> rusqlite::Result<Option<String>> {
    Ok(current(conn, key)?.and_then(|held| live(held, SystemTime::now())))
}

/// Does `op` on `key`'s lease inside the writer's transaction: `Some(holder)` when another holds it.
pub(crate) fn apply(conn: &Connection, key: &str, op: &LeaseOp, me: &Owner) -> rusqlite::Result<Option<String>> {
    match op {
        LeaseOp::Acquire { holder, term } => {
            let now = SystemTime::now();
            if let Some(other) = current(conn, key)?.and_then(|held| live(held, now))
                && other != *holder
            {
                return Ok(Some(other));
            }
            let until = millis(now.checked_add(*term).unwrap_or(now));
            conn.prepare_cached(
                "INSERT INTO log_leases (session, holder, until_ms, pid, host, started) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (session) DO UPDATE SET holder = ?2, until_ms = ?3, pid = ?4, host = ?5, started = ?6",
            )?
            .execute(params![key, holder, until, i64::from(me.pid), me.host, me.started])?;
            Ok(None)
        }
        LeaseOp::Release { holder } => {
            conn.prepare_cached("DELETE FROM log_leases WHERE session = ?1 AND holder = ?2")?
                .execute(params![key, holder])?;
            Ok(None)
        }
    }
}

/// Removes `key`'s lease (the session is deleted).
pub(crate) fn forget(conn: &Connection, key: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM log_leases WHERE session = ?1")?.execute(params![key]).map(drop)
}
