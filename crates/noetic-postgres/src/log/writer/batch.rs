//! The batch transaction: every queued append in one transaction, each fenced against its session's locked
//! summary row (see the [module docs](super)).

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use noetic_runtime::agent::log::{Expect, StoreError, Summary};
use tokio_postgres::types::ToSql;

use super::super::errors::{DbFailure, connection_lost};
use super::{Answers, Failed, Known, Request, Writer, abandon};
use crate::log::announce::payloads;

/// Creates the summary rows of sessions that have none and locks every one, in the order given (sorted keys, so
/// that two writers never wait for each other in a cycle); answers where each log ends.
const LOCK: &str = "
INSERT INTO noetic_log_sessions AS s (key, last, summary, seq, written_by, updated_at)
SELECT k, 0, '', 0, pg_current_xact_id(), now() FROM unnest($1::text[]) WITH ORDINALITY AS v(k, o) ORDER BY o
ON CONFLICT (key) DO UPDATE SET last = s.last
RETURNING s.key, s.last, s.summary, s.seq";

/// Inserts the appends (a row each), updates the summaries, removes the rows made for sessions none of whose appends passed,
/// gives up the leases of the appends that passed with a release, and announces each session's new end; answers each updated session's new append counter.
const WRITE: &str = "
WITH appended AS (
    INSERT INTO noetic_log (session, pos, entry) SELECT * FROM unnest($1::text[], $2::int8[], $3::text[])
), summed AS (
    UPDATE noetic_log_sessions AS s
    SET last = v.last, summary = v.summary, seq = nextval('noetic_log_appends'),
        written_by = pg_current_xact_id(), updated_at = now()
    FROM unnest($4::text[], $5::int8[], $6::text[]) AS v(key, last, summary)
    WHERE s.key = v.key
    RETURNING s.key, s.seq
), dropped AS (
    DELETE FROM noetic_log_sessions WHERE key = ANY($7::text[])
), released AS (
    DELETE FROM noetic_log_leases AS l USING unnest($9::text[], $10::text[]) AS r(key, holder)
    WHERE l.key = r.key AND l.holder = r.holder
)
SELECT key, seq, (SELECT count(pg_notify('noetic_log', p)) FROM unnest($8::text[]) AS p) FROM summed";

/// What one session's requests in a batch found and did.
struct Session {
    last: u64,
    seq: i64,
    /// Its summary, or why it cannot be read.
    summary: Result<Summary, String>,
    /// Its row was made by this batch.
    created: bool,
    /// An append of the batch passed.
    landed: bool,
}

