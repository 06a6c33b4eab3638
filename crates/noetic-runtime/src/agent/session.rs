//! One conversation and its turns.
//!
//! (Over the house's ~700 lines, knowingly: the handle, the session's state, starting, resuming and discarding
//! turns and routing messages share one lock protocol, and the old store's half of this file is gone. Splitting it
//! along the handle / state / turn task lines is #35's work on `agent/`, together with the façade in `mod.rs`.)

use std::borrow::Cow;
use std::future::IntoFuture;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{Notify, broadcast};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::log::{Entry, LogStore, Projection, TurnOutcome};
use super::log_turn::{LogJournal, LogRecords, ReplayIndex};
use super::logged::{Logged, Receipt, settled};
use super::queue::{MessageId, SessionQueue};
use super::{BatchPolicy, SteerError, SteerMessage, SteeringMode, TurnSteering};
use super::{Handles, RuntimeInner, SessionSettings, TurnHandle};
use crate::context::{
    Context, Event, EventFollower, EventKind, EventSink, ExecutionId, RecordSink, TurnServices, lock,
};
use crate::error::NoeticError;
use crate::model::{History, Item};
use crate::turn::TurnJournal;
use tracing::Instrument;

mod budget;
mod compact;
mod title;

pub use title::{MAX_TITLE_CHARS, check_title};

/// What [`Session::send_or_steer`] did with a message.
pub enum Routed {
    /// The session was idle: a turn started.
    Started(Turn),
    /// A turn was running: the message was queued for it.
    Steered(MessageId),
}

/// How many events a session buffers per subscriber.
const SESSION_EVENT_CAPACITY: usize = 1024;
/// How many of its most recent events a session's log keeps for followers that resume.
pub const SESSION_EVENT_LOG_CAPACITY: usize = 4096;

/// Why a session could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// A turn is already running in this session.
    #[error("session '{session}' is busy with a turn; wait for it, cancel it, or steer it")]
    Busy {
        /// The session key.
        session: String,
    },
    /// Another process sharing the session's store runs a turn in it (`noetic-postgres`); a message for it is
    /// steered there ([`Session::send_or_steer`]).
    #[error("session '{session}' is busy with a turn on worker {owner}; wait for it, stop it, or steer it")]
    BusyElsewhere {
        /// The session key.
        session: String,
        /// The worker running the turn.
        owner: String,
    },
    /// A turn a stopped process left is waiting: resume it or discard it first.
    #[error(
        "session '{session}' has an unfinished turn left by a stopped process; resume it (Session::resume) or discard it (Session::discard_unfinished) first"
    )]
    Unfinished {
        /// The session key.
        session: String,
    },
    /// The store could not write what the session needed.
    #[error("session '{session}': the store failed ({message})")]
    Store {
        /// The session key.
        session: String,
        /// Why.
        message: String,
    },
    /// The session is paused over its budget: the message (if there was one) was queued, and runs once a person
    /// raises the limit ([`Session::raise_budget`]).
    #[error(
        "session '{session}' is paused over its budget ({reason}); {} raise the limit to continue \
         (/budget in noetic chat, Raise on the page, PUT /api/sessions/{{key}}/budget, or Session::raise_budget)",
        if queued.is_some() { "the message was queued and runs once the limit is raised;" } else { "nothing runs:" }
    )]
    Paused {
        /// The session key.
        session: String,
        /// The limit reached.
        reason: String,
        /// The message queued, if one was sent.
        queued: Option<MessageId>,
    },
    /// A budget with a zero or negative limit.
    #[error("session '{session}': {message}")]
    InvalidBudget {
        /// The session key.
        session: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// A title that is empty, too long or holds control characters ([`Session::set_title`]).
    #[error("session '{session}': {message}")]
    InvalidTitle {
        /// The session key.
        session: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// The session's log could not be read; nothing runs in it until it can be.
    #[error(
        "session '{session}' could not be opened from its log ({message}); check the session store and open it again"
    )]
    Unavailable {
        /// The session key.
        session: String,
        /// Why.
        message: String,
    },
}

/// Where the conversation lives: in the session while idle, in the turn's context while a turn runs (so the
/// turn appends without copying the history).
enum Conversation {
    Idle(History),
    Running { ctx: Context, steering: Arc<TurnSteering> },
}

pub(crate) struct SessionState {
    key: Arc<str>,
    conversation: Mutex<Conversation>,
    /// Created on first subscription, so idle sessions cost no event buffer.
    events: OnceLock<EventSink>,
    turns: AtomicU64,
    /// Notified when a turn ends.
    turn_ended: Notify,
    settings: SessionSettings,
    queue: SessionQueue,
    /// The runtime's logical clock when the session was last used (the least recently used idle sessions are
    /// evicted first).
    last_used: AtomicU64,
    /// Set (under the conversation lock) when the runtime dropped this state: handles then find the live one.
    evicted: AtomicBool,
    /// What a session kept in a session log keeps besides (boxed: a session without a log pays one pointer).
    logged: Option<Box<Logged>>,
    /// Without a log: the session's budget, what it spent and its pause (with one, the log's projection holds them).
    account: Mutex<crate::budget::Account>,
    /// Without a log: the session's title (with one, the log's projection holds it).
    title: Mutex<Option<String>>,
}

impl SessionState {
    pub(crate) fn settings(&self) -> &SessionSettings {
        &self.settings
    }

    pub(crate) fn queue(&self) -> &SessionQueue {
        &self.queue
    }

    pub(crate) fn new(key: Arc<str>, settings: SessionSettings) -> Self {
        SessionState {
            key,
            settings,
            queue: SessionQueue::default(),
            conversation: Mutex::new(Conversation::Idle(History::default())),
            events: OnceLock::new(),
            turns: AtomicU64::new(0),
            turn_ended: Notify::new(),
            last_used: AtomicU64::new(0),
            evicted: AtomicBool::new(false),
            logged: None,
            account: Mutex::default(),
            title: Mutex::default(),
        }
    }

    /// The same state, kept in the session log `store` (read when the session is first used: see
    /// [`SessionState::open_log`]).
    pub(crate) fn with_log(mut self, store: Arc<dyn LogStore>, hub: Arc<super::log_hub::LogHub>) -> Self {
        self.logged = Some(Box::new(Logged::new(store, hub)));
        self
    }

    pub(crate) fn logged(&self) -> Option<&Logged> {
        self.logged.as_deref()
    }

