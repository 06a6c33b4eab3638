//! The message bus: routes inbound messages from chat channels to sessions (seed 3, "bus drain"; SPEC 4.8).
//!
//! For each message: audio is transcribed first (if a [`Transcriber`] is set; on failure or after the
//! transcription timeout the original text is used); `/stop` clears the session's queue and cancels its turn;
//! otherwise the session is claimed atomically and a turn starts, or — if the session has a turn — the message is
//! steered into it. The claim happens when the message is accepted: a turn still waiting for a free turn slot
//! already owns its session, so later messages steer into it (they reach the model in that turn) and `/stop`
//! cancels it before it reaches the model. Turns of different sessions run in parallel up to a limit. When a turn
//! ends, messages that arrived after its last checkpoint run as a continuation before the session is released,
//! so none is orphaned. A session's messages reach its turns in the order the bus accepted them: a message that
//! claims an idle session while earlier ones still wait for a continuation is queued behind them, and a turn that
//! is ending runs no continuation once a later message has claimed the session (the claiming turn takes what
//! waits at its start). Every turn's result goes out as a [`BusReply`].
//!
//! `publish` never waits for a turn slot or for a reader: a started turn waits for its slot in its own task (at
//! most one waiting turn per session), and replies go to a bounded buffer that drops its oldest reply when
//! nobody reads them (see [`BusReplies`]). The only wait left, transcription, is bounded by a timeout.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::replies::{BusReplies, BusReply, DEFAULT_REPLY_CAPACITY, ReplySender, reply_buffer};
use super::session::Routed;
use super::{MessageId, Runtime, Session, SteerError, Turn};
use crate::error::NoeticError;

/// The command that stops a session.
pub const STOP_COMMAND: &str = "/stop";
/// How long `publish` waits for a transcription by default before it routes the original text.
pub const DEFAULT_TRANSCRIPTION_TIMEOUT: Duration = Duration::from_secs(60);

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
    /// A turn started for it (it may still be waiting for a free turn slot; the session is claimed either way).
    Started,
    /// It was queued for the running turn.
    Steered(MessageId),
    /// It was `/stop`: `cleared` queued messages were dropped; `cancelled` tells whether a turn was running or
    /// waiting for a slot (a waiting turn never reaches the model; its reply is `Cancelled`).
    Stopped {
        /// Messages removed from the queue.
        cleared: usize,
        /// Whether a turn was cancelled.
        cancelled: bool,
    },
}

/// A session claimed by a turn still waiting for a free slot.
#[derive(Clone)]
struct Claim {
    id: u64,
    cancel: CancellationToken,
    /// The message the turn starts with; `None` when the session had messages queued when it was claimed (the
    /// claiming message was queued behind them and the turn runs as a continuation, keeping acceptance order).
    input: Option<Arc<str>>,
}

/// What a claimed turn found when its slot came.
enum Claimed {
    /// `/stop` came first.
    Stopped,
    /// It started.
    Turn(Turn),
    /// Another turn took its message (one started outside the bus, or a continuation).
    TakenElsewhere,
    /// The session refused it.
    Failed(NoeticError),
}

/// Routes inbound messages to sessions.
#[derive(Clone)]
pub struct MessageBus {
    runtime: Runtime,
    permits: Arc<Semaphore>,
    transcriber: Option<Arc<dyn Transcriber>>,
    transcription_timeout: Duration,
    replies: ReplySender,
    /// Sessions whose turn waits for a slot. Locked before a session's own lock, never after.
    /// An async lock: session calls (which may write to the store) happen under it.
    claims: Arc<tokio::sync::Mutex<HashMap<String, Claim>>>,
    next_claim: Arc<AtomicU64>,
}

impl MessageBus {
    /// A bus running at most `max_parallel_turns` turns at once (at least 1); replies arrive on the receiver,
    /// which keeps the newest [`DEFAULT_REPLY_CAPACITY`] (1024) unread replies.
    pub fn new(runtime: Runtime, max_parallel_turns: usize) -> (Self, BusReplies) {
        Self::with_reply_capacity(runtime, max_parallel_turns, DEFAULT_REPLY_CAPACITY)
    }

    /// A bus whose receiver keeps at most `reply_capacity` unread replies (at least 1); when a reply arrives and
    /// the buffer is full, the oldest is dropped (see [`BusReplies`]).
    pub fn with_reply_capacity(
        runtime: Runtime,
        max_parallel_turns: usize,
        reply_capacity: usize,
    ) -> (Self, BusReplies) {
        let (replies, rx) = reply_buffer(reply_capacity);
        let bus = MessageBus {
            runtime,
            permits: Arc::new(Semaphore::new(max_parallel_turns.max(1))),
            transcriber: None,
            transcription_timeout: DEFAULT_TRANSCRIPTION_TIMEOUT,
            replies,
            claims: Arc::default(),
            next_claim: Arc::default(),
        };
        (bus, rx)
    }

    /// Transcribes audio messages before routing.
    pub fn with_transcriber(mut self, transcriber: Arc<dyn Transcriber>) -> Self {
        self.transcriber = Some(transcriber);
        self
    }

    /// How long to wait for a transcription before routing the original text (default 60 s).
    pub fn with_transcription_timeout(mut self, timeout: Duration) -> Self {
        self.transcription_timeout = timeout;
        self
    }

