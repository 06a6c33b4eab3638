//! One watch of a log store per runtime, dispatched by session: each open session's writer hears only of appends to
//! its own log, and an append wakes one writer instead of every open session's (a store's watch is one broadcast of
//! every session's appends).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio::sync::{broadcast, watch};

use super::log::LogStore;
use crate::context::lock;

type Subscribers = Mutex<HashMap<Arc<str>, Arc<watch::Sender<u64>>>>;

/// How one session's writer says where its own appends ended, so that their announcements do not wake it (on
/// every store an announcement arrives after the append's answer: one spurious wake and poll of the writer per
/// append).
pub(crate) struct Known(Arc<watch::Sender<u64>>);

impl Known {
    /// The writer's own append ended at `last`: its announcement, when it comes, wakes no one. A change the writer
    /// has not read stays a change (a lag above all: `u64::MAX`).
    pub(crate) fn landed(&self, last: u64) {
        self.0.send_if_modified(|known| {
            if *known < last {
                *known = last;
            }
            false
        });
    }
}

/// The runtime's dispatcher of a log store's appends.
pub(crate) struct LogHub {
    store: Arc<dyn LogStore>,
    subscribers: Arc<Subscribers>,
    started: OnceLock<()>,
}

impl LogHub {
    pub(crate) fn new(store: Arc<dyn LogStore>) -> Self {
        LogHub { store, subscribers: Arc::default(), started: OnceLock::new() }
    }

    /// Where the appends to `key`'s log are told: the position its log is known to end at (`u64::MAX` when the
    /// store's watch lagged and the log must be read to know); and where its writer says its own appends ended.
    pub(crate) fn subscribe(&self, key: &Arc<str>) -> (watch::Receiver<u64>, Known) {
        self.started.get_or_init(|| {
            let (rx, subscribers) = (self.store.watch(), Arc::downgrade(&self.subscribers));
            tokio::spawn(dispatch(rx, subscribers));
        });
        let mut subscribers = lock(&self.subscribers);
        match subscribers.get(key) {
            Some(tx) if !tx.is_closed() => (tx.subscribe(), Known(tx.clone())),
            _ => {
                let (tx, rx) = watch::channel(0);
                let tx = Arc::new(tx);
                subscribers.insert(key.clone(), tx.clone());
                (rx, Known(tx))
            }
        }
    }
}

async fn dispatch(mut rx: broadcast::Receiver<super::log::Appended>, subscribers: Weak<Subscribers>) {
    loop {
        let heard = rx.recv().await;
        let Some(subscribers) = subscribers.upgrade() else { return };
        let mut subscribers = lock(&subscribers);
        match heard {
            Ok(appended) => {
                if let Some(tx) = subscribers.get(appended.key.as_str()) {
                    if tx.is_closed() {
                        subscribers.remove(appended.key.as_str());
                    } else {
                        // Unchanged when the session's writer already said its own append ended there.
                        tx.send_if_modified(|known| std::mem::replace(known, appended.last) != appended.last);
                    }
                }
            }
            Err(broadcast::error::RecvError::Lagged(_)) => {
                subscribers.retain(|_, tx| !tx.is_closed());
                subscribers.values().for_each(|tx| {
                    tx.send_replace(u64::MAX);
                });
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::agent::log::{Entry, Expect, MemoryLogStore};

    fn stop() -> Entry {
        Entry::StopRequested { reason: "test".into() }
    }

    #[tokio::test]
    async fn a_writers_own_append_wakes_no_one_and_an_append_by_another_does() {
        let store = Arc::new(MemoryLogStore::new());
        let hub = LogHub::new(store.clone());
        let (mut mine, known) = hub.subscribe(&Arc::from("mine"));
        let (mut other, _) = hub.subscribe(&Arc::from("other"));
        // The writer's own append, said before the dispatching task (on this one thread) hears of it.
        let last = store.append("mine", Expect::At(0), &[stop()]).await.unwrap();
        known.landed(last);
        // Appends are dispatched in order: once "other" is heard, "mine" was handled.
        store.append("other", Expect::At(0), &[stop()]).await.unwrap();
        other.changed().await.unwrap();
        assert!(!mine.has_changed().unwrap(), "the writer was woken by its own append");
        // Someone else's append to the same log.
        store.append("mine", Expect::At(last), &[stop()]).await.unwrap();
        mine.changed().await.unwrap();
        assert_eq!(*mine.borrow_and_update(), last + 1);
    }

    #[test]
    fn what_a_writer_says_of_its_own_append_never_hides_a_change_it_has_not_read() {
        let (tx, mut rx) = watch::channel(0);
        let known = Known(Arc::new(tx));
        // The store's watch lagged: the writer must read the log, whatever it appends meanwhile.
        known.0.send_replace(u64::MAX);
        known.landed(7);
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), u64::MAX);
        // Its own appends after it read: no change to read.
        known.landed(8);
        assert!(!rx.has_changed().unwrap());
        known.0.send_replace(8);
        rx.borrow_and_update();
        known.landed(9);
        assert!(!rx.has_changed().unwrap());
        assert_eq!(*rx.borrow(), 9);
    }
}
