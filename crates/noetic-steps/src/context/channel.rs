//! Channels: typed mailboxes steps use to talk to each other and to the outside world.
//!
//! Three modes:
//! * **value** — holds the latest value; `recv` returns it without consuming it (waits while there is none);
//! * **queue** — a bounded FIFO; `recv` takes the oldest value; `send` waits while the queue is full;
//! * **topic** — broadcast to receivers waiting *right now*; nothing is stored for later receivers.
//!
//! Blocking operations take the [`Context`] they run in: cancelling it wakes them with
//! [`NoeticError::Cancelled`]. A timeout gives [`NoeticError::ChannelTimeout`]; a closed channel gives
//! [`NoeticError::ChannelClosed`] (a queue is drained first).

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Context, lock};
use crate::error::{ConfigCode, ConfigError, NoeticError};

/// How long a blocked `send` on a full queue waits by default.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// How many recent topic messages are kept for receivers that are slow to wake.
const TOPIC_RETAINED: usize = 64;

/// A channel's delivery mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelMode {
    /// Latest value, read without consuming.
    Value,
    /// Bounded FIFO of at most `capacity` values.
    Queue {
        /// Maximum number of buffered values.
        capacity: usize,
    },
    /// Delivered only to receivers waiting when the value is sent.
    Topic,
}

/// Why [`Channel::try_send`] did not send. The value is handed back.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrySendError<T> {
    /// The queue is at capacity; wait with [`Channel::send`] or drop the value deliberately.
    #[error("channel is full")]
    Full(T),
    /// The channel was closed.
    #[error("channel is closed")]
    Closed(T),
}

struct State<T> {
    value: Option<T>,
    queue: VecDeque<T>,
    /// Recent topic messages with their sequence numbers.
    topic: VecDeque<(u64, T)>,
    /// Number of values ever sent (topic sequence).
    seq: u64,
    closed: bool,
}

struct Shared<T> {
    name: Arc<str>,
    mode: ChannelMode,
    state: Mutex<State<T>>,
    readable: Notify,
    writable: Notify,
    wake: Arc<Notify>,
}

/// A typed channel. Clones share the same channel.
pub struct Channel<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for Channel<T> {
    fn clone(&self) -> Self {
        Channel { shared: self.shared.clone() }
    }
}

impl<T> fmt::Debug for Channel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel").field("name", &self.shared.name).field("mode", &self.shared.mode).finish()
    }
}

/// A type-erased handle that observes sends on a channel without consuming anything (used by `every`'s
/// `wake_on`).
#[derive(Clone)]
pub struct WakeHandle {
    notify: Arc<Notify>,
}

impl WakeHandle {
    /// Resolves at the next send on the channel after this call (the wait is registered at once, before the
    /// returned future is first polled).
    pub fn notified(&self) -> impl Future<Output = ()> + Send + '_ {
        let mut wait = Box::pin(self.notify.notified());
        wait.as_mut().enable();
        wait
    }

    pub(crate) fn notify(&self) -> &Arc<Notify> {
        &self.notify
    }
}

impl fmt::Debug for WakeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WakeHandle")
    }
}

impl<T: Clone + Send + 'static> From<&Channel<T>> for WakeHandle {
    fn from(ch: &Channel<T>) -> Self {
        ch.wake_handle()
    }
}

