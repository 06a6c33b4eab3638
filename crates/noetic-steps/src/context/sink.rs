//! Where events go: live subscribers and a session's numbered, bounded log, and the followers that resume from it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use super::events::{Event, EventKind};
use super::{ExecutionId, lock};

/// Where events go: the events subscribers read — for a sink made with [`EventSink::with_log`], as every
/// session's is, a bounded log of the most recent events, numbered 1, 2, 3 …, from which a follower can resume
/// ([`EventSink::follow`]). Events are built only when someone listens (a subscriber, or a log that exists because
/// someone subscribed once). Each event is held once, in the sink, and each subscriber reads a copy of it (an
/// event's texts are shared strings: copying one copies no text), so emitting allocates nothing of its own. The
/// runtime never blocks on a subscriber: an [`EventReceiver`] that falls so far behind that the sink no longer holds
/// the next event it would read sees `RecvError::Lagged`; an [`EventFollower`] is told exactly what it missed.
///
/// Clones share everything, including a log opened later: a context built with a session's sink before anybody
/// subscribed still reaches a subscriber that arrives mid-turn.
#[derive(Clone, Default)]
pub struct EventSink {
    core: Option<Arc<SinkCore>>,
}

/// How far each session log position spreads its events' numbers: the events emitted while a session's log ends
/// at position `p` are numbered `p << POSITION_SHIFT` and up (SPEC 7.1). 2^53 (what JSON numbers hold exactly)
/// leaves room for 2^33 positions.
pub const POSITION_SHIFT: u32 = 20;

/// Where the first events of a process at the position it opened a log at are numbered from (`+ p << SHIFT`): a
/// process that died at that position numbered its own events there from 1.
const REOPENED: u64 = 1 << (POSITION_SHIFT - 1);

/// The durable events of a session log numbered in `(after, before)`, oldest first: what a follower missed that
/// the log still knows (a session kept in a session log numbers its events by [`Positions`]).
pub type Backfill = Arc<dyn Fn(u64, u64) -> BoxFuture<'static, Vec<Event>> + Send + Sync>;

/// A session log's positions, which number a log-backed session's events.
#[derive(Clone)]
pub struct Positions {
    /// The position of the log's last entry, as far as this process has written or read it.
    pub last: Arc<AtomicU64>,
    /// The position the log ended at when this process opened it.
    pub opened_at: Arc<AtomicU64>,
    /// Where a follower's missed durable events come from.
    pub backfill: Backfill,
}

struct SinkCore {
    capacity: usize,
    log_capacity: Option<usize>,
    /// Numbering by session log position, for a session kept in a log.
    positions: Option<Positions>,
    /// Opened by the first subscription (at once for [`EventSink::new`] and [`EventSink::with_log`]).
    live: OnceLock<Live>,
    /// The turn events are stamped with (0: between turns).
    turn: AtomicU64,
}

/// The events subscribers read, held once (for a sink with a log: its numbered log).
struct Live {
    ring: Arc<Ring>,
}

impl Drop for Live {
    fn drop(&mut self) {
        // The sink is gone: receivers read what is still held, then learn the stream is closed.
        lock(&self.ring.state).closed = true;
        self.ring.notify.notify_waiters();
    }
}

/// The events a sink holds, shared with its receivers.
struct Ring {
    state: Mutex<LogState>,
    /// Wakes receivers waiting for the next event.
    notify: Notify,
    /// Live receivers: a sink without a log builds events only while there is one.
    receivers: AtomicUsize,
    /// Receivers waiting for the next event: an emitter wakes them only when there are some.
    waiting: AtomicUsize,
    /// The ring is a sink's log (kept for followers); else it holds events only for its receivers, and lets them
    /// go when the last receiver does.
    logged: bool,
}

impl Ring {
    /// Wakes the receivers waiting for an event just held (none waiting: nothing to do).
    fn wake(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.notify.notify_waiters();
        }
    }
}

/// The events a session's log (or a plain sink's ring) has room for before it first grows.
const RECENT_ROOM: usize = 64;

struct LogState {
    /// The number the next event gets (at least: by position, a number past it).
    next: u64,
    recent: VecDeque<Event>,
    capacity: usize,
    /// How many events were held before `recent[0]` (dropped to keep within `capacity`): a receiver's place is
    /// counted in events ever held.
    first: u64,
    /// By position: the position the last number was taken at, and the next count within it.
    at: Option<(u64, u64)>,
    /// An event was dropped to keep within `capacity`.
    evicted: bool,
    /// By position: where the session's log was when this log started recording (the sink is dormant until its
    /// first subscriber; what happened before is only in the session's log).
    from: u64,
    /// The sink is gone.
    closed: bool,
}

