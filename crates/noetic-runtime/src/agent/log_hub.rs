//! One watch of a log store per runtime, dispatched by session: each open session's writer hears only of appends to
//! its own log, and an append wakes one writer instead of every open session's (a store's watch is one broadcast of
//! every session's appends).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio::sync::{broadcast, watch};

use super::log::LogStore;
use crate::context::lock;

type Subscribers = Mutex<HashMap<Arc<str>, watch::Sender<u64>>>;

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
    /// store's watch lagged and the log must be read to know).
    pub(crate) fn subscribe(&self, key: &Arc<str>) -> watch::Receiver<u64> {
        self.started.get_or_init(|| {
            let (rx, subscribers) = (self.store.watch(), Arc::downgrade(&self.subscribers));
            tokio::spawn(dispatch(rx, subscribers));
        });
        let mut subscribers = lock(&self.subscribers);
        match subscribers.get(key) {
            Some(tx) if !tx.is_closed() => tx.subscribe(),
            _ => {
                let (tx, rx) = watch::channel(0);
                subscribers.insert(key.clone(), tx);
                rx
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
                        tx.send_replace(appended.last);
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
