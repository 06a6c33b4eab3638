//! Sessions kept in a session log ([`super::log`]): the writer that appends one session's entries in the order the
//! session decided them, the projection it keeps as they land, and what a session reads back when it is opened.
//!
//! A session decides what happens under its conversation lock (a message accepted, a turn started, a queue
//! cleared) and hands the entries to its writer there, synchronously: the order of the log is the order of the
//! decisions. The I/O happens on the writer's task, never under the lock; whoever needs the entries durable awaits
//! the [`Receipt`]. Appends that arrive together go in one call to the store (one transaction).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use tokio::sync::{mpsc, oneshot, watch};

use super::log::READ_PAGE;
use super::log::{Entry, Expect, LogStore, Projection, Record, Snapshot, StoreError};
use crate::context::lock;

/// How many entries a session's log may grow by before its projection is saved as a snapshot again (opening the
/// session then reads the snapshot and at most this many entries).
pub(crate) const SNAPSHOT_EVERY: u64 = 1000;

/// How many waiting batches one append may take together.
const GROUP: usize = 64;

/// What the session does with entries other processes appended (a message accepted, a stop asked for; while no turn
/// runs here, also another worker's turns).
pub(crate) type Foreign = Arc<dyn Fn(&[Record]) + Send + Sync>;

/// How often a conflicting append reads what others wrote and tries again before it gives up.
const RETRIES: usize = 8;

/// Facts any process may add to a session it does not run (SPEC 6.4): another process's entries of these kinds are
/// taken in; any other kind means another process runs the session now, and this one stops writing to it.
fn anyone_may_add(entry: &Entry) -> bool {
    matches!(
        entry,
        Entry::MessageAccepted { .. }
            | Entry::StopRequested { .. }
            | Entry::MessagesDropped { .. }
            | Entry::BudgetSet { .. }
            | Entry::Settings { .. }
            | Entry::Titled { .. }
    )
}

/// The answer to an append: the position of its last entry, or why it failed.
pub(crate) type Receipt = oneshot::Receiver<Result<u64, String>>;

/// Waits for a receipt: the position of the append's last entry, or why nothing was written.
pub(crate) async fn settled(receipt: Receipt) -> Result<u64, String> {
    receipt.await.unwrap_or_else(|_| Err("the session's log writer stopped before the append".to_owned()))
}

struct Batch {
    /// A request to read what others appended (and to write again after being fenced, when no turn runs here).
    sync: bool,
    entries: Vec<Entry>,
    done: Option<oneshot::Sender<Result<u64, String>>>,
    /// The chain of writes it belongs to (a turn's): set when one of them failed, so none after it is written.
    chain: Option<Chain>,
    /// The lease holder that gives the session up once this lands (a turn's last write).
    release: Option<Arc<str>>,
}