    /// Reads the session's log the first time it is needed (later calls return at once): the conversation, the
    /// queue, the settings and the turn count come from it, and a turn a stopped process left waits to be resumed.
    pub(crate) async fn open_log(self: &Arc<Self>) -> Result<(), String> {
        let Some(logged) = self.logged() else { return Ok(()) };
        logged
            .opened
            .get_or_init(|| async {
                let first = self.settings_entry();
                let weak = Arc::downgrade(self);
                let foreign: super::logged::Foreign = Arc::new(move |records| {
                    if let Some(state) = weak.upgrade() {
                        state.take_foreign(records);
                    }
                });
                match logged.open(&self.key, first, foreign).await {
                    Ok(projection) => {
                        self.apply_projection(projection);
                        Ok(())
                    }
                    Err(e) => Err(format!("could not open session '{}' from its log: {e}", self.key)),
                }
            })
            .await
            .clone()
    }

    /// Takes in what other processes appended to the session's log (SPEC 6.4): a message they accepted joins the
    /// queue (in log order), their stop stops the running turn, their cleared queue empties this one; while no turn
    /// runs here, another worker's turns are the session's history, and whoever follows the session here sees them.
    fn take_foreign(&self, records: &[super::log::Record]) {
        let mut others = false;
        for record in records {
            match &record.entry {
                Entry::MessageAccepted { message } => match self.logged() {
                    Some(logged) => {
                        let projection = lock(&logged.projection);
                        let durable = |id| projection.queue.iter().any(|m| m.id == id);
                        self.queue.insert_foreign(message.clone(), &durable);
                    }
                    None => self.queue.push_existing(vec![message.clone()]),
                },
                Entry::StopRequested { reason } => {
                    if let Conversation::Running { ctx, steering } = &*lock(&self.conversation) {
                        steering.discard_pending();
                        ctx.cancel(reason);
                    }
                }
                Entry::MessagesDropped { ids, .. } if ids.is_empty() => {
                    self.queue.clear();
                }
                Entry::MessagesDropped { ids, .. } => {
                    for id in ids {
                        self.queue.remove(*id);
                    }
                }
                // Read from the projection (which took it in): the running turn keeps its meter, the next has it.
                Entry::BudgetSet { .. } | Entry::Titled { .. } => {}
                // Settings changed elsewhere hold here at once, also for the running turn's next checkpoint.
                Entry::Settings { mode, capacity, batch_policy } => {
                    self.settings.set_mode(*mode);
                    self.settings.set_capacity(*capacity as usize);
                    self.settings.set_batch_policy(*batch_policy);
                }
                _ => others = true,
            }
        }
        if others && let Some(logged) = self.logged() {
            let projection = lock(&logged.projection).clone();
            if projection.open_turn.is_none() {
                // The turn this process found open when it opened the session ended elsewhere.
                *lock(&logged.unfinished) = None;
            }
            logged.set_persisted(projection.conversation.len());
            self.apply_projection(projection);
            // Another worker's turn may have changed the thread's layer state: the next turn here loads it again.
            logged.layers.reset();
        }
        if let (Some(sink), Some(logged)) = (self.events.get(), self.logged()) {
            let mut events = lock(&logged.events);
            for event in records.iter().filter_map(|r| events.of(r)) {
                sink.emit_numbered(event);
            }
        }
    }

    /// True while a turn runs in this process.
    pub(crate) fn is_running(&self) -> bool {
        matches!(*lock(&self.conversation), Conversation::Running { .. })
    }

    /// After taking the lease: the session as the log says it is, and the turn a dead worker left, if any.
    pub(crate) async fn reload_unfinished(&self) -> Result<(), String> {
        let Some(logged) = self.logged() else { return Ok(()) };
        if self.is_running() {
            // A turn (a resumption, say) started here meanwhile: it took what there was to resume.
            return Ok(());
        }
        let projection = lock(&logged.projection).clone();
        let open = projection.open_turn.clone();
        if !self.is_running() {
            logged.set_persisted(projection.conversation.len());
            self.apply_projection(projection);
            logged.layers.reset();
        }
        let records = match open {
            Some(open) => Some(logged.turn_records(&self.key, open.since).await.map_err(|e| e.to_string())?),
            None => None,
        };
        *lock(&logged.unfinished) = records;
        Ok(())
    }

    /// The settings as a log entry.
    fn settings_entry(&self) -> Entry {
        Entry::Settings {
            mode: self.settings.mode(),
            capacity: u32::try_from(self.settings.capacity()).unwrap_or(u32::MAX),
            batch_policy: self.settings.batch_policy(),
        }
    }

    /// Takes what the log says of the session (it was just opened; nothing ran in it yet).
    fn apply_projection(&self, projection: Projection) {
        let mut conversation = lock(&self.conversation);
        if projection.last > 0 {
            self.settings.set_mode(projection.settings.mode);
            self.settings.set_capacity(projection.settings.capacity as usize);
            self.settings.set_batch_policy(projection.settings.batch_policy);
        }
        self.turns.store(projection.turns, Ordering::SeqCst);
        self.queue.clear();
        self.queue.push_existing(projection.queue);
        if let Conversation::Idle(history) = &mut *conversation {
            *history = History::new(projection.conversation).with_folded(projection.compacted);
        }
    }

    /// Records in the session log that the queue was emptied (`None` without a log).
    fn drop_logged_queue(&self, reason: &str) -> Option<Receipt> {
        self.submit(vec![Entry::MessagesDropped { ids: Vec::new(), reason: reason.to_owned() }])
    }

    /// Hands `entries` to the session log's writer (in the order of the calls); `None` without a log.
    fn submit(&self, entries: Vec<Entry>) -> Option<Receipt> {
        self.logged().map(|l| l.submit(entries))
    }

    /// The `llm` step of the turn a dead process left, if any.
    fn unfinished_step(&self) -> Option<String> {
        if let Some(logged) = self.logged() {
            return lock(&logged.unfinished)
                .as_ref()
                .map(|records| ReplayIndex::running_step(records).unwrap_or_default());
        }
        None
    }

    fn clear_unfinished(&self) {
        if let Some(logged) = self.logged() {
            *lock(&logged.unfinished) = None;
        }
    }

    /// Brings the layers' saved state into them before a turn.
    fn load_layer_states(&self, runtime: &RuntimeInner) -> Result<(), NoeticError> {
        if let Some(logged) = self.logged() {
            let projection = lock(&logged.projection);
            let saved = projection.layer_states.get(&super::thread_scope(&self.key));
            return super::persist::load_thread(&runtime.layers, &self.key, &logged.layers, saved);
        }
        Ok(())
    }

    pub(crate) fn key(&self) -> &Arc<str> {
        &self.key
    }

    pub(crate) fn touch(&self, now: u64) {
        self.last_used.store(now, Ordering::Relaxed);
    }

    pub(crate) fn last_used(&self) -> u64 {
        self.last_used.load(Ordering::Relaxed)
    }

    /// Marks an idle, unwatched session evicted (its log keeps it), atomically with respect to turns starting and
    /// messages being queued (both hold the conversation lock and re-check the mark). False when a turn runs or
    /// somebody follows its events (they would silently stop hearing from it).
    pub(crate) fn evict(&self) -> bool {
        let conversation = lock(&self.conversation);
        let Conversation::Idle(_) = &*conversation else { return false };
        if self.events.get().is_some_and(EventSink::is_active) {
            return false;
        }
        self.evicted.store(true, Ordering::SeqCst);
        true
    }

