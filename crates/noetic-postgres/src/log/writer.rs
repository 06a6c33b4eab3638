//! Group commit: the store object's one writer task takes every queued append request and writes them in one
//! transaction (see the [module docs](super)). [`batch`] is that transaction; [`fast`] the one round
//! trip of a writer continuing a session it wrote last, [`many`] the same for several sessions.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use deadpool_postgres::{Object, Pool};
use noetic_runtime::agent::log::{Appended, Expect, StoreError, Summary, SummaryChange};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_postgres::Statement;

use super::Counters;
use super::errors::{DbFailure, Shared};
mod batch;
mod fast;
mod many;

/// How many requests the writer answers before it lets the runtime run other tasks: answering wakes each request's
/// task, and a thousand woken at once would queue everything else on the worker (a timer, a request handler) behind
/// them all.
const ANSWER_SLICE: usize = 32;

/// How many sessions the writer remembers (where their logs end as it last wrote or read them); past it, it forgets
/// them all and learns again.
const REMEMBERED: usize = 16_384;

/// An append waiting for the writer.
pub(crate) struct Request {
    pub key: String,
    pub expect: Expect,
    /// What the entries change in the session's summary.
    pub change: SummaryChange,
    /// The entries as stored, one per line ([`noetic_runtime::agent::log::encode_row`]): one row.
    pub row: String,
    /// How many entries the row holds (at least one).
    pub count: u64,
    /// The lease holder that gives the session up in the same transaction when the append passes.
    pub release: Option<String>,
    pub reply: oneshot::Sender<Result<u64, StoreError>>,
}

/// A session as the writer last saw it committed: where its log ended, the append counter of that append (any later
/// append, by anyone, changes it), and its summary.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub last: u64,
    pub seq: i64,
    pub summary: Summary,
}

/// The writer task's state.
pub(crate) struct Writer {
    pub pool: Pool,
    pub target: String,
    pub id: String,
    pub appended: broadcast::Sender<Appended>,
    pub counters: Arc<Counters>,
    pub max_batch: usize,
    pub known: HashMap<String, Known>,
}

/// Each request's answer.
pub(crate) type Answers = Vec<Result<u64, StoreError>>;

/// Why a batch was not written.
pub(crate) enum Failed {
    /// Nothing was written.
    Before { error: Box<dyn std::error::Error + Send + Sync>, retryable: bool },
    /// The connection dropped while the commit was under way: written or not, nobody knows.
    Unknown(DbFailure),
}

impl Failed {
    pub(crate) fn db(target: &str, e: tokio_postgres::Error) -> Failed {
        let failure = DbFailure::new(target, e);
        Failed::Before { retryable: failure.retryable(), error: Box::new(failure) }
    }

    fn retryable(&self) -> bool {
        matches!(self, Failed::Before { retryable: true, .. })
    }
}

impl Writer {
    /// Writes batches until the store is dropped (its senders gone). A batch of more than [`ANSWER_SLICE`] requests
    /// is answered by a task of its own (batch after batch, in order), so the next batch is written meanwhile; a
    /// smaller one is answered at once when that task has nothing left to answer (no task hop for the common append
    /// of one session; answers stay in order).
    pub(crate) async fn run(mut self, mut queue: mpsc::Receiver<Request>) {
        let (written, mut answering) = mpsc::unbounded_channel::<(Vec<Request>, Result<Answers, Failed>)>();
        let pending = Arc::new(AtomicUsize::new(0));
        let (appended, left) = (self.appended.clone(), pending.clone());
        tokio::spawn(async move {
            while let Some((batch, outcome)) = answering.recv().await {
                answer(&appended, batch, outcome).await;
                left.fetch_sub(1, Ordering::AcqRel);
            }
        });
        let mut batch = Vec::new();
        while queue.recv_many(&mut batch, self.max_batch).await > 0 {
            let outcome = self.write(&batch).await;
            let done = std::mem::take(&mut batch);
            if done.len() <= ANSWER_SLICE && pending.load(Ordering::Acquire) == 0 {
                answer(&self.appended, done, outcome).await;
                continue;
            }
            pending.fetch_add(1, Ordering::AcqRel);
            if let Err(mpsc::error::SendError((done, outcome))) = written.send((done, outcome)) {
                // The answering task is gone only when the runtime shuts down: answer here.
                answer(&self.appended, done, outcome).await;
            }
        }
    }

