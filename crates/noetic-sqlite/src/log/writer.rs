//! The writer thread: owns the write connection, commits queued requests in groups, and looks for other
//! processes' appends (see the [module docs](super)).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime};

use noetic_runtime::agent::log::{Appended, Expect, Snapshot, StoreError, SummaryChange};
use noetic_steps::ExecutionId;
use rusqlite::Connection;
use tokio::sync::{broadcast, oneshot};

use super::checkpoint::Checkpointer;
use super::failed;
use super::heads::Heads;
use super::leases::{self, LeaseOp};
use super::read::ReadPool;
use super::request::{Done, Request};
use super::tables::{self, Row};
use crate::Durability;
use crate::process::Owner;

/// How often the file is checked for other processes' appends.
const POLL: Duration = Duration::from_millis(100);

/// The most requests one transaction takes (the rest wait for the next one).
const MAX_BATCH: usize = 4096;

/// How long a transaction that took a lease for a turn waits for the turn's start before it commits without it
/// (the start follows at once unless the session first reads what others wrote; see `Done::taken_for_turn`).
pub(crate) const LINGER: Duration = Duration::from_millis(5);

/// How long the thread looks for the next request before it sleeps: a turn's next write usually follows the answer
/// to its last within this, and waking a sleeping thread (and the wait for a core to run it on) costs more than
/// looking. It gives its core up between looks, so a busy machine loses nothing to it.
const LOOK: Duration = Duration::from_micros(200);

/// What the thread needs to start.
pub(crate) struct Setup {
    pub path: PathBuf,
    pub durability: Durability,
    pub appended: broadcast::Sender<Appended>,
    pub readers: Arc<ReadPool>,
    pub commits: Arc<AtomicU64>,
    pub linger: Duration,
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
        let wait = match writer.open {
            Some(_) => writer.linger,
            None => next_poll.saturating_duration_since(Instant::now()),
        };
        match next(&queue, wait) {
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
            Err(mpsc::RecvTimeoutError::Timeout) => writer.close(),
            Err(mpsc::RecvTimeoutError::Disconnected) => return writer.close(),
        }
        if writer.open.is_none() && Instant::now() >= next_poll {
            writer.poll();
            next_poll = Instant::now() + POLL;
        }
    }
}

/// The next request, waiting at most `wait`: looked for (giving the core up between looks) for up to [`LOOK`], then
/// slept for.
fn next(queue: &mpsc::Receiver<Request>, wait: Duration) -> Result<Request, mpsc::RecvTimeoutError> {
    let start = Instant::now();
    loop {
        match queue.try_recv() {
            Ok(request) => return Ok(request),
            Err(mpsc::TryRecvError::Disconnected) => return Err(mpsc::RecvTimeoutError::Disconnected),
            Err(mpsc::TryRecvError::Empty) => {}
        }
        let looked = start.elapsed();
        if looked >= LOOK.min(wait) {
            return queue.recv_timeout(wait.saturating_sub(looked));
        }
        std::thread::yield_now();
    }
}

struct Writer {
    /// Closed first when the thread ends, so the write connection is the file's last and folds the WAL back in.
    _readers: Arc<ReadPool>,
    /// The thread the WAL's checkpoints run on (ended, and its connection closed, before `conn` closes).
    checkpointer: Option<Checkpointer>,
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
    /// Each session's head and the append counter, between transactions.
    heads: Heads,
    /// The transaction kept open after a lease was taken for a turn.
    open: Option<Open>,
    linger: Duration,
    /// The transaction holds one request only: it runs without a savepoint of its own, and the whole transaction
    /// is rolled back when it fails (two statements fewer per commit: ~5 µs of ~45).
    alone: bool,
}

/// A transaction kept open for a turn's start: what it did (answered when it commits) and the append counter.
struct Open {
    done: Vec<Done>,
    clock: i64,
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(checkpointer) = &mut self.checkpointer {
            checkpointer.stop(&mut self.conn);
        }
    }
}

