//! The entries of a session log and their encoding (see the [module docs](super) for what each records and why).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::super::{BatchPolicy, MessageId, SteerMessage, SteeringMode};
use crate::budget::{Budget, BudgetReached, Spent};
use crate::context::ExecutionId;
use crate::error::NoeticError;
use crate::model::Item;
use crate::steering::LedgerEntry;
use crate::turn::Input;

/// The newest encoding version this build reads. An entry on its own is written as version 1 ([`encode`]); version
/// 2 is an entry of a stored row that leaves out what it shares with the `appended` entry before it in the same row
/// (see [`encode_row`](super::encode_row)): a build that reads only version 1 refuses it instead of reading an entry
/// with its content missing.
pub const ENTRY_VERSION: u32 = 2;

/// The version of an entry written whole.
const WHOLE: u32 = 1;

/// The version of an entry that shares content with the row's `appended` entry before it ([`Shared`]).
const SHARING: u32 = 2;

/// Where a step runs within its turn: the ids of the steps from the agent down, each with how many times its parent
/// had started a step of that id before (`plan#0/act#0`, a loop's third iteration `loop#0/act#2`). The same agent
/// given the same inputs walks the same paths, which is what lets a resumed turn find each step's entries again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StepPath(pub Arc<str>);

impl StepPath {
    /// The path of the `occurrence`-th step `step_id` under `self`.
    pub fn child(&self, step_id: &str, occurrence: u32) -> StepPath {
        if self.0.is_empty() {
            StepPath(format!("{step_id}#{occurrence}").into())
        } else {
            StepPath(format!("{}/{step_id}#{occurrence}", self.0).into())
        }
    }
}

/// How a turn ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum TurnOutcome {
    /// It answered.
    Completed {
        /// The answer.
        answer: String,
    },
    /// It failed (a cancellation is a failure with [`NoeticError::Cancelled`]).
    Failed {
        /// Why.
        error: NoeticError,
    },
    /// A stopped process's turn was given up ([`Session::discard_unfinished`](crate::agent::Session::discard_unfinished)):
    /// every call without a result got the interrupted result in the entry before.
    Discarded,
}

