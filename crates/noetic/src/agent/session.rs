//! One conversation and its turns.

use std::future::IntoFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{Notify, broadcast};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::queue::{MessageId, SessionQueue};
use super::{BatchPolicy, SteerError, SteerMessage, SteeringMode, TurnSteering};
use super::{RuntimeInner, SessionSettings};
use crate::context::{Context, Event, EventFollower, EventKind, EventSink, ExecutionId, Services, lock};
use crate::error::NoeticError;
use crate::model::{History, Item};

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
        }
    }
}

/// Releases a session when its turn's task ends, however it ends: the conversation becomes idle with the
/// turn's history, taken-but-unshown steering goes back to the queue, and waiters are woken.
struct Release {
    state: Arc<SessionState>,
    ctx: Context,
    steering: Arc<TurnSteering>,
}

impl Drop for Release {
    fn drop(&mut self) {
        self.ctx.events().set_turn(None);
        // Messages taken at a checkpoint but never shown to the model go back to the head of the queue.
        self.steering.return_pending();
        *lock(&self.state.conversation) = Conversation::Idle(self.ctx.history());
        self.state.turn_ended.notify_waiters();
    }
}

/// A handle on one conversation. Clones share it.
#[derive(Clone)]
pub struct Session {
    runtime: Arc<RuntimeInner>,
    state: Arc<SessionState>,
}

/// A running turn. Await it for the agent's answer.
pub struct Turn {
    number: u64,
    cancel: CancellationToken,
    handle: JoinHandle<Result<String, NoeticError>>,
}

impl Turn {
    /// The turn's number within its session (1-based).
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Cancels the turn; running tools observe the cancellation and the turn ends with `Cancelled`.
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
    pub(super) fn new(runtime: Arc<RuntimeInner>, state: Arc<SessionState>) -> Self {
        Session { runtime, state }
    }

    /// The session key.
    pub fn key(&self) -> &str {
        &self.state.key
    }

    /// The conversation so far (including what a running turn has added).
    pub fn history(&self) -> Vec<Item> {
        match &*lock(&self.state.conversation) {
            Conversation::Idle(h) => h.to_vec(),
            Conversation::Running { ctx, .. } => ctx.items(),
        }
    }

    /// True while a turn runs.
    pub fn is_busy(&self) -> bool {
        matches!(*lock(&self.state.conversation), Conversation::Running { .. })
    }

