//! The writer thread: owns the write connection, commits queued requests in groups, and looks for other
//! processes' appends (see the [module docs](super)).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime};

use noetic_runtime::agent::log::{Appended, Expect, Snapshot, StoreError, Summary, SummaryChange};
use noetic_steps::ExecutionId;
use rusqlite::Connection;
use tokio::sync::{broadcast, oneshot};

use super::failed;
use super::leases::{self, LeaseOp};
use super::read::ReadPool;
use super::tables::{self, Row};
use crate::Durability;
use crate::process::Owner;

/// How often the file is checked for other processes' appends.
const POLL: Duration = Duration::from_millis(100);

/// The most requests one transaction takes (the rest wait for the next one).
const MAX_BATCH: usize = 4096;

/// Where an answer goes.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// What the writer is asked to do.
pub(crate) enum Request {
    /// Append `encoded` (entries stamped `at`, changing the summary by `change`), then give `release`'s lease up
    /// if it landed.
    Append {
        key: String,
        expect: Expect,
        change: SummaryChange,
        encoded: Vec<String>,
        at: SystemTime,
        release: Option<String>,
        reply: Reply<u64>,
    },
    /// Delete a log.
    Delete { key: String, reply: Reply<bool> },
    /// Save a snapshot.
    SaveSnapshot { key: String, snapshot: Snapshot, reply: Reply<()> },
    /// Take, renew or give up a lease; the answer also says where the log ends.
    Lease { key: String, op: LeaseOp, reply: Reply<(Option<String>, u64)> },
}

/// What the thread needs to start.
pub(crate) struct Setup {
    pub path: PathBuf,
    pub durability: Durability,
    pub appended: broadcast::Sender<Appended>,
    pub readers: Arc<ReadPool>,
    pub commits: Arc<AtomicU64>,
}

/// A request done inside the open transaction, answered once it commits (or fails).
enum Done {
    Append { key: String, reply: Reply<u64>, result: Result<u64, StoreError> },
    Delete { reply: Reply<bool>, result: Result<bool, StoreError> },
    Snapshot { reply: Reply<()>, result: Result<(), StoreError> },
    Lease { reply: Reply<(Option<String>, u64)>, result: Result<(Option<String>, u64), StoreError> },
}

impl Request {
    /// The request, not done, with `error` as its answer.
    fn undone(self, error: impl Fn() -> StoreError) -> Done {
        match self {
            Request::Append { key, reply, .. } => Done::Append { key, reply, result: Err(error()) },
            Request::Delete { reply, .. } => Done::Delete { reply, result: Err(error()) },
            Request::SaveSnapshot { reply, .. } => Done::Snapshot { reply, result: Err(error()) },
            Request::Lease { reply, .. } => Done::Lease { reply, result: Err(error()) },
        }
    }
}

impl Done {
    /// Answers after the commit; a caller that went away is not an error.
    fn answer(self, appended: &broadcast::Sender<Appended>) {
        match self {
            Done::Append { key, reply, result } => {
                if let Ok(last) = result {
                    let _ = appended.send(Appended { key, last });
                }
                let _ = reply.send(result);
            }
            Done::Delete { reply, result } => drop(reply.send(result)),
            Done::Snapshot { reply, result } => drop(reply.send(result)),
            Done::Lease { reply, result } => drop(reply.send(result)),
        }
    }

    /// What it did was rolled back: a success becomes `error`, a refusal stays what it was.
    fn rolled_back(self, error: impl Fn() -> StoreError) -> Done {
        match self {
            Done::Append { key, reply, result } => Done::Append { key, reply, result: result.and(Err(error())) },
            Done::Delete { reply, result } => Done::Delete { reply, result: result.and(Err(error())) },
            Done::Snapshot { reply, result } => Done::Snapshot { reply, result: result.and(Err(error())) },
            Done::Lease { reply, result } => Done::Lease { reply, result: result.and(Err(error())) },
        }
    }
}

