//! Group commit: the store object's one writer task takes every queued append request and writes them in one
//! transaction (see the [module docs](super)). [`batch`] is that transaction; [`fast`] the one round
//! trip of a writer continuing a session it wrote last, [`many`] the same for several sessions.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use deadpool_postgres::{Object, Pool};
use noetic_runtime::agent::log::{Appended, Expect, StoreError, Summary, SummaryChange};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio_postgres::{Client, Statement};

use super::Counters;
use super::errors::{DbFailure, Shared, said};
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

/// How often, and how far apart, [`Writer::settle`] looks whether the ended server process is gone.
const SETTLE_POLLS: usize = 200;
const SETTLE_POLL: std::time::Duration = std::time::Duration::from_millis(10);

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
    /// The listening connection while it listens (see [`Writer::statement`]).
    pub listening: watch::Receiver<Option<Listening>>,
    /// The statements prepared on that connection, and the connection they were prepared on.
    pub listening_statements: Option<(Arc<Client>, HashMap<&'static str, Statement>)>,
}

/// The store's listening connection, as the listening task publishes it while it listens.
#[derive(Clone)]
pub(crate) struct Listening {
    pub client: Arc<Client>,
    /// Its server process (`pg_backend_pid()`): ended, and waited for, when an append on it fails without saying
    /// whether it was written (see [`Writer::settle`]).
    pub pid: i32,
    /// Its `application_name`, so that ending it never ends another process that took its pid since.
    pub name: String,
}

/// The connection a one-statement append runs on.
pub(crate) enum Conn {
    /// The store's listening connection: the append's own notifications come back with its answer, on the socket
    /// being read for that answer. On a connection of its own, each woke the listening connection's task and its
    /// server process once more (an append took ~280 µs that way on a 2-core machine, ~175 µs this way).
    Listening(Listening),
    /// A pooled connection (while the listening one reconnects, or could not prepare the statement); boxed, as the
    /// rarer of the two.
    Pooled(Box<Object>),
}

impl std::ops::Deref for Conn {
    type Target = Client;

    fn deref(&self) -> &Client {
        match self {
            Conn::Listening(listening) => &listening.client,
            Conn::Pooled(object) => object,
        }
    }
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

    /// A connection with `sql` prepared on it, for one statement that is a transaction of its own: the listening
    /// connection while it listens, else a pooled one ([`Writer::prepared`]).
    pub(crate) async fn statement(&mut self, sql: &'static str) -> Result<(Conn, Statement), Failed> {
        let listening = self.listening.borrow().clone();
        if let Some(listening) = listening.filter(|l| !l.client.is_closed()) {
            let client = listening.client.clone();
            let kept = match &self.listening_statements {
                Some((on, statements)) if Arc::ptr_eq(on, &client) => statements.get(sql).cloned(),
                _ => None,
            };
            let statement = match kept {
                Some(statement) => Some(statement),
                None => match client.prepare(sql).await {
                    Ok(statement) => {
                        let statements = match &mut self.listening_statements {
                            Some((on, statements)) if Arc::ptr_eq(on, &client) => statements,
                            other => &mut other.insert((client.clone(), HashMap::new())).1,
                        };
                        statements.insert(sql, statement.clone());
                        Some(statement)
                    }
                    Err(error) => {
                        tracing::debug!(error = %said(&error), "preparing an append on the listening connection failed; using the pool");
                        None
                    }
                },
            };
            if let Some(statement) = statement.filter(|_| !client.is_closed()) {
                return Ok((Conn::Listening(listening), statement));
            }
        }
        let (client, statement) = self.prepared(sql).await?;
        Ok((Conn::Pooled(Box::new(client)), statement))
    }

    /// Whether a statement on the listening connection `listening` that failed without an answer wrote nothing:
    /// its server process is ended and waited for (so the statement can no longer commit), then `fence` — a session
    /// it would have moved on and the append counter it expected there — is read on a pooled connection. True when
    /// the counter is still the expected one (the statement writes all or nothing, and any write moves it); false
    /// when it moved or this could not be found out (the outcome stays unknown).
    pub(crate) async fn settle(&self, listening: &Listening, fence: (&str, i64)) -> bool {
        let Ok(client) = self.connection().await else { return false };
        let ended = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND application_name = $2";
        if client.query(ended, &[&listening.pid, &listening.name]).await.is_err() {
            return false;
        }
        let alive = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND application_name = $2";
        let mut gone = false;
        for _ in 0..SETTLE_POLLS {
            match client.query_one(alive, &[&listening.pid, &listening.name]).await.and_then(|r| r.try_get::<_, i64>(0))
            {
                Ok(0) => {
                    gone = true;
                    break;
                }
                Ok(_) => tokio::time::sleep(SETTLE_POLL).await,
                Err(_) => return false,
            }
        }
        if !gone {
            return false;
        }
        let seq = "SELECT seq FROM noetic_log_sessions WHERE key = $1";
        match client.query_opt(seq, &[&fence.0]).await {
            Ok(Some(row)) => row.try_get::<_, i64>(0).is_ok_and(|seq| seq == fence.1),
            _ => false,
        }
    }

