//! The live steering queue (seed 3): messages a user types while the agent works, held per session until the
//! turn reaches a checkpoint.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::context::lock;
use crate::error::{ConfigCode, ConfigError};

/// The default per-session capacity (seed 3: `MaxQueueSize = 10`).
pub const DEFAULT_QUEUE_CAPACITY: usize = 10;

/// The identity of a steering message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MessageId(Uuid);

impl MessageId {
    fn new() -> Self {
        MessageId(crate::context::new_v7())
    }
}

impl MessageId {
    /// The id `text` shows ([`MessageId`]'s `Display`), if it is one.
    pub fn parse(text: &str) -> Option<MessageId> {
        Uuid::parse_str(text).ok().map(MessageId)
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A message waiting in a session's queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteerMessage {
    /// Its id.
    pub id: MessageId,
    /// The text, injected as a user message.
    pub text: String,
    /// When it was accepted.
    pub accepted_at: SystemTime,
}

impl SteerMessage {
    /// A new message with a fresh id, accepted now (for [`log::queue_message`](super::log::queue_message)).
    pub fn new(text: impl Into<String>) -> Self {
        SteerMessage { id: MessageId::new(), text: text.into(), accepted_at: SystemTime::now() }
    }
}

/// How many messages a checkpoint takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SteeringMode {
    /// The head message only (the default).
    #[default]
    OneAtATime,
    /// Every queued message.
    All,
}

impl SteeringMode {
    /// Parses `"one-at-a-time"` or `"all"` (any case, surrounding spaces ignored). Anything else is a
    /// [`ConfigError`] (`INVALID_STEERING_MODE`) naming the value and the valid ones: a typo must not silently
    /// pick a mode. (The library reads no environment variables; programs map their configuration — e.g. the
    /// CLI's `agents.defaults.steering_mode` — into [`RuntimeBuilder::steering_mode`](super::RuntimeBuilder::steering_mode).)
    pub fn parse(s: &str) -> Result<SteeringMode, ConfigError> {
        let v = s.trim();
        if v.eq_ignore_ascii_case("all") {
            Ok(SteeringMode::All)
        } else if v.eq_ignore_ascii_case("one-at-a-time") {
            Ok(SteeringMode::OneAtATime)
        } else {
            Err(ConfigError::new(
                ConfigCode::InvalidSteeringMode,
                format!("'{}' is not a steering mode", v.escape_debug()),
                "use \"one-at-a-time\" or \"all\"",
            ))
        }
    }

    pub(crate) fn to_u8(self) -> u8 {
        u8::from(self == SteeringMode::All)
    }

    pub(crate) fn from_u8(v: u8) -> SteeringMode {
        if v == 1 { SteeringMode::All } else { SteeringMode::OneAtATime }
    }

    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SteeringMode::OneAtATime => "one-at-a-time",
            SteeringMode::All => "all",
        }
    }
}

/// Why a message was not queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SteerError {
    /// The session already holds `capacity` messages; the message was not queued. Wait for the agent to take
    /// some, or stop the turn.
    #[error(
        "the steering queue of session '{session}' is full ({capacity} messages); wait for the agent to reach a checkpoint or stop the turn"
    )]
    QueueFull {
        /// The session.
        session: String,
        /// Its capacity.
        capacity: usize,
    },
    /// The message is empty.
    #[error("a steering message must not be empty")]
    Empty,
    /// The session's store could not keep the message; it was not queued.
    #[error("session '{session}': the store could not keep the steering message ({message}); it was not queued")]
    Store {
        /// The session key.
        session: String,
        /// Why.
        message: String,
    },
    /// The session could not be restored from the runtime's archive; nothing is queued for it.
    #[error(
        "session '{session}' could not be restored from its archive ({message}); fix the archive and open it again"
    )]
    Unavailable {
        /// The session key.
        session: String,
        /// Why.
        message: String,
    },
}