    /// Marks an idle session gone (it is being deleted): handles find a fresh state from now on, and whoever
    /// follows its events stops hearing from it. False when a turn runs.
    pub(crate) fn forget(&self) -> bool {
        let conversation = lock(&self.conversation);
        if matches!(*conversation, Conversation::Running { .. }) {
            return false;
        }
        self.evicted.store(true, Ordering::SeqCst);
        true
    }
}

/// Releases a session when its turn's task ends, however it ends: the conversation becomes idle with the
/// turn's history, taken-but-unshown steering goes back to the queue, the turn's end is announced, and waiters
/// are woken.
struct Release {
    state: Arc<SessionState>,
    ctx: Context,
    steering: Arc<TurnSteering>,
    runtime: TurnHandle,
    /// How the turn ended (`turn_completed` or `turn_failed`), emitted once the session is idle — after the end is
    /// in the log — so that whoever hears it and looks at the session finds the turn over.
    ended: Option<EventKind>,
}

impl Drop for Release {
    fn drop(&mut self) {
        // Messages taken at a checkpoint but never shown to the model go back to the head of the queue.
        self.steering.return_pending();
        let history = self.ctx.history();
        let mut conversation = lock(&self.state.conversation);
        // Under the conversation lock: a message routed here meanwhile is steered into this (ending) turn and
        // handled by the continuation check that follows, or sees the session idle after.
        *conversation = Conversation::Idle(history);
        // Under the lock: a turn started right after this one cannot announce itself before this one's end.
        if let Some(kind) = self.ended.take() {
            self.ctx.emit(|| kind);
        }
        self.ctx.events().set_turn(None);
        drop(conversation);
        self.state.turn_ended.notify_waiters();
        // The session is idle again: if the runtime keeps more idle sessions than it may, some go now.
        super::evict_over_limit(&self.runtime);
    }
}

/// A handle on one conversation, from [`Runtime::session`](super::Runtime::session). Clones share it.
///
/// [`Session::send`] starts a [`Turn`]; [`Session::steer`] queues a message for the running one;
/// [`Session::subscribe`] and [`Session::follow`] stream its [`Event`]s.
#[derive(Clone)]
pub struct Session {
    runtime: Arc<RuntimeInner>,
    /// What its turns hold the runtime by.
    handles: Handles,
    state: Arc<SessionState>,
}

/// A running turn, returned by [`Session::send`] (and [`Session::send_or_steer`], [`Session::continue_session`],
/// [`Session::resume`]).
///
/// The turn runs as a tokio task (`tokio::spawn`) from the moment it is started, whether or not anyone awaits it:
/// awaiting a `Turn` only waits for its answer, a `Result<String, `[`NoeticError`]`>`. Dropping it does not cancel
/// the turn — it runs to its end and the session stays busy until then; [`Turn::cancel`] or [`Session::stop`]
/// end it early. While it runs, [`Session::steer`] queues messages for it.
pub struct Turn {
    number: u64,
    execution_id: ExecutionId,
    cancel: CancellationToken,
    handle: JoinHandle<Result<String, NoeticError>>,
}

impl Turn {
    /// The turn's number within its session (1-based).
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The id of the turn's execution ([`ExecutionId`]): the `execution_id` of the events the turn's own steps
    /// emit ([`Event::execution_id`]; spawned children and fork paths have ids of their own), and the key of its
    /// layer state — its steering ledger, for instance, through
    /// [`Runtime::get_layer_state`](super::Runtime::get_layer_state) or
    /// [`SteeringLayer::ledger`](crate::steering::SteeringLayer::ledger).
    pub fn execution_id(&self) -> ExecutionId {
        self.execution_id
    }

    /// Cancels the turn; running tools observe the cancellation and the turn ends with
    /// [`NoeticError::Cancelled`].
    pub fn cancel(&self) {
        self.cancel.cancel();
    }
}

impl IntoFuture for Turn {
    type Output = Result<String, NoeticError>;
    type IntoFuture = BoxFuture<'static, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            self.handle.await.unwrap_or_else(|e| Err(NoeticError::other(format!("the turn's task failed: {e}"))))
        })
    }
}

impl Session {
    pub(super) fn new(runtime: Arc<RuntimeInner>, handles: Handles, state: Arc<SessionState>) -> Self {
        Session { runtime, handles, state }
    }

