//! Group commit: the store object's one writer task takes every queued append request and writes them in one
//! transaction (see the [module docs](super)).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use deadpool_postgres::{Object, Pool};
use noetic::agent::log::{Appended, Entry, Expect, StoreError, Summary};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::Counters;
use super::errors::{DbFailure, Shared, connection_lost};

/// Creates the summary rows of sessions that have none and locks every one, in the order given (sorted keys, so
/// that two writers never wait for each other in a cycle); answers where each log ends.
const LOCK: &str = "
INSERT INTO noetic_log_sessions AS s (key, last, summary, seq, written_by, updated_at)
SELECT k, 0, '', 0, pg_current_xact_id(), now() FROM unnest($1::text[]) WITH ORDINALITY AS v(k, o) ORDER BY o
ON CONFLICT (key) DO UPDATE SET last = s.last
RETURNING s.key, s.last, s.summary";

/// Inserts the entries, updates the summaries, removes the rows made for sessions none of whose appends passed,
/// and announces each session's new end.
const WRITE: &str = "
WITH appended AS (
    INSERT INTO noetic_log (session, pos, entry) SELECT * FROM unnest($1::text[], $2::int8[], $3::text[])
), summed AS (
    UPDATE noetic_log_sessions AS s
    SET last = v.last, summary = v.summary, seq = nextval('noetic_log_appends'),
        written_by = pg_current_xact_id(), updated_at = now()
    FROM unnest($4::text[], $5::int8[], $6::text[]) AS v(key, last, summary)
    WHERE s.key = v.key
), dropped AS (
    DELETE FROM noetic_log_sessions WHERE key = ANY($7::text[])
)
SELECT count(pg_notify('noetic_log', p)) FROM unnest($8::text[]) AS p";

/// An append waiting for the writer.
pub(crate) struct Request {
    pub key: String,
    pub expect: Expect,
    pub entries: Vec<Entry>,
    /// The entries as stored, in order.
    pub encoded: Vec<String>,
    pub reply: oneshot::Sender<Result<u64, StoreError>>,
}

/// The writer task's state.
pub(crate) struct Writer {
    pub pool: Pool,
    pub target: String,
    pub id: String,
    pub appended: broadcast::Sender<Appended>,
    pub counters: Arc<Counters>,
    pub max_batch: usize,
}

/// Why a batch was not written.
enum Failed {
    /// Nothing was written.
    Before { error: Box<dyn std::error::Error + Send + Sync>, retryable: bool },
    /// The connection dropped while the commit was under way: written or not, nobody knows.
    Unknown(DbFailure),
}

impl Failed {
    fn db(target: &str, e: tokio_postgres::Error) -> Failed {
        let failure = DbFailure::new(target, e);
        Failed::Before { retryable: failure.retryable(), error: Box::new(failure) }
    }
}

/// What one session's requests in a batch found and did.
struct Session {
    last: u64,
    /// Its summary, or why it cannot be read.
    summary: Result<Summary, String>,
    /// Its row was made by this batch.
    created: bool,
    /// An append of the batch passed.
    landed: bool,
}

impl Writer {
    /// Writes batches until the store is dropped (its senders gone).
    pub(crate) async fn run(self, mut queue: mpsc::Receiver<Request>) {
        let mut batch = Vec::with_capacity(self.max_batch);
        while queue.recv_many(&mut batch, self.max_batch).await > 0 {
            self.commit(std::mem::take(&mut batch)).await;
        }
    }

    /// Writes `batch` in one transaction (once more on another connection if the first failed before writing)
    /// and answers each request.
    async fn commit(&self, batch: Vec<Request>) {
        let mut outcome = self.try_commit(&batch).await;
        if let Err(Failed::Before { retryable: true, error }) = &outcome {
            tracing::info!(%error, "a session-log transaction failed before writing; trying once more");
            outcome = self.try_commit(&batch).await;
        }
        match outcome {
            Ok(answers) => {
                for (request, answer) in batch.into_iter().zip(answers) {
                    if let Ok(last) = answer {
                        // Nobody watching is not an error.
                        let _ = self.appended.send(Appended { key: request.key.clone(), last });
                    }
                    let _ = request.reply.send(answer);
                }
            }
            Err(failed) => {
                let (error, unknown) = match failed {
                    Failed::Before { error, .. } => (Shared(Arc::from(error)), false),
                    Failed::Unknown(failure) => (Shared(Arc::new(failure)), true),
                };
                for request in batch {
                    let doing = if unknown {
                        format!(
                            "appending to session '{}' (the connection dropped during the commit: whether the append \
                             was written is unknown; read the log's last position before appending again)",
                            request.key
                        )
                    } else {
                        format!("appending to session '{}'", request.key)
                    };
                    let _ = request.reply.send(Err(StoreError::unavailable(doing, error.clone())));
                }
            }
        }
    }