/// A turn's writes: once one fails, the writer refuses the rest (the log never holds a turn with a hole in it),
/// so the turn may hand over a write without waiting and the next one right after it.
pub(crate) type Chain = Arc<std::sync::atomic::AtomicBool>;

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
        }
    }

    /// Reads `key`'s log (its snapshot and what follows), starts its writer, and returns the projection (and the
    /// entries of an unfinished turn, when a stopped process left one).
    pub(crate) async fn open(&self, key: &Arc<str>, first: Entry, foreign: Foreign) -> Result<Projection, StoreError> {
        // Watching before reading: an append another process makes meanwhile is heard.
        let watch = self.hub.subscribe(key);
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
        let writer = Writer {
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
        self.last.fetch_add(entries.len() as u64, Ordering::SeqCst);
        let (done, receipt) = oneshot::channel();
        let batch = Batch { sync: false, entries, done: Some(done), chain, release };
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
            let _ = writer.send(Batch { sync: false, entries, done: None, chain: None, release: None });
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
        let batch = Batch { sync: true, entries: Vec::new(), done: Some(done), chain: None, release: None };
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

/// What woke the writer.
enum Next {
    Batch(Option<Batch>),
    /// The log is known to end here (`u64::MAX`: read it to know); `None` when nothing will be heard any more.
    Heard(Option<u64>),
}

/// Why one append did not land.
enum AppendError {
    /// Someone else appended first.
    Conflict,
    /// The store failed, or this writer is fenced.
    Failed(String),
}

/// The name of an entry's kind, for messages.
fn entry_name(entry: &Entry) -> String {
    serde_json::to_value(entry).ok().and_then(|v| v["type"].as_str().map(str::to_owned)).unwrap_or_default()
}

/// Appends one session's batches in order, grouping those that wait together.
struct Writer {
    store: Arc<dyn LogStore>,
    key: Arc<str>,
    projection: Arc<Mutex<Projection>>,
    /// Where the log ends, as far as this writer knows.
    last: u64,
    /// Where the last snapshot was taken.
    snapshot_at: u64,
    /// The entry a new session's log starts with (its settings).
    first: Option<Entry>,
    /// Another process wrote a turn to the log: this one writes nothing more (it would write over a turn it no
    /// longer owns).
    fenced: Option<String>,
    /// The session's count of positions (the numbers of its events), moved on by entries others append.
    positions: Arc<AtomicU64>,
    /// Where other processes' messages and stops go.
    foreign: Foreign,
    /// A turn of the session runs in this process.
    running: Arc<std::sync::atomic::AtomicBool>,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Batch>, watch: watch::Receiver<u64>) {
        let mut watch = Some(watch);
        loop {
            let heard = async {
                match watch.as_mut() {
                    Some(watch) => match watch.changed().await {
                        Ok(()) => Some(*watch.borrow_and_update()),
                        Err(_) => None,
                    },
                    None => std::future::pending().await,
                }
            };
            let next = tokio::select! {
                batch = rx.recv() => Next::Batch(batch),
                heard = heard => Next::Heard(heard),
            };
            match next {
                Next::Batch(None) => return,
                Next::Batch(Some(batch)) => {
                    let mut batches = vec![batch];
                    while batches.len() < GROUP && !batches.iter().any(|b| b.sync) {
                        match rx.try_recv() {
                            Ok(batch) => batches.push(batch),
                            Err(_) => break,
                        }
                    }
                    let sync = batches.iter().position(|b| b.sync).map(|at| batches.remove(at));
                    self.write(batches).await;
                    if let Some(sync) = sync {
                        self.resync().await;
                        if let Some(done) = sync.done {
                            let _ = done.send(self.fenced.clone().map_or(Ok(self.last), Err));
                        }
                    }
                }
                Next::Heard(Some(last)) if last <= self.last => {}
                // Another process appended (or the store's watch lagged: read to be sure).
                Next::Heard(Some(_)) => self.absorb().await,
                Next::Heard(None) => watch = None,
            }
        }
    }

    /// [`Logged::sync`]: written again unless a turn runs here, then what others appended taken in.
    async fn resync(&mut self) {
        if !self.running.load(Ordering::SeqCst) {
            self.fenced = None;
        }
        self.absorb().await;
    }

    /// Takes in what other processes appended since this writer's last position: messages, stops and cleared
    /// queues go to the session; while a turn runs here, anything else fences this writer (another process took the
    /// session over); while none does, another worker's turns are the session's history and are taken in too.
    async fn absorb(&mut self) {
        if self.fenced.is_some() {
            return;
        }
        let records = match self.store.read(&self.key, self.last, usize::MAX).await {
            Ok(records) => records,
            Err(e) => {
                tracing::warn!(session = %self.key, error = %e, "could not read what another process appended");
                return;
            }
        };
        let running = self.running.load(Ordering::SeqCst);
        let mut taken = Vec::with_capacity(records.len());
        for record in records {
            if running && !anyone_may_add(&record.entry) {
                self.fenced = Some(format!(
                    "session '{}': another process runs it now (its log has {:?} at {}); this process no longer \
                     writes to it — open it again",
                    self.key,
                    entry_name(&record.entry),
                    record.pos
                ));
                break;
            }
            lock(&self.projection).apply(&record);
            self.last = record.pos;
            self.positions.fetch_max(record.pos, Ordering::SeqCst);
            taken.push(record);
        }
        if !taken.is_empty() {
            (self.foreign)(&taken);
        }
    }

    async fn write(&mut self, batches: Vec<Batch>) {
        let mut entries: Vec<Entry> = self.first.iter().cloned().collect();
        let mut ends = Vec::with_capacity(batches.len());
        let mut replies = Vec::with_capacity(batches.len());
        let mut chains = Vec::new();
        let mut release = None;
        for batch in batches {
            if batch.chain.as_ref().is_some_and(|c| c.load(Ordering::SeqCst)) {
                if let Some(done) = batch.done {
                    let _ = done.send(Err("an earlier write of this turn failed; it was not written".to_owned()));
                }
                continue;
            }
            chains.extend(batch.chain);
            release = release.or(batch.release);
            entries.extend(batch.entries);
            ends.push(entries.len() as u64);
            replies.push(batch.done);
        }
        if ends.is_empty() {
            return;
        }
        let answer = self.append(&entries, release.as_deref()).await;
        match &answer {
            Ok(_) => self.first = None,
            Err(_) => chains.iter().for_each(|c| c.store(true, Ordering::SeqCst)),
        }
        let start = self.last_before(&answer, entries.len());
        for (end, done) in ends.into_iter().zip(replies) {
            let reply = answer.as_ref().map(|_| start + end).map_err(Clone::clone);
            match done {
                Some(done) => {
                    let _ = done.send(reply);
                }
                None => {
                    if let Err(e) = reply {
                        tracing::error!(session = %self.key, error = %e, "an entry could not be appended to the session log");
                    }
                }
            }
        }
    }

    /// The position before the appended entries (the answer is the last one's).
    fn last_before(&self, answer: &Result<u64, String>, count: usize) -> u64 {
        answer.as_ref().map_or(0, |last| last.saturating_sub(count as u64))
    }

    async fn append(&mut self, entries: &[Entry], release: Option<&str>) -> Result<u64, String> {
        if entries.is_empty() {
            return Ok(self.last);
        }
        for _ in 0..RETRIES {
            match self.append_once(entries, release).await {
                // Another process added a message or a stop: taken in, and the append goes after it.
                Err(AppendError::Conflict) => self.absorb().await,
                Err(AppendError::Failed(why)) => return Err(why),
                Ok(last) => return Ok(last),
            }
        }
        Err(format!("session '{}': other processes kept appending; try again", self.key))
    }

    async fn append_once(&mut self, entries: &[Entry], release: Option<&str>) -> Result<u64, AppendError> {
        if let Some(why) = &self.fenced {
            return Err(AppendError::Failed(why.clone()));
        }
        let expect = Expect::At(self.last);
        let appended = match release {
            Some(holder) => self.store.append_and_release(&self.key, expect, entries, holder).await,
            None => self.store.append(&self.key, expect, entries).await,
        };
        match appended {
            Ok(last) => {
                let at = SystemTime::now();
                let first = last + 1 - entries.len() as u64;
                {
                    let mut projection = lock(&self.projection);
                    for (i, entry) in entries.iter().enumerate() {
                        projection.apply_at(first + i as u64, at, entry);
                    }
                }
                self.last = last;
                self.snapshot().await;
                Ok(last)
            }
            Err(StoreError::Conflict { .. }) => Err(AppendError::Conflict),
            Err(e) => Err(AppendError::Failed(e.to_string())),
        }
    }

    /// Saves the projection when the log grew by [`SNAPSHOT_EVERY`] since the last snapshot (a failure is logged:
    /// a snapshot is only a shortcut).
    async fn snapshot(&mut self) {
        if self.last < self.snapshot_at + SNAPSHOT_EVERY {
            return;
        }
        let bytes = match lock(&self.projection).encode() {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::warn!(session = %self.key, error = %e, "the session's projection could not be encoded");
                return;
            }
        };
        match self.store.save_snapshot(&self.key, Snapshot { pos: self.last, bytes }).await {
            Ok(()) => self.snapshot_at = self.last,
            Err(e) => tracing::warn!(session = %self.key, error = %e, "could not save the session's snapshot"),
        }
    }
}

/// Where this process left a session's ledger chain (`None` until its first entry here); `log_chain` extends it.
#[derive(Default)]
pub(crate) struct Head(pub(crate) Mutex<Option<crate::steering::chain::ChainHead>>);
