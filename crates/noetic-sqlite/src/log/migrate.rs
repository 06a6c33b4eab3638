//! Schema version 5 → 6: the log's tables, and every session of the old tables converted into a log, in one
//! transaction (the mapping is in the [module docs](super)); 6 → 7: the leases' table; 7 → 8: rows of appends
//! (the version number only).

use std::collections::BTreeMap;
use std::path::Path;

use noetic_runtime::agent::log::{Entry, StoreError, Summary, encode};
use noetic_runtime::agent::thread_scope;
use rusqlite::{Connection, Transaction, TransactionBehavior, params};
use serde_json::Value;

use super::convert::{self, OldSession, Unreadable};
use super::failed;
use super::tables::{self, Row};
use crate::from_millis;
use crate::schema::{self, LOG_SCHEMA_VERSION, V6, V7};

/// The writer id of the rows the migration writes.
const MIGRATION: &str = "migration";

/// A log to write: its last write's time (ms) and its entries.
type Log = (i64, Vec<Entry>);

/// Brings a file of any older version (0: new) to version 8 in one transaction: the old tables' steps, the
/// log's tables, the sessions converted, the leases' table. A file at 8 is left as it is; nothing is written when a stored value
/// cannot be converted.
pub(crate) fn to_log(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let doing = "adding the session log to the file";
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| failed(path, doing, e))?;
    // Another process may have migrated meanwhile: read the version again under the write lock.
    let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(|e| failed(path, doing, e))?;
    if version >= LOG_SCHEMA_VERSION {
        return tx.commit().map_err(|e| failed(path, doing, e));
    }
    if version < 6 {
        schema::steps_after(&tx, version).map_err(|e| failed(path, "migrating the schema", e))?;
        tx.execute_batch(V6).map_err(|e| failed(path, doing, e))?;
        let mut logs = old_logs(&tx, path)?;
        let mut order: Vec<(i64, String)> = logs.iter().map(|(key, (ms, _))| (*ms, key.clone())).collect();
        order.sort();
        let mut counter = 0;
        for (_, key) in order {
            let Some((ms, entries)) = logs.remove(&key) else { continue };
            counter += 1;
            write_log(&tx, path, &key, ms, &entries, counter)?;
        }
    }
    if version < 7 {
        tx.execute_batch(V7).map_err(|e| failed(path, doing, e))?;
    }
    // Version 8 changes what a row of `log_entries` may hold, not the tables.
    tx.pragma_update(None, "user_version", LOG_SCHEMA_VERSION).map_err(|e| failed(path, doing, e))?;
    tx.commit().map_err(|e| failed(path, doing, e))
}

fn unreadable(path: &Path, e: Unreadable) -> StoreError {
    StoreError::unavailable(
        format!(
            "migrating {} to the session log: {} cannot be read; the file was damaged or written by another program \
             — repair or delete that row (nothing was changed)",
            path.display(),
            e.what
        ),
        e.cause,
    )
}

/// Every log the old tables make, by key.
fn old_logs(tx: &Transaction<'_>, path: &Path) -> Result<BTreeMap<String, Log>, StoreError> {
    let doing = "reading the sessions to migrate";
    let sql = |e| failed(path, doing, e);
    let mut logs = BTreeMap::new();
    let sessions: Vec<(OldSession, i64)> = {
        let mut stmt = tx
            .prepare(
                "SELECT key, mode, capacity, batch_policy, turns,
                        journal_step IS NOT NULL AND journal_core IS NOT NULL, updated_ms
                 FROM sessions",
            )
            .map_err(sql)?;
        let rows = stmt
            .query_map([], |r| {
                let old = OldSession {
                    key: r.get(0)?,
                    mode: r.get(1)?,
                    capacity: r.get(2)?,
                    batch_policy: r.get(3)?,
                    turns: r.get(4)?,
                    unfinished: r.get(5)?,
                    items: Vec::new(),
                    queue: Vec::new(),
                    ledger: Vec::new(),
                };
                Ok((old, r.get(6)?))
            })
            .map_err(sql)?;
        rows.collect::<rusqlite::Result<_>>().map_err(sql)?
    };
    for (mut old, updated_ms) in sessions {
        old.items =
            numbered(tx, "SELECT seq, item FROM items WHERE session = ?1 ORDER BY seq", &old.key).map_err(sql)?;
        old.queue =
            numbered(tx, "SELECT pos, message FROM queue WHERE session = ?1 ORDER BY pos", &old.key).map_err(sql)?;
        old.ledger =
            numbered(tx, "SELECT seq, entry FROM ledger WHERE session = ?1 ORDER BY seq", &old.key).map_err(sql)?;
        let entries = convert::entries(&old).map_err(|e| unreadable(path, e))?;
        logs.insert(old.key, (updated_ms, entries));
    }
    let mut stmt =
        tx.prepare("SELECT scope, layer, state, updated_ms FROM layer_state ORDER BY scope, layer").map_err(sql)?;
    let states = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get(3)?)))
        .map_err(sql)?;
    for state in states {
        let (scope, layer, text, updated_ms): (String, String, String, i64) = state.map_err(sql)?;
        let value: Value = serde_json::from_str(&text).map_err(|cause| {
            unreadable(path, Unreadable { what: format!("the state of layer '{layer}' in scope '{scope}'"), cause })
        })?;
        let key = match scope.strip_prefix("thread:") {
            Some(key) if thread_scope(key) == scope => key.to_owned(),
            _ => format!("scope:{scope}"),
        };
        let (ms, entries) = logs.entry(key).or_insert_with(|| (updated_ms, Vec::new()));
        *ms = (*ms).max(updated_ms);
        entries.push(Entry::LayerState { scope, layer, state: Some(value) });
    }
    Ok(logs)
}

/// `(number, text)` rows of `sql` for `key`.
fn numbered(tx: &Transaction<'_>, sql: &str, key: &str) -> rusqlite::Result<Vec<(i64, String)>> {
    let mut stmt = tx.prepare_cached(sql)?;
    let rows = stmt.query_map(params![key], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

fn write_log(
    tx: &Transaction<'_>,
    path: &Path,
    key: &str,
    updated_ms: i64,
    entries: &[Entry],
    counter: i64,
) -> Result<(), StoreError> {
    let doing = || format!("migrating session '{key}' to the session log");
    let at = from_millis(updated_ms);
    let encoded = entries
        .iter()
        .map(|entry| encode(entry, at))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StoreError::unavailable(doing(), e))?;
    let mut summary = Summary::default();
    entries.iter().for_each(|entry| summary.apply(entry));
    let summary = serde_json::to_string(&summary).map_err(|e| StoreError::unavailable(doing(), e))?;
    for (i, text) in encoded.iter().enumerate() {
        tables::insert_row(tx, key, i as u64 + 1, text).map_err(|e| failed(path, &doing(), e))?;
    }
    let row = Row { key, last: encoded.len() as u64, summary: &summary, at, counter, writer: MIGRATION };
    tables::put_session(tx, &row).map_err(|e| failed(path, &doing(), e))
}
