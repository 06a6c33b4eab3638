//! The message bus: routes inbound messages from chat channels to sessions (seed 3, "bus drain").
//!
//! For each message: audio is transcribed first (if a [`Transcriber`] is set; on failure the original text is
//! used); `/stop` clears the session's queue and cancels its turn; otherwise the session is claimed atomically
//! and a turn starts, or — if a turn is running — the message is steered into it. Turns of different sessions run
//! in parallel up to a limit. When a turn ends, messages that arrived after its last checkpoint run as a
//! continuation before the session is released, so none is orphaned. Every turn's result goes out as a
//! [`BusReply`].

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{Semaphore, mpsc};

use super::session::Routed;
use super::{MessageId, Runtime, SteerError, Turn};
use crate::error::NoeticError;

/// The command that stops a session.
pub const STOP_COMMAND: &str = "/stop";

/// A message from a channel.
#[derive(Debug, Clone)]
pub struct InboundMessage {
    /// The session it belongs to.
    pub session: String,
    /// Its text (for audio, what to use if transcription fails).
    pub text: String,
    /// Audio to transcribe, if any.
    pub audio: Option<Arc<[u8]>>,
}

impl InboundMessage {
    /// A text message.
    pub fn text(session: impl Into<String>, text: impl Into<String>) -> Self {
        InboundMessage { session: session.into(), text: text.into(), audio: None }
    }
}

/// Turns audio into text before a message is routed.
pub trait Transcriber: Send + Sync + 'static {
    /// The text of the message's audio.
    fn transcribe<'a>(&'a self, message: &'a InboundMessage) -> BoxFuture<'a, Result<String, NoeticError>>;
}

/// What the bus did with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// A turn started for it.
    Started,
    /// It was queued for the running turn.
    Steered(MessageId),
    /// It was `/stop`: `cleared` queued messages were dropped; `cancelled` tells whether a turn was running.
    Stopped {
        /// Messages removed from the queue.
        cleared: usize,
        /// Whether a turn was cancelled.
        cancelled: bool,
    },
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
}

/// Routes inbound messages to sessions.
#[derive(Clone)]
pub struct MessageBus {
    runtime: Runtime,
    permits: Arc<Semaphore>,
    transcriber: Option<Arc<dyn Transcriber>>,
    replies: mpsc::Sender<BusReply>,
}

impl MessageBus {
    /// A bus running at most `max_parallel_turns` turns at once (at least 1); replies arrive on the receiver,
    /// which buffers up to 1024 (a full buffer makes turn workers wait, it never drops a reply).
    pub fn new(runtime: Runtime, max_parallel_turns: usize) -> (Self, mpsc::Receiver<BusReply>) {
        let (replies, rx) = mpsc::channel(1024);
        let bus = MessageBus {
            runtime,
            permits: Arc::new(Semaphore::new(max_parallel_turns.max(1))),
            transcriber: None,
            replies,
        };
        (bus, rx)
    }

    /// Transcribes audio messages before routing.
    pub fn with_transcriber(mut self, transcriber: Arc<dyn Transcriber>) -> Self {
        self.transcriber = Some(transcriber);
        self
    }

    /// Routes one message.
    pub async fn publish(&self, message: InboundMessage) -> Result<Delivery, SteerError> {
        let text = match (&self.transcriber, &message.audio) {
            (Some(t), Some(_)) => match t.transcribe(&message).await {
                Ok(text) => text,
                Err(e) => {
                    tracing::warn!(session = %message.session, error = %e, "transcription failed; routing the original message");
                    message.text.clone()
                }
            },
            _ => message.text.clone(),
        };
        let session = self.runtime.session(&message.session);
        if text.trim() == STOP_COMMAND {
            let (cleared, cancelled) = session.stop("stopped by the user");
            return Ok(Delivery::Stopped { cleared, cancelled });
        }
        // A busy session takes the message as steering at once; only a new turn waits for a slot.
        if let Some(steered) = session.steer_if_running(&text) {
            return steered.map(Delivery::Steered);
        }
        let permit = match self.permits.clone().acquire_owned().await {
            Ok(p) => p,
            Err(_) => return session.steer(text).map(Delivery::Steered),
        };
        match session.send_or_steer(text)? {
            Routed::Steered(id) => Ok(Delivery::Steered(id)),
            Routed::Started(turn) => {
                let replies = self.replies.clone();
                let name = message.session.clone();
                tokio::spawn(async move {
                    run_with_continuations(session, name, turn, replies).await;
                    drop(permit);
                });
                Ok(Delivery::Started)
            }
        }
    }
}

/// Runs a turn, then continuation turns while messages wait, then releases the session.
async fn run_with_continuations(session: super::Session, name: String, turn: Turn, replies: mpsc::Sender<BusReply>) {
    let result = turn.await;
    let _ = replies.send(BusReply { session: name.clone(), continuation: false, result }).await;
    loop {
        match session.continue_session() {
            Ok(Some(turn)) => {
                let result = turn.await;
                let _ = replies.send(BusReply { session: name.clone(), continuation: true, result }).await;
            }
            // Nothing waits, or another worker already started a turn for this session (it will drain it).
            Ok(None) | Err(_) => return,
        }
    }
}