/// One durable fact of a session. Entries are appended, never changed; their order is the session's order.
///
/// Every entry that belongs to a turn names it (`turn`, the number the session gave it); those that belong to a
/// step name its [`StepPath`] too. New kinds may be added in later versions (the enum is non-exhaustive): a reader
/// meeting a kind it does not know refuses the log rather than skip a fact ([`decode`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Entry {
    /// The session's steering settings, as of here (the first entry of every session carries them).
    Settings {
        /// How many queued messages a checkpoint takes.
        mode: SteeringMode,
        /// How many messages may wait at once.
        capacity: u32,
        /// What pending steering does to the rest of a tool batch.
        batch_policy: BatchPolicy,
    },
    /// A message accepted for the session, by whichever process: it waits in the queue. The log's order is the
    /// acceptance order, so it is the order messages reach the model in (SPEC 4.2).
    MessageAccepted {
        /// The message (its id, text and acceptance time).
        message: SteerMessage,
    },
    /// Queued messages removed unseen: a stop, or the queue cleared. No ids: all of them.
    MessagesDropped {
        /// The messages; empty for all queued.
        ids: Vec<MessageId>,
        /// Why.
        reason: String,
    },
    /// Someone asked the session's running turn to stop (from any process); the owner acts on it at its next
    /// checkpoint and records the turn's end.
    StopRequested {
        /// Why.
        reason: String,
    },
    /// A turn started: the session's next number, and the message it starts with (empty for a continuation, whose
    /// messages follow as [`Entry::Injected`]).
    TurnStarted {
        /// Its number (1 for the session's first).
        turn: u64,
        /// Its execution's id.
        execution_id: ExecutionId,
        /// The message it was started with.
        input: String,
    },
    /// A process took over a turn another left unfinished: it keeps its number.
    TurnResumed {
        /// The turn.
        turn: u64,
        /// The process (worker) that resumed it.
        by: String,
    },
    /// Queued messages became user items of the conversation, in this order, in this one entry: shown exactly
    /// once (SPEC 6.2).
    Injected {
        /// The turn.
        turn: u64,
        /// The messages, in the order they were injected.
        ids: Vec<MessageId>,
    },
    /// Items appended to the conversation (a model's accepted answer and its calls, tool results, a step's input
    /// message).
    Appended {
        /// The turn.
        turn: u64,
        /// The items, in order.
        items: Vec<Item>,
    },
    /// A step started.
    StepStarted {
        /// The turn.
        turn: u64,
        /// Where.
        step: StepPath,
    },
    /// A step finished; `output` is its output (JSON) when later steps or a resumed turn need it.
    StepFinished {
        /// The turn.
        turn: u64,
        /// Where.
        step: StepPath,
        /// Its output.
        output: Option<Value>,
    },
    /// An input of an `llm` step's turn core ([`crate::turn::TurnCore`]): a model response received, a review
    /// decided, the answer stored, a tool outcome, a checkpoint's finding. Replaying a step's inputs through a new
    /// core puts it where it was (SPEC 6.3: what is in the log is not done again).
    Core {
        /// The turn.
        turn: u64,
        /// The `llm` step.
        step: StepPath,
        /// The input.
        input: Input,
    },
    /// A tool call started (its outcome follows as a [`Entry::Core`] input, unless the process died).
    ToolStarted {
        /// The turn.
        turn: u64,
        /// The `llm` step.
        step: StepPath,
        /// The call id (unique within its turn, not across turns).
        call_id: Arc<str>,
        /// The tool.
        tool: Arc<str>,
    },
    /// A call waits for a person's approval.
    ApprovalAsked {
        /// The turn.
        turn: u64,
        /// The call id.
        call_id: String,
        /// The tool.
        tool: String,
        /// The arguments as the model wrote them (untrusted).
        arguments: String,
        /// SHA-256 of the canonical arguments: what a decision is bound to (absent in entries before it was kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments_sha256: Option<String>,
    },
    /// A person (or the timeout) decided an approval.
    ApprovalDecided {
        /// The turn.
        turn: u64,
        /// The call id.
        call_id: String,
        /// Approved or not.
        approved: bool,
        /// The reason given with a rejection.
        reason: Option<String>,
    },
    /// A steering decision, as the ledger keeps it (also an async verdict that resolved after its turn ended).
    Decision {
        /// The turn it was made in, if it was made in one.
        turn: Option<u64>,
        /// The ledger entry.
        entry: Box<LedgerEntry>,
    },
    /// A turn ended.
    TurnEnded {
        /// The turn.
        turn: u64,
        /// How.
        #[serde(flatten)]
        outcome: TurnOutcome,
    },
    /// The conversation was compacted (SPEC 8.2): requests skip its first `upto` items and send `summary` in their
    /// place (`None`: they are left out). Nothing is removed: the conversation, the ledger and replay keep every
    /// item.
    Compacted {
        /// The turn it happened in (`None`: asked for by hand while the session was idle).
        turn: Option<u64>,
        /// Items `0..upto` are no longer sent.
        upto: usize,
        /// What is sent in their place.
        summary: Option<String>,
    },
    /// A budget set for the session (a person, the API, configuration): it holds from here on, and a session
    /// paused over its budget may continue.
    BudgetSet {
        /// The limits.
        budget: Budget,
    },
    /// A budget limit was reached: the turn ended at that checkpoint and the session is paused until a budget is
    /// set ([`Entry::BudgetSet`]).
    BudgetReached {
        /// The turn.
        turn: u64,
        /// Which limit, what it allows, what was spent.
        reached: BudgetReached,
    },
    /// What a turn spent that no other entry shows (its spawned children's and fork paths' calls, LLM judges,
    /// compaction), written with the turn's end; model responses and tool starts the log holds are counted from
    /// their own entries.
    BudgetSpent {
        /// The turn.
        turn: u64,
        /// What it spent.
        spent: Spent,
    },
    /// The session was given a title people know it by (its key stays its key): the last one holds. Any process
    /// may add it, also while another runs a turn.
    Titled {
        /// The title (checked when set: not empty, at most [`MAX_TITLE_CHARS`](crate::agent::MAX_TITLE_CHARS)
        /// characters, no control characters).
        title: String,
    },
    /// A memory layer's state for a scope other than `execution` changed (`None`: deleted).
    LayerState {
        /// Whose state (`thread:<key>`, …).
        scope: String,
        /// The layer.
        layer: String,
        /// The state.
        state: Option<Value>,
    },
}

impl Entry {
    /// The turn the entry belongs to, if any.
    pub fn turn(&self) -> Option<u64> {
        match self {
            Entry::TurnStarted { turn, .. }
            | Entry::TurnResumed { turn, .. }
            | Entry::Injected { turn, .. }
            | Entry::Appended { turn, .. }
            | Entry::StepStarted { turn, .. }
            | Entry::StepFinished { turn, .. }
            | Entry::Core { turn, .. }
            | Entry::ToolStarted { turn, .. }
            | Entry::ApprovalAsked { turn, .. }
            | Entry::ApprovalDecided { turn, .. }
            | Entry::TurnEnded { turn, .. }
            | Entry::BudgetReached { turn, .. }
            | Entry::BudgetSpent { turn, .. } => Some(*turn),
            Entry::Decision { turn, .. } | Entry::Compacted { turn, .. } => *turn,
            Entry::Settings { .. }
            | Entry::MessageAccepted { .. }
            | Entry::MessagesDropped { .. }
            | Entry::StopRequested { .. }
            | Entry::BudgetSet { .. }
            | Entry::Titled { .. }
            | Entry::LayerState { .. } => None,
        }
    }
}