impl LogState {
    /// The next event's number: the plain count, or — by position — the count within the log's current position.
    fn number(&mut self, positions: Option<&Positions>) -> u64 {
        let Some(p) = positions else { return self.next };
        let pos = p.last.load(Ordering::SeqCst);
        let k = match self.at {
            Some((at, k)) if at == pos => k,
            _ if pos > 0 && pos == p.opened_at.load(Ordering::SeqCst) => REOPENED,
            _ => 1,
        };
        self.at = Some((pos, k + 1));
        ((pos << POSITION_SHIFT) + k).max(self.next)
    }

    /// Holds `event`, dropping the oldest when full.
    fn hold(&mut self, event: Event) {
        if self.recent.len() >= self.capacity {
            self.recent.pop_front();
            self.first += 1;
            self.evicted = true;
        }
        self.recent.push_back(event);
    }

    /// Events ever held: where a receiver that reads only what comes next starts.
    fn end(&self) -> u64 {
        self.first + self.recent.len() as u64
    }

    /// The number the oldest event still held has (or would have: the next one, when none is held).
    fn oldest(&self, positions: Option<&Positions>) -> u64 {
        match (self.recent.front(), positions) {
            (Some(e), _) => e.seq,
            (None, Some(p)) => {
                // The first number this process would give at the log's current position.
                let pos = p.last.load(Ordering::SeqCst);
                let first = if pos > 0 && pos == p.opened_at.load(Ordering::SeqCst) { REOPENED } else { 1 };
                ((pos << POSITION_SHIFT) + first).max(self.next)
            }
            (None, None) => self.next,
        }
    }

    /// By position: the number below which the session log's durable events are not also in this sink — the
    /// entries before the process opened the log while it has dropped nothing; once it dropped events, the
    /// entries before the position of the oldest it holds (an entry at that position may have been reported
    /// either side of it: left out rather than shown twice).
    fn durable_before(&self, positions: &Positions) -> u64 {
        let opened = positions.opened_at.load(Ordering::SeqCst).max(self.from);
        let below = match (self.evicted, self.recent.front()) {
            (true, Some(oldest)) => oldest.seq >> POSITION_SHIFT,
            _ => opened + 1,
        };
        below << POSITION_SHIFT
    }

    /// The events after `after` that the log still holds, and the range it no longer holds, if any.
    fn since(&self, after: u64, positions: Option<&Positions>) -> (VecDeque<Event>, Option<(u64, u64)>) {
        let oldest = self.oldest(positions);
        let gap = (after.saturating_add(1) < oldest).then(|| (after.saturating_add(1), oldest - 1));
        let backlog = self.recent.iter().filter(|e| e.seq > after).cloned().collect();
        (backlog, gap)
    }
}

impl Ring {
    fn new(capacity: usize, from: u64, logged: bool) -> Arc<Ring> {
        let state = LogState {
            next: 1,
            // Room for a short turn's events at once (a turn of ten tool calls emits about fifty), instead of five
            // doublings on the way there.
            recent: VecDeque::with_capacity(capacity.min(RECENT_ROOM)),
            capacity,
            first: 0,
            at: None,
            evicted: false,
            from,
            closed: false,
        };
        Arc::new(Ring {
            state: Mutex::new(state),
            notify: Notify::new(),
            receivers: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            logged,
        })
    }

    /// A receiver reading from event `next` (counted in events ever held) on.
    fn receiver(self: &Arc<Self>, next: u64) -> EventReceiver {
        self.receivers.fetch_add(1, Ordering::SeqCst);
        EventReceiver { ring: self.clone(), next }
    }
}

impl SinkCore {
    fn live(&self) -> &Live {
        self.live.get_or_init(|| {
            let from = self.positions.as_ref().map_or(0, |p| p.last.load(Ordering::SeqCst));
            // A log holds its events for followers and subscribers alike; a plain sink holds what a subscriber
            // may not have read yet.
            let capacity = self.log_capacity.unwrap_or(self.capacity);
            let logged = self.log_capacity.is_some();
            Live { ring: Ring::new(capacity, from, logged) }
        })
    }
}

impl EventSink {
    fn make(capacity: usize, log_capacity: Option<usize>, open: bool) -> Self {
        let core = SinkCore {
            capacity: capacity.max(1),
            log_capacity: log_capacity.map(|c| c.max(1)),
            positions: None,
            live: OnceLock::new(),
            turn: AtomicU64::new(0),
        };
        if open {
            core.live();
        }
        EventSink { core: Some(Arc::new(core)) }
    }