/// Keyed FIFO queues with a shared capacity per key and a mode switchable at run time, for programs that route
/// steering without a [`Runtime`](super::Runtime). A runtime's sessions do not share one: each keeps its own FIFO
/// behind its own lock ([`Session::steer`](super::Session::steer), [`Session::queued_messages`](super::Session::queued_messages)).
pub struct SteeringQueue {
    queues: Mutex<HashMap<Arc<str>, VecDeque<SteerMessage>>>,
    capacity: usize,
    mode: AtomicU8,
}

impl fmt::Debug for SteeringQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SteeringQueue").field("capacity", &self.capacity).field("mode", &self.mode()).finish()
    }
}

impl SteeringQueue {
    /// Queues holding at most `capacity` messages per session (at least 1).
    pub fn new(capacity: usize, mode: SteeringMode) -> Self {
        let q = SteeringQueue { queues: Mutex::new(HashMap::new()), capacity: capacity.max(1), mode: AtomicU8::new(0) };
        q.set_mode(mode);
        q
    }

    /// The per-session capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The default dequeue mode (sessions of a [`Runtime`](super::Runtime) start with it and may change
    /// their own).
    pub fn mode(&self) -> SteeringMode {
        SteeringMode::from_u8(self.mode.load(Ordering::SeqCst))
    }

    /// Changes the default dequeue mode used by [`SteeringQueue::dequeue`].
    pub fn set_mode(&self, mode: SteeringMode) {
        self.mode.store(mode.to_u8(), Ordering::SeqCst);
    }

    /// Queues a message for `session`, bounded by the queue's capacity.
    pub fn push(&self, session: &str, text: impl Into<String>) -> Result<SteerMessage, SteerError> {
        self.push_bounded(session, text, self.capacity)
    }

    /// Queues a message for `session`, bounded by `capacity` (a session's own setting; at least 1).
    pub fn push_bounded(
        &self,
        session: &str,
        text: impl Into<String>,
        capacity: usize,
    ) -> Result<SteerMessage, SteerError> {
        let text = text.into();
        if text.trim().is_empty() {
            return Err(SteerError::Empty);
        }
        let mut queues = lock(&self.queues);
        let queue = match queues.get_mut(session) {
            Some(q) => q,
            None => queues.entry(Arc::from(session)).or_default(),
        };
        push_into(queue, session, text, capacity)
    }

    /// Takes messages for `session` by the queue's default mode (empty when there are none).
    pub fn dequeue(&self, session: &str) -> Vec<SteerMessage> {
        self.dequeue_by(session, self.mode())
    }

    /// Takes messages for `session` by `mode` (a session's own setting).
    pub fn dequeue_by(&self, session: &str, mode: SteeringMode) -> Vec<SteerMessage> {
        let mut queues = lock(&self.queues);
        let Some(queue) = queues.get_mut(session) else { return Vec::new() };
        let taken = take_from(queue, mode);
        if queue.is_empty() {
            queues.remove(session);
        }
        taken
    }

    /// Puts messages back at the head of `session`'s queue, in their order (used when a turn is aborted after
    /// taking them but before the model saw them). They may exceed the capacity: nothing accepted is dropped.
    pub fn return_to_front(&self, session: &str, messages: Vec<SteerMessage>) {
        if messages.is_empty() {
            return;
        }
        put_back(lock(&self.queues).entry(Arc::from(session)).or_default(), messages);
    }

    /// Messages waiting for `session`.
    pub fn len(&self, session: &str) -> usize {
        lock(&self.queues).get(session).map_or(0, VecDeque::len)
    }

    /// A copy of the messages waiting for `session`.
    pub fn peek(&self, session: &str) -> Vec<SteerMessage> {
        lock(&self.queues).get(session).map(|q| q.iter().cloned().collect()).unwrap_or_default()
    }

    /// Empties `session`'s queue; returns how many messages were removed.
    pub fn clear(&self, session: &str) -> usize {
        lock(&self.queues).remove(session).map_or(0, |q| q.len())
    }
}

