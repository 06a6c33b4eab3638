//! Bringing a database to the newest schema version: the log's tables (version 3), one row per append (4), and
//! every session of versions 1–2 converted into log entries (the mapping is in the [module docs](super);
//! [`super::convert`] does it), in one transaction.

use std::collections::HashMap;
use std::time::SystemTime;

use noetic_core::model::Item;
use noetic_runtime::agent::log::{Entry, StoreError, Summary, encode};
use noetic_runtime::agent::{SteerMessage, parse_setting};
use noetic_steering::LedgerEntry;
use tokio_postgres::{Row, Transaction};

use super::convert::{OldSession, layer_state_entry, layer_state_log, session_entries};
use super::errors::{db_error, said};
use crate::schema::{LOG_SCHEMA_VERSION, MIGRATION_LOCK, V1, V2, V3, V4};

/// The oldest server with what version 3 uses (`xid8`, `pg_current_snapshot`).
const MIN_SERVER: i32 = 130_000;

/// How many entries one insert carries while converting.
const CHUNK: usize = 5_000;

/// Why converting an old session failed.
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    #[error(
        "session '{session}': {what} {row} does not read ({cause}); repair or delete that row and connect again \
         (nothing was migrated)"
    )]
    Row { session: String, what: &'static str, row: String, cause: String },
}

fn unreadable(session: &str, what: &'static str, row: impl ToString, cause: impl ToString) -> StoreError {
    StoreError::unavailable(
        "migrating the database to the session log (schema version 3)",
        Unreadable::Row { session: session.to_owned(), what, row: row.to_string(), cause: cause.to_string() },
    )
}

/// The storage settings of the log's tables: they change no format (a build that does not set them reads and
/// writes the tables as before), so they are not a schema version. Each summary row is updated by every append to
/// its session; with half of each page left free the new row version goes on the same page (a heap-only tuple:
/// no index entry, no page split, cleaned up in place). In `noetic-bench pg-load` (1000 sessions of tool-calling
/// turns) 30 % of those updates were heap-only on packed pages, 98 % with room; 10,000 updates of 1000 rows in a
/// loop on the server took about a third less time with room than on freshly packed pages (62 against 95 ms).
const STORAGE: &str = "ALTER TABLE noetic_log_sessions SET (fillfactor = 50)";

/// Whether the tables have [`STORAGE`]'s settings.
const STORED: &str = "SELECT coalesce(reloptions, '{}') @> ARRAY['fillfactor=50'] FROM pg_class \
    WHERE oid = 'noetic_log_sessions'::regclass";

/// Migrates the database `client` is connected to (at `target`) to [`LOG_SCHEMA_VERSION`] and gives its tables
/// their storage settings ([`STORAGE`]); refuses a newer one, changing nothing.
pub(crate) async fn migrate(client: &mut tokio_postgres::Client, target: &str) -> Result<(), StoreError> {
    migrate_schema(client, target).await?;
    store_well(client, target).await;
    Ok(())
}

/// Sets [`STORAGE`] where it is not set yet (once per database, under the migration lock). A user who may not
/// alter the tables (not their owner) keeps them as they are: said in the log, not an error.
async fn store_well(client: &mut tokio_postgres::Client, target: &str) {
    let set = async {
        let stored: bool = client.query_one(STORED, &[]).await?.try_get(0)?;
        if stored {
            return Ok(false);
        }
        let tx = client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await?;
        // Another worker may have set it while this one waited for the lock.
        let altered = !tx.query_one(STORED, &[]).await?.try_get::<_, bool>(0)?;
        if altered {
            tx.batch_execute(STORAGE).await?;
        }
        tx.commit().await?;
        Ok::<bool, tokio_postgres::Error>(altered)
    };
    match set.await {
        Ok(true) => tracing::info!(%target, "the session log's summary rows now keep room for their updates"),
        Ok(false) => {}
        Err(error) => tracing::warn!(
            %target, error = %said(&error),
            "the session log's storage settings could not be set (it works without them; the owner of the tables \
             can run: {STORAGE})"
        ),
    }
}

/// Whether the version table exists (asked without the right to create tables, which `CREATE TABLE IF NOT
/// EXISTS` needs even where the table is there).
const HAS_VERSION_TABLE: &str = "SELECT to_regclass('noetic_schema') IS NOT NULL";

/// The schema version of a database whose version table exists, read without the migration lock and without the
/// right to create tables; `None` when there is no version table yet, or it could not be read (the migration then
/// reads it again under its lock, and says what is wrong).
async fn version_in_place(client: &tokio_postgres::Client) -> Option<i32> {
    let exists = client.query_one(HAS_VERSION_TABLE, &[]).await.ok()?;
    if !exists.try_get::<_, bool>(0).ok()? {
        return None;
    }
    client.query_opt("SELECT version FROM noetic_schema", &[]).await.ok()??.try_get(0).ok()
}

