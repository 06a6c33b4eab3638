//! Tool calls that run together: which calls of a response form a group, and what a group's outcomes, a
//! steering message and a failure do to it.
//!
//! The rules (SPEC 8.1; `Step::llm(..).parallel_tools(n)`, default 1):
//!
//! 1. **Grouping.** With a limit of 1 the calls of a response run one after another, in call order (seed 3);
//!    nothing of this module applies and the turn's inputs, events and log are those of a sequential turn. Above
//!    1, the core first asks which calls may run concurrently ([`Action::Classify`](super::Action::Classify):
//!    their tools say so, `Tool::concurrent`); the answer is recorded like any
//!    input, so a resumed turn groups the calls as the first process did. Then, in call order: a run of
//!    consecutive concurrent-safe calls forms a group of at most `limit` calls (a longer run forms several groups,
//!    one after another); a call not declared safe runs alone, in order, exactly as in a sequential turn. A group
//!    of one is a call that runs alone.
//! 2. **Gates.** The memory layers' `before_tool_call` and the approvals run per call, in call order, before any
//!    call of the group starts; a denied or rejected call gets its result (as in a sequential turn) and does not
//!    stop the others.
//! 3. **Results in call order.** The results of a group are appended to the conversation together, in call
//!    order, when its last call finishes, whatever the order they finished in. Each call's events
//!    (`tool_call_started`, `tool_call_completed`) carry its call id and are emitted as they happen.
//! 4. **Checkpoint.** The steering checkpoint of a group comes after its last outcome (every call of the group
//!    has started by then, so a poll after an earlier outcome could skip nothing). If steering is pending, the
//!    calls after the group are not started: each gets [`SKIPPED_RESULT`](super::SKIPPED_RESULT), in call order,
//!    and the messages are injected before the next model request, as in a sequential turn. With
//!    `interrupt_running(true)` a message queued in this process while a group runs is taken at once
//!    ([`interrupts`]) and cancels the calls of the group still running: each gets [`CANCELLED_RESULT`] as its
//!    outcome (recorded like any outcome, with a `tool_call_completed` event); then the checkpoint skips the calls
//!    after the group and the message is injected. A call that runs alone is never cancelled.
//! 5. **Durability.** A session log records the start of every call of a group (in one write, before the first
//!    starts) and each outcome as it comes. A turn resumed after a crash in the middle of a group keeps the
//!    recorded outcomes; each call started without a recorded outcome runs again if its tool is idempotent and
//!    gets [`INTERRUPTED_RESULT`](super::INTERRUPTED_RESULT) otherwise. No call runs twice unless its tool says
//!    that is harmless.
//! 6. **Failure.** A failure while a group runs (cancellation of the turn) gives every call without a result one
//!    (`Tool call not completed: …`), after the results already in, so the conversation stays well-formed.

use serde::{Deserialize, Serialize};

use super::{Effect, Phase, Polled, TurnCore, failed, not_completed};

#[cfg(test)]
mod tests;
use crate::error::NoeticError;
use crate::model::{Item, ToolCall, ToolResult};

/// The outcome of a call running in a group when steering arrived and the step cancels running calls
/// (`interrupt_running`).
pub const CANCELLED_RESULT: &str = "Cancelled due to queued user message.";

/// The result of a call steering cancelled while it ran (see [`CANCELLED_RESULT`]).
pub fn cancelled_result(call_id: &str) -> ToolResult {
    ToolResult::error(call_id, CANCELLED_RESULT)
}

/// A group of calls to run together ([`Action::RunGroup`](super::Action::RunGroup)).
#[derive(Debug, Clone, Copy)]
pub struct GroupRun<'a> {
    /// The group's calls, in call order.
    pub calls: &'a [ToolCall],
    /// By position in `calls`: the results already in (a resumed turn's recorded outcomes).
    pub results: &'a [Option<ToolResult>],
    /// A resumed turn: the calls without a result were running when the process stopped (run one again only if
    /// its tool is idempotent, else answer with [`interrupted_result`](super::interrupted_result)).
    pub resumed: bool,
}