    async fn text_of(&self, message: &InboundMessage) -> String {
        let (Some(transcriber), Some(_)) = (&self.transcriber, &message.audio) else { return message.text.clone() };
        match tokio::time::timeout(self.transcription_timeout, transcriber.transcribe(message)).await {
            Ok(Ok(text)) => text,
            Ok(Err(e)) => {
                tracing::warn!(session = %message.session, error = %e, "transcription failed; routing the original message");
                message.text.clone()
            }
            Err(_) => {
                tracing::warn!(
                    session = %message.session,
                    timeout_ms = self.transcription_timeout.as_millis(),
                    "transcription timed out; routing the original message"
                );
                message.text.clone()
            }
        }
    }

    /// Routes one message. Never waits for a turn slot or a reply reader; at most for the transcription, up to
    /// its timeout.
    pub async fn publish(&self, message: InboundMessage) -> Result<Delivery, SteerError> {
        let text = self.text_of(&message).await;
        let session = self.runtime.session(&message.session);
        let mut claims = self.claims.lock().await;
        if text.trim() == STOP_COMMAND {
            // A turn waiting for a slot is cancelled before it starts; a running one is cancelled in place.
            let waiting = claims.remove(&message.session);
            if let Some(claim) = &waiting {
                claim.cancel.cancel();
            }
            let (cleared, running) = session.stop("stopped by the user").await;
            return Ok(Delivery::Stopped { cleared, cancelled: running || waiting.is_some() });
        }
        if claims.contains_key(&message.session) {
            // Queued for the waiting turn: its turn-start checkpoint shows it to the model.
            return session.steer(text).await.map(Delivery::Steered);
        }
        if let Some(steered) = session.steer_if_running(&text).await {
            return steered.map(Delivery::Steered);
        }
        // Messages accepted earlier still wait (for the continuation of a turn that just ended): this one goes
        // behind them, and the claimed turn takes them all in order.
        let input = if session.queued() == 0 {
            Some(Arc::from(text))
        } else {
            session.steer(text).await?;
            None
        };
        let claim =
            Claim { id: self.next_claim.fetch_add(1, Ordering::Relaxed), cancel: CancellationToken::new(), input };
        claims.insert(message.session.clone(), claim.clone());
        drop(claims);
        let bus = self.clone();
        tokio::spawn(async move { bus.run_claimed(session, message.session, claim).await });
        Ok(Delivery::Started)
    }

    /// Waits for a turn slot (or `/stop`), then starts the claimed turn and its continuations.
    async fn run_claimed(self, session: Session, name: String, claim: Claim) {
        let permit = tokio::select! {
            biased;
            () = claim.cancel.cancelled() => None,
            permit = self.permits.clone().acquire_owned() => permit.ok(),
        };
        let claimed = {
            let mut claims = self.claims.lock().await;
            if claims.get(&name).is_some_and(|c| c.id == claim.id) {
                claims.remove(&name);
            }
            // Checked under the claims lock, which `/stop` holds while it cancels.
            if claim.cancel.is_cancelled() || permit.is_none() {
                Claimed::Stopped
            } else {
                match &claim.input {
                    Some(text) => match session.send_or_steer(text.to_string()).await {
                        Ok(Routed::Started(turn)) => Claimed::Turn(turn),
                        Ok(Routed::Steered(_)) => Claimed::TakenElsewhere,
                        Err(e) => Claimed::Failed(NoeticError::with_source(e.to_string(), e)),
                    },
                    // The message waits in the queue behind earlier ones: a continuation takes them in order.
                    None => match session.continue_session().await {
                        Ok(Some(turn)) => Claimed::Turn(turn),
                        Ok(None) | Err(_) => Claimed::TakenElsewhere,
                    },
                }
            }
        };
        match claimed {
            Claimed::Stopped => {
                let error = NoeticError::cancelled("stopped by the user before the turn started");
                self.replies.send(BusReply::new(&name, false, Err(error)));
            }
            Claimed::Turn(turn) => self.run_with_continuations(&session, &name, turn).await,
            Claimed::TakenElsewhere => {
                // A turn running meanwhile took the message (or will); run what it leaves behind once it ends.
                session.idle().await;
                self.continuations(&session, &name).await;
            }
            Claimed::Failed(e) => self.replies.send(BusReply::new(&name, false, Err(e))),
        }
        drop(permit);
    }

    /// Runs a turn, then continuation turns while messages wait, then releases the session.
    async fn run_with_continuations(&self, session: &Session, name: &str, turn: Turn) {
        let result = turn.await;
        self.replies.send(BusReply::new(name, false, result));
        self.continuations(session, name).await;
    }

    async fn continuations(&self, session: &Session, name: &str) {
        loop {
            let next = {
                let claims = self.claims.lock().await;
                // A message that claimed the session while its turn was ending starts the next turn itself: a
                // continuation now would run messages accepted after it first.
                if claims.get(name).is_some_and(|c| c.input.is_some()) {
                    return;
                }
                // Under the claims lock, so no message claims the session between the look and the start.
                session.continue_session().await
            };
            match next {
                Ok(Some(turn)) => {
                    let result = turn.await;
                    self.replies.send(BusReply::new(name, true, result));
                }
                // Nothing waits, or another worker already started a turn for this session (it will drain it).
                Ok(None) | Err(_) => return,
            }
        }
    }
}
