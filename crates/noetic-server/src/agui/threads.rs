//! What the server remembers of each AG-UI thread between runs: the user messages it accepted (so a client that
//! sends a run again does not say the same thing twice), the interrupts it issued (so answering one again is a
//! no-op, not an error) and how far the thread's runs streamed the session's events (so a resumed run goes on
//! where the interrupted one stopped). Bounded: the least recently used threads are forgotten first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

/// Threads remembered at most.
const MAX_THREADS: usize = 10_000;
/// Message ids and interrupt ids remembered per thread.
const MAX_IDS: usize = 256;

#[derive(Default)]
struct Thread {
    accepted: VecDeque<String>,
    issued: VecDeque<String>,
    cursor: u64,
    used: u64,
}

/// The threads, by id.
#[derive(Default)]
pub(crate) struct Threads {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    threads: HashMap<String, Thread>,
    clock: u64,
}

fn remember(ids: &mut VecDeque<String>, id: &str) {
    if !ids.iter().any(|known| known == id) {
        if ids.len() == MAX_IDS {
            ids.pop_front();
        }
        ids.push_back(id.to_owned());
    }
}

impl Threads {
    fn with<R>(&self, thread: &str, f: impl FnOnce(&mut Thread) -> R) -> R {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.clock += 1;
        let now = inner.clock;
        if !inner.threads.contains_key(thread) && inner.threads.len() >= MAX_THREADS {
            let oldest = inner.threads.iter().min_by_key(|(_, t)| t.used).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                inner.threads.remove(&oldest);
            }
        }
        let entry = inner.threads.entry(thread.to_owned()).or_default();
        entry.used = now;
        f(entry)
    }

    /// True when the thread accepted the user message `id` before.
    pub(crate) fn accepted(&self, thread: &str, id: &str) -> bool {
        self.with(thread, |t| t.accepted.iter().any(|known| known == id))
    }

    /// Notes that the thread accepted the user message `id`.
    pub(crate) fn accept(&self, thread: &str, id: &str) {
        self.with(thread, |t| remember(&mut t.accepted, id));
    }

    /// True when the thread was given the interrupt `id`.
    pub(crate) fn issued(&self, thread: &str, id: &str) -> bool {
        self.with(thread, |t| t.issued.iter().any(|known| known == id))
    }

    /// Notes that the thread was given the interrupt `id`.
    pub(crate) fn issue(&self, thread: &str, id: &str) {
        self.with(thread, |t| remember(&mut t.issued, id));
    }

    /// The last session event the thread's runs streamed (0: none).
    pub(crate) fn cursor(&self, thread: &str) -> u64 {
        self.with(thread, |t| t.cursor)
    }

    /// Moves the thread's cursor forward to `seq`.
    pub(crate) fn advance(&self, thread: &str, seq: u64) {
        self.with(thread, |t| t.cursor = t.cursor.max(seq));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_remembers_what_it_accepted_and_issued_and_its_cursor_only_moves_forward() {
        let threads = Threads::default();
        threads.accept("t", "m1");
        threads.issue("t", "c1@5");
        threads.advance("t", 9);
        threads.advance("t", 4);
        assert!(threads.accepted("t", "m1") && !threads.accepted("other", "m1"));
        assert!(threads.issued("t", "c1@5") && !threads.issued("t", "c2@5"));
        assert_eq!(threads.cursor("t"), 9);
    }
}
