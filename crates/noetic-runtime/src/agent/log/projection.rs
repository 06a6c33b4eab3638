//! A session as its log says it is: the fold of its entries, kept in memory and saved as a snapshot.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::entry::{Entry, Record};
use super::seam::{LogStore, StoreError};
use crate::agent::{BatchPolicy, DEFAULT_QUEUE_CAPACITY, SteerMessage, SteeringMode};
use crate::budget::Account;
use crate::context::ExecutionId;
use crate::model::{Folded, Item};
use crate::steering::LedgerEntry;
use crate::turn::Input;

/// How many entries one read asks a store for.
pub(crate) const READ_PAGE: usize = 1000;

/// A session's steering settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// How many queued messages a checkpoint takes.
    pub mode: SteeringMode,
    /// How many may wait.
    pub capacity: u32,
    /// What pending steering does to the rest of a batch.
    pub batch_policy: BatchPolicy,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: SteeringMode::default(),
            capacity: u32::try_from(DEFAULT_QUEUE_CAPACITY).unwrap_or(u32::MAX),
            batch_policy: BatchPolicy::default(),
        }
    }
}

/// A turn that started and has not ended: running, or left by a process that stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenTurn {
    /// Its number.
    pub turn: u64,
    /// Its execution's id.
    pub execution_id: ExecutionId,
    /// The message it started with.
    pub input: String,
    /// The position of its [`Entry::TurnStarted`]: its entries are the turn's entries after it.
    pub since: u64,
}

/// A call waiting for a person's decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AwaitedApproval {
    /// The turn.
    pub turn: u64,
    /// The call id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The arguments as the model wrote them (untrusted).
    pub arguments: String,
    /// SHA-256 of the canonical arguments (what the decision is bound to).
    #[serde(default)]
    pub arguments_sha256: Option<String>,
}

/// What a session's log says of it: everything the runtime, the server and the CLI show is read from here. Built by
/// [`Projection::apply`] from the first entry, or from a saved snapshot and the entries after it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Projection {
    /// The position of the last entry applied.
    pub last: u64,
    /// The settings.
    pub settings: Settings,
    /// The conversation.
    pub conversation: Vec<Item>,
    /// Messages waiting, in acceptance order.
    pub queue: Vec<SteerMessage>,
    /// The steering decisions, oldest first.
    pub ledger: Vec<LedgerEntry>,
    /// Turns started.
    pub turns: u64,
    /// The turn that started and has not ended.
    pub open_turn: Option<OpenTurn>,
    /// A stop asked for since the last turn ended, not yet acted on.
    pub stop_requested: Option<String>,
    /// Calls waiting for approval, in the order they were asked.
    pub approvals: Vec<AwaitedApproval>,
    /// Memory layers' state by scope, then layer.
    pub layer_states: BTreeMap<String, BTreeMap<String, Value>>,
    /// The session's budget, what it spent, and whether it is paused over it.
    #[serde(default)]
    pub budget: Account,
    /// How much of the conversation requests skip since its last compaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacted: Option<Folded>,
    /// The session's title ([`Entry::Titled`]), if it was given one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

impl Projection {
    /// The projection after `record`. Records must come in order: one at or before [`Projection::last`] is
    /// already applied and is ignored (so applying a snapshot's overlap twice is harmless).
    pub fn apply(&mut self, record: &Record) {
        self.apply_at(record.pos, record.at, &record.entry);
    }

