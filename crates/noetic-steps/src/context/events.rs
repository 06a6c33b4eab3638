//! Framework events: what the runtime did, as a stream a UI or a log can subscribe to.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::ExecutionId;
use crate::error::NoeticError;
use crate::model::Usage;

/// One event, stamped with the execution that produced it.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Its place in the sink's log: 1, 2, 3 … with no holes, in emission order (0 when the sink keeps no log).
    /// A follower resumes after the last number it saw ([`EventSink::follow`](super::EventSink::follow)).
    pub seq: u64,
    /// The session turn it belongs to (1-based), when it was emitted during one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    /// The execution (root, spawned child or fork path) the event comes from.
    pub execution_id: ExecutionId,
    /// When it happened (RFC 3339 in JSON).
    #[serde(serialize_with = "crate::time::serialize")]
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
        model: Arc<str>,
        /// The round within the step (0-based).
        round: u32,
        /// Messages sent (context, history and tail).
        messages: usize,
        /// Tools offered.
        tools: usize,
        /// The tokens the request takes, as counted and calibrated (when the model's window is known).
        #[serde(skip_serializing_if = "Option::is_none")]
        context_tokens: Option<u64>,
        /// The model's context window in tokens (when known).
        #[serde(skip_serializing_if = "Option::is_none")]
        context_window: Option<u64>,
    },
    /// The oldest turns of the conversation were compacted to fit the model's window: in what is sent, they are
    /// replaced by a summary the model wrote (or left out, by a trimming policy). The conversation and the session
    /// log keep every item.
    ContextCompacted {
        /// The llm step whose request did not fit (empty for a compaction asked for by hand).
        step_id: Arc<str>,
        /// Items folded by this compaction.
        folded: usize,
        /// Items of the conversation no longer sent (all compactions so far).
        upto: usize,
        /// Tokens of the older history before (as counted).
        tokens_before: u64,
        /// Tokens of what is sent in its place.
        tokens_after: u64,
        /// True when a summary replaces them (false: they were left out).
        summarized: bool,
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
        /// The step the call belongs to: the `llm` step whose model asked for it, or the `tool` step itself.
        step_id: Arc<str>,
        /// The call id.
        call_id: Arc<str>,
        /// The tool's name.
        tool: Arc<str>,
        /// The arguments as the model wrote them (untrusted; possibly malformed JSON); empty for a direct `tool`
        /// step, whose input is a typed value.
        arguments: Arc<str>,
    },
    /// A tool call ended (ran, failed, or was refused before running).
    ToolCallCompleted {
        /// The step the call belongs to (as in `tool_call_started`).
        step_id: Arc<str>,
        /// The call id.
        call_id: Arc<str>,
        /// The tool's name.
        tool: Arc<str>,
        /// True when the result is an error.
        is_error: bool,
        /// The result text given to the model.
        output: Arc<str>,
        /// What kind of failure, when the result is an error.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_kind: Option<crate::model::ToolErrorKind>,
    },
    /// A steering decision stopped a tool call (deny or guide); the tool did not run.
    SteeringDenied {
        /// The call id.
        call_id: Arc<str>,
        /// The tool's name.
        tool: Arc<str>,
        /// The layers that decided.
        layers: Vec<String>,
        /// `deny` or `guide` (a guided call gets the guidance as its result and the model may try again).
        action: crate::decision::SteeringAction,
        /// The error, carrying the guidance.
        error: NoeticError,
    },
    /// A gating layer rewrote a tool call's arguments (see `layer::ToolCallAction::Rewrite`); the call runs with
    /// `arguments` if every gate allows them. The model's own call keeps the arguments it wrote.
    ToolCallRewritten {
        /// The call id.
        call_id: Arc<str>,
        /// The tool's name.
        tool: Arc<str>,
        /// The layer that rewrote the arguments.
        layer: String,
        /// The new arguments (JSON text).
        arguments: String,
        /// Why.
        reason: String,
    },
    /// A steering decision on a model response: `guide` makes the step ask again, `deny` fails it.
    ModelResponseSteered {
        /// The llm step.
        step_id: Arc<str>,
        /// The action taken.
        action: crate::decision::SteeringAction,
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
        /// The `llm` step whose model asked for the call.
        step_id: Arc<str>,
        /// The call id.
        call_id: Arc<str>,
        /// The tool it asked for.
        tool: Arc<str>,
        /// Why.
        reason: String,
    },
    /// A running tool reported progress.
    ToolProgress {
        /// The call id.
        call_id: Arc<str>,
        /// The tool's name.
        tool: Arc<str>,
        /// What the tool reported.
        data: serde_json::Value,
    },
    /// A call of a tool that needs approval waits for the approver's decision.
    ApprovalRequested {
        /// The call id.
        call_id: Arc<str>,
        /// The tool's name.
        tool: Arc<str>,
        /// The validated arguments (written by the model: untrusted).
        arguments: serde_json::Value,
        /// The SHA-256 of the arguments' canonical JSON (the approval request's `arguments_sha256`).
        #[serde(default)]
        arguments_sha256: String,
    },
    /// The approver decided on a call (a rejected call does not run; the reason goes to the model).
    ApprovalDecided {
        /// The call id.
        call_id: Arc<str>,
        /// The tool's name.
        tool: Arc<str>,
        /// True when the call may run.
        approved: bool,
        /// The SHA-256 of the arguments' canonical JSON the decision was given for.
        #[serde(default)]
        arguments_sha256: String,
        /// Why it was rejected.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
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
    /// A budget limit was reached: the turn ends at this checkpoint (no more model requests or tool calls) and the
    /// session is paused until the limit is raised (see [`crate::budget`]).
    BudgetReached {
        /// The session key.
        session: Arc<str>,
        /// Which limit, what it allows and what was spent.
        #[serde(flatten)]
        reached: crate::budget::BudgetReached,
    },
}

/// The kind of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// `Step::Run`.
    Run,
    /// `Step::Llm`.
    Llm,
    /// `Step::Tool`.
    Tool,
    /// `Step::Branch`.
    Branch,
    /// `Step::Fork`.
    Fork,
    /// `Step::Spawn`.
    Spawn,
    /// `Step::Provide`.
    Provide,
    /// `Step::Loop`.
    Loop,
    /// `Step::Every`.
    Every,
}

impl StepKind {
    /// The kind's lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Run => "run",
            StepKind::Llm => "llm",
            StepKind::Tool => "tool",
            StepKind::Branch => "branch",
            StepKind::Fork => "fork",
            StepKind::Spawn => "spawn",
            StepKind::Provide => "provide",
            StepKind::Loop => "loop",
            StepKind::Every => "every",
        }
    }
}

impl fmt::Display for StepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}