/// Appends a message unless `queue` holds `capacity` (at least 1) already.
fn push_into(
    queue: &mut VecDeque<SteerMessage>,
    session: &str,
    text: String,
    capacity: usize,
) -> Result<SteerMessage, SteerError> {
    let capacity = capacity.max(1);
    if queue.len() >= capacity {
        return Err(SteerError::QueueFull { session: session.to_owned(), capacity });
    }
    let message = SteerMessage { id: MessageId::new(), text, accepted_at: SystemTime::now() };
    queue.push_back(message.clone());
    Ok(message)
}

/// Takes the head message, or every message, by `mode`.
fn take_from(queue: &mut VecDeque<SteerMessage>, mode: SteeringMode) -> Vec<SteerMessage> {
    match mode {
        SteeringMode::OneAtATime => queue.pop_front().into_iter().collect(),
        SteeringMode::All => queue.drain(..).collect(),
    }
}

/// Puts `messages` back at the head, in their order; they may exceed the capacity (nothing accepted is dropped).
fn put_back(queue: &mut VecDeque<SteerMessage>, messages: Vec<SteerMessage>) {
    for m in messages.into_iter().rev() {
        queue.push_front(m);
    }
}

/// One session's steering FIFO, behind a lock of its own: sessions never wait for each other to queue or take.
/// The FIFO is boxed and made on first use, so an idle session pays one pointer for it.
#[derive(Debug, Default)]
pub(crate) struct SessionQueue {
    // Boxed on purpose: one pointer while idle instead of a VecDeque's four words, times every idle session.
    #[allow(clippy::box_collection)]
    messages: Mutex<Option<Box<VecDeque<SteerMessage>>>>,
    /// Woken when a message is queued, made when a turn first waits for one (calls running together that steering
    /// cancels); until then queueing wakes nobody.
    arrivals: std::sync::OnceLock<std::sync::Arc<tokio::sync::Notify>>,
}

impl SessionQueue {
    /// Makes the message `text` would become if queued now (not empty, room left), without queueing it: a
    /// session writes it to its store first, so a turn can never take (and inject) a message the store does not
    /// hold yet — its removal would come before its insertion and leave it queued there forever.
    pub(crate) fn admit(&self, session: &str, text: String, capacity: usize) -> Result<SteerMessage, SteerError> {
        if text.trim().is_empty() {
            return Err(SteerError::Empty);
        }
        let capacity = capacity.max(1);
        if self.len() >= capacity {
            return Err(SteerError::QueueFull { session: session.to_owned(), capacity });
        }
        Ok(SteerMessage { id: MessageId::new(), text, accepted_at: SystemTime::now() })
    }

    /// Queues a message [`SessionQueue::admit`] made, at the tail.
    pub(crate) fn push_admitted(&self, message: SteerMessage) {
        lock(&self.messages).get_or_insert_default().push_back(message);
        self.wake();
    }

    /// Woken when a message is queued from now on (see [`Checkpoints::arrivals`](crate::context::Checkpoints)).
    pub(crate) fn arrivals(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.arrivals.get_or_init(Default::default).clone()
    }

    fn wake(&self) {
        if let Some(arrivals) = self.arrivals.get() {
            arrivals.notify_one();
        }
    }

    pub(crate) fn take(&self, mode: SteeringMode) -> Vec<SteerMessage> {
        lock(&self.messages).as_deref_mut().map(|q| take_from(q, mode)).unwrap_or_default()
    }

