//! The session log: every durable fact of a session as one entry in one append-only, totally ordered log per
//! session (SPEC 6, 7). Everything else — the conversation, the steering queue, the ledger, pending approvals, the
//! running turn's position, layer state, the event stream's numbers — is a projection of it.
//!
//! This module holds the log's format ([`Entry`], [`encode`], [`decode`]), the fold that turns a log into what a
//! session shows ([`Projection`], [`Summary`]), the async store seam ([`LogStore`], [`Leases`], [`StoreError`]), the
//! in-memory store ([`MemoryLogStore`]) and the recorded steering decisions of a store, read to be replayed through
//! new rules ([`Recording`], see [`crate::steering::replay`](mod@crate::steering::replay)). `noetic::testing::check_log_store` is the
//! conformance kit every store runs.
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
//! | [`Entry::Compacted`] | the conversation was compacted to fit the model's window | what requests skip |
//! | [`Entry::Titled`] | someone renames the session (any process, also during another's turn) | title |
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
//! Version 2 exists only inside a store's row ([`encode_row`]: an append's entries, one per line): a `core` entry
//! that hands the turn core what the row's last `appended` entry before it holds — a tool call's result, a model
//! response's items — leaves that out and says what it shares: `{"v":2,"at_ms":…,"shared":{"item":0},"type":"core",…}`
//! (the entry's result is that `appended` entry's first item), `"shared":"items"` (the response's items are all of
//! its items). Only a row reader puts it back ([`RowReader`]); read alone, such a line is refused, and a build that
//! reads only version 1 refuses it as newer rather than read a result without its text.
//!
//! # Positions and events
//!
//! A session's first entry is at position 1, each next one 1 more; positions never repeat, also across processes,
//! because only an append to the store gives one. A session's events are numbered by the position its log is at
//! (SPEC 7.1): the events emitted while the log ends at `p` get `(p << 20) + 1`, `+ 2`, …
//! ([`POSITION_SHIFT`](crate::context::POSITION_SHIFT)); a process that opened the log at `p` numbers its first events
//! there from `(p << 20) + 2^19`, above what a process that died at `p` used. Numbers therefore never repeat or go
//! back, across restarts, resumes and workers. A follower that asks for numbers its process never held (it saw them
//! from a process that died, or another worker) is told the gap, then gets the *durable* events of that range from
//! the log, each numbered `pos << 20` by its entry: a turn's start (or resumption) and end, a message queued and
//! injected, a tool call's start and outcome, a model response. Text deltas and progress are not in the log: they
//! are what the gap says is gone.
//!
//! # The seam
//!
//! [`LogStore`] is async and small: append at an expected position (a writer that missed an append — a stale owner
//! whose session was taken over — is refused with [`StoreError::Conflict`] and reads what it missed), append at the
//! end (facts any process may add: a message, a stop), read from a position, watch appends (other processes'
//! included), list, delete, snapshot. [`Leases`] exist only for stores several processes share; with them,
//! [`LogStore::take_lease`] takes a lease and says where the log ends, and [`LogStore::append_and_release`] gives it
//! up with a turn's last append (SQLite and PostgreSQL each in one transaction). Every method does its I/O off the
//! caller's tokio worker; no store call happens in `Drop` or under a std lock.
//!
//! # How a runtime writes it
//!
//! [`RuntimeBuilder::log_store`](crate::agent::RuntimeBuilder::log_store) keeps every session in a log. A session
//! decides what happens under its conversation lock and hands the entries to its own writer task there (so the log's
//! order is the order of the decisions); the writer appends them (batches that wait together share one append, one
//! transaction) and folds them into the session's [`Projection`]; whoever needs them durable awaits the receipt,
//! outside any lock. The durable points of a turn:
//! - its start (or resumption), with the messages a continuation starts with, before the agent runs;
//! - before each model request: the items since the last write, the messages injected into this request, the core's
//!   inputs — handed over without waiting; the writer holds them up to 1 ms for the next write (a model that answers
//!   within it has them written with its response and the next call's start: one transaction per tool call), else
//!   writes them while the model answers; an idempotent call's outcome waits for the next call's start anyway;
//! - before each tool call: everything since, and the call's [`Entry::ToolStarted`] — waited for, so a call never
//!   runs unrecorded; a turn's writes form a chain the writer refuses after one fails, so the turn never leaves a
//!   hole and two of its writes may share a transaction;
//! - a response is written on its own only while a slow review (an LLM judge) or the layers' storing runs, joined
//!   with it; a quick review adds no write;
//! - a step's answer ([`Entry::StepFinished`]), the turn's end with the layers' changed thread state.
//!
//! Decisions are appended as they are made, also an async verdict after its turn ended (with the thread's carried
//! feedback, so it survives a restart).
//!
//! # Processes that share a log
//!
//! What another process appends is heard through the store's watch (one per runtime, told to the session it
//! concerns) or found on a conflicting append: a message it accepted joins the queue in log order, its stop cancels
//! the running turn, its cleared queue empties this one, and this process's append goes after them. Another
//! process's turn entries fence a process running a turn of the session (it lost it); an idle one takes them in as
//! the session's history and shows them to its followers. With a store that has [`Leases`], a turn runs only where
//! the session's lease is held: taken (then what others wrote is read, unless the log ends where this process last
//! read it) before the turn, renewed every third of its term while it runs, given up with the turn's end; a process that cannot take it is told who holds it, and steers or stops
//! that turn by appending; a dead worker's turn is resumed by whoever takes the lease once its term ran out.
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
mod recorded;
mod remote;
mod rows;
mod seam;
mod summary;

#[cfg(test)]
mod tests;

pub use entry::{DecodeError, ENTRY_VERSION, Entry, Record, StepPath, TurnOutcome, decode, encode, encode_into};
pub use memory::MemoryLogStore;
pub(crate) use projection::READ_PAGE;
pub use projection::{AwaitedApproval, OpenTurn, Projection, Settings};
pub use recorded::{Recording, RecordingError, RecordingFilter};
pub use remote::{queue_message, rename, request_stop};
pub use rows::{RowReader, encode_row};
pub use seam::{Append, Appended, Expect, Leases, LogStore, SessionLine, Snapshot, StoreError, Taken};
pub use summary::{Summary, SummaryChange};