    /// A pooled connection.
    pub(crate) async fn connection(&self) -> Result<Object, Failed> {
        self.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => Failed::db(&self.target, e),
            other => {
                Failed::Before { error: format!("no connection to {}: {other}", self.target).into(), retryable: false }
            }
        })
    }

    /// A pooled connection with `sql` prepared on it, checked to be open (a statement sent on a closed one fails
    /// without saying whether it was written).
    pub(crate) async fn prepared(&self, sql: &str) -> Result<(Object, Statement), Failed> {
        let client = self.connection().await?;
        let statement = client.prepare_cached(sql).await.map_err(|e| Failed::db(&self.target, e))?;
        if client.is_closed() {
            return Err(Failed::Before { error: "the pooled connection was closed".into(), retryable: true });
        }
        Ok((client, statement))
    }

    /// Remembers `key` as committed at `known`.
    pub(crate) fn remember(&mut self, key: &str, known: Known) {
        if self.known.len() >= REMEMBERED && !self.known.contains_key(key) {
            self.known.clear();
        }
        self.known.insert(key.to_owned(), known);
    }

    /// Writes `batch`: in one round trip when it continues sessions this writer knows, else (or when another
    /// wrote there meanwhile) in the batch transaction, once more on another connection if that failed before
    /// writing.
    async fn write(&mut self, batch: &[Request]) -> Result<Answers, Failed> {
        if let Some(plan) = fast::plan(&self.known, batch) {
            let key = plan.key;
            match fast::commit(self, plan).await {
                Ok(Some(answers)) => return Ok(answers),
                Ok(None) => {
                    self.known.remove(key);
                }
                Err(Failed::Before { error, .. }) => {
                    tracing::info!(%error, "a session-log append failed before writing; trying the batch way");
                }
                Err(unknown) => return Err(unknown),
            }
        } else if let Some(plan) = many::plan(&self.known, batch) {
            match many::commit(self, plan).await {
                Ok(Some(answers)) => return Ok(answers),
                // The batch transaction reads every session's row again and remembers what it finds.
                Ok(None) => {}
                Err(Failed::Before { error, .. }) => {
                    tracing::info!(%error, "a session-log append failed before writing; trying the batch way");
                }
                Err(unknown) => return Err(unknown),
            }
        }
        let outcome = batch::commit(self, batch).await;
        match outcome {
            Err(failed) if failed.retryable() => {
                if let Failed::Before { error, .. } = &failed {
                    tracing::info!(%error, "a session-log transaction failed before writing; trying once more");
                }
                batch::commit(self, batch).await
            }
            other => other,
        }
    }
}

/// Why a statement sent alone (a transaction of its own) failed: the server refused it (nothing was written), or the
/// connection dropped while it ran (written or not, nobody knows).
pub(crate) fn statement_failed(target: &str, e: tokio_postgres::Error) -> Failed {
    if e.as_db_error().is_some() { Failed::db(target, e) } else { Failed::Unknown(DbFailure::new(target, e)) }
}

/// Answers each request of `batch` and tells watchers of what landed, [`ANSWER_SLICE`] requests at a time.
async fn answer(appended: &broadcast::Sender<Appended>, batch: Vec<Request>, outcome: Result<Answers, Failed>) {
    match outcome {
        Ok(answers) => {
            for (i, (request, answer)) in batch.into_iter().zip(answers).enumerate() {
                if i > 0 && i % ANSWER_SLICE == 0 {
                    tokio::task::yield_now().await;
                }
                if let Ok(last) = answer {
                    // Nobody watching is not an error.
                    let _ = appended.send(Appended { key: request.key.clone(), last });
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

/// Ends the open transaction, or takes the connection out of the pool when that fails (it is broken).
pub(crate) async fn abandon(client: Object) {
    if client.batch_execute("ROLLBACK").await.is_err() {
        drop(Object::take(client));
    }
}
