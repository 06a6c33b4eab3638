//! A session's log writer: appends the session's batches in the order they were handed over, grouping those that
//! wait together into one append, takes in what other processes appended, and saves snapshots (see `logged`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use smallvec::SmallVec;
use tokio::sync::{mpsc, oneshot, watch};

use super::log::{Entry, Expect, LogStore, Projection, Record, Snapshot, StoreError};
use crate::context::lock;

/// How many entries a session's log may grow by before its projection is saved as a snapshot again (opening the
/// session then reads the snapshot and at most this many entries).
const SNAPSHOT_EVERY: u64 = 1000;

/// What the session does with entries other processes appended (a message accepted, a stop asked for; while no turn
/// runs here, also another worker's turns).
pub(crate) type Foreign = Arc<dyn Fn(&[Record]) + Send + Sync>;

/// Entries handed to a session's writer (`log_writer`).
pub(crate) struct Batch {
    /// A request to read what others appended (and to write again after being fenced, when no turn runs here).
    pub(crate) sync: bool,
    pub(crate) entries: Vec<Entry>,
    pub(crate) done: Option<oneshot::Sender<Result<u64, String>>>,
    /// The chain of writes it belongs to (a turn's): set when one of them failed, so none after it is written.
    pub(crate) chain: Option<Chain>,
    /// The lease holder that gives the session up once this lands (a turn's last write).
    pub(crate) release: Option<Arc<str>>,
    /// Nobody waits for it now (a turn's write handed over before a model request): the writer may hold it for
    /// up to [`HOLD`] to write it with the batch that follows (see [`gather`]).
    pub(crate) lazy: bool,
}

/// A turn's writes: once one fails, the writer refuses the rest (the log never holds a turn with a hole in it),
/// so the turn may hand over a write without waiting and the next one right after it.
pub(crate) type Chain = Arc<std::sync::atomic::AtomicBool>;

/// How many waiting batches one append may take together.
const GROUP: usize = 64;

/// How often a conflicting append reads what others wrote and tries again before it gives up.
const RETRIES: usize = 8;

/// How long a lazy batch may wait for the next one. A turn hands a call's outcome over before its model request and
/// the response with the next call's start after it: a model that answers within this goes into one append with
/// the outcome (one transaction per tool call, SPEC 6), a slower one finds the outcome written while it answers.
/// A crash in the window loses no more than a crash while the outcome's own append was under way would: the call
/// gets the interrupted result, and the model request is made again (its answer never arrived).
const HOLD: std::time::Duration = std::time::Duration::from_millis(1);

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

/// Takes the batches waiting behind `batches`' first (up to [`GROUP`], up to a sync); while all it has are lazy,
/// waits up to [`HOLD`] for the next. Whether the queue closed meanwhile (the session is gone: what was taken is
/// still written).
async fn gather(rx: &mut mpsc::UnboundedReceiver<Batch>, batches: &mut Batches) -> bool {
    let mut deadline = None;
    while batches.len() < GROUP && !batches.iter().any(|b| b.sync) {
        match rx.try_recv() {
            Ok(batch) => {
                batches.push(batch);
                continue;
            }
            Err(mpsc::error::TryRecvError::Disconnected) => return true,
            Err(mpsc::error::TryRecvError::Empty) => {}
        }
        if !batches.iter().all(|b| b.lazy) {
            break;
        }
        let until = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + HOLD);
        match tokio::time::timeout_at(until, rx.recv()).await {
            Ok(Some(batch)) => batches.push(batch),
            Ok(None) => return true,
            Err(_) => break,
        }
    }
    false
}

/// The batches one write takes (usually one; a held outcome and the write after it, two).
type Batches = SmallVec<[Batch; 2]>;

/// Appends one session's batches in order, grouping those that wait together.
pub(crate) struct Writer {
    pub(crate) store: Arc<dyn LogStore>,
    pub(crate) key: Arc<str>,
    pub(crate) projection: Arc<Mutex<Projection>>,
    /// Where the log ends, as far as this writer knows.
    pub(crate) last: u64,
    /// Where the last snapshot was taken.
    pub(crate) snapshot_at: u64,
    /// The entry a new session's log starts with (its settings).
    pub(crate) first: Option<Entry>,
    /// Another process wrote a turn to the log: this one writes nothing more (it would write over a turn it no
    /// longer owns).
    pub(crate) fenced: Option<String>,
    /// The session's count of positions (the numbers of its events), moved on by entries others append.
    pub(crate) positions: Arc<AtomicU64>,
    /// Where other processes' messages and stops go.
    pub(crate) foreign: Foreign,
    /// A turn of the session runs in this process.
    pub(crate) running: Arc<std::sync::atomic::AtomicBool>,
    /// Messages accepted in this process not written yet (see `Logged::unwritten`): each leaves once its write
    /// was tried.
    pub(crate) unwritten: Arc<Mutex<Vec<super::queue::MessageId>>>,
    /// Where this writer says its own appends ended (their announcements then wake no one).
    pub(crate) known: super::log_hub::Known,
}

impl Writer {
    pub(crate) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Batch>, watch: watch::Receiver<u64>) {
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
                    let mut batches: Batches = smallvec::smallvec![batch];
                    let closed = gather(&mut rx, &mut batches).await;
                    let sync = batches.iter().position(|b| b.sync).map(|at| batches.remove(at));
                    self.write(batches).await;
                    if closed {
                        return;
                    }
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

    async fn write(&mut self, batches: Batches) {
        let mut entries: Vec<Entry> = self.first.iter().cloned().collect();
        let mut ends: SmallVec<[u64; 2]> = SmallVec::new();
        let mut replies: SmallVec<[_; 2]> = SmallVec::new();
        let mut chains: SmallVec<[_; 2]> = SmallVec::new();
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
            // The usual write is one batch: its entries are the append's, not copied.
            if entries.is_empty() {
                entries = batch.entries;
            } else {
                entries.extend(batch.entries);
            }
            ends.push(entries.len() as u64);
            replies.push(batch.done);
        }
        if ends.is_empty() {
            return;
        }
        let answer = self.append(&entries, release.as_deref()).await;
        // Written (and in the projection) or failed (their senders take them out of the queue): either way no
        // longer on their way.
        if entries.iter().any(|e| matches!(e, Entry::MessageAccepted { .. })) {
            let mut unwritten = lock(&self.unwritten);
            for entry in &entries {
                if let Entry::MessageAccepted { message } = entry {
                    unwritten.retain(|id| *id != message.id);
                }
            }
        }
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
                self.known.landed(last);
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