    /// One transaction for `batch`: each request's answer, or why none was written.
    async fn try_commit(&self, batch: &[Request]) -> Result<Vec<Result<u64, StoreError>>, Failed> {
        let client = self.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => Failed::db(&self.target, e),
            other => {
                Failed::Before { error: format!("no connection to {}: {other}", self.target).into(), retryable: false }
            }
        })?;
        let db = |e| Failed::db(&self.target, e);
        let lock = client.prepare_cached(LOCK).await.map_err(db)?;
        let write = client.prepare_cached(WRITE).await.map_err(db)?;
        let mut locking: Vec<&str> = batch.iter().map(|r| r.key.as_str()).collect();
        locking.sort_unstable();
        locking.dedup();
        // Pipelined: one round trip.
        let locking: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&locking];
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
            let (key, last, summary): (String, i64, String) = (row.get(0), row.get(1), row.get(2));
            let created = last == 0;
            let summary = if created {
                Ok(Summary::default())
            } else {
                serde_json::from_str(&summary).map_err(|e| {
                    format!(
                        "its summary row in noetic_log_sessions does not read ({e}); it was damaged or written by \
                         another program: delete the session or repair the row"
                    )
                })
            };
            sessions.insert(key, Session { last: u64::try_from(last).unwrap_or(0), summary, created, landed: false });
        }

        let (mut log_keys, mut log_pos, mut log_entries) = (Vec::new(), Vec::new(), Vec::new());
        let mut answers = Vec::with_capacity(batch.len());
        for request in batch {
            answers.push(decide(&mut sessions, request, &mut log_keys, &mut log_pos, &mut log_entries));
        }
        let (mut keys, mut lasts, mut summaries, mut dropped, mut payloads) =
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
                    payloads.push(format!("{}\t{}\t{key}", self.id, session.last));
                }
                _ if session.created => dropped.push(key.as_str()),
                _ => {}
            }
        }
        if keys.is_empty() && dropped.is_empty() {
            abandon(client).await;
            return Ok(answers);
        }
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] =
            [&log_keys, &log_pos, &log_entries, &keys, &lasts, &summaries, &dropped, &payloads];
        // Pipelined with the statement: a statement that fails turns the COMMIT into a rollback.
        let (written, committed) = tokio::join!(client.query_one(&write, &params), client.batch_execute("COMMIT"));
        match (written, committed) {
            (Ok(_), Ok(())) => {
                self.counters.transactions.fetch_add(1, Ordering::Relaxed);
                let landed = answers.iter().filter(|a| a.is_ok()).count() as u64;
                self.counters.appends.fetch_add(landed, Ordering::Relaxed);
                Ok(answers)
            }
            (Err(e), _) if !connection_lost(&e) => Err(db(e)),
            (Err(e), _) | (Ok(_), Err(e)) => Err(Failed::Unknown(DbFailure::new(&self.target, e))),
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
    for (i, (entry, text)) in request.entries.iter().zip(&request.encoded).enumerate() {
        log_keys.push(key);
        log_pos.push(i64::try_from(session.last + 1 + i as u64).unwrap_or(i64::MAX));
        log_entries.push(text.as_str());
        summary.apply(entry);
    }
    session.last += request.entries.len() as u64;
    session.landed = true;
    Ok(session.last)
}

/// Ends the open transaction, or takes the connection out of the pool when that fails (it is broken).
async fn abandon(client: Object) {
    if client.batch_execute("ROLLBACK").await.is_err() {
        drop(Object::take(client));
    }
}
