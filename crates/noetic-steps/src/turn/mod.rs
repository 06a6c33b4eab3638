//! The turn core: every decision of a model-driven turn (an `llm` step) as a pure state machine.
//!
//! [`TurnCore`] does no I/O and holds no handles. The async driver (`exec::llm`) feeds it [`Input`]s — the model's
//! response, the after-model review, a tool call's outcome, what a steering checkpoint found, a failure such as
//! cancellation — and performs the [`Action`] it returns (call the model, review, run a tool, poll the queue …),
//! applying the [`Effect`]s that come with it (items to append, events to emit). Its state is
//! `Serialize + Deserialize`: it is what a durable store journals while a turn runs and what a resumed turn starts
//! from.
//!
//! (Over the house's ~500 lines, knowingly: the transitions below are one state machine, read top to bottom; its
//! parallel groups and its types already live in `batch.rs` and beside.)
//!
//! The decisions it owns (SPEC 3.5 and 4):
//! - the round limit, raised by pending steering up to one queue's worth (`max_rounds + capacity`);
//! - the checkpoints: at turn start, after every tool outcome, after an answer without tool calls;
//! - the rest of a batch when steering is pending (skipped results, or the batch finishes);
//! - an answer without tool calls while steering is pending: kept, and the model is asked again;
//! - after-model review: deny fails the step, guide asks again with a correction (at most
//!   [`MAX_GUIDE_RETRIES`] times), allow accepts;
//! - a failure in the middle of a batch: every call without a result gets one, so the conversation stays
//!   well-formed;
//! - what a steering decision on a model-driven tool call makes the model see ([`steered_result`]);
//! - which calls of a response run together ([`batch`]: groups of calls declared safe to run concurrently).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::decision::{SteeringAction, SteeringDecision};
use crate::error::NoeticError;
use crate::model::{Item, ModelResponse, ToolCall, ToolResult, Usage};

pub mod batch;
mod journal;
#[cfg(test)]
mod tests;

pub use batch::{CANCELLED_RESULT, GroupRun, cancelled_result, interrupts};
pub use journal::{Finished, Replay, TurnCommit, TurnJournal};

/// The content of the result each tool call skipped by queued steering gets (seed 3).
pub const SKIPPED_RESULT: &str = "Skipped due to queued user message.";

/// The content of the result a tool call gets when the process stopped while it ran and its tool is not
/// idempotent, so it is not run again (SPEC 6.3).
pub const INTERRUPTED_RESULT: &str =
    "Interrupted: the process stopped while this tool ran; it may or may not have taken effect.";

/// The result a call gets when a resumed turn does not run it again (see [`INTERRUPTED_RESULT`]).
pub fn interrupted_result(call_id: &str) -> ToolResult {
    ToolResult::error(call_id, INTERRUPTED_RESULT)
}

/// How often an `after_model_call` guide decision makes the step ask the model again before it accepts the
/// response anyway.
pub const MAX_GUIDE_RETRIES: usize = 3;

/// The correction sent when a guide decision carries no guidance.
const DEFAULT_CORRECTION: &str = "Please adjust your response.";

/// The tool result a steering decision that stopped a model-driven call gives the model (SPEC 3.5): `Steering
/// denied: <guidance>` for a deny, `Steering guidance: <guidance>` for a guide, with the error flag.
pub fn steered_result(call_id: &str, decision: &SteeringDecision) -> ToolResult {
    let guidance = decision.guidance.as_deref().unwrap_or("steering rule violation");
    let content = match decision.action {
        SteeringAction::Guide => format!("Steering guidance: {guidance}"),
        _ => format!("Steering denied: {guidance}"),
    };
    ToolResult::error(call_id, content)
}

/// The result of a call that will not complete because the turn failed before or while it ran.
fn not_completed(call: &ToolCall, reason: &str) -> Item {
    Item::ToolResult(ToolResult::error(call.id.clone(), format!("Tool call not completed: {reason}")))
}

fn skipped(call: &ToolCall) -> Item {
    Item::ToolResult(ToolResult::error(call.id.clone(), SKIPPED_RESULT.to_owned()))
}

/// What a steering checkpoint found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Polled {
    /// Messages are taken and wait to be injected before the next model request.
    pub pending: bool,
    /// The session's queue capacity: the extra rounds pending steering may buy.
    pub capacity: usize,
    /// The batch policy: pending steering skips the rest of the tool batch (else the batch finishes).
    pub skip_rest: bool,
}