/// Why a database of a newer schema version is refused.
fn newer(target: &str, version: i32) -> StoreError {
    StoreError::Refused {
        message: format!(
            "session store {target}: its schema is version {version}, newer than this noetic supports \
             ({LOG_SCHEMA_VERSION}); upgrade noetic or use another database (nothing was changed)"
        ),
    }
}

/// [`migrate`]'s schema versions. A database already at this version (or a newer one) is taken (or refused) as it
/// is: a user who may read and write the tables but not create any (the tables made by their owner) connects.
async fn migrate_schema(client: &mut tokio_postgres::Client, target: &str) -> Result<(), StoreError> {
    match version_in_place(client).await {
        Some(version) if version == LOG_SCHEMA_VERSION => return Ok(()),
        Some(version) if version > LOG_SCHEMA_VERSION => return Err(newer(target, version)),
        _ => {}
    }
    let doing = "migrating the schema";
    let fail = |e| db_error(target, doing, e);
    let tx = client.transaction().await.map_err(fail)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await.map_err(fail)?;
    // Made only where it is missing ([`HAS_VERSION_TABLE`]): the version read before the lock may have been a
    // migration's that has finished since.
    let exists: bool = tx.query_one(HAS_VERSION_TABLE, &[]).await.and_then(|r| r.try_get(0)).map_err(fail)?;
    if !exists {
        tx.batch_execute("CREATE TABLE noetic_schema (version INTEGER NOT NULL)").await.map_err(fail)?;
    }
    let version: i32 = match tx.query_opt("SELECT version FROM noetic_schema", &[]).await.map_err(fail)? {
        Some(row) => row.try_get(0).map_err(fail)?,
        None => {
            tx.execute("INSERT INTO noetic_schema (version) VALUES (0)", &[]).await.map_err(fail)?;
            0
        }
    };
    if version > LOG_SCHEMA_VERSION {
        tx.rollback().await.map_err(fail)?;
        return Err(newer(target, version));
    }
    if version == LOG_SCHEMA_VERSION {
        return tx.commit().await.map_err(fail);
    }
    let server: String = tx.query_one("SHOW server_version_num", &[]).await.and_then(|r| r.try_get(0)).map_err(fail)?;
    if server.parse::<i32>().is_ok_and(|v| v < MIN_SERVER) {
        tx.rollback().await.map_err(fail)?;
        return Err(StoreError::Refused {
            message: format!(
                "session store {target}: the session log needs PostgreSQL 13 or newer (the server is {server}); \
                 upgrade the server (nothing was changed)"
            ),
        });
    }
    for (to, sql) in [(1, V1), (2, V2), (3, V3), (4, V4)] {
        if version < to {
            tx.batch_execute(sql).await.map_err(fail)?;
        }
    }
    // Sessions of the store before the log are converted once, on the way to version 3; their tables stay.
    if version < 3 {
        convert(&tx, target).await?;
    }
    tx.execute("UPDATE noetic_schema SET version = $1", &[&LOG_SCHEMA_VERSION]).await.map_err(fail)?;
    tx.commit().await.map_err(fail)
}

/// A log to write: its entries, and the time they carry.
struct Log {
    entries: Vec<Entry>,
    at: SystemTime,
}

/// Converts every session of the old tables into a log (sessions first, oldest first; then logs that only layer
/// states of other scopes make).
async fn convert(tx: &Transaction<'_>, target: &str) -> Result<(), StoreError> {
    let doing = "converting the sessions to the session log";
    let fail = |e| db_error(target, doing, e);
    let mut logs: Vec<(String, Log)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let sessions = tx
        .query(
            "SELECT key, mode, capacity, batch_policy, turns, journal_core IS NOT NULL, updated_at
             FROM noetic_sessions ORDER BY updated_at, key",
            &[],
        )
        .await
        .map_err(fail)?;
    for row in &sessions {
        let (old, at) = read_session(tx, target, row).await?;
        index.insert(old.key.clone(), logs.len());
        logs.push((old.key.clone(), Log { entries: session_entries(&old), at }));
    }
    let states = tx
        .query("SELECT scope, layer, state, updated_at FROM noetic_layer_state ORDER BY updated_at, scope, layer", &[])
        .await
        .map_err(fail)?;
    for row in &states {
        let (scope, layer, text, at): (String, String, String, SystemTime) =
            (get(row, 0, target)?, get(row, 1, target)?, get(row, 2, target)?, get(row, 3, target)?);
        let key = layer_state_log(&scope);
        let state = serde_json::from_str(&text)
            .map_err(|e| unreadable(&key, "the layer state", format!("({scope}, {layer})"), e))?;
        let at_log = *index.entry(key.clone()).or_insert_with(|| {
            logs.push((key.clone(), Log { entries: Vec::new(), at }));
            logs.len() - 1
        });
        let log = &mut logs[at_log].1;
        log.entries.push(layer_state_entry(&scope, &layer, state));
        log.at = log.at.max(at);
    }
    write(tx, target, &logs).await
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, i: usize, target: &str) -> Result<T, StoreError> {
    row.try_get(i).map_err(|e| db_error(target, "reading an old session (a column is not as version 2 made it)", e))
}