    /// A sink holding its last `capacity` events (at least 1) for its subscribers while there are any, with no log.
    pub fn new(capacity: usize) -> Self {
        Self::make(capacity, None, true)
    }

    /// A sink that keeps the last `log_capacity` events (at least 1), numbered, for followers to resume from and
    /// subscribers to read (a subscriber falls behind when the log drops an event it has not read; `capacity` is
    /// then unused).
    pub fn with_log(capacity: usize, log_capacity: usize) -> Self {
        Self::make(capacity, Some(log_capacity), true)
    }

    /// Like [`EventSink::with_log`], but the log opens at the first subscription: until then emitting costs one
    /// check and nothing is recorded.
    pub fn dormant_with_log(capacity: usize, log_capacity: usize) -> Self {
        Self::make(capacity, Some(log_capacity), false)
    }

    /// Like [`EventSink::dormant_with_log`], numbered by a session log's positions (SPEC 7.1): the events emitted
    /// while the log ends at `p` get numbers from `p << `[`POSITION_SHIFT`], so numbers never repeat or go back
    /// across processes, and a follower that asks for events this sink never held gets the durable ones from the
    /// log (`positions.backfill`) before an explicit gap for the rest.
    pub fn numbered_by_position(capacity: usize, log_capacity: usize, positions: Positions) -> Self {
        let mut sink = Self::make(capacity, Some(log_capacity), false);
        if let Some(core) = sink.core.as_mut().and_then(Arc::get_mut) {
            core.positions = Some(positions);
        }
        sink
    }

    /// A sink that drops everything.
    pub fn disabled() -> Self {
        EventSink { core: None }
    }

    /// A new subscriber, seeing events emitted from now on. `None` for a disabled sink.
    pub fn subscribe(&self) -> Option<EventReceiver> {
        let ring = &self.core.as_ref()?.live().ring;
        let end = lock(&ring.state).end();
        Some(ring.receiver(end))
    }

    /// A follower that first gets the logged events numbered after `after` (0: from the oldest the log holds),
    /// then live ones; if the log no longer holds some of them, it is told so first with [`Followed::Gap`]. A
    /// number past the newest event (a log that restarted, say) counts as the newest. `None` for a sink without
    /// a log.
    pub fn follow(&self, after: u64) -> Option<EventFollower> {
        let core = self.core.as_ref()?;
        let live = core.live();
        if !live.ring.logged {
            return None;
        }
        // Placed under the log's lock: every event is either in the backlog or arrives live, never both.
        let state = lock(&live.ring.state);
        let newest = state.oldest(core.positions.as_ref()).max(state.next).saturating_sub(1);
        let after = after.min(newest.max(state.recent.back().map_or(0, |e| e.seq)));
        let (backlog, gap) = state.since(after, core.positions.as_ref());
        let rx = live.ring.receiver(state.end());
        // By position, what this sink never held may still be in the session's log: read before the gap is told.
        let backfill = gap.and(core.positions.as_ref()).map(|p| Backfilling {
            read: p.backfill.clone(),
            before: state.durable_before(p),
            // A first follower of a sink that dropped nothing misses only what the log held before the process
            // opened it: when that has no durable event, nothing is missing and no gap is told.
            quiet_if_empty: after == 0 && !state.evicted,
        });
        drop(state);
        let ready = backlog.into_iter().map(Followed::Event).collect();
        Some(EventFollower { core: core.clone(), rx, ready, gap, backfill, last: after })
    }

    /// The number of the newest event (0 when none was logged).
    pub fn last_seq(&self) -> u64 {
        match self.core.as_ref().and_then(|c| c.live.get()).filter(|l| l.ring.logged) {
            Some(live) => lock(&live.ring.state).next - 1,
            None => 0,
        }
    }

    /// Stamps the events emitted from now on with this turn (`None` between turns).
    pub fn set_turn(&self, turn: Option<u64>) {
        if let Some(core) = &self.core {
            core.turn.store(turn.unwrap_or(0), Ordering::SeqCst);
        }
    }

    /// True when someone listens (or a log records).
    pub fn is_active(&self) -> bool {
        match self.core.as_ref().and_then(|c| c.live.get()) {
            Some(live) => live.ring.logged || live.ring.receivers.load(Ordering::SeqCst) > 0,
            None => false,
        }
    }