/// What the driver tells the core. Serialisable: a session log records the inputs of each `llm` step, and
/// replaying them through a new core puts it where it was.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "input", content = "value", rename_all = "snake_case")]
pub enum Input {
    /// The turn begins.
    Start,
    /// A turn restored from a journal continues in another process: the core repeats what it was waiting for —
    /// a journaled model response is reviewed, not requested again; a tool call that was running is offered as
    /// [`Action::ResumeTool`].
    Resume,
    /// The answer to [`Action::Poll`].
    Polled(Polled),
    /// The answer to [`Action::CallModel`] (boxed: the input stays small, so feeding the core copies no response).
    Response(Box<ModelResponse>),
    /// The answer to [`Action::Review`]: the after-model decision.
    Reviewed(SteeringDecision),
    /// The answer to [`Action::Store`]: the layers stored the answer.
    Stored,
    /// The answer to [`Action::RunTool`]: the call's result (whatever the outcome — executed, failed, denied,
    /// unknown tool, invalid arguments — it is a result). Also one of the answers to [`Action::RunGroup`].
    ToolDone(ToolResult),
    /// The answer to [`Action::Classify`]: for each call of the response, whether its tool is declared safe to
    /// run concurrently ([`Tool::concurrent`](crate::tool::Tool::concurrent)).
    Classified(Vec<bool>),
    /// The current action failed, or the turn was cancelled before it.
    Failed(NoeticError),
}

impl Input {
    /// [`Input::Response`] with `response`.
    pub fn response(response: ModelResponse) -> Input {
        Input::Response(Box::new(response))
    }
}

