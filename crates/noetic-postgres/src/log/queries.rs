//! The store's reads, its deletes, snapshots and leases: each a statement or two on a pooled connection.

use std::time::{Duration, SystemTime};

use deadpool_postgres::{Object, Pool};
use noetic_runtime::agent::log::{Record, RowReader, SessionLine, Snapshot, StoreError, Summary, Taken};
use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use super::errors::{connection_lost, db_error, pool_error, said};
use super::storable;

/// The longest lease term kept (longer ones are cut to it): a hundred years.
const MAX_TERM_MICROS: i64 = 100 * 365 * 24 * 3600 * 1_000_000;

/// A pooled connection, for `doing`.
async fn connection(pool: &Pool, target: &str, doing: &str) -> Result<Object, StoreError> {
    pool.get().await.map_err(|e| pool_error(target, doing, e))
}

/// Runs `sql` (prepared once per connection) with `params`; once more on a new connection when the pooled one
/// turns out to be gone (the server restarted or ended it). Every statement run here may run twice.
async fn query(
    pool: &Pool,
    target: &str,
    doing: &str,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<Row>, StoreError> {
    let mut retried = false;
    loop {
        let client = connection(pool, target, doing).await?;
        let result = match client.prepare_cached(sql).await {
            Ok(statement) => client.query(&statement, params).await,
            Err(e) => Err(e),
        };
        match result {
            Err(e) if !retried && connection_lost(&e) => {
                tracing::info!(error = %said(&e), "a pooled connection to {target} was gone; trying on another");
                retried = true;
                drop(Object::take(client));
            }
            other => return other.map_err(|e| db_error(target, doing, e)),
        }
    }
}

/// Column `i` of `row`, or an error saying the table is not as this build made it.
fn column<'a, T: FromSql<'a>>(row: &'a Row, i: usize, target: &str, doing: &str) -> Result<T, StoreError> {
    row.try_get(i).map_err(|e| db_error(target, format!("{doing} (a column is not as schema 4 made it)"), e))
}

/// A position as stored (positions beyond `i64::MAX` cannot exist).
fn stored(pos: u64) -> i64 {
    i64::try_from(pos).unwrap_or(i64::MAX)
}

fn position(pos: i64) -> u64 {
    u64::try_from(pos).unwrap_or(0)
}

pub(crate) async fn read(
    pool: &Pool,
    target: &str,
    key: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<Record>, StoreError> {
    if limit == 0 || !storable(key) || after >= i64::MAX as u64 {
        return Ok(Vec::new());
    }
    let doing = format!("reading session '{key}'");
    // From the row holding the entry after `after` (a row holds one append: `RowReader`); every row holds at least
    // one entry, so `limit` rows hold the `limit` entries wanted.
    let sql = "SELECT pos, entry FROM noetic_log WHERE session = $1::text AND pos >= COALESCE(
                   (SELECT max(pos) FROM noetic_log WHERE session = $1::text AND pos <= $2::int8 + 1), $2::int8 + 1)
               ORDER BY pos LIMIT $3::int8";
    let rows =
        query(pool, target, &doing, sql, &[&key, &stored(after), &i64::try_from(limit).unwrap_or(i64::MAX)]).await?;
    let mut kept = RowReader::new(key, after, limit);
    for row in &rows {
        let pos = position(column(row, 0, target, &doing)?);
        let text: &str = column(row, 1, target, &doing)?;
        if !kept.take(pos, text)? {
            break;
        }
    }
    Ok(kept.into_records())
}

pub(crate) async fn last(pool: &Pool, target: &str, key: &str) -> Result<u64, StoreError> {
    if !storable(key) {
        return Ok(0);
    }
    let doing = format!("reading where session '{key}' ends");
    let rows = query(pool, target, &doing, "SELECT last FROM noetic_log_sessions WHERE key = $1", &[&key]).await?;
    match rows.first() {
        Some(row) => Ok(position(column(row, 0, target, &doing)?)),
        None => Ok(0),
    }
}

pub(crate) async fn list(pool: &Pool, target: &str) -> Result<Vec<SessionLine>, StoreError> {
    let doing = "listing sessions";
    let sql = "SELECT key, last, summary, updated_at FROM noetic_log_sessions WHERE last > 0 ORDER BY seq DESC";
    let rows = query(pool, target, doing, sql, &[]).await?;
    rows.iter()
        .map(|row| {
            let key: String = column(row, 0, target, doing)?;
            let summary: &str = column(row, 2, target, doing)?;
            let summary: Summary = serde_json::from_str(summary).map_err(|e| {
                StoreError::unavailable(
                    doing,
                    format!(
                        "session '{key}': its summary row in noetic_log_sessions does not read ({e}); it was \
                         damaged or written by another program: delete the session or repair the row"
                    ),
                )
            })?;
            let updated_at: SystemTime = column(row, 3, target, doing)?;
            Ok(SessionLine { last: position(column(row, 1, target, doing)?), key, summary, updated_at })
        })
        .collect()
}

pub(crate) async fn delete(pool: &Pool, target: &str, key: &str) -> Result<bool, StoreError> {
    if !storable(key) {
        return Ok(false);
    }
    let doing = format!("deleting session '{key}'");
    let client = connection(pool, target, &doing).await?;
    let fail = |e| db_error(target, &doing, e);
    // The summary row first: its lock waits for an append under way, whose entries the next statement (with a
    // snapshot of its own) then sees and deletes.
    let row = client.prepare_cached("DELETE FROM noetic_log_sessions WHERE key = $1").await.map_err(fail)?;
    let rest = client
        .prepare_cached(
            "WITH entries AS (DELETE FROM noetic_log WHERE session = $1),
                  snapshots AS (DELETE FROM noetic_log_snapshots WHERE session = $1)
             DELETE FROM noetic_log_leases WHERE key = $1",
        )
        .await
        .map_err(fail)?;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&key];
    let (begun, gone, removed, committed) = tokio::join!(
        client.batch_execute("BEGIN"),
        client.execute(&row, &params),
        client.execute(&rest, &params),
        client.batch_execute("COMMIT")
    );
    begun.map_err(fail)?;
    let gone = gone.map_err(fail)?;
    removed.map_err(fail)?;
    committed.map_err(fail)?;
    Ok(gone > 0)
}