    /// Counts a transaction of `appends` appends written on `conn`.
    pub(crate) fn count(&self, conn: &Conn, appends: usize) {
        self.counters.transactions.fetch_add(1, Ordering::Relaxed);
        self.counters.appends.fetch_add(appends as u64, Ordering::Relaxed);
        if matches!(conn, Conn::Listening(_)) {
            self.counters.on_listening_connection.fetch_add(1, Ordering::Relaxed);
        }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use deadpool_postgres::{Manager, ManagerConfig, RecyclingMethod, Runtime};
    use noetic_runtime::agent::SteerMessage;
    use noetic_runtime::agent::log::{Entry, Expect, LogStore};

    use super::*;
    use crate::testing::{Throwaway, client};

    /// A writer on `db` (the listening connection is the test's to give).
    fn writer_on(db: &Throwaway) -> Writer {
        let config: tokio_postgres::Config = db.url.parse().unwrap();
        let manager = Manager::from_config(
            config,
            tokio_postgres::NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        Writer {
            pool: Pool::builder(manager).max_size(2).runtime(Runtime::Tokio1).build().unwrap(),
            target: db.name.clone(),
            id: "test".into(),
            appended: broadcast::channel(4).0,
            counters: Arc::default(),
            max_batch: 16,
            known: HashMap::new(),
            listening: watch::channel(None).1,
            listening_statements: None,
        }
    }

    /// A connection named `name`, as the listening task publishes its own.
    async fn listening(db: &Throwaway, name: &str) -> Listening {
        let client = client(&format!("{}?application_name={}", db.url, name.replace(' ', "%20"))).await.unwrap();
        let pid = client.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
        Listening { client: Arc::new(client), pid, name: name.to_owned() }
    }

    async fn alive(db: &Throwaway, pid: i32) -> bool {
        db.admin
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", &[&pid])
            .await
            .unwrap()
            .get::<_, i64>(0)
            > 0
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn settling_ends_the_listening_process_then_says_unwritten_only_while_the_fence_holds() {
        let Some(db) = Throwaway::or_skip("log_settle").await.unwrap_or_else(|e| panic!("{e}")) else { return };
        let store = crate::PgLogStore::connect(&db.url).await.unwrap();
        let message = Entry::MessageAccepted { message: SteerMessage::new("x") };
        store.append("s", Expect::At(0), std::slice::from_ref(&message)).await.unwrap();
        let writer = writer_on(&db);
        let fence_now = "SELECT seq FROM noetic_log_sessions WHERE key = 's'";
        let fence: i64 = client(&db.url).await.unwrap().query_one(fence_now, &[]).await.unwrap().get(0);

        // The fence holds: the process is ended and gone before the answer, which is "nothing written".
        let first = listening(&db, "noetic-listen settle-a").await;
        assert!(alive(&db, first.pid).await);
        assert!(writer.settle(&first, ("s", fence)).await);
        assert!(!alive(&db, first.pid).await, "the listening connection's server process is gone");

        // The session moved on since: whatever the failed statement did, it is not known to be nothing.
        store.append("s", Expect::At(1), std::slice::from_ref(&message)).await.unwrap();
        let second = listening(&db, "noetic-listen settle-b").await;
        assert!(!writer.settle(&second, ("s", fence)).await);

        // A process that is not the one named (its pid taken by another connection) is left alone.
        let other = listening(&db, "someone else").await;
        let impostor = Listening { name: "noetic-listen settle-c".into(), ..other.clone() };
        // The named process is gone (that pid is another connection's now) and the fence of now holds.
        let now: i64 = client(&db.url).await.unwrap().query_one(fence_now, &[]).await.unwrap().get(0);
        assert!(writer.settle(&impostor, ("s", now)).await);
        assert!(alive(&db, other.pid).await, "another connection with that pid is not ended");
        drop((store, writer, first, second, other));
        db.remove().await.unwrap();
    }
}