/// What the driver does next.
#[derive(Debug)]
pub enum Action<'a> {
    /// Poll the steering queue and answer with [`Input::Polled`]. At the turn start the poll happens at most once
    /// per turn (and not at all for a continuation); the answer then only reports what is pending.
    Poll {
        /// This is the turn-start checkpoint.
        turn_start: bool,
    },
    /// Inject pending steering, recall the layers, and call the model with the history followed by `tail`; answer
    /// with [`Input::Response`].
    CallModel {
        /// The round this request belongs to (0-based; guide retries repeat a round).
        round: u32,
        /// Corrections from guide decisions, sent after the history.
        tail: &'a [Item],
    },
    /// Run the after-model review of `response`; answer with [`Input::Reviewed`].
    Review(&'a ModelResponse),
    /// Let the layers store the accepted final answer; answer with [`Input::Stored`].
    Store(&'a ModelResponse),
    /// Run one tool call; answer with [`Input::ToolDone`].
    RunTool(&'a ToolCall),
    /// Say which calls of the response may run concurrently; answer with [`Input::Classified`]. Asked only by a
    /// step whose limit is above 1, for a response of several calls.
    Classify(&'a [ToolCall]),
    /// Run these calls together (see [`batch`]); answer with one [`Input::ToolDone`] per call still to run, in
    /// the order they finish.
    RunGroup(GroupRun<'a>),
    /// A resumed turn was running this call when its process stopped, and no outcome was journaled: run it again
    /// if its tool is idempotent, else answer with [`interrupted_result`]; either way with [`Input::ToolDone`].
    ResumeTool(&'a ToolCall),
    /// The step is done: parse `text` as its output.
    Finish {
        /// The final answer's text.
        text: String,
        /// Usage of the step's model calls.
        usage: Usage,
        /// Their cost in US dollars.
        cost: f64,
    },
    /// The step fails with this error.
    Fail(NoeticError),
}

/// What the driver applies before it performs the action, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Append these items to the conversation.
    Append(Vec<Item>),
    /// Append this item to the conversation.
    Push(Item),
    /// This call will not start: queued steering skipped it (its result is in the `Append` before).
    Skipped {
        /// The skipped call's id.
        call_id: Arc<str>,
        /// The tool it asked for.
        tool: Arc<str>,
    },
    /// The after-model review steered the response (deny or guide).
    Steered {
        /// Deny or guide.
        action: SteeringAction,
        /// The decision's guidance.
        guidance: Option<String>,
    },
}

/// A response's tool calls, as the core works through them: one call (what most answers ask for) is held in place,
/// without an allocation of its own; serialised as a list either way.
type Calls = smallvec::SmallVec<[ToolCall; 1]>;

/// Where the turn is: what the core waits for. The large payloads are boxed (serialised as if inline), so the
/// phase stays a few words and moving it on every input costs no copy of a response or an error.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
enum Phase {
    /// Nothing has happened yet.
    Start,
    /// Waiting for the turn-start checkpoint.
    TurnStartPoll,
    /// Waiting for the model's response.
    AwaitingResponse,
    /// Waiting for the after-model review of `response`.
    Reviewing { response: Box<ModelResponse> },
    /// Waiting for the layers to store the accepted final answer.
    Storing { response: Box<ModelResponse> },
    /// Waiting for the checkpoint after the final answer (already appended).
    AnswerPoll { text: String },
    /// Waiting for the outcome of `calls[next]`.
    Tool { calls: Calls, next: usize },
    /// Waiting to learn which of `calls` may run concurrently.
    Classifying { calls: Calls },
    /// Waiting for the outcomes of calls that run together.
    Group(Box<batch::Group>),
    /// A resumed turn: `calls[next]` was running when the process stopped; waiting for its outcome.
    ResumingTool { calls: Calls, next: usize },
    /// Waiting for the checkpoint after the outcome of `calls[next - 1]`.
    ToolPoll { calls: Calls, next: usize },
    /// The step produced its answer.
    Finished { text: String },
    /// The step failed.
    Failed { error: Box<NoeticError> },
}

/// The state of one model-driven turn. See the [module docs](self).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TurnCore {
    step_id: std::sync::Arc<str>,
    max_rounds: u32,
    /// The turn has steering checkpoints (a session turn's own execution; not a child or a plain context).
    checkpoints: bool,
    round: u32,
    corrections: Vec<Item>,
    usage: Usage,
    cost: f64,
    steering_pending: bool,
    steering_capacity: u32,
    /// How many calls may run at once (1: one after another).
    #[serde(default = "batch::one", skip_serializing_if = "batch::is_one")]
    parallel: u32,
    /// For each call of the current response, whether it may run concurrently (empty: none may).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    concurrent: Vec<bool>,
    phase: Phase,
}

impl PartialEq for TurnCore {
    /// Equal when they would act alike (serialised forms compared: errors have no equality of their own).
    fn eq(&self, other: &Self) -> bool {
        serde_json::to_value(self).ok() == serde_json::to_value(other).ok()
    }
}

impl TurnCore {
    /// A turn of the `llm` step `step_id` with its round limit; `checkpoints` is true when a steering queue is
    /// polled at its checkpoints.
    pub fn new(step_id: impl Into<std::sync::Arc<str>>, max_rounds: u32, checkpoints: bool) -> Self {
        TurnCore {
            step_id: step_id.into(),
            max_rounds,
            checkpoints,
            round: 0,
            corrections: Vec::new(),
            usage: Usage::default(),
            cost: 0.0,
            steering_pending: false,
            steering_capacity: 0,
            parallel: 1,
            concurrent: Vec::new(),
            phase: Phase::Start,
        }
    }

    /// Completed rounds (accepted model responses).
    pub fn round(&self) -> u32 {
        self.round
    }

    /// Usage of the turn's model calls so far.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// True once the turn finished or failed.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Finished { .. } | Phase::Failed { .. })
    }

    /// True while the core is about to ask the model or to run a tool call: the points a durable driver journals
    /// before acting (one write per model request and one per tool call). A resumed turn then never runs a call
    /// twice unknowingly, never loses an injected steering message, and asks the model again only for a response
    /// that arrived after the last write (one that was being reviewed, or whose calls had not started).
    pub fn is_at_durable_point(&self) -> bool {
        matches!(
            self.phase,
            Phase::AwaitingResponse | Phase::Tool { .. } | Phase::ResumingTool { .. } | Phase::Group(_)
        )
    }

    /// What the driver does next: performs it and answers with the matching [`Input`].
    pub fn action(&self) -> Action<'_> {
        match &self.phase {
            // Before the start input there is nothing to do but start; a driver never asks.
            Phase::Start => Action::Poll { turn_start: true },
            Phase::TurnStartPoll => Action::Poll { turn_start: true },
            Phase::AnswerPoll { .. } | Phase::ToolPoll { .. } => Action::Poll { turn_start: false },
            Phase::AwaitingResponse => Action::CallModel { round: self.round, tail: &self.corrections },
            Phase::Reviewing { response } => Action::Review(response),
            Phase::Storing { response } => Action::Store(response),
            Phase::Tool { calls, next } => match calls.get(*next) {
                Some(call) => Action::RunTool(call),
                None => self.lost(),
            },
            Phase::ResumingTool { calls, next } => match calls.get(*next) {
                Some(call) => Action::ResumeTool(call),
                None => self.lost(),
            },
            Phase::Classifying { calls } => Action::Classify(calls),
            Phase::Group(group) => match group.calls.get(group.first..group.end) {
                Some(calls) => Action::RunGroup(GroupRun { calls, results: &group.results, resumed: group.resumed }),
                None => self.lost(),
            },
            Phase::Finished { text } => Action::Finish { text: text.clone(), usage: self.usage, cost: self.cost },
            Phase::Failed { error } => Action::Fail((**error).clone()),
        }
    }

    fn lost(&self) -> Action<'_> {
        Action::Fail(NoeticError::Other {
            message: format!("turn core of step '{}' lost its place in the batch; this is a bug", self.step_id),
            source: None,
        })
    }

    /// Advances the turn by one input; returns the effects to apply, in order, before the next
    /// [`action`](TurnCore::action). [`TurnCore::advance_with`] hands them over one by one instead.
    pub fn advance(&mut self, input: Input) -> Vec<Effect> {
        let mut effects = Vec::new();
        self.advance_with(input, &mut |effect| effects.push(effect));
        effects
    }

    /// Advances the turn by one input, handing each effect to `emit` in order (no collection is built: the
    /// driver's per-step path).
    pub fn advance_with(&mut self, input: Input, emit: &mut dyn FnMut(Effect)) {
        let phase = std::mem::replace(&mut self.phase, Phase::Start);
        self.phase = match (phase, input) {
            (Phase::Start, Input::Start | Input::Resume) if self.checkpoints => Phase::TurnStartPoll,
            (Phase::Start, Input::Start | Input::Resume) => self.request(),
            (Phase::TurnStartPoll, Input::Polled(p)) => {
                self.note(p);
                self.request()
            }
            (Phase::AwaitingResponse, Input::Response(response)) => self.respond(response),
            (Phase::Reviewing { response }, Input::Reviewed(decision)) => self.review(response, decision, emit),
            (Phase::Storing { response }, Input::Stored) => {
                let text = response.text_output().to_owned();
                emit(Effect::Append(response.items));
                if self.checkpoints { Phase::AnswerPoll { text } } else { Phase::Finished { text } }
            }
            (Phase::AnswerPoll { text }, Input::Polled(p)) => {
                self.note(p);
                // Steering that arrived while the model answered: keep the answer, add the messages, ask again.
                if self.steering_pending { self.request() } else { Phase::Finished { text } }
            }
            (Phase::Classifying { calls }, Input::Classified(concurrent)) => {
                self.concurrent = concurrent;
                self.next_call(calls, 0)
            }
            (Phase::Group(group), Input::ToolDone(result)) => self.group_done(group, result, emit),
            (Phase::Group(group), Input::Failed(error)) => {
                batch::group_failed(*group, &error, emit);
                failed(error)
            }
            (Phase::Group(mut group), Input::Resume) => {
                group.resumed = true;
                Phase::Group(group)
            }
            (Phase::Tool { calls, next } | Phase::ResumingTool { calls, next }, Input::ToolDone(result)) => {
                emit(Effect::Push(Item::ToolResult(result)));
                if self.checkpoints {
                    Phase::ToolPoll { calls, next: next + 1 }
                } else {
                    self.next_call(calls, next + 1)
                }
            }
            (Phase::ToolPoll { calls, next }, Input::Polled(p)) => {
                self.note(p);
                if self.steering_pending && p.skip_rest {
                    for call in &calls[next.min(calls.len())..] {
                        emit(Effect::Push(skipped(call)));
                        emit(Effect::Skipped { call_id: call.id.clone(), tool: call.name.clone() });
                    }
                    self.request()
                } else {
                    self.next_call(calls, next)
                }
            }
            (Phase::Tool { calls, next } | Phase::ResumingTool { calls, next }, Input::Failed(error)) => {
                // Every call without a result gets one, so the conversation stays well-formed.
                let reason = error.to_string();
                let rest = &calls[next.min(calls.len())..];
                emit(Effect::Append(rest.iter().map(|c| not_completed(c, &reason)).collect()));
                failed(error)
            }
            (phase @ (Phase::Finished { .. } | Phase::Failed { .. }), Input::Resume) => {
                let _ = phase;
                failed(NoeticError::Other {
                    message: format!("the turn of step '{}' already ended; there is nothing to resume", self.step_id),
                    source: None,
                })
            }
            (Phase::Tool { calls, next }, Input::Resume) => Phase::ResumingTool { calls, next },
            // About to ask the model: first see what was queued meanwhile, so it goes with this request.
            (Phase::AwaitingResponse, Input::Resume) if self.checkpoints => Phase::TurnStartPoll,
            // Anywhere else a resume repeats what the turn waited for.
            (phase, Input::Resume) => phase,
            (_, Input::Failed(error)) => failed(error),
            (phase, input) => failed(NoeticError::Other {
                message: format!(
                    "turn core of step '{}' got {} while {}; this is a bug in the driver",
                    self.step_id,
                    input_name(&input),
                    phase_name(&phase)
                ),
                source: None,
            }),
        };
    }

    fn note(&mut self, p: Polled) {
        self.steering_pending = p.pending;
        self.steering_capacity = u32::try_from(p.capacity).unwrap_or(u32::MAX);
    }

    /// Before a model request: the round limit (raised by pending steering, up to one queue's worth), then the
    /// request. Injection happens in the driver right before the call, which clears what is pending.
    fn request(&mut self) -> Phase {
        let limit = if self.steering_pending {
            self.max_rounds.saturating_add(self.steering_capacity)
        } else {
            self.max_rounds
        };
        if self.round >= limit {
            return failed(NoeticError::RoundLimitExceeded {
                step_id: self.step_id.to_string(),
                max_rounds: self.max_rounds,
            });
        }
        self.steering_pending = false;
        Phase::AwaitingResponse
    }

    fn respond(&mut self, mut response: Box<ModelResponse>) -> Phase {
        self.usage.add(&response.usage);
        self.cost += response.usage.cost.unwrap_or(0.0);
        if let Some(refusal) = response.refusal.take() {
            return failed(NoeticError::ModelRefused { step_id: self.step_id.to_string(), refusal });
        }
        Phase::Reviewing { response }
    }

    fn review(
        &mut self,
        response: Box<ModelResponse>,
        decision: SteeringDecision,
        emit: &mut dyn FnMut(Effect),
    ) -> Phase {
        match decision.action {
            SteeringAction::Allow => {}
            SteeringAction::Deny => {
                emit(Effect::Steered { action: SteeringAction::Deny, guidance: decision.guidance.clone() });
                return failed(NoeticError::SteeringDenied { guidance: decision.guidance });
            }
            SteeringAction::Guide if self.corrections.len() < MAX_GUIDE_RETRIES => {
                emit(Effect::Steered { action: SteeringAction::Guide, guidance: decision.guidance.clone() });
                let text = decision.guidance.unwrap_or_else(|| DEFAULT_CORRECTION.to_owned());
                self.corrections.push(Item::developer(text));
                // The response is discarded; the same round asks again.
                return self.request();
            }
            SteeringAction::Guide => {
                tracing::warn!(step_id = %self.step_id, "steering kept guiding after {MAX_GUIDE_RETRIES} retries; accepting the response");
            }
        }
        self.corrections.clear();
        self.round += 1;
        let calls: Calls = response.tool_calls_iter().cloned().collect();
        if calls.is_empty() {
            return Phase::Storing { response };
        }
        emit(Effect::Append(response.items));
        self.concurrent.clear();
        // Only a step that may run calls together asks which may; one call never runs with another.
        if self.parallel > 1 && calls.len() > 1 { Phase::Classifying { calls } } else { Phase::Tool { calls, next: 0 } }
    }

    /// The call at `next` runs alone, or starts a group with the concurrent-safe calls that follow it.
    fn next_call(&mut self, calls: Calls, next: usize) -> Phase {
        if next >= calls.len() {
            return self.request();
        }
        match batch::group_end(&self.concurrent, next, self.parallel) {
            Some(end) => Phase::Group(Box::new(batch::Group::new(calls, next, end))),
            None => Phase::Tool { calls, next },
        }
    }
}

