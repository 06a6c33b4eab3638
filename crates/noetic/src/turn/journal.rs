//! Where a running turn's state goes, so another process can resume it (SPEC 6): the [`TurnJournal`] hook.
//!
//! The driver commits at the points a resume needs: before each model request (after steering was injected),
//! when a response arrived (so it is never requested again), before each tool call (so a call that was running
//! is known), and when the step ends. Each commit carries the conversation items appended since the last one and
//! the ids of the steering messages injected with them, so a store can write both in one transaction (a message
//! is shown exactly once). Without a journal (the default) nothing of this runs.

use futures::future::BoxFuture;

use super::TurnCore;
use crate::error::NoeticError;
use crate::model::Item;

/// One commit of a running turn.
#[derive(Debug)]
pub struct TurnCommit<'a> {
    /// The `llm` step whose turn this is.
    pub step_id: &'a str,
    /// The index in the conversation of the first item in `items`.
    pub first: usize,
    /// Items appended since the last commit, in order.
    pub items: Vec<Item>,
    /// Ids of the steering messages injected with these items (they leave the queue in the same write).
    pub injected: Vec<String>,
    /// The core as it is now, or `None` when the step ended (its journal entry goes).
    pub core: Option<&'a TurnCore>,
}

/// A durable home for running turns. A store implements it per session.
pub trait TurnJournal: Send + Sync {
    /// How many conversation items are already durable (the next commit starts there).
    fn persisted(&self) -> usize;

    /// Writes `commit` — all of it or nothing. An error fails the turn (what was committed before stays).
    fn commit<'a>(&'a self, commit: TurnCommit<'a>) -> BoxFuture<'a, Result<(), NoeticError>>;

    /// The saved core of an unfinished turn of `step_id`, if a process stopped during one.
    fn saved(&self, step_id: &str) -> Option<TurnCore>;
}