    /// Emits an event another process reported (rebuilt from a session log, numbered by its entry): numbered as it
    /// is unless that would go back, then as the next number.
    pub fn emit_numbered(&self, mut event: Event) {
        let Some(core) = &self.core else { return };
        let Some(live) = core.live.get().filter(|l| l.ring.logged) else { return };
        let mut state = lock(&live.ring.state);
        event.seq = event.seq.max(state.next);
        state.next = event.seq + 1;
        state.hold(event);
        drop(state);
        live.ring.wake();
    }

    /// Emits the event `kind` builds, if anyone listens or a log records.
    pub fn emit(&self, execution_id: ExecutionId, kind: impl FnOnce() -> EventKind) {
        let Some(core) = &self.core else { return };
        let Some(live) = core.live.get() else { return };
        if !live.ring.logged && live.ring.receivers.load(Ordering::Relaxed) == 0 {
            return;
        }
        let turn = Some(core.turn.load(Ordering::Relaxed)).filter(|t| *t > 0);
        let mut state = lock(&live.ring.state);
        // Numbered under the lock, so receivers read the numbers in order.
        let seq = if live.ring.logged { state.number(core.positions.as_ref()) } else { 0 };
        state.hold(Event { seq, turn, execution_id, at: SystemTime::now(), kind: kind() });
        if live.ring.logged {
            state.next = seq + 1;
        }
        drop(state);
        live.ring.wake();
    }
}

/// `RecvError` for a look that found something to say.
fn recv_error(error: TryRecvError) -> RecvError {
    match error {
        TryRecvError::Lagged(n) => RecvError::Lagged(n),
        TryRecvError::Empty | TryRecvError::Closed => RecvError::Closed,
    }
}

/// A receiver waiting for the next event, counted while it waits.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The event numbered `next` in events ever held, if `ring` holds it (`next` moved past it).
fn read(ring: &Ring, next: &mut u64) -> Result<Event, TryRecvError> {
    let state = lock(&ring.state);
    if *next < state.first {
        let missed = state.first - *next;
        *next = state.first;
        return Err(TryRecvError::Lagged(missed));
    }
    match usize::try_from(*next - state.first).ok().and_then(|at| state.recent.get(at)) {
        Some(event) => {
            *next += 1;
            Ok(event.clone())
        }
        None if state.closed => Err(TryRecvError::Closed),
        None => Err(TryRecvError::Empty),
    }
}

/// Reads a sink's events as they are emitted, each a copy of the one the sink holds. Made by
/// [`EventSink::subscribe`] (and `Session::subscribe`); it reads what is emitted after it was made.
///
/// `recv` answers `Err(RecvError::Lagged(n))` when the sink dropped the next `n` events before this receiver read
/// them (it then reads on from the oldest still held), and `Err(RecvError::Closed)` once the sink is gone and
/// everything it held was read — as a `tokio::sync::broadcast::Receiver` does.
pub struct EventReceiver {
    ring: Arc<Ring>,
    /// The next event to read, counted in events ever held.
    next: u64,
}

impl std::fmt::Debug for EventReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventReceiver").field("next", &self.next).finish_non_exhaustive()
    }
}

impl Drop for EventReceiver {
    fn drop(&mut self) {
        if self.ring.receivers.fetch_sub(1, Ordering::SeqCst) == 1 && !self.ring.logged {
            // Nobody reads a plain sink's events any more: what they hold (results, arguments) is let go.
            let mut state = lock(&self.ring.state);
            state.first += state.recent.len() as u64;
            state.recent.clear();
        }
    }
}

impl EventReceiver {
    /// A receiver with nothing to read: `recv` answers `Err(RecvError::Closed)` at once.
    pub fn closed() -> Self {
        let ring = Ring::new(1, 0, false);
        lock(&ring.state).closed = true;
        ring.receiver(0)
    }

    /// The next event, waiting for one when everything held was read.
    pub async fn recv(&mut self) -> Result<Event, RecvError> {
        loop {
            // What is held already is read without waiting (a receiver woken once reads everything that came).
            match read(&self.ring, &mut self.next) {
                Err(TryRecvError::Empty) => {}
                done => return done.map_err(recv_error),
            }
            let ring = &self.ring;
            let notified = ring.notify.notified();
            let mut notified = std::pin::pin!(notified);
            // Counted and registered before looking again, so an event held after that look wakes it (the emitter
            // looks at the count after holding the event, under the lock this look takes).
            ring.waiting.fetch_add(1, Ordering::SeqCst);
            let _waiting = Waiting(&ring.waiting);
            notified.as_mut().enable();
            match read(ring, &mut self.next) {
                Err(TryRecvError::Empty) => notified.await,
                done => return done.map_err(recv_error),
            }
        }
    }