pub(crate) async fn save_snapshot(pool: &Pool, target: &str, key: &str, snapshot: Snapshot) -> Result<(), StoreError> {
    let none = || StoreError::Refused { message: format!("session '{key}': no log to snapshot") };
    if !storable(key) {
        return Err(none());
    }
    let doing = format!("saving a snapshot of session '{key}'");
    // The row's key lock keeps a delete out until the snapshot is in (the delete then removes it too).
    let sql = "
        WITH held AS (SELECT last FROM noetic_log_sessions WHERE key = $1::text FOR KEY SHARE),
             saved AS (
                INSERT INTO noetic_log_snapshots (session, pos, bytes)
                SELECT $1::text, $2::int8, $3::bytea FROM held WHERE held.last >= $2::int8
                ON CONFLICT (session) DO UPDATE SET pos = EXCLUDED.pos, bytes = EXCLUDED.bytes
                RETURNING 1)
        SELECT (SELECT last FROM held), (SELECT count(*) FROM saved)";
    let rows = query(pool, target, &doing, sql, &[&key, &stored(snapshot.pos), &snapshot.bytes]).await?;
    let Some(row) = rows.first() else { return Err(none()) };
    let last: Option<i64> = column(row, 0, target, &doing)?;
    let saved: i64 = column(row, 1, target, &doing)?;
    match last {
        None => Err(none()),
        Some(last) if saved == 0 => Err(StoreError::Refused {
            message: format!("session '{key}': a snapshot at {} is past the log's end at {last}", snapshot.pos),
        }),
        Some(_) => Ok(()),
    }
}

pub(crate) async fn snapshot(pool: &Pool, target: &str, key: &str) -> Result<Option<Snapshot>, StoreError> {
    if !storable(key) {
        return Ok(None);
    }
    let doing = format!("reading the snapshot of session '{key}'");
    let sql = "SELECT pos, bytes FROM noetic_log_snapshots WHERE session = $1";
    let rows = query(pool, target, &doing, sql, &[&key]).await?;
    match rows.first() {
        Some(row) => Ok(Some(Snapshot {
            pos: position(column(row, 0, target, &doing)?),
            bytes: column(row, 1, target, &doing)?,
        })),
        None => Ok(None),
    }
}

/// Takes `key`'s lease for `holder` and, in the same statement, reads where its log ends.
pub(crate) async fn acquire(
    pool: &Pool,
    target: &str,
    key: &str,
    holder: &str,
    term: Duration,
) -> Result<Taken, StoreError> {
    if !storable(key) || holder.contains('\0') {
        return Err(StoreError::Refused {
            message: format!("a lease on key '{key}' for '{holder}' cannot be stored (a NUL character or a long key)"),
        });
    }
    let doing = format!("taking the lease of session '{key}'");
    let micros = i64::try_from(term.as_micros()).unwrap_or(i64::MAX).min(MAX_TERM_MICROS);
    let take = "
        WITH taken AS (
            INSERT INTO noetic_log_leases AS l (key, holder, lease_until)
            VALUES ($1, $2, now() + $3::int8 * interval '1 microsecond')
            ON CONFLICT (key) DO UPDATE SET holder = EXCLUDED.holder, lease_until = EXCLUDED.lease_until
            WHERE l.holder = EXCLUDED.holder OR l.lease_until <= now()
            RETURNING holder
        )
        SELECT (SELECT last FROM noetic_log_sessions WHERE key = $1) FROM taken";
    // Refused: someone holds it — unless they let it go in between, then it is free to take again.
    for _ in 0..3 {
        if let Some(row) = query(pool, target, &doing, take, &[&key, &holder, &micros]).await?.first() {
            let last: Option<i64> = column(row, 0, target, &doing)?;
            return Ok(Taken::Held { last: last.map_or(0, position) });
        }
        if let Some(other) = self::holder(pool, target, key).await? {
            return Ok(Taken::Elsewhere(other));
        }
    }
    Err(StoreError::unavailable(doing, "the lease changed hands three times while it was being taken; try again"))
}

pub(crate) async fn release(pool: &Pool, target: &str, key: &str, holder: &str) -> Result<(), StoreError> {
    if !storable(key) || holder.contains('\0') {
        return Ok(());
    }
    let doing = format!("releasing the lease of session '{key}'");
    let sql = "DELETE FROM noetic_log_leases WHERE key = $1 AND holder = $2";
    query(pool, target, &doing, sql, &[&key, &holder]).await.map(drop)
}

pub(crate) async fn holder(pool: &Pool, target: &str, key: &str) -> Result<Option<String>, StoreError> {
    if !storable(key) {
        return Ok(None);
    }
    let doing = format!("reading the lease of session '{key}'");
    let sql = "SELECT holder FROM noetic_log_leases WHERE key = $1 AND lease_until > now()";
    let rows = query(pool, target, &doing, sql, &[&key]).await?;
    rows.first().map(|row| column(row, 0, target, &doing)).transpose()
}