impl Writer {
    fn open(setup: Setup) -> Result<Writer, StoreError> {
        let mut conn = super::open::open_connection(&setup.path, setup.durability)?;
        let checkpointer = Checkpointer::start(&mut conn, &setup.path);
        let path = setup.path;
        let data_version = data_version(&conn).map_err(|e| failed(&path, "reading the data version", e))?;
        let seen = tables::clock(&conn).map_err(|e| failed(&path, "reading the append counter", e))?;
        Ok(Writer {
            _readers: setup.readers,
            checkpointer,
            conn,
            path,
            id: ExecutionId::new().to_string(),
            owner: Owner::this_process(),
            appended: setup.appended,
            commits: setup.commits,
            data_version,
            seen,
            heads: Heads::default(),
            open: None,
            linger: setup.linger,
            alone: false,
        })
    }

    /// Does `batch` in one transaction (the one kept open, if any) and answers every request once it commits.
    /// A batch that ends with a lease taken for a turn leaves its transaction open for the turn's start (once).
    fn commit(&mut self, batch: Vec<Request>) {
        let (mut done, mut clock, lingered) = match self.open.take() {
            Some(open) => (open.done, open.clock, true),
            None => match self.begin() {
                Ok(clock) => (Vec::with_capacity(batch.len()), clock, false),
                Err(cause) => return self.roll_back(Vec::new(), batch.into_iter(), cause),
            },
        };
        self.alone = !lingered && batch.len() == 1;
        let mut rest = batch.into_iter();
        let written = self.write_all(&mut rest, &mut done, &mut clock);
        let alone = std::mem::take(&mut self.alone);
        match written {
            // What the lone request wrote before it failed goes with the transaction; its answer is its own error.
            Ok(()) if alone && done.iter().any(Done::failed) => self.abandon(done),
            Ok(()) if !lingered && done.last().is_some_and(Done::taken_for_turn) => {
                if let Some(lease) = done.pop() {
                    lease.answer(&self.appended);
                }
                self.open = Some(Open { done, clock });
            }
            Ok(()) => self.finish(done, clock),
            Err(cause) => self.roll_back(done, rest, cause),
        }
    }

    /// Commits the transaction kept open, if any.
    fn close(&mut self) {
        if let Some(Open { done, clock }) = self.open.take() {
            self.finish(done, clock);
        }
    }

    /// Starts a transaction; the append counter it starts from.
    fn begin(&mut self) -> Result<i64, Cause> {
        // Prepared once (as every statement of an append): parsing them again cost more than running them.
        self.conn.prepare_cached("BEGIN IMMEDIATE").and_then(|mut begin| begin.execute([])).map_err(cause)?;
        // Another connection's commit since the last transaction makes what the writer knew of the file stale.
        data_version(&self.conn).map(|version| self.heads.check(version)).map_err(cause)?;
        self.heads.clock(&self.conn).map_err(cause)
    }

    /// Commits the open transaction and answers what it did.
    fn finish(&mut self, done: Vec<Done>, clock: i64) {
        match self.conn.prepare_cached("COMMIT").and_then(|mut commit| commit.execute([])) {
            Ok(_) => {
                self.heads.set_clock(clock);
                self.commits.fetch_add(1, Ordering::Relaxed);
                done.into_iter().for_each(|d| d.answer(&self.appended));
            }
            Err(e) => self.roll_back(done, Vec::new().into_iter(), cause(e)),
        }
    }