/// One transaction for `batch`: each request's answer, or why none was written.
pub(crate) async fn commit(writer: &mut Writer, batch: &[Request]) -> Result<Answers, Failed> {
    let target = writer.target.clone();
    let db = |e| Failed::db(&target, e);
    let client = writer.connection().await?;
    let lock = client.prepare_cached(LOCK).await.map_err(db)?;
    let write = client.prepare_cached(WRITE).await.map_err(db)?;
    let mut locking: Vec<&str> = batch.iter().map(|r| r.key.as_str()).collect();
    locking.sort_unstable();
    locking.dedup();
    // Pipelined: one round trip.
    let locking: [&(dyn ToSql + Sync); 1] = [&locking];
    let (begun, locked) = tokio::join!(client.batch_execute("BEGIN"), client.query(&lock, &locking));
    let rows = match begun.and(locked) {
        Ok(rows) => rows,
        Err(e) => {
            abandon(client).await;
            return Err(db(e));
        }
    };
    let mut sessions: HashMap<String, Session> = HashMap::with_capacity(rows.len());
    for row in &rows {
        let columns: Result<(String, i64, String, i64), _> =
            (|| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?, row.try_get(3)?)))();
        let (key, last, summary, seq) = match columns {
            Ok(columns) => columns,
            Err(e) => {
                abandon(client).await;
                return Err(db(e));
            }
        };
        let created = last == 0;
        let summary = if created {
            Ok(Summary::default())
        } else {
            serde_json::from_str(&summary).map_err(|e| {
                format!(
                    "its summary row in noetic_log_sessions does not read ({e}); it was damaged or written by another \
                     program: delete the session or repair the row"
                )
            })
        };
        let last = u64::try_from(last).unwrap_or(0);
        sessions.insert(key, Session { last, seq, summary, created, landed: false });
    }

    let (mut log_keys, mut log_pos, mut log_entries) = (Vec::new(), Vec::new(), Vec::new());
    let mut answers = Vec::with_capacity(batch.len());
    let (mut released_keys, mut released_holders) = (Vec::new(), Vec::new());
    for request in batch {
        let answer = decide(&mut sessions, request, &mut log_keys, &mut log_pos, &mut log_entries);
        if let (Ok(_), Some(holder)) = (&answer, &request.release) {
            released_keys.push(request.key.as_str());
            released_holders.push(holder.as_str());
        }
        answers.push(answer);
    }
    let (mut keys, mut lasts, mut summaries, mut dropped, mut announced) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (key, session) in &sessions {
        match (&session.summary, session.landed) {
            (Ok(summary), true) => {
                let summary = serde_json::to_string(summary).map_err(|e| Failed::Before {
                    error: format!("a session summary could not be encoded: {e}").into(),
                    retryable: false,
                })?;
                keys.push(key.as_str());
                lasts.push(i64::try_from(session.last).unwrap_or(i64::MAX));
                summaries.push(summary);
                announced.push((key.as_str(), session.last));
            }
            _ if session.created => dropped.push(key.as_str()),
            _ => {}
        }
    }
    let payloads = payloads(&writer.id, announced);
    if keys.is_empty() && dropped.is_empty() {
        abandon(client).await;
        learn(writer, &sessions, &[]);
        return Ok(answers);
    }
    let params: [&(dyn ToSql + Sync); 10] = [
        &log_keys,
        &log_pos,
        &log_entries,
        &keys,
        &lasts,
        &summaries,
        &dropped,
        &payloads,
        &released_keys,
        &released_holders,
    ];
    // Pipelined with the statement: a statement that fails turns the COMMIT into a rollback.
    let (written, committed) = tokio::join!(client.query(&write, &params), client.batch_execute("COMMIT"));
    match (written, committed) {
        (Ok(rows), Ok(())) => {
            writer.counters.transactions.fetch_add(1, Ordering::Relaxed);
            let landed = answers.iter().filter(|a| a.is_ok()).count() as u64;
            writer.counters.appends.fetch_add(landed, Ordering::Relaxed);
            let written: Vec<(String, i64)> =
                rows.iter().filter_map(|r| Some((r.try_get(0).ok()?, r.try_get(1).ok()?))).collect();
            learn(writer, &sessions, &written);
            Ok(answers)
        }
        (Err(e), _) if !connection_lost(&e) => Err(db(e)),
        (Err(e), _) | (Ok(_), Err(e)) => Err(Failed::Unknown(DbFailure::new(&target, e))),
    }
}

/// Remembers what the committed batch left in each session: those it wrote with their new append counters
/// (`written`), those it only read as they were; forgets the rest.
fn learn(writer: &mut Writer, sessions: &HashMap<String, Session>, written: &[(String, i64)]) {
    let written: HashMap<&str, i64> = written.iter().map(|(k, seq)| (k.as_str(), *seq)).collect();
    for (key, session) in sessions {
        let seq = match (session.landed, written.get(key.as_str())) {
            (true, Some(seq)) => Some(*seq),
            (false, _) if !session.created => Some(session.seq),
            _ => None,
        };
        match (seq, &session.summary) {
            (Some(seq), Ok(summary)) => {
                writer.remember(key, Known { last: session.last, seq, summary: summary.clone() });
            }
            _ => {
                writer.known.remove(key);
            }
        }
    }
}

/// Fences `request` against where its session's log ends so far in this batch; when it passes, adds its rows and
/// folds its entries into the summary.
fn decide<'a>(
    sessions: &mut HashMap<String, Session>,
    request: &'a Request,
    log_keys: &mut Vec<&'a str>,
    log_pos: &mut Vec<i64>,
    log_entries: &mut Vec<&'a str>,
) -> Result<u64, StoreError> {
    let key = request.key.as_str();
    let Some(session) = sessions.get_mut(key) else {
        return Err(StoreError::unavailable(format!("appending to session '{key}'"), "its row was not locked"));
    };
    let summary = match &mut session.summary {
        Ok(summary) => summary,
        Err(why) => return Err(StoreError::unavailable(format!("appending to session '{key}'"), why.clone())),
    };
    if let Expect::At(expected) = request.expect
        && expected != session.last
    {
        return Err(StoreError::Conflict { key: key.to_owned(), expected, actual: session.last });
    }
    log_keys.push(key);
    log_pos.push(i64::try_from(session.last + 1).unwrap_or(i64::MAX));
    log_entries.push(request.row.as_str());
    summary.apply_change(&request.change);
    session.last += request.count;
    session.landed = true;
    Ok(session.last)
}