    /// Subscribes to this session's events (turns, steps, model and tool calls, tool progress) from now on —
    /// also those of a turn already running. A receiver that falls behind loses events (`Lagged`); use
    /// [`Session::follow`] to get every event or an explicit gap.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        match self.sink().subscribe() {
            Some(rx) => rx,
            None => broadcast::channel(1).1,
        }
    }

    /// Follows this session's events in order from the one numbered after `after` (`Event::seq`; 0: from the
    /// oldest the session's log still holds): what the log holds first, then live events. Events the bounded log
    /// (the last [`SESSION_EVENT_LOG_CAPACITY`]) no longer holds are reported as one [`Followed::Gap`](crate::context::Followed::Gap), never
    /// skipped silently; a follower that falls behind catches up the same way. The log starts at the first
    /// subscription or follow.
    pub fn follow(&self, after: u64) -> EventFollower {
        // A session's sink always has a log; were it missing, the follower would just end.
        self.sink().follow(after).unwrap_or_else(EventFollower::ended)
    }

    /// The number of the session's newest event (0 before the first subscription).
    pub fn last_event_seq(&self) -> u64 {
        self.state.events.get().map_or(0, EventSink::last_seq)
    }

    /// The session's sink: numbered, logged, opened at the first subscription; shared with every turn's context
    /// so that a subscriber arriving mid-turn sees the rest of it.
    fn sink(&self) -> &EventSink {
        self.state
            .events
            .get_or_init(|| EventSink::dormant_with_log(SESSION_EVENT_CAPACITY, SESSION_EVENT_LOG_CAPACITY))
    }

    /// Cancels the running turn, if any. Returns true if there was one.
    pub fn cancel(&self, reason: &str) -> bool {
        match &*lock(&self.state.conversation) {
            Conversation::Running { ctx, .. } => {
                ctx.cancel(reason);
                true
            }
            Conversation::Idle(_) => false,
        }
    }

    /// Starts a turn with a user message. Fails with [`SessionError::Busy`] while another turn runs.
    pub fn send(&self, message: impl Into<String>) -> Result<Turn, SessionError> {
        let mut conversation = lock(&self.state.conversation);
        let history = self.claim(&mut conversation)?;
        Ok(self.start_turn(&mut conversation, history, message.into(), Vec::new(), false))
    }

    /// Takes the idle conversation's history for a new turn; `Busy` while a turn runs.
    fn claim(&self, conversation: &mut Conversation) -> Result<History, SessionError> {
        match conversation {
            Conversation::Running { .. } => Err(SessionError::Busy { session: self.state.key.to_string() }),
            Conversation::Idle(h) => Ok(std::mem::take(h)),
        }
    }

    /// Queues a message for the running turn: it reaches the model at the next checkpoint (after the running
    /// tool call), and the rest of that tool batch is skipped. While the session is idle the message waits for
    /// the next turn or [`Session::continue_session`]. A full queue refuses the message, and says so.
    pub fn steer(&self, text: impl Into<String>) -> Result<MessageId, SteerError> {
        let execution_id = match &*lock(&self.state.conversation) {
            Conversation::Running { ctx, .. } => ctx.execution_id(),
            Conversation::Idle(_) => ExecutionId::new(),
        };
        self.enqueue(execution_id, text.into())
    }

    /// Queues a message and tells the event stream whether it was accepted.
    fn enqueue(&self, execution_id: ExecutionId, text: String) -> Result<MessageId, SteerError> {
        let result = self.state.queue.push(&self.state.key, text, self.state.settings.capacity());
        if let Some(sink) = self.state.events.get() {
            let session = self.state.key.clone();
            match &result {
                Ok(m) => sink.emit(execution_id, || EventKind::SteeringQueued { session, id: m.id.to_string() }),
                Err(e) => sink.emit(execution_id, || EventKind::SteeringRejected { session, reason: e.to_string() }),
            }
        }
        result.map(|m| m.id)
    }

    /// Starts a turn if the session is idle, or steers the message into the running turn — decided atomically,
    /// so a message can never fall between a turn's last checkpoint and its release unnoticed (see
    /// [`MessageBus`](super::MessageBus), which runs a continuation for such messages).
    pub fn send_or_steer(&self, text: impl Into<String>) -> Result<Routed, SteerError> {
        let text = text.into();
        let mut conversation = lock(&self.state.conversation);
        let history = match &mut *conversation {
            // Queue while holding the conversation lock: the turn cannot be released in between, so the bus's
            // continuation check after the turn sees this message.
            Conversation::Running { ctx, .. } => return self.enqueue(ctx.execution_id(), text).map(Routed::Steered),
            Conversation::Idle(h) => std::mem::take(h),
        };
        Ok(Routed::Started(self.start_turn(&mut conversation, history, text, Vec::new(), false)))
    }

    /// Steers the message if a turn is running (atomically, like [`Session::send_or_steer`]); `None` when idle.
    pub fn steer_if_running(&self, text: &str) -> Option<Result<MessageId, SteerError>> {
        let conversation = lock(&self.state.conversation);
        let Conversation::Running { ctx, .. } = &*conversation else { return None };
        Some(self.enqueue(ctx.execution_id(), text.to_owned()))
    }

    /// Stops the session: clears its queue (including messages the running turn took but has not shown the
    /// model) and cancels the running turn; running tools see the cancellation. Returns how many queued
    /// messages were dropped and whether a turn was running.
    pub fn stop(&self, reason: &str) -> (usize, bool) {
        let conversation = lock(&self.state.conversation);
        let running = match &*conversation {
            Conversation::Running { ctx, steering } => {
                steering.discard_pending();
                ctx.cancel(reason);
                true
            }
            Conversation::Idle(_) => false,
        };
        (self.state.queue.clear(), running)
    }

    /// This session's dequeue mode (it starts with the runtime's).
    pub fn steering_mode(&self) -> SteeringMode {
        self.state.settings.mode()
    }

    /// Changes this session's dequeue mode (no other session's); its next checkpoint uses it.
    pub fn set_steering_mode(&self, mode: SteeringMode) {
        self.state.settings.set_mode(mode);
    }

    /// How many messages this session may have queued at once (it starts with the runtime's).
    pub fn steering_capacity(&self) -> usize {
        self.state.settings.capacity()
    }

    /// Changes this session's queue capacity (at least 1); messages already queued stay.
    pub fn set_steering_capacity(&self, capacity: usize) {
        self.state.settings.set_capacity(capacity);
    }

    /// Messages queued for this session.
    pub fn queued(&self) -> usize {
        self.state.queue.len()
    }

    /// What happens to the rest of a tool batch when steering arrives, for this session (it starts with the
    /// runtime's).
    pub fn batch_policy(&self) -> BatchPolicy {
        self.state.settings.batch_policy()
    }

    /// Changes this session's batch policy; the next checkpoint uses it.
    pub fn set_batch_policy(&self, policy: BatchPolicy) {
        self.state.settings.set_batch_policy(policy);
    }

    /// A copy of the messages queued for this session, oldest first.
    pub fn queued_messages(&self) -> Vec<SteerMessage> {
        self.state.queue.peek()
    }

    /// Empties this session's queue; returns how many messages were removed.
    pub fn clear_queue(&self) -> usize {
        self.state.queue.clear()
    }

    /// Resumes an idle session with its queued messages: `Ok(None)` when none are queued (no model call);
    /// [`SessionError::Busy`] while a turn runs. The messages (taken by the queue's mode) reach the model as
    /// separate user messages; the turn-start poll is skipped.
    pub fn continue_session(&self) -> Result<Option<Turn>, SessionError> {
        let mut conversation = lock(&self.state.conversation);
        if matches!(*conversation, Conversation::Running { .. }) {
            return Err(SessionError::Busy { session: self.state.key.to_string() });
        }
        let messages = self.state.queue.take(self.state.settings.mode());
        if messages.is_empty() {
            return Ok(None);
        }
        let history = self.claim(&mut conversation)?;
        Ok(Some(self.start_turn(&mut conversation, history, String::new(), messages, true)))
    }

    /// Starts a turn on a claimed conversation (the caller holds its lock and took its history).
    fn start_turn(
        &self,
        conversation: &mut Conversation,
        history: History,
        message: String,
        pending: Vec<SteerMessage>,
        skip_initial_poll: bool,
    ) -> Turn {
        let cancel = CancellationToken::new();
        let execution_id = ExecutionId::new();
        let steering =
            Arc::new(TurnSteering::new(self.state.clone(), self.state.key.clone(), execution_id, skip_initial_poll));
        let services = Services { steering: Some(steering.clone()), ..self.runtime.services.clone() };
        let ctx = Context::builder()
            .execution_id(execution_id)
            .thread_id(self.state.key.clone())
            .history(history)
            .events(self.sink().clone())
            .layers(self.runtime.layers.iter().cloned())
            .services(services)
            .cancel_with(&cancel)
            .build();
        *conversation = Conversation::Running { ctx: ctx.clone(), steering: steering.clone() };
        // Messages a continuation starts with enter the conversation now, whatever the agent does next, so they
        // are shown (and persisted) exactly once.
        if !pending.is_empty() {
            let count = pending.len();
            ctx.extend_items(pending.into_iter().map(|m| Item::user(m.text)));
            ctx.emit(|| EventKind::SteeringInjected { session: self.state.key.clone(), count });
        }
        let number = self.state.turns.fetch_add(1, Ordering::SeqCst) + 1;
        let agent = self.runtime.agent.clone();
        let state = self.state.clone();
        let handle = tokio::spawn(async move {
            // Whatever happens below — an error, a panic, the task being aborted — the session is released.
            let release = Release { state: state.clone(), ctx: ctx.clone(), steering };
            let session = state.key.clone();
            let started = tokio::time::Instant::now();
            ctx.events().set_turn(Some(number));
            ctx.emit(|| EventKind::TurnStarted { session: session.clone(), turn: number });
            let result = AssertUnwindSafe(crate::run(&agent, message, &ctx)).catch_unwind().await.unwrap_or_else(|p| {
                Err(NoeticError::other(format!(
                    "turn {number} of session '{session}' panicked: {}",
                    crate::error::panic_message(&*p)
                )))
            });
            match &result {
                Ok(_) => ctx.emit(|| EventKind::TurnCompleted {
                    session: session.clone(),
                    turn: number,
                    duration: started.elapsed(),
                }),
                Err(e) => {
                    ctx.emit(|| EventKind::TurnFailed { session: session.clone(), turn: number, error: e.clone() })
                }
            }
            drop(release);
            result
        });
        Turn { number, cancel, handle }
    }

    /// Waits until no turn runs.
    pub async fn idle(&self) {
        loop {
            let ended = self.state.turn_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !self.is_busy() {
                return;
            }
            ended.await;
        }
    }
}