    pub(crate) fn put_back(&self, messages: Vec<SteerMessage>) {
        if !messages.is_empty() {
            put_back(lock(&self.messages).get_or_insert_default(), messages);
        }
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.messages).as_ref().map_or(0, |q| q.len())
    }

    /// Appends messages another process queued in the store (already durable there, already bounded there); one
    /// already held (same id) is not added twice.
    pub(crate) fn push_existing(&self, messages: Vec<SteerMessage>) {
        if !messages.is_empty() {
            let mut guard = lock(&self.messages);
            let queue = guard.get_or_insert_default();
            for message in messages {
                if !queue.iter().any(|m| m.id == message.id) {
                    queue.push_back(message);
                }
            }
            drop(guard);
            self.wake();
        }
    }

    /// Queues a message another process appended to the session's log, in log order: after the messages the log
    /// already holds (`durable`), before this process's own messages whose appends are still on their way (they
    /// land after it). One already held is not added twice.
    pub(crate) fn insert_foreign(&self, message: SteerMessage, durable: &dyn Fn(MessageId) -> bool) {
        let mut guard = lock(&self.messages);
        let queue = guard.get_or_insert_default();
        if queue.iter().any(|m| m.id == message.id) {
            return;
        }
        match queue.iter().position(|m| !durable(m.id)) {
            Some(at) => queue.insert(at, message),
            None => queue.push_back(message),
        }
        drop(guard);
        self.wake();
    }

    /// Removes the message `id` (its write to the log failed); false when it was not queued (a turn took it).
    pub(crate) fn remove(&self, id: MessageId) -> bool {
        let mut guard = lock(&self.messages);
        let Some(queue) = guard.as_deref_mut() else { return false };
        let before = queue.len();
        queue.retain(|m| m.id != id);
        queue.len() < before
    }

    pub(crate) fn peek(&self) -> Vec<SteerMessage> {
        lock(&self.messages).as_ref().map(|q| q.iter().cloned().collect()).unwrap_or_default()
    }

    /// Empties the queue; returns how many messages were removed.
    pub(crate) fn clear(&self) -> usize {
        lock(&self.messages).take().map_or(0, |q| q.len())
    }
}

impl Default for SteeringQueue {
    fn default() -> Self {
        SteeringQueue::new(DEFAULT_QUEUE_CAPACITY, SteeringMode::OneAtATime)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_strictly_and_a_bad_value_is_an_error_naming_it_and_the_valid_ones() {
        assert_eq!(SteeringMode::parse("all"), Ok(SteeringMode::All));
        assert_eq!(SteeringMode::parse(" ALL "), Ok(SteeringMode::All));
        assert_eq!(SteeringMode::parse("one-at-a-time"), Ok(SteeringMode::OneAtATime));
        for bad in ["", "bogus", "sometimes"] {
            let e = SteeringMode::parse(bad).err().unwrap_or_else(|| unreachable!("'{bad}' parsed"));
            assert_eq!(e.code, ConfigCode::InvalidSteeringMode);
            assert!(e.message.contains(&format!("'{bad}'")), "{e}");
            assert!(e.hint.contains("one-at-a-time") && e.hint.contains("all"), "{e}");
        }
    }

    #[test]
    fn queues_are_fifo_per_session_bounded_and_mode_driven() {
        let q = SteeringQueue::new(2, SteeringMode::OneAtATime);
        let a1 = q.push("a", "one").unwrap_or_else(|e| unreachable!("{e}"));
        q.push("a", "two").unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(q.push("a", "three"), Err(SteerError::QueueFull { session: "a".into(), capacity: 2 }));
        q.push("b", "other").unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(q.dequeue("a").iter().map(|m| m.text.as_str()).collect::<Vec<_>>(), vec!["one"]);
        q.return_to_front("a", vec![a1]);
        q.set_mode(SteeringMode::All);
        assert_eq!(q.dequeue("a").iter().map(|m| m.text.as_str()).collect::<Vec<_>>(), vec!["one", "two"]);
        assert!(q.dequeue("a").is_empty());
        assert_eq!(q.clear("b"), 1);
        assert_eq!(q.len("b"), 0);
        assert_eq!(q.push("a", "  "), Err(SteerError::Empty));
    }

    #[test]
    fn the_same_text_twice_is_two_messages() {
        let q = SteeringQueue::default();
        let x = q.push("s", "stop").unwrap_or_else(|e| unreachable!("{e}"));
        let y = q.push("s", "stop").unwrap_or_else(|e| unreachable!("{e}"));
        assert_ne!(x.id, y.id);
        assert_eq!(q.len("s"), 2);
    }
}
