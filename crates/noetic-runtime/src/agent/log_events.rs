//! A session log's durable events: what a follower gets back from the log for events its process never held (a
//! restart, another worker, a follower that fell too far behind). Each entry that a live event reported becomes
//! that event again, numbered by its position (`pos << POSITION_SHIFT`): a turn's start and end, steering queued and
//! injected, a tool call's start and outcome, a model response, a compaction (how many items it folded — counted
//! from the compaction before it in what was read, else from the start — but not its tokens, which the log does
//! not keep: they read 0).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::log::{Entry, LogStore, Record, TurnOutcome};
use crate::context::{Event, EventKind, ExecutionId, POSITION_SHIFT};
use crate::error::NoeticError;
use crate::model::Item;
use crate::turn::Input;

/// How many entries one backfill reads at most (the newest before the follower's gap ends): a follower that asks
/// for more is told the rest is a gap.
const MOST: u64 = 4096;

/// The durable events of `key`'s log numbered in `(after, before)`, oldest first. A log that cannot be read gives
/// none (the follower is told a gap).
pub(crate) async fn backfill(store: Arc<dyn LogStore>, key: Arc<str>, after: u64, before: u64) -> Vec<Event> {
    let first = (after >> POSITION_SHIFT) + 1;
    let last = before.saturating_sub(1) >> POSITION_SHIFT;
    if last < first {
        return Vec::new();
    }
    let from = first.max(last.saturating_sub(MOST - 1));
    let records = match store.read(&key, from - 1, usize::try_from(last - from + 1).unwrap_or(usize::MAX)).await {
        Ok(records) => records,
        Err(e) => {
            tracing::warn!(session = %key, error = %e, "could not read the session log for a follower");
            return Vec::new();
        }
    };
    let mut events = Events::new(key);
    records.iter().filter_map(|record| events.of(record)).filter(|e| e.seq > after && e.seq < before).collect()
}

/// A call's tool and arguments, by (turn, call id).
type Calls = HashMap<(u64, Arc<str>), (Arc<str>, Arc<str>)>;

/// What mapping entries to events needs to remember across them.
pub(crate) struct Events {
    session: Arc<str>,
    /// Each turn's execution and start time.
    turns: HashMap<u64, (ExecutionId, std::time::SystemTime)>,
    /// Each call's tool and arguments, by (turn, call id).
    calls: Calls,
    /// Responses per step path so far (the round of the next).
    rounds: HashMap<Arc<str>, u32>,
    /// Items no longer sent after the last compaction read.
    compacted_upto: usize,
}

impl Events {
    pub(crate) fn new(session: Arc<str>) -> Self {
        Events { session, turns: HashMap::new(), calls: HashMap::new(), rounds: HashMap::new(), compacted_upto: 0 }
    }

    /// The event `record` reported, if it reported one.
    pub(crate) fn of(&mut self, record: &Record) -> Option<Event> {
        let turn = record.entry.turn();
        let kind = self.kind(record)?;
        let execution_id = turn.and_then(|t| self.turns.get(&t)).map_or_else(ExecutionId::nil, |(id, _)| *id);
        Some(Event { seq: record.pos << POSITION_SHIFT, turn, execution_id, at: record.at, kind })
    }

    fn kind(&mut self, record: &Record) -> Option<EventKind> {
        let session = self.session.clone();
        let step_id = |path: &str| Arc::from(path.split('#').next().unwrap_or(path));
        Some(match &record.entry {
            Entry::TurnStarted { turn, execution_id, .. } => {
                self.turns.insert(*turn, (*execution_id, record.at));
                EventKind::TurnStarted { session, turn: *turn }
            }
            Entry::TurnResumed { turn, .. } => EventKind::TurnStarted { session, turn: *turn },
            Entry::MessageAccepted { message } => EventKind::SteeringQueued { session, id: message.id.to_string() },
            Entry::Injected { ids, .. } => EventKind::SteeringInjected { session, count: ids.len() },
            Entry::Appended { turn, items } => {
                for item in items {
                    if let Item::ToolCall(call) = item {
                        let arguments = call.arguments.clone();
                        self.calls.insert((*turn, call.id.clone()), (call.name.clone(), arguments));
                    }
                }
                return None;
            }
            Entry::ToolStarted { turn, step, call_id, tool } => {
                let arguments = self.calls.get(&(*turn, call_id.clone())).map(|(_, a)| a.clone()).unwrap_or_default();
                EventKind::ToolCallStarted {
                    step_id: step_id(&step.0),
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    arguments,
                }
            }
            Entry::Core { turn, step, input: Input::ToolDone(result) } => {
                let tool = self.calls.get(&(*turn, result.call_id.clone())).map(|(t, _)| t.clone()).unwrap_or_default();
                EventKind::ToolCallCompleted {
                    step_id: step_id(&step.0),
                    call_id: result.call_id.clone(),
                    tool,
                    is_error: result.is_error,
                    output: result.content.clone(),
                    error_kind: None,
                }
            }
            Entry::Core { step, input: Input::Response(response), .. } => {
                let round = self.rounds.entry(step.0.clone()).or_default();
                let this = *round;
                *round += 1;
                EventKind::ModelCallCompleted {
                    step_id: step_id(&step.0),
                    round: this,
                    tool_calls: response.tool_calls_iter().count(),
                    usage: response.usage,
                }
            }
            Entry::TurnEnded { turn, outcome } => match outcome {
                TurnOutcome::Completed { .. } => {
                    let started = self.turns.get(turn).map(|(_, at)| *at);
                    let duration = started.and_then(|s| record.at.duration_since(s).ok()).unwrap_or(Duration::ZERO);
                    EventKind::TurnCompleted { session, turn: *turn, duration }
                }
                TurnOutcome::Failed { error } => EventKind::TurnFailed { session, turn: *turn, error: error.clone() },
                TurnOutcome::Discarded => EventKind::TurnFailed {
                    session,
                    turn: *turn,
                    error: NoeticError::other("the turn a stopped process left was discarded"),
                },
            },
            Entry::Compacted { upto, summary, .. } => {
                let folded = upto.saturating_sub(self.compacted_upto);
                self.compacted_upto = *upto;
                EventKind::ContextCompacted {
                    step_id: Arc::from(""),
                    folded,
                    upto: *upto,
                    tokens_before: 0,
                    tokens_after: 0,
                    summarized: summary.is_some(),
                }
            }
            _ => return None,
        })
    }
}