impl<T: Clone + Send + 'static> Channel<T> {
    fn with_mode(name: impl Into<Arc<str>>, mode: ChannelMode) -> Self {
        Channel {
            shared: Arc::new(Shared {
                name: name.into(),
                mode,
                state: Mutex::new(State {
                    value: None,
                    queue: VecDeque::new(),
                    topic: VecDeque::new(),
                    seq: 0,
                    closed: false,
                }),
                readable: Notify::new(),
                writable: Notify::new(),
                wake: Arc::new(Notify::new()),
            }),
        }
    }

    /// A value channel: holds the latest value.
    pub fn value(name: impl Into<Arc<str>>) -> Self {
        Self::with_mode(name, ChannelMode::Value)
    }

    /// A queue channel holding at most `capacity` values (at least 1).
    pub fn queue(name: impl Into<Arc<str>>, capacity: usize) -> Result<Self, ConfigError> {
        let name = name.into();
        if capacity < 1 {
            return Err(ConfigError::new(
                ConfigCode::InvalidChannelCapacity,
                format!("queue channel '{name}' has capacity 0"),
                "give the queue a capacity of at least 1",
            ));
        }
        Ok(Self::with_mode(name, ChannelMode::Queue { capacity }))
    }

    /// A topic channel: each value goes to the receivers waiting when it is sent.
    pub fn topic(name: impl Into<Arc<str>>) -> Self {
        Self::with_mode(name, ChannelMode::Topic)
    }

    /// The channel's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The channel's mode.
    pub fn mode(&self) -> ChannelMode {
        self.shared.mode
    }

    /// Number of buffered values (queue mode), 1 or 0 for a value channel, 0 for a topic.
    pub fn len(&self) -> usize {
        let st = lock(&self.shared.state);
        match self.shared.mode {
            ChannelMode::Value => usize::from(st.value.is_some()),
            ChannelMode::Queue { .. } => st.queue.len(),
            ChannelMode::Topic => 0,
        }
    }

    /// True when [`Channel::len`] is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A handle that observes sends without consuming.
    pub fn wake_handle(&self) -> WakeHandle {
        WakeHandle { notify: self.shared.wake.clone() }
    }

    /// Closes the channel: sends fail, blocked receivers wake with [`NoeticError::ChannelClosed`] once the queue is
    /// drained.
    pub fn close(&self) {
        lock(&self.shared.state).closed = true;
        self.shared.readable.notify_waiters();
        self.shared.writable.notify_waiters();
    }

    /// True once [`Channel::close`] was called.
    pub fn is_closed(&self) -> bool {
        lock(&self.shared.state).closed
    }

    /// Sends without waiting. A full queue hands the value back in [`TrySendError::Full`].
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        {
            let mut st = lock(&self.shared.state);
            if st.closed {
                return Err(TrySendError::Closed(value));
            }
            match self.shared.mode {
                ChannelMode::Value => st.value = Some(value),
                ChannelMode::Queue { capacity } => {
                    if st.queue.len() >= capacity {
                        return Err(TrySendError::Full(value));
                    }
                    st.queue.push_back(value);
                }
                ChannelMode::Topic => {
                    let seq = st.seq + 1;
                    st.topic.push_back((seq, value));
                    if st.topic.len() > TOPIC_RETAINED {
                        st.topic.pop_front();
                    }
                }
            }
            st.seq += 1;
        }
        self.shared.readable.notify_waiters();
        self.shared.wake.notify_waiters();
        Ok(())
    }

    /// Sends, waiting up to 30 s for room in a full queue.
    pub async fn send(&self, value: T, ctx: &Context) -> Result<(), NoeticError> {
        self.send_timeout(value, ctx, DEFAULT_SEND_TIMEOUT).await
    }

    /// Sends, waiting up to `timeout` for room in a full queue. Cancelling `ctx` ends the wait with
    /// [`NoeticError::Cancelled`].
    pub async fn send_timeout(&self, value: T, ctx: &Context, timeout: Duration) -> Result<(), NoeticError> {
        let deadline = Instant::now() + timeout;
        let mut value = value;
        loop {
            let writable = self.shared.writable.notified();
            tokio::pin!(writable);
            writable.as_mut().enable();
            match self.try_send(value) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Closed(_)) => return Err(self.closed_error()),
                Err(TrySendError::Full(v)) => value = v,
            }
            tokio::select! {
                biased;
                () = ctx.cancelled() => return Err(ctx.cancelled_error()),
                () = &mut writable => {}
                () = tokio::time::sleep_until(deadline) => return Err(self.timeout_error(timeout)),
            }
        }
    }

    /// Receives without waiting: the current value (value mode), the oldest value (queue mode), or `None`
    /// (topic mode always, since topics deliver only to waiting receivers).
    pub fn try_recv(&self) -> Option<T> {
        let taken = {
            let mut st = lock(&self.shared.state);
            match self.shared.mode {
                ChannelMode::Value => st.value.clone(),
                ChannelMode::Queue { .. } => st.queue.pop_front(),
                ChannelMode::Topic => None,
            }
        };
        if taken.is_some() && matches!(self.shared.mode, ChannelMode::Queue { .. }) {
            self.shared.writable.notify_waiters();
        }
        taken
    }

    /// Receives, waiting up to `timeout`. Topic receivers get the first value sent after the call.
    pub async fn recv(&self, ctx: &Context, timeout: Duration) -> Result<T, NoeticError> {
        let deadline = Instant::now() + timeout;
        let start_seq = lock(&self.shared.state).seq;
        loop {
            let readable = self.shared.readable.notified();
            tokio::pin!(readable);
            readable.as_mut().enable();
            ctx.check_cancelled()?;
            {
                let mut st = lock(&self.shared.state);
                let got = match self.shared.mode {
                    ChannelMode::Value => st.value.clone(),
                    ChannelMode::Queue { .. } => st.queue.pop_front(),
                    ChannelMode::Topic => st.topic.iter().find(|(seq, _)| *seq > start_seq).map(|(_, v)| v.clone()),
                };
                if let Some(v) = got {
                    drop(st);
                    if matches!(self.shared.mode, ChannelMode::Queue { .. }) {
                        self.shared.writable.notify_waiters();
                    }
                    return Ok(v);
                }
                if st.closed {
                    return Err(self.closed_error());
                }
            }
            tokio::select! {
                biased;
                () = ctx.cancelled() => return Err(ctx.cancelled_error()),
                () = &mut readable => {}
                () = tokio::time::sleep_until(deadline) => return Err(self.timeout_error(timeout)),
            }
        }
    }

    fn closed_error(&self) -> NoeticError {
        NoeticError::ChannelClosed { channel: self.shared.name.to_string() }
    }

    fn timeout_error(&self, timeout: Duration) -> NoeticError {
        NoeticError::ChannelTimeout { channel: self.shared.name.to_string(), timeout }
    }
}