/// One old session, parsed: its row, history, queue and ledger.
async fn read_session(tx: &Transaction<'_>, target: &str, row: &Row) -> Result<(OldSession, SystemTime), StoreError> {
    let fail = |e| db_error(target, "reading an old session", e);
    let key: String = get(row, 0, target)?;
    let (mode, capacity, policy): (String, i64, String) =
        (get(row, 1, target)?, get(row, 2, target)?, get(row, 3, target)?);
    let (turns, unfinished, at): (i64, bool, SystemTime) =
        (get(row, 4, target)?, get(row, 5, target)?, get(row, 6, target)?);
    let mut history = Vec::new();
    for r in
        tx.query("SELECT seq, item FROM noetic_items WHERE session = $1 ORDER BY seq", &[&key]).await.map_err(fail)?
    {
        let (seq, text): (i64, String) = (get(&r, 0, target)?, get(&r, 1, target)?);
        history.push(serde_json::from_str::<Item>(&text).map_err(|e| unreadable(&key, "item", seq, e))?);
    }
    let mut queue = Vec::new();
    for r in tx
        .query("SELECT pos, message FROM noetic_queue WHERE session = $1 ORDER BY pos", &[&key])
        .await
        .map_err(fail)?
    {
        let (pos, text): (i64, String) = (get(&r, 0, target)?, get(&r, 1, target)?);
        queue
            .push(serde_json::from_str::<SteerMessage>(&text).map_err(|e| unreadable(&key, "queued message", pos, e))?);
    }
    let mut ledger = Vec::new();
    for r in
        tx.query("SELECT seq, entry FROM noetic_ledger WHERE session = $1 ORDER BY seq", &[&key]).await.map_err(fail)?
    {
        let (seq, text): (i64, String) = (get(&r, 0, target)?, get(&r, 1, target)?);
        ledger.push(serde_json::from_str::<LedgerEntry>(&text).map_err(|e| unreadable(&key, "ledger entry", seq, e))?);
    }
    let old = OldSession {
        mode: parse_setting(&mode).map_err(|e| unreadable(&key, "the steering mode", &mode, e))?,
        batch_policy: parse_setting(&policy).map_err(|e| unreadable(&key, "the batch policy", &policy, e))?,
        capacity: u32::try_from(capacity.max(1)).unwrap_or(u32::MAX),
        turns: u64::try_from(turns).unwrap_or(0),
        key,
        history,
        unfinished,
        queue,
        ledger,
    };
    Ok((old, at))
}

/// Inserts `logs` (in chunks), their summary rows in the order given (the last one listed first).
async fn write(tx: &Transaction<'_>, target: &str, logs: &[(String, Log)]) -> Result<(), StoreError> {
    let fail = |e| db_error(target, "writing the converted sessions", e);
    let entries = tx
        .prepare(
            "INSERT INTO noetic_log (session, pos, entry) SELECT * FROM unnest($1::text[], $2::int8[], $3::text[])",
        )
        .await
        .map_err(fail)?;
    let (mut keys, mut positions, mut texts) = (Vec::new(), Vec::new(), Vec::new());
    let (mut sessions, mut lasts, mut summaries, mut times) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (key, log) in logs {
        if log.entries.is_empty() {
            continue;
        }
        let mut summary = Summary::default();
        for (i, entry) in log.entries.iter().enumerate() {
            let text = encode(entry, log.at).map_err(|e| unreadable(key, "converted entry", i + 1, e))?;
            summary.apply(entry);
            keys.push(key.as_str());
            positions.push(i as i64 + 1);
            texts.push(text);
            if texts.len() == CHUNK {
                tx.execute(&entries, &[&keys, &positions, &texts]).await.map_err(fail)?;
                (keys, positions, texts) = (Vec::new(), Vec::new(), Vec::new());
            }
        }
        sessions.push(key.as_str());
        lasts.push(log.entries.len() as i64);
        summaries.push(serde_json::to_string(&summary).map_err(|e| unreadable(key, "its summary", "", e))?);
        times.push(log.at);
    }
    if !texts.is_empty() {
        tx.execute(&entries, &[&keys, &positions, &texts]).await.map_err(fail)?;
    }
    tx.execute(
        "INSERT INTO noetic_log_sessions (key, last, summary, seq, written_by, updated_at)
         SELECT k, l, s, nextval('noetic_log_appends'), pg_current_xact_id(), u
         FROM unnest($1::text[], $2::int8[], $3::text[], $4::timestamptz[]) AS v(k, l, s, u)",
        &[&sessions, &lasts, &summaries, &times],
    )
    .await
    .map_err(fail)?;
    Ok(())
}
