//! Session logs in memory: the library's default store and the reference the database stores are tested against.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::future::BoxFuture;
use tokio::sync::broadcast;

use super::entry::Record;
use super::seam::{Append, Appended, Expect, Leases, LogStore, SessionLine, Snapshot, StoreError};
use super::summary::Summary;
use crate::context::lock;

/// How many appends a watcher may fall behind by before it is told it lagged.
const WATCH_CAPACITY: usize = 1024;

#[derive(Debug, Default, Clone)]
struct Log {
    records: Vec<Record>,
    summary: Summary,
    updated_at: Option<SystemTime>,
    snapshot: Option<Snapshot>,
}

#[derive(Debug, Clone)]
struct Lease {
    holder: String,
    until: Instant,
}

#[derive(Debug, Default, Clone)]
struct Held {
    logs: HashMap<String, Log>,
    leases: HashMap<String, Lease>,
}

/// A [`LogStore`] (with [`Leases`]) in memory. Cloning it gives another handle on the same logs, as another process
/// sharing a database would have; [`MemoryLogStore::copy`] gives what a killed process would leave behind.
#[derive(Debug, Clone)]
pub struct MemoryLogStore {
    held: Arc<Mutex<Held>>,
    appended: broadcast::Sender<Appended>,
}

impl Default for MemoryLogStore {
    fn default() -> Self {
        MemoryLogStore { held: Arc::default(), appended: broadcast::channel(WATCH_CAPACITY).0 }
    }
}

impl MemoryLogStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryLogStore::default()
    }

    /// An independent copy of everything it holds now (tests "crash" a process by going on with the copy).
    pub fn copy(&self) -> MemoryLogStore {
        MemoryLogStore { held: Arc::new(Mutex::new(lock(&self.held).clone())), ..MemoryLogStore::default() }
    }

    /// Ends every lease's term now, as if their holders had died long enough ago (tests take a dead worker's
    /// session over without waiting for its lease to run out).
    pub fn expire_leases(&self) {
        let now = Instant::now();
        for lease in lock(&self.held).leases.values_mut() {
            lease.until = now;
        }
    }

    /// Makes `append` under the store's lock, its release included: one step, as a database's transaction.
    fn commit_now(&self, append: Append<'_>) -> Result<u64, StoreError> {
        let Append { key, expect, entries, release } = append;
        if entries.is_empty() {
            return Err(StoreError::Refused { message: format!("session '{key}': nothing to append") });
        }
        let last = {
            let mut held = lock(&self.held);
            let log = held.logs.entry(key.to_owned()).or_default();
            let actual = log.records.len() as u64;
            if let Expect::At(expected) = expect
                && expected != actual
            {
                return Err(StoreError::Conflict { key: key.to_owned(), expected, actual });
            }
            let at = SystemTime::now();
            for (i, entry) in entries.iter().enumerate() {
                log.summary.apply(entry);
                log.records.push(Record { pos: actual + 1 + i as u64, at, entry: entry.clone() });
            }
            log.updated_at = Some(at);
            let last = log.records.len() as u64;
            if let Some(holder) = release {
                release_lease(&mut held, key, holder);
            }
            last
        };
        // Nobody watching is not an error.
        let _ = self.appended.send(Appended { key: key.to_owned(), last });
        Ok(last)
    }
}

/// Gives up `key`'s lease if `holder` holds it.
fn release_lease(held: &mut Held, key: &str, holder: &str) {
    if held.leases.get(key).is_some_and(|l| l.holder == holder) {
        held.leases.remove(key);
    }
}

impl LogStore for MemoryLogStore {
    /// The append and its release under one lock.
    fn commit<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(std::future::ready(self.commit_now(append)))
    }

    fn read<'a>(&'a self, key: &'a str, after: u64, limit: usize) -> BoxFuture<'a, Result<Vec<Record>, StoreError>> {
        let held = lock(&self.held);
        let records = held.logs.get(key).map_or_else(Vec::new, |log| {
            let from = usize::try_from(after).unwrap_or(usize::MAX).min(log.records.len());
            log.records[from..].iter().take(limit).cloned().collect()
        });
        Box::pin(std::future::ready(Ok(records)))
    }

    fn last<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<u64, StoreError>> {
        let last = lock(&self.held).logs.get(key).map_or(0, |log| log.records.len() as u64);
        Box::pin(std::future::ready(Ok(last)))
    }

    fn watch(&self) -> broadcast::Receiver<Appended> {
        self.appended.subscribe()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<SessionLine>, StoreError>> {
        let mut lines: Vec<SessionLine> = lock(&self.held)
            .logs
            .iter()
            .map(|(key, log)| SessionLine {
                key: key.clone(),
                last: log.records.len() as u64,
                summary: log.summary.clone(),
                updated_at: log.updated_at.unwrap_or(SystemTime::UNIX_EPOCH),
            })
            .collect();
        lines.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.key.cmp(&b.key)));
        Box::pin(std::future::ready(Ok(lines)))
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        let mut held = lock(&self.held);
        held.leases.remove(key);
        let existed = held.logs.remove(key).is_some();
        Box::pin(std::future::ready(Ok(existed)))
    }

    fn save_snapshot<'a>(&'a self, key: &'a str, snapshot: Snapshot) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut held = lock(&self.held);
        let result = match held.logs.get_mut(key) {
            Some(log) if snapshot.pos <= log.records.len() as u64 => {
                log.snapshot = Some(snapshot);
                Ok(())
            }
            Some(log) => Err(StoreError::Refused {
                message: format!(
                    "session '{key}': a snapshot at {} is past the log's end at {}",
                    snapshot.pos,
                    log.records.len()
                ),
            }),
            None => Err(StoreError::Refused { message: format!("session '{key}': no log to snapshot") }),
        };
        Box::pin(std::future::ready(result))
    }

    fn snapshot<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Snapshot>, StoreError>> {
        let snapshot = lock(&self.held).logs.get(key).and_then(|log| log.snapshot.clone());
        Box::pin(std::future::ready(Ok(snapshot)))
    }

    fn leases(&self) -> Option<&dyn Leases> {
        Some(self)
    }
}

impl Leases for MemoryLogStore {
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        holder: &'a str,
        term: Duration,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        let now = Instant::now();
        let mut held = lock(&self.held);
        let taken = match held.leases.get(key) {
            Some(lease) if lease.holder != holder && lease.until > now => Some(lease.holder.clone()),
            _ => {
                held.leases.insert(key.to_owned(), Lease { holder: holder.to_owned(), until: now + term });
                None
            }
        };
        Box::pin(std::future::ready(Ok(taken)))
    }

    fn release<'a>(&'a self, key: &'a str, holder: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        release_lease(&mut lock(&self.held), key, holder);
        Box::pin(std::future::ready(Ok(())))
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        let now = Instant::now();
        let holder = lock(&self.held).leases.get(key).filter(|l| l.until > now).map(|l| l.holder.clone());
        Box::pin(std::future::ready(Ok(holder)))
    }
}