    /// The session's live state: this handle's, unless the runtime evicted it since — then the one the runtime
    /// holds now (read from its log again if needed).
    fn live(&self) -> Cow<'_, Arc<SessionState>> {
        if self.state.evicted.load(Ordering::SeqCst) {
            Cow::Owned(super::state_of(&self.runtime, &self.state.key))
        } else {
            Cow::Borrowed(&self.state)
        }
    }

    /// Runs `f` on the live state's conversation, locked; looks again when an eviction won the race for the lock.
    fn locked<R>(&self, f: impl FnOnce(&Arc<SessionState>, &mut Conversation) -> R) -> R {
        let mut state = self.live();
        loop {
            let mut conversation = lock(&state.conversation);
            if !state.evicted.load(Ordering::SeqCst) {
                return f(&state, &mut conversation);
            }
            drop(conversation);
            state = Cow::Owned(super::state_of(&self.runtime, &self.state.key));
        }
    }

    /// The session key.
    pub fn key(&self) -> &str {
        &self.state.key
    }

    /// The conversation so far, as [`Item`]s (including what a running turn has added).
    pub fn history(&self) -> Vec<Item> {
        self.locked(|_, conversation| match conversation {
            Conversation::Idle(h) => h.to_vec(),
            Conversation::Running { ctx, .. } => ctx.items(),
        })
    }

    /// The steering decisions the session's log holds, oldest first (with a log store; empty without one — a
    /// [`SteeringLayer`](crate::steering::SteeringLayer) keeps each execution's own in memory).
    pub fn ledger(&self) -> Vec<crate::steering::LedgerEntry> {
        self.live().logged().map(Logged::ledger).unwrap_or_default()
    }

    /// Adds a decision made outside the steering layer (an approval a configuration gave without a question, say)
    /// to the session's ledger, chained after its last entry (and signed with the runtime's
    /// [ledger key](super::RuntimeBuilder::ledger_key) when no turn runs: it is then the last entry). Without a
    /// log store the ledger is the steering layer's, and this does nothing.
    pub fn record_decision(&self, entry: &crate::steering::LedgerEntry) {
        let state = self.live();
        let Some(logged) = state.logged() else { return };
        let idle = !self.is_busy();
        let signer = self.runtime.ledger_key.as_deref();
        super::log_chain::append_decision(logged, state.key(), None, entry.clone(), signer, idle, Vec::new);
    }

    /// True while a turn runs.
    pub fn is_busy(&self) -> bool {
        self.locked(|_, conversation| matches!(conversation, Conversation::Running { .. }))
    }

    /// Subscribes to this session's events (turns, steps, model and tool calls, tool progress) from now on —
    /// also those of a turn already running — as a tokio
    /// [`broadcast::Receiver`](tokio::sync::broadcast::Receiver)`<Arc<`[`Event`]`>>` (match on
    /// [`Event::kind`], an [`EventKind`]). A receiver that falls behind loses events
    /// ([`RecvError::Lagged`](tokio::sync::broadcast::error::RecvError::Lagged)); use [`Session::follow`] to get
    /// every event or an explicit gap.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        match sink(&self.live()).subscribe() {
            Some(rx) => rx,
            None => broadcast::channel(1).1,
        }
    }

    /// Follows this session's events with an [`EventFollower`], in order from the one numbered after `after`
    /// ([`Event::seq`]; 0: from the oldest the session's log still holds): what the log holds first, then live events. Events the bounded log
    /// (the last [`SESSION_EVENT_LOG_CAPACITY`]) no longer holds are reported as one [`Followed::Gap`](crate::context::Followed::Gap), never
    /// skipped silently; a follower that falls behind catches up the same way. The log starts at the first
    /// subscription or follow. A session that is followed is never evicted.
    pub fn follow(&self, after: u64) -> EventFollower {
        // A session's sink always has a log; were it missing, the follower would just end.
        sink(&self.live()).follow(after).unwrap_or_else(EventFollower::ended)
    }

    /// The number of the session's newest event (0 before the first subscription).
    pub fn last_event_seq(&self) -> u64 {
        self.live().events.get().map_or(0, EventSink::last_seq)
    }

    /// How many turns this session has started (the running turn's number while one runs).
    pub fn turns(&self) -> u64 {
        self.live().turns.load(Ordering::SeqCst)
    }

    /// Cancels the running turn, if any. Returns true if there was one.
    pub fn cancel(&self, reason: &str) -> bool {
        self.locked(|_, conversation| match conversation {
            Conversation::Running { ctx, .. } => {
                ctx.cancel(reason);
                true
            }
            Conversation::Idle(_) => false,
        })
    }

    /// Starts a [`Turn`] with a user message; the turn runs from now on, awaiting it gives its answer. Fails with
    /// [`SessionError::Busy`] while another turn runs (see [`SessionError`] for the other cases).
    pub async fn send(&self, message: impl Into<String>) -> Result<Turn, SessionError> {
        let message = message.into();
        self.opened().await.map_err(|message| SessionError::Unavailable { session: self.key().to_owned(), message })?;
        if let Some(reached) = self.live().paused() {
            // Nothing runs over the budget: the message waits for the limit to be raised.
            return Err(match self.steer(message).await {
                Ok(queued) => self.paused_error(&reached, Some(queued)),
                Err(e) => SessionError::Paused {
                    session: self.key().to_owned(),
                    reason: format!("{reached}; the message was not queued either: {e}"),
                    queued: None,
                },
            });
        }
        if let Some(owner) = self.lease().await? {
            return Err(SessionError::BusyElsewhere { session: self.key().to_owned(), owner });
        }
        let started = self.locked(|state, conversation| {
            let history = claim(state, conversation)?;
            Ok(self.start_turn(state, conversation, history, message, Vec::new(), TurnKind::Fresh))
        });
        if started.is_err() {
            self.unlease().await;
        }
        started
    }

    /// Where the session's log is shared between processes: takes its lease for a turn (kept for the turn that
    /// starts next), or names the worker that holds it. `None` when this process may go on.
    async fn lease(&self) -> Result<Option<String>, SessionError> {
        let state = self.live().into_owned();
        let hold = super::log_lease::hold(&state, &self.runtime.worker, self.runtime.lease_term)
            .await
            .map_err(|message| SessionError::Store { session: self.key().to_owned(), message })?;
        match hold {
            super::log_lease::Hold::Free => Ok(None),
            super::log_lease::Hold::Held(guard) => {
                if let Some(logged) = state.logged() {
                    *lock(&logged.held) = Some(guard);
                }
                Ok(None)
            }
            super::log_lease::Hold::Elsewhere(owner) => Ok(Some(owner)),
        }
    }

    /// Gives back a lease [`Session::lease`] took for a turn that did not start. Not while a turn runs here: the
    /// lease is this process's (one holder name), and that turn — started by a concurrent call meanwhile — holds it
    /// and gives it up at its end; releasing it now would let another worker start a second turn.
    async fn unlease(&self) {
        let state = self.live().into_owned();
        let guard = state.logged().and_then(|l| lock(&l.held).take());
        if let Some(guard) = guard
            && !state.is_running()
        {
            guard.release().await;
        }
    }

    /// Queues a message for the running turn and returns its [`MessageId`]: it reaches the model at the next
    /// checkpoint (after the running tool call), and the rest of that tool batch is skipped (the session's
    /// [`BatchPolicy`]). While the session is idle the message waits for
    /// the next turn or [`Session::continue_session`]. A full queue refuses the message with a [`SteerError`], and says so.
    pub async fn steer(&self, text: impl Into<String>) -> Result<MessageId, SteerError> {
        let text = text.into();
        self.opened().await.map_err(|message| SteerError::Unavailable { session: self.key().to_owned(), message })?;
        let (state, accepted) = self.locked(|state, conversation| (state.clone(), enqueue(state, conversation, text)));
        settle(&state, accepted?).await
    }

    /// Opens the session's log the first time it is needed (see [`SessionState::open_log`]).
    async fn opened(&self) -> Result<(), String> {
        let state = self.live().into_owned();
        let opened = state.open_log().await;
        if opened.is_err() {
            // Not kept: the next use reads the log again.
            super::forget_unopened(&self.runtime, &state);
        }
        opened
    }

    /// Starts a turn if the session is idle ([`Routed::Started`] with its [`Turn`]), or steers the message into the
    /// running turn ([`Routed::Steered`] with its [`MessageId`]) — decided atomically,
    /// so a message can never fall between a turn's last checkpoint and its release unnoticed (see
    /// [`MessageBus`](super::MessageBus), which runs a continuation for such messages). While a turn a stopped
    /// process left waits ([`Session::unfinished_turn`]), the message is queued for it ([`Routed::Steered`]): it
    /// reaches the model at that turn's first checkpoint once it is resumed ([`Session::resume`]), or starts the
    /// next turn if it is discarded.
    pub async fn send_or_steer(&self, text: impl Into<String>) -> Result<Routed, SteerError> {
        let text = text.into();
        self.opened().await.map_err(|message| SteerError::Unavailable { session: self.key().to_owned(), message })?;
        let leased = self
            .lease()
            .await
            .map_err(|e| SteerError::Store { session: self.key().to_owned(), message: e.to_string() })?;
        if leased.is_some() {
            // Another worker runs the session's turn: the message goes to it through the log.
            return self.steer_elsewhere(text).await.map(Routed::Steered);
        }
        let (state, routed) = self.locked(|state, conversation| (state.clone(), self.route(state, conversation, text)));
        match routed {
            Ok(Routing::Started(turn)) => Ok(Routed::Started(turn)),
            Ok(Routing::Steered(accepted)) => {
                self.unlease().await;
                settle(&state, accepted).await.map(Routed::Steered)
            }
            Err(e) => {
                self.unlease().await;
                Err(e)
            }
        }
    }

    /// Accepts a message for a turn another worker runs: appended to the shared log, where that worker takes it at
    /// its next checkpoint (SPEC 6.4).
    async fn steer_elsewhere(&self, text: String) -> Result<MessageId, SteerError> {
        if text.trim().is_empty() {
            return Err(SteerError::Empty);
        }
        let state = self.live().into_owned();
        let message = SteerMessage::new(text);
        super::log_lease::tell_holder(&state, &[Entry::MessageAccepted { message: message.clone() }])
            .await
            .map_err(|e| SteerError::Store { session: state.key.to_string(), message: e })?;
        if let Some(sink) = state.events.get() {
            let (session, id) = (state.key.clone(), message.id.to_string());
            sink.emit(ExecutionId::new(), || EventKind::SteeringQueued { session, id });
        }
        Ok(message.id)
    }

    /// [`Session::send_or_steer`] under the conversation lock: a started turn, or a message accepted (not yet
    /// settled in the log).
    fn route(
        &self,
        state: &Arc<SessionState>,
        conversation: &mut Conversation,
        text: String,
    ) -> Result<Routing, SteerError> {
        {
            let history = match conversation {
                // Queue while holding the conversation lock: the turn cannot be released in between, so the
                // bus's continuation check after the turn sees this message.
                Conversation::Running { .. } => {
                    return enqueue(state, conversation, text).map(Routing::Steered);
                }
                // Paused over its budget: the message waits for the limit to be raised.
                Conversation::Idle(_) if state.paused().is_some() => {
                    return enqueue(state, conversation, text).map(Routing::Steered);
                }
                Conversation::Idle(_) => match claim(state, conversation) {
                    Ok(history) => history,
                    // A dead process's turn waits to be resumed (here or by whoever takes the session over): the
                    // message waits for it like any other steering, durably.
                    Err(SessionError::Unfinished { .. }) => {
                        return enqueue(state, conversation, text).map(Routing::Steered);
                    }
                    Err(e) => {
                        return Err(SteerError::Unavailable { session: state.key.to_string(), message: e.to_string() });
                    }
                },
            };
            Ok(Routing::Started(self.start_turn(state, conversation, history, text, Vec::new(), TurnKind::Fresh)))
        }
    }

    /// Steers the message if a turn is running (atomically, like [`Session::send_or_steer`]): its [`MessageId`], or
    /// the [`SteerError`] that refused it; `None` when idle.
    pub async fn steer_if_running(&self, text: &str) -> Option<Result<MessageId, SteerError>> {
        let (state, accepted) = self.locked(|state, conversation| {
            let Conversation::Running { .. } = conversation else { return (state.clone(), None) };
            (state.clone(), Some(enqueue(state, conversation, text.to_owned())))
        });
        match accepted? {
            Ok(accepted) => Some(settle(&state, accepted).await),
            Err(e) => Some(Err(e)),
        }
    }

    /// Stops the session: clears its queue (including messages the running turn took but has not shown the
    /// model) and cancels the running turn; running tools see the cancellation. Returns how many queued
    /// messages were dropped and whether a turn was running.
    /// In a store several processes share, a turn running in another process is stopped there (at its next
    /// checkpoint), and the stored queue is cleared.
    pub async fn stop(&self, reason: &str) -> (usize, bool) {
        if let Err(e) = self.opened().await {
            tracing::error!(session = %self.key(), error = %e, "could not stop the session");
            return (0, false);
        }
        let (state, receipt, stopped) = self.locked(|state, conversation| {
            let (cleared, running) = stop_conversation(state, conversation, reason);
            let receipt = state.drop_logged_queue(reason);
            (state.clone(), receipt, (cleared, running))
        });
        note_failure(&state, receipt, "could not write the cleared queue to the log").await;
        if !stopped.1 && self.running_elsewhere().await.is_some() {
            // Another worker runs the turn: the stop reaches it through the shared log, at its next checkpoint.
            let entries = [
                Entry::StopRequested { reason: reason.to_owned() },
                Entry::MessagesDropped { ids: Vec::new(), reason: reason.to_owned() },
            ];
            match super::log_lease::tell_holder(&state, &entries).await {
                Ok(()) => return (stopped.0, true),
                Err(e) => tracing::error!(session = %state.key, error = %e, "could not stop a turn running elsewhere"),
            }
        }
        stopped
    }

    /// The worker that runs the session's turn, when it is another process (a session log store with leases);
    /// `None` when no turn runs, it runs here, or the store cannot say (logged as a warning).
    pub async fn running_elsewhere(&self) -> Option<String> {
        let state = self.live().into_owned();
        let leases = state.logged().and_then(|l| l.store().leases())?;
        match leases.holder(&state.key).await {
            Ok(Some(holder)) => (*holder != *self.runtime.worker).then_some(holder),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(session = %state.key, error = %e, "could not ask who runs the session");
                None
            }
        }
    }

    /// This session's dequeue mode, a [`SteeringMode`] (it starts with the runtime's).
    pub fn steering_mode(&self) -> SteeringMode {
        self.live().settings.mode()
    }

    /// Changes this session's dequeue mode ([`SteeringMode`]; no other session's); its next checkpoint uses it.
    pub async fn set_steering_mode(&self, mode: SteeringMode) {
        self.change_settings(|settings| settings.set_mode(mode)).await;
    }

    /// Changes a setting and writes the settings where the session is kept (a failure is logged: the session goes
    /// on with them in memory).
    async fn change_settings(&self, change: impl FnOnce(&SessionSettings)) {
        if let Err(e) = self.opened().await {
            tracing::error!(session = %self.key(), error = %e, "the setting is not saved");
        }
        let (state, receipt) = self.locked(|state, _| {
            change(&state.settings);
            (state.clone(), state.submit(vec![state.settings_entry()]))
        });
        note_failure(&state, receipt, "could not write the session's settings to the log").await;
    }

    /// How many messages this session may have queued at once (it starts with the runtime's).
    pub fn steering_capacity(&self) -> usize {
        self.live().settings.capacity()
    }

    /// Changes this session's queue capacity (at least 1); messages already queued stay.
    pub async fn set_steering_capacity(&self, capacity: usize) {
        self.change_settings(|settings| settings.set_capacity(capacity)).await;
    }

    /// Messages queued for this session.
    pub fn queued(&self) -> usize {
        self.live().queue.len()
    }

    /// What happens to the rest of a tool batch when steering arrives, for this session: a [`BatchPolicy`] (it
    /// starts with the runtime's).
    pub fn batch_policy(&self) -> BatchPolicy {
        self.live().settings.batch_policy()
    }

    /// Changes this session's batch policy ([`BatchPolicy`]); the next checkpoint uses it.
    pub async fn set_batch_policy(&self, policy: BatchPolicy) {
        self.change_settings(|settings| settings.set_batch_policy(policy)).await;
    }

    /// A copy of the messages ([`SteerMessage`]s) queued for this session, oldest first.
    pub fn queued_messages(&self) -> Vec<SteerMessage> {
        self.live().queue.peek()
    }

    /// Empties this session's queue; returns how many messages were removed.
    pub async fn clear_queue(&self) -> usize {
        if let Err(e) = self.opened().await {
            tracing::error!(session = %self.key(), error = %e, "could not clear the queue");
            return 0;
        }
        let (state, receipt, cleared) = self.locked(|state, _| {
            let cleared = clear_queue(state);
            (state.clone(), state.drop_logged_queue("the queue was cleared"), cleared)
        });
        note_failure(&state, receipt, "could not write the cleared queue to the log").await;
        cleared
    }

    /// Resumes an idle session with its queued messages in a new [`Turn`]: `Ok(None)` when none are queued (no
    /// model call); [`SessionError::Busy`] while a turn runs. The messages (taken by the queue's mode) reach the
    /// model as separate user messages; the turn-start poll is skipped.
    pub async fn continue_session(&self) -> Result<Option<Turn>, SessionError> {
        self.opened().await.map_err(|message| SessionError::Unavailable { session: self.key().to_owned(), message })?;
        if let Some(owner) = self.lease().await? {
            return Err(SessionError::BusyElsewhere { session: self.key().to_owned(), owner });
        }
        let started = self.locked(|state, conversation| {
            if matches!(*conversation, Conversation::Running { .. }) {
                return Err(SessionError::Busy { session: state.key.to_string() });
            }
            if let Some(reached) = state.paused() {
                return Err(self.paused_error(&reached, None));
            }
            // What other processes queued for the idle session is in the queue already (heard through the log).
            if state.queue.len() == 0 {
                return Ok(None);
            }
            let history = claim(state, conversation)?;
            let messages = state.queue.take(state.settings.mode());
            if messages.is_empty() {
                *conversation = Conversation::Idle(history);
                return Ok(None);
            }
            Ok(Some(self.start_turn(state, conversation, history, String::new(), messages, TurnKind::Continuation)))
        });
        if !matches!(started, Ok(Some(_))) {
            self.unlease().await;
        }
        started
    }

    /// Starts a turn on a claimed conversation (the caller holds its lock and took its history).
    fn start_turn(
        &self,
        state: &Arc<SessionState>,
        conversation: &mut Conversation,
        history: History,
        message: String,
        pending: Vec<SteerMessage>,
        kind: TurnKind,
    ) -> Turn {
        let cancel = CancellationToken::new();
        let execution_id = ExecutionId::new();
        let number = match kind {
            // The turn a stopped process left keeps its number: it was the session's last one started.
            TurnKind::Resumed => state.turns.load(Ordering::SeqCst).max(1),
            TurnKind::Fresh | TurnKind::Continuation => state.turns.fetch_add(1, Ordering::SeqCst) + 1,
        };
        let skip_initial_poll = kind == TurnKind::Continuation;
        let span = turn_span(&state.key, number);
        let steering = Arc::new(TurnSteering::new(
            state.clone(),
            state.key.clone(),
            execution_id,
            skip_initial_poll,
            span.clone(),
        ));
        // The lease taken for this turn (a shared log) goes with it: renewed while it runs, given up at its end.
        let lease = state.logged().and_then(|logged| {
            logged.running.store(true, Ordering::SeqCst);
            lock(&logged.held).take()
        });
        let log_journal = state.logged().map(|logged| {
            let replay = match kind {
                TurnKind::Resumed => lock(&logged.unfinished).take().map(|r| ReplayIndex::of(&r)).unwrap_or_default(),
                TurnKind::Fresh | TurnKind::Continuation => ReplayIndex::default(),
            };
            Arc::new(LogJournal::new(state.clone(), number, replay))
        });
        let journal = log_journal.as_ref().map(|journal| journal.clone() as Arc<dyn TurnJournal>);
        let records = log_journal.as_ref().map(|journal| {
            Arc::new(LogRecords { journal: journal.clone(), runtime: Arc::downgrade(&self.runtime) })
                as Arc<dyn RecordSink>
        });
        // In a session log, the turn's start (or its resumption by this process) and the messages a continuation
        // starts with are one append; the turn's task waits for it before it does anything.
        let mut opening = log_journal.as_ref().map(|_| {
            vec![match kind {
                TurnKind::Resumed => Entry::TurnResumed { turn: number, by: process_name() },
                TurnKind::Fresh | TurnKind::Continuation => {
                    Entry::TurnStarted { turn: number, execution_id, input: message.clone() }
                }
            }]
        });
        let meter = state.meter(&self.runtime.default_budget, kind == TurnKind::Resumed);
        let shared = self.runtime.shared.local();
        let ctx = Context::builder()
            .execution_id(execution_id)
            .thread_id(state.key.clone())
            .history(history)
            .events(sink(state).clone())
            .shared_services(shared.services.clone(), shared.layers.clone())
            .turn_services(TurnServices {
                steering: Some(steering.clone()),
                journal,
                records,
                meter: Some(meter.clone()),
            })
            .cancel_with(&cancel)
            .build();
        *conversation = Conversation::Running { ctx: ctx.clone(), steering: steering.clone() };
        state.touch(super::tick(&self.runtime));
        // Messages a continuation starts with enter the conversation now, whatever the agent does next, so they
        // are shown (and persisted) exactly once.
        if !pending.is_empty() {
            let count = pending.len();
            if let Some(entries) = &mut opening {
                entries.push(Entry::Injected { turn: number, ids: pending.iter().map(|m| m.id).collect() });
            }
            ctx.extend_items(pending.into_iter().map(|m| Item::user(m.text)));
            if let Some(logged) = state.logged() {
                logged.set_persisted(ctx.with_items(<[Item]>::len));
            }
            ctx.emit(|| EventKind::SteeringInjected { session: state.key.clone(), count });
            tracing::info!(parent: &span, noetic.steering.count = count, "steering.injected");
        }
        let opening = opening.and_then(|entries| state.submit(entries));
        let renewing = CancellationToken::new();
        if let Some(lease) = &lease {
            lease.keep(cancel.clone(), renewing.clone());
        }
        // Whatever happens in the task — an error, a panic, the task being aborted or never run — the session is
        // released. The task reaches the runtime (and the agent) through it: every other clone of the runtime or
        // the step would make each turn write one more reference count that all threads share.
        let mut release = Release {
            state: state.clone(),
            ctx: ctx.clone(),
            steering,
            runtime: self.handles.local().clone(),
            ended: None,
        };
        let handle = tokio::spawn(
            async move {
                let (state, runtime) = (&release.state, &release.runtime);
                let session = state.key.clone();
                let started = tokio::time::Instant::now();
                ctx.events().set_turn(Some(number));
                ctx.emit(|| EventKind::TurnStarted { session: session.clone(), turn: number });
                // A turn the log does not hold does not run.
                let opened = match opening {
                    Some(receipt) => settled(receipt).await.map(|_| ()).map_err(|e| {
                        NoeticError::other(format!("turn {number} of session '{session}' could not be logged: {e}"))
                    }),
                    None => Ok(()),
                };
                let logged = opened.is_ok();
                let opened = match opened {
                    Ok(()) => super::persist::load_global(runtime).await,
                    failed => failed,
                };
                // Layers whose state could not be restored do not run: the turn fails, nothing else happens.
                let result = match opened.and_then(|()| state.load_layer_states(runtime)) {
                    Err(e) => Err(e),
                    Ok(()) => AssertUnwindSafe(crate::run(&runtime.agent, message, &ctx))
                        .catch_unwind()
                        .await
                        .unwrap_or_else(|p| {
                            Err(NoeticError::other(format!(
                                "turn {number} of session '{session}' panicked: {}",
                                crate::error::panic_message(&*p)
                            )))
                        }),
                };
                // Said once the session is idle (see `Release`): whoever hears it finds the turn over.
                release.ended = Some(match &result {
                    Ok(_) => {
                        EventKind::TurnCompleted { session: session.clone(), turn: number, duration: started.elapsed() }
                    }
                    Err(e) => {
                        crate::trace::fail_with(&tracing::Span::current(), e);
                        EventKind::TurnFailed { session: session.clone(), turn: number, error: e.clone() }
                    }
                });
                state.settle_budget(&ctx, &meter, number, logged).await;
                if let Some(journal) = log_journal.filter(|_| logged) {
                    let outcome = match &result {
                        Ok(answer) => TurnOutcome::Completed { answer: answer.clone() },
                        Err(error) => TurnOutcome::Failed { error: error.clone() },
                    };
                    let layers =
                        state.logged().map(|l| super::persist::thread_changes(&runtime.layers, &session, &l.layers));
                    if let Err(e) = journal.end(&ctx, layers.unwrap_or_default(), outcome).await {
                        tracing::error!(session = %session, error = %e, "could not write the end of a turn to the log");
                    }
                    super::persist::save_global(runtime).await;
                    // The log holds no open turn once this one ended: nothing is left to resume, whatever a
                    // concurrent resume attempt read meanwhile.
                    if let Some(logged) = state.logged()
                        && lock(&logged.projection).open_turn.is_none()
                    {
                        *lock(&logged.unfinished) = None;
                    }
                }
                if let Some(logged) = state.logged() {
                    logged.running.store(false, Ordering::SeqCst);
                }
                renewing.cancel();
                if let Some(lease) = lease {
                    lease.release().await;
                }
                drop(release);
                result
            }
            .instrument(span),
        );
        Turn { number, execution_id, cancel, handle }
    }

    /// The `llm` step of a turn a stopped process left unfinished, if there is one (see [`Session::resume`]).
    pub fn unfinished_turn(&self) -> Option<String> {
        self.live().unfinished_step()
    }

    /// Resumes the turn a stopped process left: journaled model responses are not requested again, journaled
    /// tool outcomes are not re-run, and a call that was running gets the interrupted result (SPEC 6.3).
    /// The resumed [`Turn`], `Ok(None)` when there is none; [`SessionError::Busy`] while a turn runs.
    pub async fn resume(&self) -> Result<Option<Turn>, SessionError> {
        self.opened().await.map_err(|message| SessionError::Unavailable { session: self.key().to_owned(), message })?;
        if let Some(owner) = self.lease().await? {
            return Err(SessionError::BusyElsewhere { session: self.key().to_owned(), owner });
        }
        let started = self.locked(|state, conversation| {
            if matches!(conversation, Conversation::Running { .. }) {
                return Err(SessionError::Busy { session: state.key.to_string() });
            }
            if state.unfinished_step().is_none() {
                return Ok(None);
            }
            let Conversation::Idle(history) = conversation else {
                return Err(SessionError::Busy { session: state.key.to_string() });
            };
            let history = std::mem::take(history);
            // The agent runs again with the message the turn started with (its finished steps answer from the log).
            let input = state
                .logged()
                .and_then(|l| lock(&l.projection).open_turn.as_ref().map(|t| t.input.clone()))
                .unwrap_or_default();
            Ok(Some(self.start_turn(state, conversation, history, input, Vec::new(), TurnKind::Resumed)))
        });
        if !matches!(started, Ok(Some(_))) {
            self.unlease().await;
        }
        started
    }

    /// Gives up the turn a stopped process left: every tool call in the conversation without a result gets the
    /// interrupted result, and nothing is left to resume. Returns false when there was none; a
    /// [`SessionError`] while a turn runs or when the store cannot write it.
    pub async fn discard_unfinished(&self) -> Result<bool, SessionError> {
        self.opened().await.map_err(|message| SessionError::Unavailable { session: self.key().to_owned(), message })?;
        if let Some(owner) = self.lease().await? {
            return Err(SessionError::BusyElsewhere { session: self.key().to_owned(), owner });
        }
        let discarded = self.discard_held().await;
        self.unlease().await;
        discarded
    }

    /// [`Session::discard_unfinished`] once this process may write the session.
    async fn discard_held(&self) -> Result<bool, SessionError> {
        let logged = self.locked(|state, conversation| {
            let Conversation::Idle(history) = conversation else {
                return Err(SessionError::Busy { session: state.key.to_string() });
            };
            if state.unfinished_step().is_none() {
                return Ok(None);
            }
            let Some(logged) = state.logged() else { return Ok(None) };
            let open = unanswered_calls(history.as_slice());
            let results: Vec<Item> =
                open.iter().map(|id| Item::ToolResult(crate::turn::interrupted_result(id))).collect();
            // The interrupted results and the turn's end are one append; the session changes once it is durable.
            let turn = lock(&logged.projection).open_turn.as_ref().map_or(0, |t| t.turn);
            let mut entries = Vec::new();
            if !results.is_empty() {
                entries.push(Entry::Appended { turn, items: results.clone() });
            }
            entries.push(Entry::TurnEnded { turn, outcome: TurnOutcome::Discarded });
            Ok(Some((state.clone(), logged.submit(entries), results)))
        });
        let Some((state, receipt, results)) = logged? else { return Ok(false) };
        settled(receipt).await.map_err(|message| SessionError::Store { session: state.key.to_string(), message })?;
        let mut conversation = lock(&state.conversation);
        if let Conversation::Idle(history) = &mut *conversation {
            let mut items = history.to_vec();
            items.extend(results);
            if let Some(logged) = state.logged() {
                logged.set_persisted(items.len());
            }
            *history = History::new(items);
        }
        drop(conversation);
        state.clear_unfinished();
        Ok(true)
    }

    /// Waits until no turn runs.
    pub async fn idle(&self) {
        loop {
            let state = self.live().into_owned();
            let ended = state.turn_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !matches!(*lock(&state.conversation), Conversation::Running { .. }) {
                return;
            }
            ended.await;
        }
    }
}