fn failed(error: NoeticError) -> Phase {
    Phase::Failed { error: Box::new(error) }
}

fn input_name(input: &Input) -> &'static str {
    match input {
        Input::Start => "the start",
        Input::Resume => "a resume",
        Input::Polled(_) => "a checkpoint result",
        Input::Response(_) => "a model response",
        Input::Reviewed(_) => "a review decision",
        Input::Stored => "a stored answer",
        Input::ToolDone(_) => "a tool result",
        Input::Classified(_) => "which calls may run together",
        Input::Failed(_) => "a failure",
    }
}

fn phase_name(phase: &Phase) -> &'static str {
    match phase {
        Phase::Start => "not started",
        Phase::TurnStartPoll => "waiting for the turn-start checkpoint",
        Phase::AwaitingResponse => "waiting for the model",
        Phase::Reviewing { .. } => "waiting for the review",
        Phase::Storing { .. } => "waiting for the answer to be stored",
        Phase::AnswerPoll { .. } => "waiting for the checkpoint after the answer",
        Phase::Tool { .. } | Phase::ResumingTool { .. } => "waiting for a tool result",
        Phase::ToolPoll { .. } => "waiting for the checkpoint after a tool",
        Phase::Classifying { .. } => "waiting to learn which calls may run together",
        Phase::Group(_) => "waiting for calls that run together",
        Phase::Finished { .. } => "finished",
        Phase::Failed { .. } => "failed",
    }
}