/// Opens the file, then commits what `queue` brings until every sender is dropped.
pub(crate) fn run(setup: Setup, queue: mpsc::Receiver<Request>, ready: oneshot::Sender<Result<(), StoreError>>) {
    let mut writer = match Writer::open(setup) {
        Ok(writer) => writer,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    // An opener that went away also dropped the only sender: the loop below ends at once.
    let _ = ready.send(Ok(()));
    let mut next_poll = Instant::now() + POLL;
    loop {
        match queue.recv_timeout(next_poll.saturating_duration_since(Instant::now())) {
            Ok(first) => {
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match queue.try_recv() {
                        Ok(request) => batch.push(request),
                        Err(_) => break,
                    }
                }
                writer.commit(batch);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        if Instant::now() >= next_poll {
            writer.poll();
            next_poll = Instant::now() + POLL;
        }
    }
}

struct Writer {
    /// Closed first when the thread ends, so the write connection is the file's last and folds the WAL back in.
    _readers: Arc<ReadPool>,
    conn: Connection,
    path: PathBuf,
    /// This store's id in the rows it writes (to tell its own appends from other processes').
    id: String,
    appended: broadcast::Sender<Appended>,
    commits: Arc<AtomicU64>,
    /// This process, as the leases it takes name it.
    owner: Owner,
    /// `PRAGMA data_version` when the file was last looked at.
    data_version: i64,
    /// The highest append counter announced (or this store's own).
    seen: i64,
}

impl Writer {
    fn open(setup: Setup) -> Result<Writer, StoreError> {
        let conn = super::open::open_connection(&setup.path, setup.durability)?;
        let path = setup.path;
        let data_version = data_version(&conn).map_err(|e| failed(&path, "reading the data version", e))?;
        let seen = tables::clock(&conn).map_err(|e| failed(&path, "reading the append counter", e))?;
        Ok(Writer {
            _readers: setup.readers,
            conn,
            path,
            id: ExecutionId::new().to_string(),
            owner: Owner::this_process(),
            appended: setup.appended,
            commits: setup.commits,
            data_version,
            seen,
        })
    }

    /// Does `batch` in one transaction and answers every request.
    fn commit(&mut self, batch: Vec<Request>) {
        if let Err(e) = self.conn.execute_batch("BEGIN IMMEDIATE") {
            let error = failure(&self.path, Arc::new(e));
            batch.into_iter().for_each(|request| request.undone(&error).answer(&self.appended));
            return;
        }
        let mut done = Vec::with_capacity(batch.len());
        let mut rest = batch.into_iter();
        match self.write_all(&mut rest, &mut done) {
            Ok(()) => {
                self.commits.fetch_add(1, Ordering::Relaxed);
                done.into_iter().for_each(|d| d.answer(&self.appended));
            }
            Err(cause) => {
                if !self.conn.is_autocommit() {
                    let _ = self.conn.execute_batch("ROLLBACK");
                }
                let error = failure(&self.path, cause);
                done.into_iter().for_each(|d| d.rolled_back(&error).answer(&self.appended));
                rest.for_each(|request| request.undone(&error).answer(&self.appended));
            }
        }
    }

    /// Does the requests inside the open transaction and commits it.
    fn write_all(&self, batch: &mut impl Iterator<Item = Request>, done: &mut Vec<Done>) -> Result<(), Cause> {
        let mut clock = tables::clock(&self.conn).map_err(cause)?;
        for request in batch {
            done.push(self.apply(request, &mut clock));
            if self.conn.is_autocommit() {
                let lost: Box<dyn std::error::Error + Send + Sync> =
                    "an error made SQLite roll the whole transaction back".into();
                return Err(Arc::from(lost));
            }
        }
        self.conn.execute_batch("COMMIT").map_err(cause)
    }

    /// Does one request inside the open transaction.
    fn apply(&self, request: Request, clock: &mut i64) -> Done {
        match request {
            Request::Append { key, expect, change, encoded, at, release, reply } => {
                let result = self.append(&key, expect, (&change, &encoded), at, release.as_deref(), clock);
                Done::Append { key, reply, result }
            }
            Request::Delete { key, reply } => {
                let result = self
                    .savepoint(|conn| tables::delete(conn, &key))
                    .map_err(|e| failed(&self.path, &format!("deleting session '{key}'"), e));
                Done::Delete { reply, result }
            }
            Request::SaveSnapshot { key, snapshot, reply } => {
                Done::Snapshot { reply, result: self.save_snapshot(&key, &snapshot) }
            }
            Request::Lease { key, op, reply } => {
                let result = self
                    .savepoint(|conn| {
                        let other = leases::apply(conn, &key, &op, &self.owner)?;
                        Ok((other, tables::head(conn, &key)?.map_or(0, |(last, _)| last)))
                    })
                    .map_err(|e| failed(&self.path, &format!("taking or giving up the lease of session '{key}'"), e));
                Done::Lease { reply, result }
            }
        }
    }

    /// Appends `encoded` entries (changing the summary by `change`) to `key`'s log, and gives `release`'s lease up
    /// with them.
    fn append(
        &self,
        key: &str,
        expect: Expect,
        (change, encoded): (&SummaryChange, &[String]),
        at: SystemTime,
        release: Option<&str>,
        clock: &mut i64,
    ) -> Result<u64, StoreError> {
        let doing = || format!("appending to session '{key}'");
        let head = tables::head(&self.conn, key).map_err(|e| failed(&self.path, &doing(), e))?;
        let actual = head.as_ref().map_or(0, |(last, _)| *last);
        if let Expect::At(expected) = expect
            && expected != actual
        {
            return Err(StoreError::Conflict { key: key.to_owned(), expected, actual });
        }
        let mut summary = match &head {
            Some((_, json)) => tables::summary(&self.path, key, json)?,
            None => Summary::default(),
        };
        summary.apply_change(change);
        let summary = serde_json::to_string(&summary).map_err(|e| StoreError::unavailable(doing(), e))?;
        let last = actual + encoded.len() as u64;
        *clock += 1;
        let row = Row { key, last, summary: &summary, at, counter: *clock, writer: &self.id };
        self.savepoint(|conn| {
            tables::insert_entries(conn, key, actual + 1, encoded)?;
            tables::put_session(conn, &row)?;
            match release {
                Some(holder) => {
                    leases::apply(conn, key, &LeaseOp::Release { holder: holder.to_owned() }, &self.owner).map(drop)
                }
                None => Ok(()),
            }
        })
        .map_err(|e| failed(&self.path, &doing(), e))?;
        Ok(last)
    }

    fn save_snapshot(&self, key: &str, snapshot: &Snapshot) -> Result<(), StoreError> {
        let doing = || format!("saving the snapshot of session '{key}'");
        let head = tables::head(&self.conn, key).map_err(|e| failed(&self.path, &doing(), e))?;
        match head {
            None => Err(StoreError::Refused { message: format!("session '{key}': no log to snapshot") }),
            Some((last, _)) if snapshot.pos > last => Err(StoreError::Refused {
                message: format!("session '{key}': a snapshot at {} is past the log's end at {last}", snapshot.pos),
            }),
            Some(_) => self
                .savepoint(|conn| tables::put_snapshot(conn, key, snapshot))
                .map_err(|e| failed(&self.path, &doing(), e)),
        }
    }

    /// Runs `f` in a savepoint: a request that fails leaves nothing behind and the others of its group go on.
    fn savepoint<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> rusqlite::Result<T> {
        self.conn.prepare_cached("SAVEPOINT request")?.execute([])?;
        match f(&self.conn) {
            Ok(value) => {
                self.conn.prepare_cached("RELEASE request")?.execute([])?;
                Ok(value)
            }
            Err(e) => {
                if !self.conn.is_autocommit() {
                    let _ = self.conn.execute_batch("ROLLBACK TO request; RELEASE request");
                }
                Err(e)
            }
        }
    }

    /// Announces the sessions other connections appended to since the last look (nothing to read when the data
    /// version did not move: only another connection's commit moves it).
    fn poll(&mut self) {
        let version = match data_version(&self.conn) {
            Ok(version) => version,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "could not check the session log for other processes' appends");
                return;
            }
        };
        if version == self.data_version {
            return;
        }
        match tables::moved_since(&self.conn, self.seen) {
            Ok(moved) => {
                for (key, last, counter, writer) in moved {
                    self.seen = self.seen.max(counter);
                    if writer != self.id {
                        let _ = self.appended.send(Appended { key, last });
                    }
                }
                self.data_version = version;
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "could not read other processes' appends to the session log");
            }
        }
    }
}

/// Why a group's transaction failed, shared by every answer of the group.
type Cause = Arc<dyn std::error::Error + Send + Sync>;

fn cause(e: rusqlite::Error) -> Cause {
    Arc::new(e)
}

/// The error each request of a failed group is answered with.
fn failure(path: &Path, cause: Cause) -> impl Fn() -> StoreError {
    let doing = format!("committing to the session log ({}; nothing of this request was written)", path.display());
    move || StoreError::unavailable(doing.clone(), cause.clone())
}

fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("PRAGMA data_version")?.query_row([], |r| r.get(0))
}