/// The ids of the calls in `items` with no result after them, in call order. Calls and results pair up in order:
/// call ids are unique within a turn, not across turns (a model may reuse `c1` in every turn).
fn unanswered_calls(items: &[Item]) -> Vec<String> {
    let mut open: Vec<&str> = Vec::new();
    for item in items {
        match item {
            Item::ToolCall(c) => open.push(&c.id),
            Item::ToolResult(r) => {
                if let Some(at) = open.iter().position(|id| *id == r.call_id) {
                    open.remove(at);
                }
            }
            _ => {}
        }
    }
    open.into_iter().map(str::to_owned).collect()
}

/// How this process names itself in the log when it resumes a turn another left.
fn process_name() -> String {
    format!("pid {}", std::process::id())
}

/// A turn's span (see [`crate::trace`]), disabled when no subscriber wants it.
fn turn_span(session: &str, number: u64) -> tracing::Span {
    tracing::info_span!(
        "invoke_agent",
        otel.name = "invoke_agent",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.conversation.id = session,
        noetic.turn = number,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// How a turn starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TurnKind {
    /// With a message: the session's next number.
    Fresh,
    /// With queued messages, skipping the turn-start poll: the session's next number.
    Continuation,
    /// The turn a stopped process left: its own number.
    Resumed,
}

/// What [`Session::route`] did with a message.
enum Routing {
    Started(Turn),
    Steered((MessageId, Option<Receipt>)),
}

/// Takes the idle conversation's history for a new turn: `Busy` while a turn runs, `Unfinished` while a stopped
/// process's turn waits to be resumed or discarded.
fn claim(state: &SessionState, conversation: &mut Conversation) -> Result<History, SessionError> {
    if state.unfinished_step().is_some() {
        return Err(SessionError::Unfinished { session: state.key.to_string() });
    }
    match conversation {
        Conversation::Running { .. } => Err(SessionError::Busy { session: state.key.to_string() }),
        Conversation::Idle(h) => Ok(std::mem::take(h)),
    }
}

/// Queues a message and tells the event stream (and the running turn's span) whether it was accepted.
fn enqueue(
    state: &SessionState,
    conversation: &Conversation,
    text: String,
) -> Result<(MessageId, Option<Receipt>), SteerError> {
    let (execution_id, span) = match conversation {
        Conversation::Running { ctx, steering } => (ctx.execution_id(), Some(steering.span())),
        Conversation::Idle(_) => (ExecutionId::new(), None),
    };
    // Admitted under the conversation lock (every enqueue holds it, so the capacity check holds). In a session log
    // the entry is handed to the writer here, in this order, and the message is visible at once: a turn that
    // injects it appends that after this entry (see `settle`).
    let result = state.queue.admit(&state.key, text, state.settings.capacity());
    let mut receipt = None;
    if let Ok(message) = &result {
        receipt = state.submit(vec![Entry::MessageAccepted { message: message.clone() }]);
        state.queue.push_admitted(message.clone());
    }
    if let Some(span) = span.filter(|s| !s.is_disabled()) {
        match &result {
            Ok(m) => tracing::info!(parent: span, noetic.steering.message.id = %m.id, "steering.queued"),
            Err(e) => tracing::info!(parent: span, noetic.steering.error = %e, "steering.rejected"),
        }
    }
    if let Some(sink) = state.events.get() {
        let session = state.key.clone();
        match &result {
            Ok(m) => sink.emit(execution_id, || EventKind::SteeringQueued { session, id: m.id.to_string() }),
            Err(e) => sink.emit(execution_id, || EventKind::SteeringRejected { session, reason: e.to_string() }),
        }
    }
    result.map(|m| (m.id, receipt))
}

/// Waits for a write to the session log that the caller cannot undo; a failure is logged.
async fn note_failure(state: &SessionState, receipt: Option<Receipt>, what: &str) {
    if let Some(receipt) = receipt
        && let Err(e) = settled(receipt).await
    {
        tracing::error!(session = %state.key, error = %e, "{what}");
    }
}

/// Waits until an accepted message is in the session log; when the write failed, the message leaves the queue
/// (unless a turn already took it) and the error says why.
async fn settle(state: &SessionState, accepted: (MessageId, Option<Receipt>)) -> Result<MessageId, SteerError> {
    let (id, receipt) = accepted;
    let Some(receipt) = receipt else { return Ok(id) };
    match settled(receipt).await {
        Ok(_) => Ok(id),
        Err(message) => {
            state.queue.remove(id);
            Err(SteerError::Store { session: state.key.to_string(), message })
        }
    }
}

/// The session's sink: numbered, logged, opened at the first subscription; shared with every turn's context so
/// that a subscriber arriving mid-turn sees the rest of it.
fn sink(state: &SessionState) -> &EventSink {
    state.events.get_or_init(|| match state.logged() {
        // Kept in a log: numbered by its positions, so numbers never repeat across processes (SPEC 7.1).
        Some(logged) => EventSink::numbered_by_position(
            SESSION_EVENT_CAPACITY,
            SESSION_EVENT_LOG_CAPACITY,
            logged.positions(&state.key),
        ),
        None => EventSink::dormant_with_log(SESSION_EVENT_CAPACITY, SESSION_EVENT_LOG_CAPACITY),
    })
}

/// Stops the session: messages the running turn took but has not shown are dropped, the turn is cancelled (its
/// tools see it) and the queue is emptied. Returns how many queued messages were dropped and whether a turn ran.
fn stop_conversation(state: &SessionState, conversation: &Conversation, reason: &str) -> (usize, bool) {
    let running = match conversation {
        Conversation::Running { ctx, steering } => {
            steering.discard_pending();
            ctx.cancel(reason);
            true
        }
        Conversation::Idle(_) => false,
    };
    (clear_queue(state), running)
}

/// Empties the queue; returns how many messages were removed.
fn clear_queue(state: &SessionState) -> usize {
    state.queue.clear()
}
