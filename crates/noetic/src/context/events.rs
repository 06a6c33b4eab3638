//! Framework events: what the runtime did, as a stream a UI or a log can subscribe to.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::sync::broadcast;

use super::ExecutionId;
use crate::error::NoeticError;
use crate::model::Usage;
use crate::step::StepKind;

/// One event, stamped with the execution that produced it.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// The execution (root, spawned child or fork path) the event comes from.
    pub execution_id: ExecutionId,
    /// When it happened.
    pub at: SystemTime,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// A step started.
    StepStarted {
        /// The step.
        step_id: Arc<str>,
        /// Its kind.
        kind: StepKind,
    },
    /// A step finished successfully.
    StepCompleted {
        /// The step.
        step_id: Arc<str>,
        /// Its kind.
        kind: StepKind,
    },
    /// A step failed.
    StepFailed {
        /// The step.
        step_id: Arc<str>,
        /// Its kind.
        kind: StepKind,
        /// Why.
        error: NoeticError,
    },
    /// A `run` step attempt failed and will be retried after `delay`.
    RetryScheduled {
        /// The step.
        step_id: Arc<str>,
        /// The 0-based attempt that failed.
        attempt: u32,
        /// How long the step waits before the next attempt.
        delay: Duration,
        /// Why the attempt failed.
        error: NoeticError,
    },
    /// An iteration of an `every` step failed and the step keeps going (`on_error: Continue`).
    EveryIterationError {
        /// The `every` step.
        step_id: Arc<str>,
        /// Why the iteration failed.
        error: NoeticError,
    },
    /// A loop's `on_error` handler chose an action for a failed iteration.
    LoopIterationError {
        /// The loop step.
        step_id: Arc<str>,
        /// The action chosen (`retry`, `skip`).
        action: &'static str,
        /// Why the iteration failed.
        error: NoeticError,
    },
    /// A message on a loop's inbox kept the loop running.
    LoopInboxMessage {
        /// The loop step.
        step_id: Arc<str>,
    },
    /// An `llm` step is calling the model.
    ModelCallStarted {
        /// The llm step.
        step_id: Arc<str>,
        /// The model id.
        model: String,
        /// The round within the step (0-based).
        round: u32,
        /// Messages sent (context, history and tail).
        messages: usize,
        /// Tools offered.
        tools: usize,
    },
    /// A piece of the model's answer text, as it streams in (only while someone watches events).
    ModelTextDelta {
        /// The llm step.
        step_id: Arc<str>,
        /// The new text.
        text: String,
    },
    /// The model answered.
    ModelCallCompleted {
        /// The llm step.
        step_id: Arc<str>,
        /// The round within the step (0-based).
        round: u32,
        /// Tool calls in the answer.
        tool_calls: usize,
        /// Tokens used.
        usage: Usage,
    },
    /// A tool call is starting.
    ToolCallStarted {
        /// The call id.
        call_id: String,
        /// The tool's name.
        tool: String,
    },
    /// A tool call ended (ran, failed, or was refused before running).
    ToolCallCompleted {
        /// The call id.
        call_id: String,
        /// The tool's name.
        tool: String,
        /// True when the result is an error.
        is_error: bool,
        /// The result text given to the model.
        output: String,
    },
    /// A steering decision stopped a tool call (deny or guide); the tool did not run.
    SteeringDenied {
        /// The call id.
        call_id: String,
        /// The tool's name.
        tool: String,
        /// The layers that decided.
        layers: Vec<String>,
        /// The error, carrying the guidance.
        error: NoeticError,
    },
    /// A steering decision on a model response: `guide` makes the step ask again, `deny` fails it.
    ModelResponseSteered {
        /// The llm step.
        step_id: Arc<str>,
        /// The action taken.
        action: crate::steering::SteeringAction,
        /// The guidance.
        guidance: Option<String>,
    },
    /// A steering message was queued for a session.
    SteeringQueued {
        /// The session.
        session: Arc<str>,
        /// The message id.
        id: String,
    },
    /// A steering message was refused (queue full).
    SteeringRejected {
        /// The session.
        session: Arc<str>,
        /// Why.
        reason: String,
    },
    /// Steering messages were injected before a model request.
    SteeringInjected {
        /// The session.
        session: Arc<str>,
        /// How many.
        count: usize,
    },
    /// A tool call was not started because steering arrived; it got a skipped result.
    ToolSkipped {
        /// The call id.
        call_id: String,
        /// Why.
        reason: String,
    },
    /// A running tool reported progress.
    ToolProgress {
        /// The call id.
        call_id: String,
        /// The tool's name.
        tool: String,
        /// What the tool reported.
        data: serde_json::Value,
    },
    /// A session turn started.
    TurnStarted {
        /// The session key.
        session: Arc<str>,
        /// The turn's number within the session (1-based).
        turn: u64,
    },
    /// A session turn ended.
    TurnCompleted {
        /// The session key.
        session: Arc<str>,
        /// The turn's number.
        turn: u64,
        /// Time the turn took.
        duration: Duration,
    },
    /// A session turn failed or was cancelled.
    TurnFailed {
        /// The session key.
        session: Arc<str>,
        /// The turn's number.
        turn: u64,
        /// Why.
        error: NoeticError,
    },
}

/// Where events go: a broadcast channel any number of subscribers can read. Events are built only when at least
/// one subscriber listens. A slow subscriber that falls more than `capacity` events behind loses the oldest ones
/// (it sees `RecvError::Lagged`); the runtime never blocks on a subscriber.
#[derive(Clone, Default)]
pub struct EventSink {
    tx: Option<broadcast::Sender<Arc<Event>>>,
}

impl EventSink {
    /// A sink buffering up to `capacity` events per subscriber (at least 1).
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        EventSink { tx: Some(tx) }
    }

    /// A sink that drops everything.
    pub fn disabled() -> Self {
        EventSink { tx: None }
    }

    /// A new subscriber, seeing events emitted from now on. `None` for a disabled sink.
    pub fn subscribe(&self) -> Option<broadcast::Receiver<Arc<Event>>> {
        self.tx.as_ref().map(|tx| tx.subscribe())
    }

    /// True when someone listens.
    pub fn is_active(&self) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.receiver_count() > 0)
    }

    /// Emits the event `kind` builds, if anyone listens.
    pub fn emit(&self, execution_id: ExecutionId, kind: impl FnOnce() -> EventKind) {
        if let Some(tx) = &self.tx
            && tx.receiver_count() > 0
        {
            let _ = tx.send(Arc::new(Event { execution_id, at: SystemTime::now(), kind: kind() }));
        }
    }
}
