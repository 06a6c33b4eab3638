//! What a session of schema versions 1–2 becomes in the log (the mapping is in the [module docs](super)): pure,
//! so it is tested without a database.

use std::collections::HashSet;

use noetic_core::model::{Item, Role};
use noetic_runtime::agent::log::{Entry, TurnOutcome};
use noetic_runtime::agent::{BatchPolicy, SteerMessage, SteeringMode};
use noetic_steering::LedgerEntry;
use noetic_steps::ExecutionId;
use serde_json::Value;

/// A session as versions 1–2 kept it, read and parsed.
#[derive(Debug, Clone)]
pub(crate) struct OldSession {
    pub key: String,
    pub mode: SteeringMode,
    pub capacity: u32,
    pub batch_policy: BatchPolicy,
    /// Turns the session had started.
    pub turns: u64,
    pub history: Vec<Item>,
    /// A turn was running when the old version stopped (its journal was left in the row).
    pub unfinished: bool,
    pub queue: Vec<SteerMessage>,
    pub ledger: Vec<LedgerEntry>,
}

/// The log a layer state of `scope` goes to: a session's thread state to the session's own log, any other scope
/// (global, a resource) to the log `scope:<scope>`.
pub(crate) fn layer_state_log(scope: &str) -> String {
    match scope.strip_prefix("thread:") {
        Some(key) => key.to_owned(),
        None => format!("scope:{scope}"),
    }
}

/// The entries `old` becomes, in order: its settings, its history as one turn (given up when it was unfinished),
/// its queue, its ledger.
pub(crate) fn session_entries(old: &OldSession) -> Vec<Entry> {
    let mut entries = vec![Entry::Settings { mode: old.mode, capacity: old.capacity, batch_policy: old.batch_policy }];
    let turn = if old.turns == 0 && !old.history.is_empty() { 1 } else { old.turns };
    if turn >= 1 {
        entries.push(Entry::TurnStarted { turn, execution_id: ExecutionId::new(), input: String::new() });
        entries.push(Entry::Appended { turn, items: old.history.clone() });
        if old.unfinished {
            let interrupted: Vec<Item> = open_calls(&old.history)
                .map(|id| Item::ToolResult(noetic_steps::turn::interrupted_result(id)))
                .collect();
            if !interrupted.is_empty() {
                entries.push(Entry::Appended { turn, items: interrupted });
            }
            entries.push(Entry::TurnEnded { turn, outcome: TurnOutcome::Discarded });
        } else {
            let answer = old
                .history
                .iter()
                .rev()
                .find(|item| item.role() == Some(Role::Assistant))
                .and_then(Item::text)
                .unwrap_or_default()
                .to_owned();
            entries.push(Entry::TurnEnded { turn, outcome: TurnOutcome::Completed { answer } });
        }
    }
    entries.extend(old.queue.iter().map(|message| Entry::MessageAccepted { message: message.clone() }));
    entries.extend(old.ledger.iter().map(|entry| Entry::Decision { turn: None, entry: Box::new(entry.clone()) }));
    entries
}

/// The entry a layer state becomes.
pub(crate) fn layer_state_entry(scope: &str, layer: &str, state: Value) -> Entry {
    Entry::LayerState { scope: scope.to_owned(), layer: layer.to_owned(), state: Some(state) }
}

/// The ids of the history's tool calls that have no result, in the order they were made.
fn open_calls(history: &[Item]) -> impl Iterator<Item = &str> {
    let answered: HashSet<&str> = history
        .iter()
        .filter_map(|item| match item {
            Item::ToolResult(result) => Some(&*result.call_id),
            _ => None,
        })
        .collect();
    history.iter().filter_map(move |item| match item {
        Item::ToolCall(call) if !answered.contains(&*call.id) => Some(&*call.id),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use noetic_core::model::{ToolCall, ToolResult};
    use noetic_runtime::agent::log::{Projection, Record};
    use noetic_steering::{LedgerKind, SteeringAction};

    use super::*;

    fn call(id: &str) -> Item {
        Item::ToolCall(ToolCall { id: id.into(), name: "search".into(), arguments: "{}".into() })
    }

    fn old(history: Vec<Item>, turns: u64, unfinished: bool) -> OldSession {
        OldSession {
            key: "k".into(),
            mode: SteeringMode::default(),
            capacity: 7,
            batch_policy: BatchPolicy::default(),
            turns,
            history,
            unfinished,
            queue: vec![SteerMessage::new("waiting")],
            ledger: vec![LedgerEntry::new(LedgerKind::ToolCall, SteeringAction::Allow)],
        }
    }

    fn project(entries: &[Entry]) -> Projection {
        let mut projection = Projection::default();
        for (i, entry) in entries.iter().enumerate() {
            projection.apply(&Record { pos: i as u64 + 1, at: std::time::SystemTime::now(), entry: entry.clone() });
        }
        projection
    }

    #[test]
    fn a_finished_session_becomes_one_completed_turn_with_its_queue_and_ledger() {
        let history =
            vec![Item::user("q"), call("c1"), Item::ToolResult(ToolResult::ok("c1", "r")), Item::assistant("a")];
        let entries = session_entries(&old(history.clone(), 2, false));
        let p = project(&entries);
        assert_eq!((p.conversation.clone(), p.turns, p.open_turn.clone()), (history, 2, None));
        assert_eq!((p.queue.len(), p.ledger.len(), p.settings.capacity), (1, 1, 7));
        let ended = entries.iter().find_map(|e| match e {
            Entry::TurnEnded { outcome: TurnOutcome::Completed { answer }, .. } => Some(answer.clone()),
            _ => None,
        });
        assert_eq!(ended.as_deref(), Some("a"));
    }

    #[test]
    fn an_unfinished_turn_is_given_up_and_each_open_call_gets_the_interrupted_result() {
        let history = vec![Item::user("q"), call("c1"), call("c2"), Item::ToolResult(ToolResult::ok("c1", "r"))];
        let p = project(&session_entries(&old(history, 1, true)));
        assert_eq!(p.conversation.len(), 5);
        assert_eq!(p.conversation[4], Item::ToolResult(noetic_steps::turn::interrupted_result("c2")));
        assert_eq!((p.turns, p.open_turn), (1, None));
    }

    #[test]
    fn items_without_a_counted_turn_are_turn_one_and_an_empty_session_has_only_its_settings() {
        let p = project(&session_entries(&old(vec![Item::user("q")], 0, false)));
        assert_eq!((p.turns, p.conversation.len()), (1, 1));
        let mut empty = old(Vec::new(), 0, false);
        empty.queue.clear();
        empty.ledger.clear();
        assert!(matches!(session_entries(&empty)[..], [Entry::Settings { .. }]));
    }

    #[test]
    fn thread_state_stays_with_its_session_and_other_scopes_get_a_log_of_their_own() {
        assert_eq!(layer_state_log("thread:a:b"), "a:b");
        assert_eq!(layer_state_log("global"), "scope:global");
        assert_eq!(layer_state_log("resource:x"), "scope:resource:x");
    }
}
