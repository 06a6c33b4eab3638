//! What the writer thread is asked to do, and the answers it owes until its transaction commits.

use std::time::SystemTime;

use noetic_runtime::agent::log::{Appended, Expect, Snapshot, StoreError, SummaryChange};
use tokio::sync::{broadcast, oneshot};

use super::leases::LeaseOp;

/// Where an answer goes.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// What the writer is asked to do.
pub(crate) enum Request {
    /// Append `row` (`count` entries stamped `at`, one per line, changing the summary by `change`), then give
    /// `release`'s lease up if it landed.
    Append {
        key: String,
        expect: Expect,
        change: SummaryChange,
        row: String,
        count: u64,
        at: SystemTime,
        release: Option<String>,
        reply: Reply<u64>,
    },
    /// Delete a log.
    Delete { key: String, reply: Reply<bool> },
    /// Save a snapshot.
    SaveSnapshot { key: String, snapshot: Snapshot, reply: Reply<()> },
    /// Take, renew or give up a lease; the answer also says where the log ends. `turn`: taken for a turn, whose
    /// start is the holder's next write (see [`Done::taken_for_turn`]).
    Lease { key: String, op: LeaseOp, turn: bool, reply: Reply<(Option<String>, u64)> },
}

/// A request done inside the open transaction, answered once it commits (or fails).
pub(crate) enum Done {
    Append { key: String, reply: Reply<u64>, result: Result<u64, StoreError> },
    Delete { reply: Reply<bool>, result: Result<bool, StoreError> },
    Snapshot { reply: Reply<()>, result: Result<(), StoreError> },
    Lease { turn: bool, reply: Reply<(Option<String>, u64)>, result: Result<(Option<String>, u64), StoreError> },
}

impl Request {
    /// The request, not done, with `error` as its answer.
    pub(crate) fn undone(self, error: impl Fn() -> StoreError) -> Done {
        match self {
            Request::Append { key, reply, .. } => Done::Append { key, reply, result: Err(error()) },
            Request::Delete { reply, .. } => Done::Delete { reply, result: Err(error()) },
            Request::SaveSnapshot { reply, .. } => Done::Snapshot { reply, result: Err(error()) },
            Request::Lease { turn, reply, .. } => Done::Lease { turn, reply, result: Err(error()) },
        }
    }
}

impl Done {
    /// A lease taken for a turn: the writer answers it at once and keeps its transaction open a moment for the
    /// turn's start, which then shares its commit. Answering before the commit is safe because the open
    /// transaction holds the file's write lock: no other process can take the lease meanwhile, and a crash rolls
    /// the lease back with the process that held it. (Should that commit fail, the turn's start fails with it.)
    pub(crate) fn taken_for_turn(&self) -> bool {
        matches!(self, Done::Lease { turn: true, result: Ok((None, _)), .. })
    }

    /// Whether it failed (its answer is an error).
    pub(crate) fn failed(&self) -> bool {
        match self {
            Done::Append { result, .. } => result.is_err(),
            Done::Delete { result, .. } => result.is_err(),
            Done::Snapshot { result, .. } => result.is_err(),
            Done::Lease { result, .. } => result.is_err(),
        }
    }

    /// Answers after the commit; a caller that went away is not an error. An append is answered before it is
    /// announced: announcing wakes the watchers' task (a system call, and on a virtual machine an idle core),
    /// which the caller need not wait for.
    pub(crate) fn answer(self, appended: &broadcast::Sender<Appended>) {
        match self {
            Done::Append { key, reply, result } => {
                let landed = result.as_ref().ok().copied();
                let _ = reply.send(result);
                if let Some(last) = landed {
                    let _ = appended.send(Appended { key, last });
                }
            }
            Done::Delete { reply, result } => drop(reply.send(result)),
            Done::Snapshot { reply, result } => drop(reply.send(result)),
            Done::Lease { reply, result, .. } => drop(reply.send(result)),
        }
    }

    /// What it did was rolled back: a success becomes `error`, a refusal stays what it was.
    pub(crate) fn rolled_back(self, error: impl Fn() -> StoreError) -> Done {
        match self {
            Done::Append { key, reply, result } => Done::Append { key, reply, result: result.and(Err(error())) },
            Done::Delete { reply, result } => Done::Delete { reply, result: result.and(Err(error())) },
            Done::Snapshot { reply, result } => Done::Snapshot { reply, result: result.and(Err(error())) },
            Done::Lease { turn, reply, result } => Done::Lease { turn, reply, result: result.and(Err(error())) },
        }
    }
}