/// An entry at its position in its session's log.
#[derive(Debug, Clone)]
pub struct Record {
    /// Its position: 1 for a session's first entry, each next one 1 more. Event numbers of durable events are
    /// these positions (SPEC 7.1).
    pub pos: u64,
    /// When it was appended.
    pub at: SystemTime,
    /// The fact.
    pub entry: Entry,
}

/// The encoded form: the version, the time and the entry's own fields, one JSON object.
#[derive(Serialize)]
struct Encoded<'a> {
    v: u32,
    at_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    shared: Option<Shared>,
    #[serde(flatten)]
    entry: &'a Entry,
}

#[derive(Deserialize)]
struct Decoded {
    v: u32,
    at_ms: u64,
    #[serde(default)]
    shared: Option<Shared>,
    #[serde(flatten)]
    entry: Value,
}

/// What a stored `core` entry leaves out because the last `appended` entry before it in its row holds it (a turn
/// appends a call's result to the conversation and gives it to its core in one append; likewise a model response's
/// items): `"shared":"items"`, a response whose items are all that entry's items; `"shared":{"item":n}`, a tool
/// outcome that is that entry's `n`-th item (0 first). Written as version 2 ([`ENTRY_VERSION`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Shared {
    /// The response's items.
    Items,
    /// The tool outcome: the `appended` entry's item at this index.
    Item(u32),
}

/// Why an encoded entry could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A newer build wrote it: this one must not guess what it means.
    #[error(
        "the entry was written by a newer version of noetic (entry version {found}, this build reads up to \
         {ENTRY_VERSION}); upgrade noetic to open this session"
    )]
    Newer {
        /// The version found.
        found: u32,
    },
    /// It is not an entry this build knows.
    #[error("the entry cannot be read ({message}); the log is damaged or was not written by noetic")]
    Unreadable {
        /// What is wrong with it.
        message: String,
    },
}

fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The stored form of `entry` appended at `at`: one JSON object, `{"v":1,"at_ms":…,"type":…,…}`.
pub fn encode(entry: &Entry, at: SystemTime) -> Result<String, DecodeError> {
    serde_json::to_string(&Encoded { v: WHOLE, at_ms: millis(at), shared: None, entry })
        .map_err(|e| DecodeError::Unreadable { message: format!("could not encode the entry: {e}") })
}

/// [`encode`], written at the end of `out` instead of into a string of its own (a store keeping several entries in
/// one text writes them one after the other). On an error, `out` may hold part of the entry.
pub fn encode_into(entry: &Entry, at: SystemTime, out: &mut Vec<u8>) -> Result<(), DecodeError> {
    encode_line(entry, None, at, out)
}

/// [`encode_into`]; with `shared`, `entry` is the stripped entry of a row's line that shares it (version 2).
pub(super) fn encode_line(
    entry: &Entry,
    shared: Option<Shared>,
    at: SystemTime,
    out: &mut Vec<u8>,
) -> Result<(), DecodeError> {
    let v = if shared.is_some() { SHARING } else { WHOLE };
    serde_json::to_writer(out, &Encoded { v, at_ms: millis(at), shared, entry })
        .map_err(|e| DecodeError::Unreadable { message: format!("could not encode the entry: {e}") })
}

/// Reads what [`encode`] wrote, as the entry at `pos`. A newer version is refused ([`DecodeError::Newer`]), so
/// is anything that is not an entry, and an entry of a row that shares content with the entry before it (only its
/// row reads it: [`RowReader`](super::RowReader)).
pub fn decode(pos: u64, text: &str) -> Result<Record, DecodeError> {
    match decode_line(pos, text)? {
        (record, None) => Ok(record),
        (_, Some(_)) => Err(DecodeError::Unreadable {
            message: "the entry leaves out what it shares with an earlier entry of its row: read it with its row"
                .into(),
        }),
    }
}

/// Reads one line of a row: the entry (stripped of what it shares, if anything) and what it shares.
pub(super) fn decode_line(pos: u64, text: &str) -> Result<(Record, Option<Shared>), DecodeError> {
    let decoded: Decoded =
        serde_json::from_str(text).map_err(|e| DecodeError::Unreadable { message: e.to_string() })?;
    if decoded.v > ENTRY_VERSION {
        return Err(DecodeError::Newer { found: decoded.v });
    }
    if decoded.shared.is_some() && decoded.v < SHARING {
        return Err(DecodeError::Unreadable { message: format!("version {} shares no content", decoded.v) });
    }
    let entry =
        serde_json::from_value(decoded.entry).map_err(|e| DecodeError::Unreadable { message: e.to_string() })?;
    Ok((Record { pos, at: UNIX_EPOCH + Duration::from_millis(decoded.at_ms), entry }, decoded.shared))
}
