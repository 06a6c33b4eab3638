//! The live-steering checkpoints of a session turn, as the interpreter sees them. The agent layer implements them
//! (`agent::TurnSteering`); the context only carries them, so the interpreter needs no import of the agent layer.

use super::Context;

pub use crate::turn::SKIPPED_RESULT;

/// Where lasting records of an execution go — the steering ledger's entries — so that they outlive the process (a
/// session log keeps them; see `agent::log`).
pub trait RecordSink: Send + Sync {
    /// Keeps one ledger entry: a `steering::LedgerEntry`, handed over as it is (the context, below the steering
    /// layer, does not name its type; a JSON round trip cost more than the rest of the record).
    fn ledger_entry(&self, entry: Box<dyn std::any::Any + Send>);

    /// Keeps that a call waits for a person's decision, or how it was decided (default: kept nowhere).
    fn approval(&self, _approval: ApprovalRecord<'_>) {}

    /// Keeps that a gating layer rewrote a call's arguments (default: kept nowhere). A session keeps it as a
    /// ledger entry.
    fn rewrite(&self, _rewrite: RewriteRecord<'_>) {}
}

/// A gating layer's rewrite of a call's arguments, as a session keeps it ([`RecordSink::rewrite`]).
#[derive(Debug, Clone, Copy)]
pub struct RewriteRecord<'a> {
    /// The call id.
    pub call_id: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// The layer that rewrote the arguments.
    pub layer: &'a str,
    /// The arguments before.
    pub before: &'a serde_json::Value,
    /// The arguments after.
    pub after: &'a serde_json::Value,
    /// Why.
    pub reason: &'a str,
}

/// A call's approval, as a session keeps it ([`RecordSink::approval`]).
#[derive(Debug, Clone, Copy)]
pub enum ApprovalRecord<'a> {
    /// The call waits for a decision.
    Asked {
        /// The call id.
        call_id: &'a str,
        /// The tool.
        tool: &'a str,
        /// The arguments as the model wrote them (untrusted).
        arguments: &'a str,
        /// SHA-256 of the canonical arguments (what a decision is bound to).
        arguments_sha256: &'a str,
    },
    /// The call was approved or rejected (by a person, or by the timeout).
    Decided {
        /// The call id.
        call_id: &'a str,
        /// Approved or not.
        approved: bool,
        /// Why it was rejected.
        reason: Option<&'a str>,
    },
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
    /// Woken (at least once) when a message is queued for the session after this is first asked, so that calls
    /// running together can be cancelled when steering arrives (`interrupt_running`); a wake may find nothing
    /// new. `None` (the default): arrivals are only seen at the checkpoints.
    fn arrivals(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        None
    }
    /// The turn's span, where steering-queue events go (see [`crate::trace`]); `None` when there is none.
    fn span(&self) -> Option<&tracing::Span> {
        None
    }
}
