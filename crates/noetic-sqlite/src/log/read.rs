//! Read connections, kept between reads. Only blocking-pool threads and the writer thread touch them: a
//! connection is taken out under the lock and used after it is released, and closing one (dropping it) happens
//! on those threads too.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use noetic_runtime::agent::log::StoreError;
use rusqlite::{Connection, OpenFlags};

use super::failed;

/// How many idle read connections are kept; a read finding none opens one.
const IDLE: usize = 4;

/// The read connections of one store.
pub(crate) struct ReadPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl ReadPool {
    pub(crate) fn new(path: PathBuf) -> Self {
        ReadPool { path, idle: Mutex::new(Vec::new()) }
    }

    /// Runs `f` on a read connection (on the calling thread, which must be allowed to block).
    pub(crate) fn with<T>(&self, f: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let kept = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let conn = match kept {
            Some(conn) => conn,
            None => self.open()?,
        };
        let result = f(&conn);
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE {
            idle.push(conn);
        } else {
            drop(idle);
            drop(conn);
        }
        result
    }

    fn open(&self) -> Result<Connection, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&self.path, flags)
            .map_err(|e| failed(&self.path, "opening a read connection", e))?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(|e| failed(&self.path, "setting the busy timeout", e))?;
        Ok(conn)
    }
}