    /// Rolls back the transaction of a lone request that failed, and answers it with its own error.
    fn abandon(&mut self, done: Vec<Done>) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        self.heads.forget();
        done.into_iter().for_each(|d| d.answer(&self.appended));
    }

    /// Rolls the open transaction back: what it did and what it did not get to fail with `cause`.
    fn roll_back(&mut self, done: Vec<Done>, rest: impl Iterator<Item = Request>, cause: Cause) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        self.heads.forget();
        let error = failure(&self.path, cause);
        done.into_iter().for_each(|d| d.rolled_back(&error).answer(&self.appended));
        rest.for_each(|request| request.undone(&error).answer(&self.appended));
    }

    /// Does the requests inside the open transaction.
    fn write_all(
        &mut self,
        batch: &mut impl Iterator<Item = Request>,
        done: &mut Vec<Done>,
        clock: &mut i64,
    ) -> Result<(), Cause> {
        for request in batch {
            done.push(self.apply(request, clock));
            if self.conn.is_autocommit() {
                let lost: Box<dyn std::error::Error + Send + Sync> =
                    "an error made SQLite roll the whole transaction back".into();
                return Err(Arc::from(lost));
            }
        }
        Ok(())
    }

    /// Does one request inside the open transaction.
    fn apply(&mut self, request: Request, clock: &mut i64) -> Done {
        match request {
            Request::Append { key, expect, change, row, count, at, release, reply } => {
                let result = self.append(&key, expect, (&change, &row, count), at, release.as_deref(), clock);
                Done::Append { key, reply, result }
            }
            Request::Delete { key, reply } => {
                let result = self
                    .savepoint(|conn| tables::delete(conn, &key))
                    .map_err(|e| failed(&self.path, &format!("deleting session '{key}'"), e));
                if result.is_ok() {
                    self.heads.deleted(&key);
                }
                Done::Delete { reply, result }
            }
            Request::SaveSnapshot { key, snapshot, reply } => {
                Done::Snapshot { reply, result: self.save_snapshot(&key, &snapshot) }
            }
            Request::Lease { key, op, turn, reply } => {
                let result = self
                    .savepoint(|conn| leases::apply(conn, &key, &op, &self.owner))
                    .map_err(|e| failed(&self.path, &format!("taking or giving up the lease of session '{key}'"), e))
                    .and_then(|other| Ok((other, self.heads.last(&self.conn, &self.path, &key)?)));
                Done::Lease { turn, reply, result }
            }
        }
    }

    /// Appends the row of `count` entries (changing the summary by `change`) to `key`'s log, and gives `release`'s
    /// lease up with them.
    fn append(
        &mut self,
        key: &str,
        expect: Expect,
        (change, text, count): (&SummaryChange, &str, u64),
        at: SystemTime,
        release: Option<&str>,
        clock: &mut i64,
    ) -> Result<u64, StoreError> {
        let doing = || format!("appending to session '{key}'");
        let head = self.heads.head(&self.conn, &self.path, key)?;
        let actual = head.map_or(0, |(last, _)| *last);
        if let Expect::At(expected) = expect
            && expected != actual
        {
            return Err(StoreError::Conflict { key: key.to_owned(), expected, actual });
        }
        let mut summary = head.map(|(_, summary)| summary.clone()).unwrap_or_default();
        summary.apply_change(change);
        let json = serde_json::to_string(&summary).map_err(|e| StoreError::unavailable(doing(), e))?;
        let last = actual + count;
        let row = Row { key, last, summary: &json, at, counter: *clock + 1, writer: &self.id };
        self.savepoint(|conn| {
            tables::insert_row(conn, key, actual + 1, text)?;
            tables::put_session(conn, &row)?;
            match release {
                Some(holder) => {
                    leases::apply(conn, key, &LeaseOp::Release { holder: holder.to_owned() }, &self.owner).map(drop)
                }
                None => Ok(()),
            }
        })
        .map_err(|e| failed(&self.path, &doing(), e))?;
        *clock += 1;
        self.heads.set(key, last, summary);
        Ok(last)
    }

    fn save_snapshot(&mut self, key: &str, snapshot: &Snapshot) -> Result<(), StoreError> {
        let doing = || format!("saving the snapshot of session '{key}'");
        let head = self.heads.head(&self.conn, &self.path, key)?.map(|(last, _)| *last);
        match head {
            None => Err(StoreError::Refused { message: format!("session '{key}': no log to snapshot") }),
            Some(last) if snapshot.pos > last => Err(StoreError::Refused {
                message: format!("session '{key}': a snapshot at {} is past the log's end at {last}", snapshot.pos),
            }),
            Some(_) => self
                .savepoint(|conn| tables::put_snapshot(conn, key, snapshot))
                .map_err(|e| failed(&self.path, &doing(), e)),
        }
    }

    /// Runs `f` in a savepoint: a request that fails leaves nothing behind and the others of its group go on. A
    /// request alone in its transaction needs none: its transaction is rolled back if it fails (`abandon`).
    fn savepoint<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> rusqlite::Result<T> {
        if self.alone {
            return f(&self.conn);
        }
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
