//! The session's state behind its handle: the conversation (idle, or in the running turn's context), the queue,
//! the settings and the log; and the guard that hands a finished turn's conversation back.

use super::*;

/// Where the conversation lives: in the session while idle, in the turn's context while a turn runs (so the
/// turn appends without copying the history).
pub(super) enum Conversation {
    Idle(History),
    Running { ctx: Context, steering: Arc<TurnSteering> },
}

pub(crate) struct SessionState {
    pub(super) key: Arc<str>,
    pub(super) conversation: Mutex<Conversation>,
    /// Created on first subscription, so idle sessions cost no event buffer.
    pub(super) events: OnceLock<EventSink>,
    pub(super) turns: AtomicU64,
    /// Notified when a turn ends.
    pub(super) turn_ended: Notify,
    pub(super) settings: SessionSettings,
    pub(super) queue: SessionQueue,
    /// The runtime's logical clock when the session was last used (the least recently used idle sessions are
    /// evicted first).
    pub(super) last_used: AtomicU64,
    /// Set (under the conversation lock) when the runtime dropped this state: handles then find the live one.
    pub(super) evicted: AtomicBool,
    /// What a session kept in a session log keeps besides (boxed: a session without a log pays one pointer).
    pub(super) logged: Option<Box<Logged>>,
    /// Without a log: the session's budget, what it spent and its pause (with one, the log's projection holds them).
    pub(super) account: Mutex<crate::budget::Account>,
    /// Without a log: the session's title (with one, the log's projection holds it).
    pub(super) title: Mutex<Option<String>>,
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
    pub(crate) fn with_log(mut self, store: Arc<dyn LogStore>, hub: Arc<crate::agent::log_hub::LogHub>) -> Self {
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
                let foreign: crate::agent::logged::Foreign = Arc::new(move |records| {
                    if let Some(state) = weak.upgrade() {
                        state.take_foreign(records);
                    }
                });
                match logged.open(&self.key, first, foreign).await {
                    Ok(projection) => {
                        self.apply_projection(projection, &[]);
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
    pub(super) fn take_foreign(&self, records: &[crate::agent::log::Record]) {
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
            let (projection, unwritten) = logged.projection_and_unwritten();
            if projection.open_turn.is_none() {
                // The turn this process found open when it opened the session ended elsewhere.
                *lock(&logged.unfinished) = None;
            }
            logged.set_persisted(projection.conversation.len());
            self.apply_projection(projection, &unwritten);
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
        let (projection, unwritten) = logged.projection_and_unwritten();
        let open = projection.open_turn.clone();
        if !self.is_running() {
            logged.set_persisted(projection.conversation.len());
            self.apply_projection(projection, &unwritten);
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
    pub(super) fn settings_entry(&self) -> Entry {
        Entry::Settings {
            mode: self.settings.mode(),
            capacity: u32::try_from(self.settings.capacity()).unwrap_or(u32::MAX),
            batch_policy: self.settings.batch_policy(),
        }
    }

    /// Takes what the log says of the session (it was just opened, or read again while no turn runs here). The
    /// queue becomes the log's, followed by this process's messages in `unwritten` (accepted here, their entries
    /// still on their way to the log, where they will follow everything the projection holds): a message steered
    /// while the log was read again is not lost.
    pub(super) fn apply_projection(&self, projection: Projection, unwritten: &[crate::agent::queue::MessageId]) {
        // Under the conversation lock, which every acceptance holds: those accepted since the caller's look are
        // still unwritten now (they were not when the projection was read either).
        let mut conversation = lock(&self.conversation);
        let now = self.logged().map(|l| lock(&l.unwritten).clone()).unwrap_or_default();
        let on_their_way: Vec<_> = if unwritten.is_empty() && now.is_empty() {
            Vec::new()
        } else {
            self.queue.peek().into_iter().filter(|m| unwritten.contains(&m.id) || now.contains(&m.id)).collect()
        };
        if projection.last > 0 {
            self.settings.set_mode(projection.settings.mode);
            self.settings.set_capacity(projection.settings.capacity as usize);
            self.settings.set_batch_policy(projection.settings.batch_policy);
        }
        self.turns.store(projection.turns, Ordering::SeqCst);
        self.queue.clear();
        self.queue.push_existing(projection.queue);
        self.queue.push_existing(on_their_way);
        if let Conversation::Idle(history) = &mut *conversation {
            *history = History::new(projection.conversation).with_folded(projection.compacted);
        }
    }

    /// Records in the session log that the queue was emptied (`None` without a log).
    pub(super) fn drop_logged_queue(&self, reason: &str) -> Option<Receipt> {
        self.submit(vec![Entry::MessagesDropped { ids: Vec::new(), reason: reason.to_owned() }])
    }

    /// Hands `entries` to the session log's writer (in the order of the calls); `None` without a log.
    pub(super) fn submit(&self, entries: Vec<Entry>) -> Option<Receipt> {
        self.logged().map(|l| l.submit(entries))
    }

    /// The `llm` step of the turn a dead process left, if any.
    pub(super) fn unfinished_step(&self) -> Option<String> {
        if let Some(logged) = self.logged() {
            return lock(&logged.unfinished)
                .as_ref()
                .map(|records| ReplayIndex::running_step(records).unwrap_or_default());
        }
        None
    }

    pub(super) fn clear_unfinished(&self) {
        if let Some(logged) = self.logged() {
            *lock(&logged.unfinished) = None;
        }
    }

    /// Brings the layers' saved state into them before a turn.
    pub(super) fn load_layer_states(&self, runtime: &RuntimeInner) -> Result<(), NoeticError> {
        if let Some(logged) = self.logged() {
            let projection = lock(&logged.projection);
            let saved = projection.layer_states.get(&crate::agent::thread_scope(&self.key));
            return crate::agent::persist::load_thread(&runtime.layers, &self.key, &logged.layers, saved);
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
pub(super) struct Release {
    pub(super) state: Arc<SessionState>,
    pub(super) ctx: Context,
    pub(super) steering: Arc<TurnSteering>,
    pub(super) runtime: TurnHandle,
    /// How the turn ended (`turn_completed` or `turn_failed`), emitted once the session is idle — after the end is
    /// in the log — so that whoever hears it and looks at the session finds the turn over.
    pub(super) ended: Option<EventKind>,
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
        crate::agent::evict_over_limit(&self.runtime);
    }
}

/// Takes the idle conversation's history for a new turn: `Busy` while a turn runs, `Unfinished` while a stopped
/// process's turn waits to be resumed or discarded.
pub(super) fn claim(state: &SessionState, conversation: &mut Conversation) -> Result<History, SessionError> {
    if state.unfinished_step().is_some() {
        return Err(SessionError::Unfinished { session: state.key.to_string() });
    }
    match conversation {
        Conversation::Running { .. } => Err(SessionError::Busy { session: state.key.to_string() }),
        Conversation::Idle(h) => Ok(std::mem::take(h)),
    }
}

/// The session's sink: numbered, logged, opened at the first subscription; shared with every turn's context so
/// that a subscriber arriving mid-turn sees the rest of it.
pub(super) fn sink(state: &SessionState) -> &EventSink {
    state.events.get_or_init(|| match state.logged() {
        // Kept in a log: numbered by its positions, so numbers never repeat across processes (SPEC 7.1).
        Some(logged) => EventSink::numbered_by_position(
            SESSION_EVENT_LOG_CAPACITY,
            SESSION_EVENT_LOG_CAPACITY,
            logged.positions(&state.key),
        ),
        None => EventSink::dormant_with_log(SESSION_EVENT_LOG_CAPACITY, SESSION_EVENT_LOG_CAPACITY),
    })
}

/// Stops the session: messages the running turn took but has not shown are dropped, the turn is cancelled (its
/// tools see it) and the queue is emptied. Returns how many queued messages were dropped and whether a turn ran.
pub(super) fn stop_conversation(state: &SessionState, conversation: &Conversation, reason: &str) -> (usize, bool) {
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
pub(super) fn clear_queue(state: &SessionState) -> usize {
    state.queue.clear()
}
