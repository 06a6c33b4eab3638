//! The session log: every durable fact of a session as one entry in one append-only, totally ordered log per
//! session (SPEC 6, 7). Everything else — the conversation, the steering queue, the ledger, pending approvals, the
//! running turn's position, layer state, the event stream's numbers — is a projection of it.
//!
//! This module holds the log's format ([`Entry`], [`encode`], [`decode`]), the fold that turns a log into what a
//! session shows ([`Projection`], [`Summary`]), the async store seam ([`LogStore`], [`Leases`], [`StoreError`]) and
//! the in-memory store ([`MemoryLogStore`]). `noetic::testing::check_log_store` is the conformance kit every store
//! runs.
//!
//! # Why one log
//!
//! A session used to be six things written at different moments (conversation items, the turn journal, the
//! steering inbox and queue, the ledger, layer states, the in-memory event log): each window between two of those
//! writes was a way to lose or repeat something across a crash. With one log a crash can only cut it between two
//! appends, and each append is all or nothing, so the question "what survives a crash" has one answer: every entry
//! that was appended, in order.
//!
//! # The entries (format version 1)
//!
//! | entry | written when | its projection |
//! |---|---|---|
//! | [`Entry::Settings`] | the session's first append; a setting changes | settings |
//! | [`Entry::MessageAccepted`] | any process accepts a message (acceptance order = log order) | queue |
//! | [`Entry::MessagesDropped`] | a stop or a clear empties the queue | queue |
//! | [`Entry::StopRequested`] | any process asks the running turn to stop | the owner stops at its next checkpoint |
//! | [`Entry::TurnStarted`] / [`Entry::TurnResumed`] / [`Entry::TurnEnded`] | a turn starts, is taken over, ends | turn count, the open turn |
//! | [`Entry::Injected`] | a checkpoint shows queued messages to the model | queue → conversation, atomically |
//! | [`Entry::Appended`] | items join the conversation | conversation |
//! | [`Entry::StepStarted`] / [`Entry::StepFinished`] | a step of the agent starts / finishes (with the output later steps need) | where a resumed turn is |
//! | [`Entry::Core`] | an `llm` step's turn core gets an input: model response, review decision, stored answer, tool outcome, checkpoint | where a resumed step is |
//! | [`Entry::ToolStarted`] | a tool call is about to run | a call with no outcome after it was interrupted |
//! | [`Entry::ApprovalAsked`] / [`Entry::ApprovalDecided`] | a call waits for / gets a person's decision | pending approvals |
//! | [`Entry::Decision`] | a steering rule decides (also an async verdict after its turn) | the ledger |
//! | [`Entry::LayerState`] | a layer's non-execution state changed | layer state |
//!
//! Entries that belong to a turn carry its number; those of a step carry its [`StepPath`] (the step ids from the
//! agent down, each with its occurrence), so two `llm` steps of one turn (plan, then act) and two turns reusing a
//! call id (`c1` in turn 1 and in turn 2) never mix: a call is `(turn, call id)`.
//!
//! # Encoding and versions
//!
//! An entry is stored as one JSON object: `{"v":1,"at_ms":…,"type":"message_accepted",…}` ([`encode`]). The version
//! is per entry, so a log written across upgrades stays readable entry by entry. A reader refuses an entry whose
//! version is newer than [`ENTRY_VERSION`] or whose `type` it does not know ([`DecodeError`]): skipping a fact it
//! cannot read would rebuild a session that never was. A later version adds entry kinds or optional fields; it
//! never changes what a field of version 1 means.
//!
//! # Positions and events
//!
//! A session's first entry is at position 1, each next one 1 more; positions never repeat, also across processes,
//! because only an append to the store gives one. Event numbers of durable events are their entries' positions
//! (SPEC 7.1): a client that saw up to N and reconnects after a crash reads the log after N. Transient events (text
//! deltas) are numbered after the position they follow, in a range that the next entry's number leaves behind, so
//! they never collide with a durable number after a restart.
//!
//! # The seam
//!
//! [`LogStore`] is async and small: append at an expected position (a writer that missed an append — a stale owner
//! whose session was taken over — is refused with [`StoreError::Conflict`] and reads what it missed), append at the
//! end (facts any process may add: a message, a stop), read from a position, watch appends (other processes'
//! included), list, delete, snapshot. [`Leases`] exist only for stores several processes share. Every method does
//! its I/O off the caller's tokio worker; no store call happens in `Drop` or under a std lock.
//!
//! # Resume is replay
//!
//! Opening a session reads its snapshot and the entries after it into a [`Projection`]. A turn that started and
//! did not end ([`Projection::open_turn`]) is resumed by running the agent again over its entries: a step whose
//! [`Entry::StepFinished`] is in the log returns its recorded output without running, an `llm` step feeds its
//! recorded [`Entry::Core`] inputs to a new turn core (so a model response in the log is never requested again, also
//! when the crash came during its review), a tool call with an outcome is not run again, and one with only an
//! [`Entry::ToolStarted`] gets the interrupted result unless its tool is idempotent. The turn keeps its number.

mod entry;
mod memory;
mod projection;
mod seam;
mod summary;

#[cfg(test)]
mod tests;

pub use entry::{DecodeError, ENTRY_VERSION, Entry, Record, StepPath, TurnOutcome, decode, encode};
pub use memory::MemoryLogStore;
pub use projection::{AwaitedApproval, OpenTurn, Projection, Settings};
pub use seam::{Appended, Expect, Leases, LogStore, SessionLine, Snapshot, StoreError};
pub use summary::Summary;
