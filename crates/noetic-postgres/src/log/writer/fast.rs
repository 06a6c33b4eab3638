//! One round trip for the common append: a batch of one session's appends that continue where this writer last
//! saw the session committed. The writer folds the summary from what it remembers and writes with the append
//! counter it remembers as the fence (any append by anyone since changes it); when another wrote meanwhile the
//! statement writes nothing, and the batch transaction ([`super::batch`], beside it) does it instead.

use std::collections::HashMap;

use noetic_runtime::agent::log::{Expect, StoreError};
use tokio_postgres::types::ToSql;

use super::{Conn, Failed, Known, Request, Writer, statement_failed};
use crate::log::announce::payload;

/// Updates the summary row if no append happened since the one remembered, and then (only then) inserts the
/// entries, does `$released` (more of the statement) and announces the new end; answers the new append counter, or
/// nothing when the row had changed.
macro_rules! continue_sql {
    ($released:literal) => {
        concat!(
            "
WITH summed AS (
    UPDATE noetic_log_sessions
    SET last = $3::int8, summary = $4::text, seq = nextval('noetic_log_appends'),
        written_by = pg_current_xact_id(), updated_at = now()
    WHERE key = $1::text AND seq = $2::int8
    RETURNING seq
), appended AS (
    INSERT INTO noetic_log (session, pos, entry)
    SELECT $1::text, r.pos, r.entry FROM unnest($5::int8[], $6::text[]) AS r(pos, entry)
    WHERE EXISTS (SELECT FROM summed)
)",
            $released,
            "
SELECT seq, (SELECT count(*) FROM pg_notify('noetic_log', $7::text)) FROM summed"
        )
    };
}

/// The append.
const CONTINUE: &str = continue_sql!("");

/// The append that also gives up the lease of the holder `$8` (a turn's last write).
const CONTINUE_RELEASING: &str = continue_sql!(
    ", released AS (
    DELETE FROM noetic_log_leases WHERE key = $1::text AND holder = $8::text AND EXISTS (SELECT FROM summed)
)"
);

/// A batch that continues one remembered session: what it writes and answers.
pub(crate) struct Plan<'a> {
    pub key: &'a str,
    seen: i64,
    known: Known,
    positions: Vec<i64>,
    entries: Vec<&'a str>,
    answers: Vec<u64>,
    release: Option<&'a str>,
}

/// The plan for `batch` when all of it appends to one session this writer remembers and every request's fence
/// passes against what it remembers; `None` otherwise (the batch transaction decides).
pub(crate) fn plan<'a>(known: &HashMap<String, Known>, batch: &'a [Request]) -> Option<Plan<'a>> {
    let key = batch.first()?.key.as_str();
    if batch.iter().any(|r| r.key != key) {
        return None;
    }
    let remembered = known.get(key)?;
    let mut next = remembered.clone();
    let (mut positions, mut entries, mut answers) = (Vec::new(), Vec::new(), Vec::with_capacity(batch.len()));
    for request in batch {
        if let Expect::At(expected) = request.expect
            && expected != next.last
        {
            return None;
        }
        positions.push(i64::try_from(next.last + 1).ok()?);
        entries.push(request.row.as_str());
        next.last += request.count;
        next.summary.apply_change(&request.change);
        answers.push(next.last);
    }
    let release = batch.iter().find_map(|r| r.release.as_deref());
    Some(Plan { key, seen: remembered.seq, known: next, positions, entries, answers, release })
}

/// Writes `plan` in one round trip, one statement: the answers, or `None` when another wrote to the session since the writer
/// last saw it (nothing was written).
pub(crate) async fn commit(
    writer: &mut Writer,
    plan: Plan<'_>,
) -> Result<Option<Vec<Result<u64, StoreError>>>, Failed> {
    let sql = if plan.release.is_some() { CONTINUE_RELEASING } else { CONTINUE };
    let (client, statement) = writer.statement(sql).await?;
    let summary = serde_json::to_string(&plan.known.summary).map_err(|e| Failed::Before {
        error: format!("a session summary could not be encoded: {e}").into(),
        retryable: false,
    })?;
    let last = i64::try_from(plan.known.last).unwrap_or(i64::MAX);
    let payload = payload(&writer.id, plan.key, plan.known.last);
    let mut params: Vec<&(dyn ToSql + Sync)> =
        vec![&plan.key, &plan.seen, &last, &summary, &plan.positions, &plan.entries, &payload];
    if let Some(holder) = &plan.release {
        params.push(holder);
    }
    // One statement outside a transaction block is a transaction of its own: one message, one answer, and a
    // statement that fails writes nothing.
    match client.query(&statement, &params).await {
        Ok(rows) => {
            let Some(seq) = rows.first().and_then(|row| row.try_get::<_, i64>(0).ok()) else {
                return Ok(None);
            };
            writer.count(&client, plan.answers.len());
            writer.remember(plan.key, Known { seq, ..plan.known });
            Ok(Some(plan.answers.into_iter().map(Ok).collect()))
        }
        Err(e) => match &client {
            // Whether it was written is known once the listening connection's server process is gone.
            Conn::Listening(listening)
                if e.as_db_error().is_none() && writer.settle(listening, (plan.key, plan.seen)).await =>
            {
                Err(Failed::Before { error: Box::new(e), retryable: true })
            }
            _ => Err(statement_failed(&writer.target, e)),
        },
    }
}
