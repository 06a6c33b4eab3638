//! Sessions kept in a session log ([`super::log`]): the writer that appends one session's entries in the order the
//! session decided them (its task is in `log_writer`), the projection it keeps as they land, and what a session
//! reads back when it is opened.
//!
//! A session decides what happens under its conversation lock (a message accepted, a turn started, a queue
//! cleared) and hands the entries to its writer there, synchronously: the order of the log is the order of the
//! decisions. The I/O happens on the writer's task, never under the lock; whoever needs the entries durable awaits
//! the [`Receipt`]. Appends that arrive together go in one call to the store (one transaction).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::{mpsc, oneshot};

use super::log::READ_PAGE;
use super::log::{Entry, LogStore, Projection, Record, StoreError};
use crate::context::lock;

use super::log_writer::Batch;
pub(crate) use super::log_writer::{Chain, Foreign};

/// The answer to an append: the position of its last entry, or why it failed.
pub(crate) type Receipt = oneshot::Receiver<Result<u64, String>>;

/// Waits for a receipt: the position of the append's last entry, or why nothing was written.
pub(crate) async fn settled(receipt: Receipt) -> Result<u64, String> {
    receipt.await.unwrap_or_else(|_| Err("the session's log writer stopped before the append".to_owned()))
}

/// What a session keeps of its log.
pub(crate) struct Logged {
    store: Arc<dyn LogStore>,
    /// The runtime's dispatcher of the store's appends.
    hub: Arc<super::log_hub::LogHub>,
    /// The writer's queue, once the session was opened.
    writer: OnceLock<mpsc::UnboundedSender<Batch>>,
    /// Whether opening worked (opened once; an error is kept: the session is unavailable).
    pub(crate) opened: tokio::sync::OnceCell<Result<(), String>>,
    /// The log as it is durable: the fold of every entry appended or read.
    pub(crate) projection: Arc<Mutex<Projection>>,
    /// How many conversation items the log holds.
    pub(crate) persisted: AtomicUsize,
    /// The entries of a turn a stopped process left (from its start), until it is resumed or discarded.
    pub(crate) unfinished: Mutex<Option<Vec<Record>>>,
    /// What the log holds of the layers' state for this session's thread.
    pub(crate) layers: super::persist::Kept,
    /// The position of the last entry handed to the writer (or read): what numbers the session's events.
    pub(crate) last: Arc<AtomicU64>,
    /// Where the log ended when this process opened it.
    pub(crate) opened_at: Arc<AtomicU64>,
    /// A turn of the session runs in this process (its writer then refuses another process's turn entries).
    pub(crate) running: Arc<std::sync::atomic::AtomicBool>,
    /// The session's lease, held for a turn about to start here (taken by the turn).
    pub(crate) held: Mutex<Option<Arc<super::log_lease::LeaseGuard>>>,
    /// What turns others' entries into the events a follower here sees.
    pub(crate) events: Mutex<super::log_events::Events>,
    /// Where this process left the session's ledger chain (see `log_chain`).
    pub(crate) chain: Head,
    /// Messages accepted here whose entries the writer has not written yet (the writer takes each out once it
    /// tried): the projection does not hold them, so whatever replaces the queue with the projection's keeps them.
    pub(crate) unwritten: Arc<Mutex<Vec<super::queue::MessageId>>>,
}

impl Logged {
    pub(crate) fn new(store: Arc<dyn LogStore>, hub: Arc<super::log_hub::LogHub>) -> Self {
        Logged {
            store,
            hub,
            writer: OnceLock::new(),
            opened: tokio::sync::OnceCell::new(),
            projection: Arc::default(),
            persisted: AtomicUsize::new(0),
            unfinished: Mutex::new(None),
            layers: super::persist::Kept::default(),
            last: Arc::default(),
            opened_at: Arc::default(),
            running: Arc::default(),
            held: Mutex::new(None),
            events: Mutex::new(super::log_events::Events::new(Arc::from(""))),
            chain: Head::default(),
            unwritten: Arc::default(),
        }
    }

    /// The messages accepted here not written yet, then the projection: in that order, so a message written in
    /// between is in the projection (it was read after) rather than in neither.
    pub(crate) fn projection_and_unwritten(&self) -> (Projection, Vec<super::queue::MessageId>) {
        let unwritten = lock(&self.unwritten).clone();
        (lock(&self.projection).clone(), unwritten)
    }

    /// Reads `key`'s log (its snapshot and what follows), starts its writer, and returns the projection (and the
    /// entries of an unfinished turn, when a stopped process left one).
    pub(crate) async fn open(&self, key: &Arc<str>, first: Entry, foreign: Foreign) -> Result<Projection, StoreError> {
        // Watching before reading: an append another process makes meanwhile is heard.
        let (watch, known) = self.hub.subscribe(key);
        let (projection, snapshot_at) = Projection::load_from_snapshot(self.store.as_ref(), key).await?;
        if let Some(open) = &projection.open_turn {
            *lock(&self.unfinished) = Some(self.turn_records(key, open.since).await?);
        }
        *lock(&self.events) = super::log_events::Events::new(key.clone());
        self.persisted.store(projection.conversation.len(), Ordering::SeqCst);
        // A new log starts with the settings entry the writer adds to its first append.
        self.last.store(projection.last.max(1), Ordering::SeqCst);
        self.opened_at.store(projection.last.max(1), Ordering::SeqCst);
        *lock(&self.projection) = projection.clone();
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = super::log_writer::Writer {
            store: self.store.clone(),
            key: key.clone(),
            projection: self.projection.clone(),
            last: projection.last,
            snapshot_at,
            first: (projection.last == 0).then_some(first),
            fenced: None,
            positions: self.last.clone(),
            foreign,
            running: self.running.clone(),
            unwritten: self.unwritten.clone(),
            known,
        };
        tokio::spawn(writer.run(rx, watch));
        let _ = self.writer.set(tx);
        Ok(projection)
    }

