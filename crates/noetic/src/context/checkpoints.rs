//! The live-steering checkpoints of a session turn, as the interpreter sees them. The agent layer implements them
//! (`agent::TurnSteering`); the context only carries them, so the interpreter needs no import of the agent layer.

use super::Context;

pub use crate::turn::SKIPPED_RESULT;

/// Where lasting records of an execution go — the steering ledger's entries, as JSON — so that they outlive the
/// process (a session log keeps them; see `agent::log`).
pub trait RecordSink: Send + Sync {
    /// Keeps one ledger entry.
    fn ledger_entry(&self, entry: String);
}

/// What an `llm` step asks of the session turn it runs in: polls at the checkpoints, injection of taken messages
/// before the next model request, and the batch policy.
pub trait Checkpoints: Send + Sync {
    /// True when the checkpoints belong to this execution (the turn's own, not a spawned child or a fork path).
    fn applies_to(&self, ctx: &Context) -> bool;
    /// The turn-start checkpoint, at most once per turn.
    fn poll_at_turn_start(&self);
    /// A checkpoint: takes queued messages; true if any are now pending.
    fn poll(&self) -> bool;
    /// True while messages are taken but not yet injected.
    fn has_pending(&self) -> bool;
    /// The session's queue capacity: the extra rounds steering may buy beyond the round limit.
    fn capacity(&self) -> usize;
    /// Injects the pending messages as user messages; returns their ids when `ids` is true (else nothing).
    fn inject(&self, ctx: &Context, ids: bool) -> Vec<String>;
    /// True when steering found at a checkpoint skips the rest of the tool batch (else the batch finishes).
    fn skips_rest_of_batch(&self) -> bool;
    /// The key of the session the turn belongs to.
    fn session(&self) -> &str;
    /// The turn's span, where steering-queue events go (see [`crate::trace`]); `None` when there is none.
    fn span(&self) -> Option<&tracing::Span> {
        None
    }
}
