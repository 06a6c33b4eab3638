//! One round trip for a batch of several sessions' appends that each continue where this writer last saw its session
//! committed (under many sessions the usual batch): one statement, a transaction of its own, fenced by each
//! session's remembered append counter. It locks the sessions' rows in key order (so two writers never wait for each
//! other in a cycle), and writes only when every one still holds the counter remembered — all of the batch or none:
//! when another wrote to one of them meanwhile, nothing is written and the batch transaction ([`super::batch`])
//! decides instead. Unlike the batch transaction it writes each summary row once, not twice (no row is created or
//! locked by an update first), and answers in one message instead of two.

use std::collections::HashMap;

use noetic_runtime::agent::log::{Expect, StoreError};
use tokio_postgres::types::ToSql;

use super::{Conn, Failed, Known, Request, Writer, statement_failed};
use crate::log::announce::payloads;

/// Locks the rows of the sessions (`$1`) that still hold their remembered counters (`$2`), in key order; updates
/// them only if all `$n` (the array's length) were locked, then inserts the appends (`$6`–`$8`), gives up the leases
/// asked (`$9`, the holder per session, null for none) and announces the sessions' new ends (`$5`: a few
/// notifications for all of them, sent once the first row is answered, so only when the update wrote); answers each
/// updated session's key and new append counter, or nothing.
const CONTINUE_MANY: &str = "
WITH v AS (
    SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::text[], $9::text[])
        AS v(key, seen, last, summary, holder)
), locked AS (
    SELECT s.key FROM noetic_log_sessions AS s JOIN v ON s.key = v.key AND s.seq = v.seen
    ORDER BY s.key FOR UPDATE OF s
), summed AS (
    UPDATE noetic_log_sessions AS s
    SET last = v.last, summary = v.summary, seq = nextval('noetic_log_appends'),
        written_by = pg_current_xact_id(), updated_at = now()
    FROM v
    WHERE s.key = v.key AND (SELECT count(*) FROM locked) = cardinality($1::text[])
    RETURNING s.key, s.seq
), appended AS (
    INSERT INTO noetic_log (session, pos, entry)
    SELECT r.key, r.pos, r.entry FROM unnest($6::text[], $7::int8[], $8::text[]) AS r(key, pos, entry)
    WHERE EXISTS (SELECT FROM summed)
), released AS (
    DELETE FROM noetic_log_leases AS l USING v
    WHERE l.key = v.key AND l.holder = v.holder AND EXISTS (SELECT FROM summed)
)
SELECT s.key, s.seq, (SELECT count(pg_notify('noetic_log', p)) FROM unnest($5::text[]) AS p) FROM summed AS s";

/// A batch that continues several remembered sessions: what it writes and answers.
pub(crate) struct Plan<'a> {
    /// Each session once, in the order of its first request: its key and what it will be once written (its end and
    /// summary; its counter stays the one remembered, the fence, until the database answers the new one).
    sessions: Vec<(&'a str, Known)>,
    /// Each request's rows: its session, its first position, its entries.
    keys: Vec<&'a str>,
    positions: Vec<i64>,
    rows: Vec<&'a str>,
    /// The holder whose lease each session gives up, if any (in `sessions`' order).
    holders: Vec<Option<&'a str>>,
    answers: Vec<u64>,
}

/// The plan for `batch` when it appends to more than one session, every one of which this writer remembers, and
/// every request's fence passes against what it remembers (two requests for one session in arrival order); `None`
/// otherwise (the batch transaction decides).
pub(crate) fn plan<'a>(known: &HashMap<String, Known>, batch: &'a [Request]) -> Option<Plan<'a>> {
    let first = batch.first()?.key.as_str();
    if batch.iter().all(|r| r.key == first) {
        return None;
    }
    let mut at: HashMap<&str, usize> = HashMap::with_capacity(batch.len());
    let mut plan = Plan {
        sessions: Vec::new(),
        keys: Vec::with_capacity(batch.len()),
        positions: Vec::with_capacity(batch.len()),
        rows: Vec::with_capacity(batch.len()),
        holders: Vec::new(),
        answers: Vec::with_capacity(batch.len()),
    };
    for request in batch {
        let key = request.key.as_str();
        let i = match at.get(key) {
            Some(&i) => i,
            None => {
                let remembered = known.get(key)?;
                plan.sessions.push((key, remembered.clone()));
                plan.holders.push(None);
                at.insert(key, plan.sessions.len() - 1);
                plan.sessions.len() - 1
            }
        };
        let next = &mut plan.sessions[i].1;
        if let Expect::At(expected) = request.expect
            && expected != next.last
        {
            return None;
        }
        plan.keys.push(key);
        plan.positions.push(i64::try_from(next.last + 1).ok()?);
        plan.rows.push(request.row.as_str());
        next.last += request.count;
        next.summary.apply_change(&request.change);
        plan.answers.push(next.last);
        if let Some(holder) = request.release.as_deref() {
            plan.holders[i] = Some(holder);
        }
    }
    Some(plan)
}

/// Writes `plan` in one round trip, one statement: the answers, or `None` when another wrote to one of the sessions
/// since the writer last saw it (nothing was written).
pub(crate) async fn commit(
    writer: &mut Writer,
    plan: Plan<'_>,
) -> Result<Option<Vec<Result<u64, StoreError>>>, Failed> {
    let (client, statement) = writer.statement(CONTINUE_MANY).await?;
    let n = plan.sessions.len();
    let (mut keys, mut seen, mut lasts, mut summaries) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    for (key, known) in &plan.sessions {
        let summary = serde_json::to_string(&known.summary).map_err(|e| Failed::Before {
            error: format!("a session summary could not be encoded: {e}").into(),
            retryable: false,
        })?;
        keys.push(*key);
        seen.push(known.seq);
        lasts.push(i64::try_from(known.last).unwrap_or(i64::MAX));
        summaries.push(summary);
    }
    let payloads = payloads(&writer.id, plan.sessions.iter().map(|(key, known)| (*key, known.last)));
    let params: [&(dyn ToSql + Sync); 9] =
        [&keys, &seen, &lasts, &summaries, &payloads, &plan.keys, &plan.positions, &plan.rows, &plan.holders];
    // One statement outside a transaction block is a transaction of its own: one message, one answer, and a
    // statement that fails writes nothing.
    match client.query(&statement, &params).await {
        Ok(rows) => {
            let written: HashMap<String, i64> =
                rows.iter().filter_map(|r| Some((r.try_get(0).ok()?, r.try_get(1).ok()?))).collect();
            if written.is_empty() {
                // Another writer moved a session on: the statement wrote nothing.
                return Ok(None);
            }
            writer.count(&client, plan.answers.len());
            // All of them were written (the statement writes all or none).
            for (key, known) in plan.sessions {
                match written.get(key) {
                    Some(&seq) => writer.remember(key, Known { seq, ..known }),
                    None => {
                        writer.known.remove(key);
                    }
                }
            }
            Ok(Some(plan.answers.into_iter().map(Ok).collect()))
        }
        Err(e) => match (&client, plan.sessions.first()) {
            // Whether it was written is known once the listening connection's server process is gone: the
            // statement writes all of its sessions or none, so one of them tells.
            (Conn::Listening(listening), Some((key, known)))
                if e.as_db_error().is_none() && writer.settle(listening, (key, known.seq)).await =>
            {
                Err(Failed::Before { error: Box::new(e), retryable: true })
            }
            _ => Err(statement_failed(&writer.target, e)),
        },
    }
}