    /// The entries of the turn that started at `since`, from its start.
    pub(crate) async fn turn_records(&self, key: &str, since: u64) -> Result<Vec<Record>, StoreError> {
        let mut records = Vec::new();
        let mut after = since.saturating_sub(1);
        loop {
            let page = self.store.read(key, after, READ_PAGE).await?;
            let Some(last) = page.last() else { break };
            after = last.pos;
            records.extend(page.into_iter().filter(|r| r.pos >= since));
        }
        Ok(records)
    }

    /// Hands `entries` to the writer (in this order, after everything handed before); the receipt says when they
    /// are durable. Before the session was opened there is no writer: the receipt says so.
    pub(crate) fn submit(&self, entries: Vec<Entry>) -> Receipt {
        self.submit_in(entries, None)
    }

    /// [`Logged::submit`] as a write of `chain`: refused when an earlier write of the chain failed.
    pub(crate) fn submit_in(&self, entries: Vec<Entry>, chain: Option<Chain>) -> Receipt {
        self.submit_releasing(entries, chain, None)
    }

    /// [`Logged::submit_in`], giving `release`'s lease of the session up with the append (in one transaction where
    /// the store can): a turn's last write.
    pub(crate) fn submit_releasing(
        &self,
        entries: Vec<Entry>,
        chain: Option<Chain>,
        release: Option<Arc<str>>,
    ) -> Receipt {
        self.hand_over(entries, chain, release, false)
    }

    /// [`Logged::submit_in`] for a write nobody waits for now: the writer may hold it briefly to write it with the
    /// next one (see `log_writer`); [`Logged::flush`] before waiting for its receipt.
    pub(crate) fn submit_lazy(&self, entries: Vec<Entry>, chain: Option<Chain>) -> Receipt {
        self.hand_over(entries, chain, None, true)
    }

    /// Ends the writer's hold of lazy writes (their receipts are about to be waited for).
    pub(crate) fn flush(&self) {
        if let Some(writer) = self.writer.get() {
            let flush = Batch { sync: false, entries: Vec::new(), done: None, chain: None, release: None, lazy: false };
            let _ = writer.send(flush);
        }
    }

    fn hand_over(&self, entries: Vec<Entry>, chain: Option<Chain>, release: Option<Arc<str>>, lazy: bool) -> Receipt {
        self.last.fetch_add(entries.len() as u64, Ordering::SeqCst);
        let (done, receipt) = oneshot::channel();
        let batch = Batch { sync: false, entries, done: Some(done), chain, release, lazy };
        match self.writer.get() {
            Some(writer) => {
                if let Err(refused) = writer.send(batch)
                    && let Some(done) = refused.0.done
                {
                    let _ = done.send(Err("the session's log writer stopped".to_owned()));
                }
            }
            None => {
                if let Some(done) = batch.done {
                    let _ = done.send(Err("the session was not opened from its log".to_owned()));
                }
            }
        }
        receipt
    }

    /// Hands `entries` to the writer without waiting: a failure is logged by the writer.
    pub(crate) fn submit_detached(&self, entries: Vec<Entry>) {
        if let Some(writer) = self.writer.get() {
            self.last.fetch_add(entries.len() as u64, Ordering::SeqCst);
            let _ = writer.send(Batch { sync: false, entries, done: None, chain: None, release: None, lazy: false });
        }
    }

    /// How the session's events are numbered: by this log's positions, with the log as the source of what a
    /// follower missed.
    pub(crate) fn positions(&self, key: &Arc<str>) -> crate::context::Positions {
        let (store, key) = (self.store.clone(), key.clone());
        crate::context::Positions {
            last: self.last.clone(),
            opened_at: self.opened_at.clone(),
            backfill: Arc::new(move |after, before| {
                Box::pin(super::log_events::backfill(store.clone(), key.clone(), after, before))
            }),
        }
    }

    /// How many conversation items the log holds.
    pub(crate) fn persisted(&self) -> usize {
        self.persisted.load(Ordering::SeqCst)
    }

    pub(crate) fn set_persisted(&self, n: usize) {
        self.persisted.store(n, Ordering::SeqCst);
    }

    /// Reads what others appended to the log since this process's last entry (another worker's turns included:
    /// called once this process holds the session's lease) and writes again if it was fenced.
    pub(crate) async fn sync(&self) -> Result<u64, String> {
        let (done, receipt) = oneshot::channel();
        let batch =
            Batch { sync: true, entries: Vec::new(), done: Some(done), chain: None, release: None, lazy: false };
        match self.writer.get() {
            Some(writer) => {
                let _ = writer.send(batch);
                settled(receipt).await
            }
            None => Err("the session was not opened from its log".to_owned()),
        }
    }

    /// The position of the last entry this session has taken in (its own or others').
    pub(crate) fn known(&self) -> u64 {
        lock(&self.projection).last
    }

    /// The store the log is in.
    pub(crate) fn store(&self) -> &Arc<dyn LogStore> {
        &self.store
    }

    /// The session's ledger as its log holds it.
    pub(crate) fn ledger(&self) -> Vec<crate::steering::LedgerEntry> {
        lock(&self.projection).ledger.clone()
    }
}

/// Where this process left a session's ledger chain (`None` until its first entry here); `log_chain` extends it.
#[derive(Default)]
pub(crate) struct Head(pub(crate) Mutex<Option<crate::steering::chain::ChainHead>>);