impl<'a> GroupRun<'a> {
    /// The calls still to run (those without a result), in call order.
    pub fn to_run(&self) -> impl Iterator<Item = &'a ToolCall> + 'a {
        let results = self.results;
        self.calls.iter().enumerate().filter(move |(i, _)| results.get(*i).is_none_or(Option::is_none)).map(|(_, c)| c)
    }
}

/// True when `polled`, taken while calls run together, cancels those still running (the driver then gives each
/// [`cancelled_result`] as its outcome): steering is pending, the batch policy skips the rest of a batch, and the
/// step was configured with `interrupt_running`.
pub fn interrupts(polled: &Polled, interrupt_running: bool) -> bool {
    interrupt_running && polled.pending && polled.skip_rest
}

pub(super) fn one() -> u32 {
    1
}

pub(super) fn is_one(n: &u32) -> bool {
    *n == 1
}

/// The end (exclusive) of the group starting at `next`, when at least two concurrent-safe calls start there.
pub(super) fn group_end(concurrent: &[bool], next: usize, limit: u32) -> Option<usize> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let run = concurrent.get(next..)?.iter().take(limit).take_while(|safe| **safe).count();
    (run >= 2).then_some(next + run)
}

/// Calls that run together: the core waits for the outcomes of `calls[first..end]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Group {
    /// The response's calls (the group and those after it).
    pub(super) calls: super::Calls,
    pub(super) first: usize,
    pub(super) end: usize,
    /// The outcomes already in, by position in the group.
    pub(super) results: Vec<Option<ToolResult>>,
    /// A resumed turn: the calls without a result were running when the process stopped.
    pub(super) resumed: bool,
}

impl Group {
    pub(super) fn new(calls: super::Calls, first: usize, end: usize) -> Self {
        Group { results: vec![None; end.saturating_sub(first)], calls, first, end, resumed: false }
    }
}

impl TurnCore {
    /// This turn runs up to `limit` calls at once (see [the module docs](self)); 1, the default, runs them one
    /// after another.
    pub fn with_parallel_tools(mut self, limit: u32) -> Self {
        self.parallel = limit.max(1);
        self
    }

    /// A call of the group finished (or was cancelled): when it was the last, the group's results are appended in
    /// call order and the checkpoint follows.
    pub(super) fn group_done(&mut self, mut g: Box<Group>, result: ToolResult, emit: &mut dyn FnMut(Effect)) -> Phase {
        let slot = g
            .calls
            .get(g.first..g.end)
            .and_then(|calls| calls.iter().zip(&g.results).position(|(c, r)| r.is_none() && c.id == result.call_id));
        let Some(open) = slot.and_then(|slot| g.results.get_mut(slot)) else {
            return failed(NoeticError::Other {
                message: format!(
                    "turn core of step '{}' got a result for call '{}', which is not running; this is a bug in the \
                     driver",
                    self.step_id, result.call_id
                ),
                source: None,
            });
        };
        *open = Some(result);
        if g.results.iter().any(Option::is_none) {
            return Phase::Group(g);
        }
        let Group { calls, end, results, .. } = *g;
        emit(Effect::Append(results.into_iter().flatten().map(Item::ToolResult).collect()));
        if self.checkpoints { Phase::ToolPoll { calls, next: end } } else { self.next_call(calls, end) }
    }
}

/// A failure while a group ran: the results already in, then one for every call without a result.
pub(super) fn group_failed(group: Group, error: &NoeticError, emit: &mut dyn FnMut(Effect)) {
    let Group { calls, first, results, .. } = group;
    let reason = error.to_string();
    let mut results = results.into_iter();
    let items = calls
        .get(first..)
        .unwrap_or_default()
        .iter()
        .map(|call| match results.next().flatten() {
            Some(result) => Item::ToolResult(result),
            None => not_completed(call, &reason),
        })
        .collect();
    emit(Effect::Append(items));
}