    /// The next event if one is held that this receiver has not read, without waiting.
    pub fn try_recv(&mut self) -> Result<Event, TryRecvError> {
        read(&self.ring, &mut self.next)
    }

    /// A receiver of the same sink reading what is emitted from now on.
    pub fn resubscribe(&self) -> Self {
        let end = lock(&self.ring.state).end();
        self.ring.receiver(end)
    }
}

/// What a follower gets: the next event, or the news that some events are gone from the log.
#[derive(Debug, Clone)]
pub enum Followed {
    /// The next event (numbers increase by one, except right after a gap).
    Event(Event),
    /// Events `from..=to` were dropped from the bounded log before this follower could read them. For a session
    /// kept in a session log, the durable events of that range that the log still holds follow the gap (numbered
    /// within it, rising); the others — text deltas, progress — are gone.
    Gap {
        /// The first missing number.
        from: u64,
        /// The last missing number.
        to: u64,
    },
}

/// How a follower reads back what its sink does not hold from the session log.
struct Backfilling {
    read: Backfill,
    /// Only events numbered below this are read back (see `LogState::durable_before`).
    before: u64,
    /// Say nothing when nothing is found.
    quiet_if_empty: bool,
}

/// Reads a sink's events in order from a given number on: the logged backlog first, then live events. A
/// follower that falls behind the live channel catches up from the log; what the log no longer holds is reported
/// as a [`Followed::Gap`], never skipped silently.
pub struct EventFollower {
    core: Arc<SinkCore>,
    rx: EventReceiver,
    /// What is handed out next, in order, before live events.
    ready: VecDeque<Followed>,
    /// Events `from..=to` this sink does not hold: told (after what `backfill` finds of them) before `ready`.
    gap: Option<(u64, u64)>,
    /// Where the durable ones among them may still be read.
    backfill: Option<Backfilling>,
    /// The number of the last event handed out.
    last: u64,
}

impl EventFollower {
    /// A follower with nothing to read: `next` answers `None` at once.
    pub fn ended() -> Self {
        let core = SinkCore {
            capacity: 1,
            log_capacity: None,
            positions: None,
            live: OnceLock::new(),
            turn: AtomicU64::new(0),
        };
        let core = Arc::new(core);
        let rx = EventReceiver::closed();
        EventFollower { core, rx, ready: VecDeque::new(), gap: None, backfill: None, last: 0 }
    }

    /// The next event or gap; waits for a live event when caught up. `None` once the sink is gone.
    pub async fn next(&mut self) -> Option<Followed> {
        if let Some(backfill) = self.backfill.take()
            && let Some((from, to)) = self.gap.take()
        {
            // The gap is told first; then the durable events of it that the session log still holds (rising, with
            // the numbers their entries give them), then the rest.
            let found = (backfill.read)(from - 1, (to + 1).min(backfill.before)).await;
            let found: Vec<Followed> =
                found.into_iter().filter(|e| e.seq >= from && e.seq <= to).map(Followed::Event).collect();
            let mut told = VecDeque::new();
            if !(found.is_empty() && backfill.quiet_if_empty) {
                told.push_back(Followed::Gap { from, to });
            } else {
                self.last = self.last.max(to);
            }
            told.extend(found);
            told.append(&mut self.ready);
            self.ready = told;
        }
        loop {
            if let Some(f) = self.ready() {
                return Some(f);
            }
            match self.rx.recv().await {
                // Live events already handed out from the backlog are skipped.
                Ok(event) if event.seq <= self.last => continue,
                Ok(event) => {
                    self.last = event.seq;
                    return Some(Followed::Event(event));
                }
                Err(RecvError::Lagged(_)) => self.catch_up(),
                Err(RecvError::Closed) => return None,
            }
        }
    }

    /// The next gap or backlog event, without waiting.
    fn ready(&mut self) -> Option<Followed> {
        if let Some((from, to)) = self.gap.take() {
            self.last = self.last.max(to);
            return Some(Followed::Gap { from, to });
        }
        let next = self.ready.pop_front()?;
        match &next {
            Followed::Event(event) => self.last = self.last.max(event.seq),
            Followed::Gap { to, .. } => self.last = self.last.max(*to),
        }
        Some(next)
    }

    /// Re-reads the log after falling behind it.
    fn catch_up(&mut self) {
        let live = self.core.live();
        let state = lock(&live.ring.state);
        let (backlog, gap) = state.since(self.last, self.core.positions.as_ref());
        self.rx = live.ring.receiver(state.end());
        drop(state);
        self.ready = backlog.into_iter().map(Followed::Event).collect();
        self.gap = gap;
    }
}

#[cfg(test)]
mod tests;
