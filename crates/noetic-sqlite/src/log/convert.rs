//! A session of the old tables as log entries (the mapping is in the [module docs](super)).

use noetic_core::model::{Item, Role};
use noetic_runtime::agent::log::{Entry, TurnOutcome};
use noetic_runtime::agent::{BatchPolicy, SteerMessage, SteeringMode, parse_setting};
use noetic_steering::LedgerEntry;
use noetic_steps::ExecutionId;
use noetic_steps::turn::interrupted_result;
use serde::de::DeserializeOwned;

/// One row of the old `sessions` table with its items, queue and ledger, as stored.
pub(crate) struct OldSession {
    pub key: String,
    pub mode: String,
    pub capacity: i64,
    pub batch_policy: String,
    pub turns: i64,
    /// The row had a turn journal: its last turn did not finish.
    pub unfinished: bool,
    /// `(seq, item JSON)`, in order.
    pub items: Vec<(i64, String)>,
    /// `(pos, message JSON)`, in queue order.
    pub queue: Vec<(i64, String)>,
    /// `(seq, ledger entry JSON)`, in order.
    pub ledger: Vec<(i64, String)>,
}

/// Why a stored value could not be converted: the session, the table and row, the cause.
#[derive(Debug)]
pub(crate) struct Unreadable {
    pub what: String,
    pub cause: serde_json::Error,
}

fn parse<T: DeserializeOwned>(text: &str, what: impl FnOnce() -> String) -> Result<T, Unreadable> {
    serde_json::from_str(text).map_err(|cause| Unreadable { what: what(), cause })
}

/// The session's entries: settings, its turns folded into one, its queue, its ledger.
pub(crate) fn entries(old: &OldSession) -> Result<Vec<Entry>, Unreadable> {
    let key = &old.key;
    let mode: SteeringMode = parse_setting(&old.mode)
        .map_err(|cause| Unreadable { what: format!("session '{key}': its steering mode '{}'", old.mode), cause })?;
    let batch_policy: BatchPolicy = parse_setting(&old.batch_policy).map_err(|cause| Unreadable {
        what: format!("session '{key}': its batch policy '{}'", old.batch_policy),
        cause,
    })?;
    let capacity = u32::try_from(old.capacity.max(1)).unwrap_or(u32::MAX);
    let mut entries = vec![Entry::Settings { mode, capacity, batch_policy }];
    let history = old
        .items
        .iter()
        .map(|(seq, text)| parse::<Item>(text, || format!("session '{key}': its conversation item {seq}")))
        .collect::<Result<Vec<_>, _>>()?;
    let turns = u64::try_from(old.turns).unwrap_or(0);
    if turns > 0 || !history.is_empty() {
        entries.extend(turn(turns.max(1), history, old.unfinished));
    }
    for (pos, text) in &old.queue {
        let message = parse::<SteerMessage>(text, || format!("session '{key}': its queued message at {pos}"))?;
        entries.push(Entry::MessageAccepted { message });
    }
    for (seq, text) in &old.ledger {
        let entry = parse::<LedgerEntry>(text, || format!("session '{key}': its ledger row {seq}"))?;
        entries.push(Entry::Decision { turn: None, entry: Box::new(entry) });
    }
    Ok(entries)
}

/// The whole conversation as one turn `turn`, ended: given up when it was left unfinished (every call without a
/// result gets the interrupted result), completed with the last answer otherwise.
fn turn(turn: u64, history: Vec<Item>, unfinished: bool) -> Vec<Entry> {
    let mut entries = vec![Entry::TurnStarted { turn, execution_id: ExecutionId::new(), input: String::new() }];
    let answer = history
        .iter()
        .rev()
        .find_map(|item| match item {
            Item::Message { role: Role::Assistant, content } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let open = open_calls(&history);
    if !history.is_empty() {
        entries.push(Entry::Appended { turn, items: history });
    }
    if unfinished {
        if !open.is_empty() {
            let items = open.iter().map(|id| Item::ToolResult(interrupted_result(id))).collect();
            entries.push(Entry::Appended { turn, items });
        }
        entries.push(Entry::TurnEnded { turn, outcome: TurnOutcome::Discarded });
    } else {
        entries.push(Entry::TurnEnded { turn, outcome: TurnOutcome::Completed { answer } });
    }
    entries
}

/// The ids of the tool calls without a result, in call order. Ids may repeat across turns: a result answers the
/// earliest open call of its id.
fn open_calls(history: &[Item]) -> Vec<std::sync::Arc<str>> {
    let mut open: Vec<std::sync::Arc<str>> = Vec::new();
    for item in history {
        match item {
            Item::ToolCall(call) => open.push(call.id.clone()),
            Item::ToolResult(result) => {
                if let Some(at) = open.iter().position(|id| *id == result.call_id) {
                    open.remove(at);
                }
            }
            Item::Message { .. } => {}
        }
    }
    open
}

#[cfg(test)]
mod tests {
    use noetic_core::model::{ToolCall, ToolResult};

    use super::*;

    fn call(id: &str) -> Item {
        Item::ToolCall(ToolCall { id: id.into(), name: "t".into(), arguments: "{}".into() })
    }

    #[test]
    fn a_reused_call_id_is_open_only_where_its_last_call_has_no_result() {
        let history = [call("c1"), Item::ToolResult(ToolResult::ok("c1", "one")), call("c1"), call("c2")];
        assert_eq!(open_calls(&history), [std::sync::Arc::from("c1"), std::sync::Arc::from("c2")]);
    }

    #[test]
    fn a_finished_conversation_ends_its_turn_with_the_last_answer() {
        let entries = turn(3, vec![Item::user("hi"), Item::assistant("hello"), Item::user("bye")], false);
        assert!(matches!(entries[0], Entry::TurnStarted { turn: 3, .. }));
        assert!(matches!(
            &entries[2],
            Entry::TurnEnded { turn: 3, outcome: TurnOutcome::Completed { answer } } if answer == "hello"
        ));
    }
}
