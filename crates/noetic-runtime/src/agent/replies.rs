//! The [`MessageBus`](super::MessageBus)'s reply buffer: bounded, and a full buffer drops its oldest reply rather
//! than make anyone wait — a turn never blocks on a reader that is not there, so neither `publish` nor the turn
//! slots can stall behind unread replies.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::context::lock;
use crate::error::NoeticError;

/// How many replies a bus keeps for its reader by default.
pub const DEFAULT_REPLY_CAPACITY: usize = 1024;

struct State {
    queue: VecDeque<BusReply>,
    /// Replies dropped since the reader last received one (reported on the next reply it receives).
    missed: u64,
    /// Replies dropped in all.
    dropped: u64,
    /// Live senders (the bus and its clones, and running turn workers).
    senders: usize,
}

struct Shared {
    state: Mutex<State>,
    capacity: usize,
    ready: Notify,
}

/// Receives the replies of the turns a [`MessageBus`](super::MessageBus) ran, oldest first.
///
/// It keeps at most the capacity the bus was built with (default [`DEFAULT_REPLY_CAPACITY`]). When a reply
/// arrives and the buffer is full, the oldest reply is dropped, a `tracing` warning names its session, and the
/// next reply received says how many were dropped before it ([`BusReply::dropped_before`]); [`BusReplies::dropped`]
/// counts them all.
pub struct BusReplies {
    shared: Arc<Shared>,
}

/// The sending side, held by the bus and its workers.
pub(super) struct ReplySender {
    shared: Arc<Shared>,
}

/// A reply buffer keeping at most `capacity` replies (at least 1).
pub(super) fn reply_buffer(capacity: usize) -> (ReplySender, BusReplies) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State { queue: VecDeque::new(), missed: 0, dropped: 0, senders: 1 }),
        capacity: capacity.max(1),
        ready: Notify::new(),
    });
    (ReplySender { shared: shared.clone() }, BusReplies { shared })
}

impl ReplySender {
    /// Queues a reply; never waits. A full buffer drops its oldest reply first.
    pub(super) fn send(&self, reply: BusReply) {
        let mut state = lock(&self.shared.state);
        if state.queue.len() >= self.shared.capacity
            && let Some(oldest) = state.queue.pop_front()
        {
            state.missed += 1;
            state.dropped += 1;
            tracing::warn!(
                session = %oldest.session,
                capacity = self.shared.capacity,
                "message bus reply buffer full (nobody reads the replies): dropped the oldest reply"
            );
        }
        state.queue.push_back(reply);
        drop(state);
        self.shared.ready.notify_one();
    }
}

impl Clone for ReplySender {
    fn clone(&self) -> Self {
        lock(&self.shared.state).senders += 1;
        ReplySender { shared: self.shared.clone() }
    }
}

impl Drop for ReplySender {
    fn drop(&mut self) {
        lock(&self.shared.state).senders -= 1;
        self.shared.ready.notify_one();
    }
}

/// Why [`BusReplies::try_recv`] returned no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TryRecvError {
    /// No reply is waiting now.
    #[error("no reply is waiting")]
    Empty,
    /// No reply is waiting and none can come: the bus, its clones and its turns are all gone.
    #[error("the message bus is gone and every reply was received")]
    Closed,
}

impl BusReplies {
    /// The next reply; `None` once the bus, its clones and its turns are gone and every reply was received.
    pub async fn recv(&mut self) -> Option<BusReply> {
        loop {
            match self.try_recv() {
                Ok(reply) => return Some(reply),
                Err(TryRecvError::Closed) => return None,
                // A send between the check and the wait leaves a permit in `ready`, so no wake-up is lost.
                Err(TryRecvError::Empty) => self.shared.ready.notified().await,
            }
        }
    }

    /// The next reply if one is waiting.
    pub fn try_recv(&mut self) -> Result<BusReply, TryRecvError> {
        let mut state = lock(&self.shared.state);
        match state.queue.pop_front() {
            Some(mut reply) => {
                reply.dropped_before = std::mem::take(&mut state.missed);
                Ok(reply)
            }
            None if state.senders == 0 => Err(TryRecvError::Closed),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Replies waiting to be received.
    pub fn len(&self) -> usize {
        lock(&self.shared.state).queue.len()
    }

    /// True when no reply is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Replies dropped because the buffer was full, in all.
    pub fn dropped(&self) -> u64 {
        lock(&self.shared.state).dropped
    }

    /// The most replies kept at once.
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }
}

/// The outcome of one turn the bus ran.
#[derive(Debug, Clone)]
pub struct BusReply {
    /// The session.
    pub session: String,
    /// True for a continuation turn (messages that arrived after the previous turn's last checkpoint).
    pub continuation: bool,
    /// The agent's answer, or why there is none.
    pub result: Result<String, NoeticError>,
    /// Replies dropped just before this one because the reply buffer was full (nobody read them in time).
    pub dropped_before: u64,
}

impl BusReply {
    pub(crate) fn new(session: &str, continuation: bool, result: Result<String, NoeticError>) -> Self {
        BusReply { session: session.to_owned(), continuation, result, dropped_before: 0 }
    }
}
