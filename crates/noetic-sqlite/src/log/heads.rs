//! What the writer thread knows of the file between its transactions: where each session's log ends and its
//! summary, and the append counter. An append then reads neither back (nor parses the summary's JSON) before it
//! writes. It is only as good as the file it was read from: each transaction starts by checking
//! `PRAGMA data_version`, which moves only when *another* connection committed (another process, another store
//! on the same file), and everything is forgotten when it moved or when a transaction of the writer's failed.

use std::collections::HashMap;
use std::path::Path;

use noetic_runtime::agent::log::{StoreError, Summary};
use rusqlite::Connection;

use super::failed;
use super::tables;

/// How many sessions' heads are kept; past that the whole cache is dropped and filled again as sessions write.
const KEPT: usize = 4096;

/// A session's head: where its log ends and its summary (`None`: it has no log).
type Head = Option<(u64, Summary)>;

/// The writer's cache (see the [module docs](self)).
#[derive(Default)]
pub(crate) struct Heads {
    /// The data version it was read at.
    version: Option<i64>,
    clock: Option<i64>,
    sessions: HashMap<String, Head>,
}

impl Heads {
    /// Called at the start of each transaction with the file's data version: what another connection's commit
    /// may have changed is forgotten.
    pub(crate) fn check(&mut self, version: i64) {
        if self.version != Some(version) {
            self.forget();
            self.version = Some(version);
        }
    }

    /// Forgets everything (a transaction was rolled back: what it wrote here never happened).
    pub(crate) fn forget(&mut self) {
        self.version = None;
        self.clock = None;
        self.sessions.clear();
    }

    /// The append counter (read from the file the first time).
    pub(crate) fn clock(&mut self, conn: &Connection) -> rusqlite::Result<i64> {
        match self.clock {
            Some(clock) => Ok(clock),
            None => {
                let clock = tables::clock(conn)?;
                self.clock = Some(clock);
                Ok(clock)
            }
        }
    }

    /// The counter after this writer's transaction took values up to `clock` (kept once it committed).
    pub(crate) fn set_clock(&mut self, clock: i64) {
        self.clock = Some(clock);
    }

    /// `key`'s head (read from the file the first time).
    pub(crate) fn head(
        &mut self,
        conn: &Connection,
        path: &Path,
        key: &str,
    ) -> Result<Option<&(u64, Summary)>, StoreError> {
        if !self.sessions.contains_key(key) {
            let head = match tables::head(conn, key)
                .map_err(|e| failed(path, &format!("reading where session '{key}' ends"), e))?
            {
                Some((last, json)) => Some((last, tables::summary(path, key, &json)?)),
                None => None,
            };
            if self.sessions.len() >= KEPT {
                self.sessions.clear();
            }
            self.sessions.insert(key.to_owned(), head);
        }
        Ok(self.sessions.get(key).and_then(Option::as_ref))
    }

    /// Where `key`'s log ends (0: no log).
    pub(crate) fn last(&mut self, conn: &Connection, path: &Path, key: &str) -> Result<u64, StoreError> {
        Ok(self.head(conn, path, key)?.map_or(0, |(last, _)| *last))
    }

    /// `key`'s head after an append of the open transaction.
    pub(crate) fn set(&mut self, key: &str, last: u64, summary: Summary) {
        self.sessions.insert(key.to_owned(), Some((last, summary)));
    }

    /// `key`'s log was deleted.
    pub(crate) fn deleted(&mut self, key: &str) {
        self.sessions.insert(key.to_owned(), None);
    }
}
