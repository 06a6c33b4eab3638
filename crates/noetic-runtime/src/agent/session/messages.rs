//! Messages into a session: starting a turn with one, steering the running turn, routing between the two, and
//! stopping; each message is acknowledged once it is in the session log.

use super::*;

impl Session {
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
    pub(super) async fn lease(&self) -> Result<Option<String>, SessionError> {
        let state = self.live().into_owned();
        let hold = super::lease::hold(&state, &self.runtime.worker, self.runtime.lease_term)
            .await
            .map_err(|message| SessionError::Store { session: self.key().to_owned(), message })?;
        match hold {
            super::lease::Hold::Free => Ok(None),
            super::lease::Hold::Held(guard) => {
                if let Some(logged) = state.logged() {
                    *lock(&logged.held) = Some(guard);
                }
                Ok(None)
            }
            super::lease::Hold::Elsewhere(owner) => Ok(Some(owner)),
        }
    }

    /// Gives back a lease [`Session::lease`] took for a turn that did not start. Not while a turn runs here: the
    /// lease is this process's (one holder name), and that turn — started by a concurrent call meanwhile — holds it
    /// and gives it up at its end; releasing it now would let another worker start a second turn.
    pub(super) async fn unlease(&self) {
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
    pub(super) async fn opened(&self) -> Result<(), String> {
        let state = self.live().into_owned();
        let opened = state.open_log().await;
        if opened.is_err() {
            // Not kept: the next use reads the log again.
            crate::agent::forget_unopened(&self.runtime, &state);
        }
        opened
    }

    /// Starts a turn if the session is idle ([`Routed::Started`] with its [`Turn`]), or steers the message into the
    /// running turn ([`Routed::Steered`] with its [`MessageId`]) — decided atomically,
    /// so a message can never fall between a turn's last checkpoint and its release unnoticed (see
    /// [`MessageBus`](crate::agent::MessageBus), which runs a continuation for such messages). While a turn a stopped
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
    pub(super) async fn steer_elsewhere(&self, text: String) -> Result<MessageId, SteerError> {
        if text.trim().is_empty() {
            return Err(SteerError::Empty);
        }
        let state = self.live().into_owned();
        let message = SteerMessage::new(text);
        super::lease::tell_holder(&state, &[Entry::MessageAccepted { message: message.clone() }])
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
    pub(super) fn route(
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
            match super::lease::tell_holder(&state, &entries).await {
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
}

/// What [`Session::route`] did with a message.
pub(super) enum Routing {
    Started(Turn),
    Steered((MessageId, Option<Receipt>)),
}

/// Queues a message and tells the event stream (and the running turn's span) whether it was accepted.
pub(super) fn enqueue(
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
        // Noted before it is handed over: the writer takes it out once written.
        if let Some(logged) = state.logged() {
            lock(&logged.unwritten).push(message.id);
        }
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
pub(super) async fn note_failure(state: &SessionState, receipt: Option<Receipt>, what: &str) {
    if let Some(receipt) = receipt
        && let Err(e) = settled(receipt).await
    {
        tracing::error!(session = %state.key, error = %e, "{what}");
    }
}

/// Waits until an accepted message is in the session log; when the write failed, the message leaves the queue
/// (unless a turn already took it) and the error says why.
pub(super) async fn settle(
    state: &SessionState,
    accepted: (MessageId, Option<Receipt>),
) -> Result<MessageId, SteerError> {
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
