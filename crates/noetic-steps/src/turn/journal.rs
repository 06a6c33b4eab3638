//! Where a running turn's state goes, so another process can resume it (SPEC 6): the [`TurnJournal`] hook.
//!
//! The driver commits at the points a resume needs: before each model request (after steering was injected),
//! when a response arrived (so it is never requested again), before each tool call or group of calls that run
//! together (so a call that was running is known), after each outcome in such a group, and when the step ends. Each commit carries the conversation items appended since the last one and
//! the ids of the steering messages injected with them, so a store can write both in one transaction (a message
//! is shown exactly once). When a step finishes, its answer is committed too: a turn of several `llm` steps (plan,
//! then act) resumed after a crash returns the finished steps' answers without asking the model again and continues
//! the step that was running. Without a journal (the default) nothing of this runs.

use futures::future::BoxFuture;

use serde::{Deserialize, Serialize};

use super::{Input, TurnCore};
use crate::error::NoeticError;
use crate::model::{Folded, Item, ToolCall, Usage};

/// One commit of a running turn.
#[derive(Debug)]
pub struct TurnCommit<'a> {
    /// The `llm` step whose turn this is.
    pub step_id: &'a str,
    /// Where the step runs in the turn ([`TurnJournal::enter`]): `step_id#n` for its n-th run.
    pub path: &'a str,
    /// The index in the conversation of the first item in `items`.
    pub first: usize,
    /// Items appended since the last commit, in order.
    pub items: Vec<Item>,
    /// Ids of the steering messages injected with these items (they leave the queue in the same write).
    pub injected: Vec<String>,
    /// The core as it is now, or `None` when the step ended.
    pub core: Option<&'a TurnCore>,
    /// The step finished with this answer: a resumed turn returns it without running the step again.
    pub finished: Option<Finished>,
    /// The tool calls about to start: one, or a group that runs together (a session log records their starts in
    /// the same write).
    pub starts: &'a [ToolCall],
    /// The driver waits until the commit is durable (else a journal may write it while the driver goes on, as long
    /// as its next commit is written after it: a session log does this before a model request).
    pub wait: bool,
    /// Everything new since the journal's last commit can be done again on resume: outcomes of calls whose tools
    /// are idempotent, steering polls. A journal may keep it for its next commit instead of writing it now (a
    /// session log then writes a call's start together with the previous call's outcome: one write per call; a
    /// crash in between runs that call again, which its tool says is harmless). Never set when messages were
    /// injected, a model response arrived or a call that is not idempotent finished since the last commit.
    pub redoable: bool,
}

/// A finished `llm` step's answer, as a resumed turn gets it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finished {
    /// The final answer's text (parsed again into the step's output).
    pub text: String,
    /// Usage of the step's model calls.
    pub usage: Usage,
    /// Their cost in US dollars.
    pub cost: f64,
}

/// What a journal holds of one run of an `llm` step ([`TurnJournal::replay`]).
#[derive(Debug, Clone)]
pub enum Replay {
    /// The step finished: its answer.
    Finished(Finished),
    /// The step was running: its core.
    Running(TurnCore),
    /// The step was running: the inputs its core had been given, in order (a session log keeps these); a new core
    /// fed them is where the step was.
    Inputs(Vec<Input>),
}

/// A durable home for running turns. A store implements it per session turn.
pub trait TurnJournal: Send + Sync {
    /// How many conversation items are already durable (the next commit starts there).
    fn persisted(&self) -> usize;

    /// Writes `commit` — all of it or nothing. An error fails the turn (what was committed before stays).
    fn commit<'a>(&'a self, commit: TurnCommit<'a>) -> BoxFuture<'a, Result<(), NoeticError>>;

    /// Where a run of the `llm` step `step_id` is in this turn: `step_id#n` for its n-th run (0-based), counted
    /// per turn. The same agent walks the same runs in the same order, so a resumed turn finds each run's record
    /// under the same path. Called once at the start of each run.
    fn enter(&self, step_id: &str) -> String;

    /// What the journal holds of the run at `path`, if a stopped process left this turn unfinished: its answer when
    /// it finished (not run again), its core or its inputs when it was running (continued).
    fn replay(&self, path: &str) -> Option<Replay>;

    /// The core of the run at `path` is given `input` (a journal that records inputs keeps it for the next
    /// commit; the default keeps nothing).
    fn record(&self, _path: &str, _input: &Input) {}

    /// True when the journal records inputs ([`TurnJournal::record`]).
    fn records_inputs(&self) -> bool {
        false
    }

    /// The conversation was compacted: requests now skip what `folded` says (a session log records it with the
    /// next commit; the default keeps nothing, and a resumed turn compacts again if it must).
    fn compacted(&self, _folded: &Folded) {}
}