    /// [`Projection::apply`] of the entry `entry` at position `pos`, appended at `at` (no record to build).
    pub fn apply_at(&mut self, pos: u64, at: std::time::SystemTime, entry: &Entry) {
        if pos <= self.last {
            return;
        }
        self.last = pos;
        match entry {
            Entry::Settings { mode, capacity, batch_policy } => {
                self.settings = Settings { mode: *mode, capacity: *capacity, batch_policy: *batch_policy };
            }
            Entry::MessageAccepted { message } => {
                if !self.queue.iter().any(|m| m.id == message.id) {
                    self.queue.push(message.clone());
                }
            }
            Entry::MessagesDropped { ids, .. } if ids.is_empty() => self.queue.clear(),
            Entry::MessagesDropped { ids, .. } => self.queue.retain(|m| !ids.contains(&m.id)),
            Entry::StopRequested { reason } => self.stop_requested = Some(reason.clone()),
            Entry::TurnStarted { turn, execution_id, input } => {
                self.budget.turn_started(at);
                self.turns = self.turns.max(*turn);
                self.stop_requested = None;
                self.open_turn =
                    Some(OpenTurn { turn: *turn, execution_id: *execution_id, input: input.clone(), since: pos });
            }
            Entry::Injected { ids, .. } => {
                for id in ids {
                    if let Some(at) = self.queue.iter().position(|m| m.id == *id) {
                        let message = self.queue.remove(at);
                        self.conversation.push(Item::user(message.text));
                    }
                }
            }
            Entry::Appended { items, .. } => self.conversation.extend(items.iter().cloned()),
            Entry::ApprovalAsked { turn, call_id, tool, arguments, arguments_sha256 } => {
                self.approvals.retain(|a| !(a.turn == *turn && a.call_id == *call_id));
                self.approvals.push(AwaitedApproval {
                    turn: *turn,
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    arguments: arguments.clone(),
                    arguments_sha256: arguments_sha256.clone(),
                });
            }
            Entry::ApprovalDecided { turn, call_id, .. } => {
                self.approvals.retain(|a| !(a.turn == *turn && a.call_id == *call_id));
            }
            Entry::Decision { entry, .. } => self.ledger.push((**entry).clone()),
            Entry::TurnEnded { turn, .. } => {
                self.budget.turn_ended(at);
                if self.open_turn.as_ref().is_some_and(|t| t.turn == *turn) {
                    self.open_turn = None;
                    self.stop_requested = None;
                }
                self.approvals.retain(|a| a.turn != *turn);
            }
            Entry::LayerState { scope, layer, state } => match state {
                Some(state) => {
                    self.layer_states.entry(scope.clone()).or_default().insert(layer.clone(), state.clone());
                }
                None => {
                    if let Some(layers) = self.layer_states.get_mut(scope) {
                        layers.remove(layer);
                        if layers.is_empty() {
                            self.layer_states.remove(scope);
                        }
                    }
                }
            },
            Entry::Compacted { upto, summary, .. } => {
                self.compacted = Some(Folded { upto: *upto, summary: summary.clone() });
            }
            Entry::Core { input: Input::Response(response), .. } => self.budget.model_call(&response.usage),
            Entry::ToolStarted { .. } => self.budget.tool_call(),
            Entry::BudgetSet { budget } => {
                self.budget.budget = Some(*budget);
                self.budget.paused = None;
            }
            Entry::BudgetReached { reached, .. } => self.budget.paused = Some(reached.clone()),
            Entry::BudgetSpent { spent, .. } => self.budget.add(spent),
            Entry::Titled { title } => self.title = Some(title.clone()),
            Entry::TurnResumed { .. } | Entry::StepStarted { .. } | Entry::StepFinished { .. } | Entry::Core { .. } => {
            }
        }
    }

    /// `key`'s session as `store` holds it now: its snapshot and the entries after it, read page by page (a
    /// session the store does not hold is the empty projection, `last == 0`).
    pub async fn load(store: &dyn LogStore, key: &str) -> Result<Projection, StoreError> {
        Projection::load_from_snapshot(store, key).await.map(|(projection, _)| projection)
    }

    /// [`Projection::load`], and the position of the snapshot it started from (0: none).
    pub(crate) async fn load_from_snapshot(store: &dyn LogStore, key: &str) -> Result<(Projection, u64), StoreError> {
        let mut projection = match store.snapshot(key).await? {
            Some(snapshot) => Projection::decode(&snapshot.bytes).unwrap_or_default(),
            None => Projection::default(),
        };
        let snapshot_at = projection.last;
        loop {
            let records = store.read(key, projection.last, READ_PAGE).await?;
            if records.is_empty() {
                return Ok((projection, snapshot_at));
            }
            records.iter().for_each(|record| projection.apply(record));
        }
    }

    /// The projection as a snapshot's bytes.
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(&SnapshotForm { v: SNAPSHOT_VERSION, projection: self })
    }

    /// Reads what [`Projection::encode`] wrote; a snapshot of a newer version, or one that does not read, is
    /// `None`: the caller rebuilds the projection from the log instead (a snapshot is only a shortcut).
    pub fn decode(bytes: &[u8]) -> Option<Projection> {
        let read: SnapshotRead = serde_json::from_slice(bytes).ok()?;
        (read.v == SNAPSHOT_VERSION).then_some(read.projection)
    }
}

/// The version of a snapshot's form ([`Projection::encode`]); one of another version is rebuilt from the log.
pub(crate) const SNAPSHOT_VERSION: u32 = 1;

#[derive(Serialize)]
struct SnapshotForm<'a> {
    v: u32,
    projection: &'a Projection,
}

#[derive(Deserialize)]
struct SnapshotRead {
    v: u32,
    projection: Projection,
}
