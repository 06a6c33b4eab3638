//! One conversation and its turns.

use std::future::IntoFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use futures::future::BoxFuture;
use tokio::sync::{Notify, broadcast};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::RuntimeInner;
use super::queue::MessageId;
use super::{SteerError, SteerMessage, SteeringMode, TurnSteering};
use crate::context::{Context, Event, EventKind, EventSink, ExecutionId, Services, lock};
use crate::error::NoeticError;
use crate::model::{History, Item};

/// How many events a session buffers per subscriber.
const SESSION_EVENT_CAPACITY: usize = 1024;

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
    Running { ctx: Context },
}

pub(crate) struct SessionState {
    key: Arc<str>,
    conversation: Mutex<Conversation>,
    /// Created on first subscription, so idle sessions cost no event buffer.
    events: OnceLock<EventSink>,
    turns: AtomicU64,
    /// Notified when a turn ends.
    turn_ended: Notify,
}

impl SessionState {
    pub(crate) fn new(key: Arc<str>) -> Self {
        SessionState {
            key,
            conversation: Mutex::new(Conversation::Idle(History::default())),
            events: OnceLock::new(),
            turns: AtomicU64::new(0),
            turn_ended: Notify::new(),
        }
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

    /// Subscribes to this session's events (turns, steps, model and tool calls, tool progress).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        let sink = self.state.events.get_or_init(|| EventSink::new(SESSION_EVENT_CAPACITY));
        match sink.subscribe() {
            Some(rx) => rx,
            None => broadcast::channel(1).1,
        }
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
        self.start_turn(&mut conversation, message.into(), Vec::new(), false)
    }

    /// Queues a message for the running turn: it reaches the model at the next checkpoint (after the running
    /// tool call), and the rest of that tool batch is skipped. While the session is idle the message waits for
    /// the next turn or [`Session::continue_session`]. A full queue refuses the message, and says so.
    pub fn steer(&self, text: impl Into<String>) -> Result<MessageId, SteerError> {
        let result = self.runtime.queue.push(&self.state.key, text);
        let sink = self.state.events.get();
        let id = match &*lock(&self.state.conversation) {
            Conversation::Running { ctx } => ctx.execution_id(),
            Conversation::Idle(_) => ExecutionId::new(),
        };
        if let Some(sink) = sink {
            let session = self.state.key.clone();
            match &result {
                Ok(m) => sink.emit(id, || EventKind::SteeringQueued { session, id: m.id.to_string() }),
                Err(e) => sink.emit(id, || EventKind::SteeringRejected { session, reason: e.to_string() }),
            }
        }
        result.map(|m| m.id)
    }

    /// The steering queue's dequeue mode.
    pub fn steering_mode(&self) -> SteeringMode {
        self.runtime.queue.mode()
    }

    /// Changes the dequeue mode; the next checkpoint uses it.
    pub fn set_steering_mode(&self, mode: SteeringMode) {
        self.runtime.queue.set_mode(mode);
    }

    /// Messages queued for this session.
    pub fn queued(&self) -> usize {
        self.runtime.queue.len(&self.state.key)
    }

    /// Empties this session's queue; returns how many messages were removed.
    pub fn clear_queue(&self) -> usize {
        self.runtime.queue.clear(&self.state.key)
    }

    /// Resumes an idle session with its queued messages: `Ok(None)` when none are queued (no model call);
    /// [`SessionError::Busy`] while a turn runs. The messages (taken by the queue's mode) reach the model as
    /// separate user messages; the turn-start poll is skipped.
    pub fn continue_session(&self) -> Result<Option<Turn>, SessionError> {
        let mut conversation = lock(&self.state.conversation);
        if matches!(*conversation, Conversation::Running { .. }) {
            return Err(SessionError::Busy { session: self.state.key.to_string() });
        }
        let messages = self.runtime.queue.dequeue(&self.state.key);
        if messages.is_empty() {
            return Ok(None);
        }
        self.start_turn(&mut conversation, String::new(), messages, true).map(Some)
    }

    fn start_turn(
        &self,
        conversation: &mut Conversation,
        message: String,
        pending: Vec<SteerMessage>,
        skip_initial_poll: bool,
    ) -> Result<Turn, SessionError> {
        let history = match conversation {
            Conversation::Running { .. } => {
                self.runtime.queue.return_to_front(&self.state.key, pending);
                return Err(SessionError::Busy { session: self.state.key.to_string() });
            }
            Conversation::Idle(h) => std::mem::take(h),
        };
        let cancel = CancellationToken::new();
        let execution_id = ExecutionId::new();
        let steering = Arc::new(TurnSteering::new(
            self.runtime.queue.clone(),
            self.state.key.clone(),
            execution_id,
            self.runtime.batch_policy,
            pending,
            skip_initial_poll,
        ));
        let services = Services { steering: Some(steering.clone()), ..self.runtime.services.clone() };
        let ctx = Context::builder()
            .execution_id(execution_id)
            .thread_id(self.state.key.clone())
            .history(history)
            .events(self.state.events.get().cloned().unwrap_or_default())
            .layers(self.runtime.layers.iter().cloned())
            .services(services)
            .cancel_with(&cancel)
            .build();
        *conversation = Conversation::Running { ctx: ctx.clone() };
        let number = self.state.turns.fetch_add(1, Ordering::SeqCst) + 1;
        let agent = self.runtime.agent.clone();
        let state = self.state.clone();
        let handle = tokio::spawn(async move {
            let session = state.key.clone();
            let started = tokio::time::Instant::now();
            ctx.emit(|| EventKind::TurnStarted { session: session.clone(), turn: number });
            let result = crate::run(&agent, message, &ctx).await;
            // Messages taken at a checkpoint but never shown to the model go back to the head of the queue.
            steering.return_pending();
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
            *lock(&state.conversation) = Conversation::Idle(ctx.history());
            state.turn_ended.notify_waiters();
            result
        });
        Ok(Turn { number, cancel, handle })
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
