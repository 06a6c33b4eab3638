//! What a store keeps per session for its list, folded from the entries as they are appended.

use std::collections::BTreeSet;

use super::entry::Entry;
use crate::agent::MessageId;

/// The counts a session list shows, kept by the store beside the log (updated in the append's own transaction with
/// [`Summary::apply`], so listing sessions reads no log).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Turns started.
    pub turns: u64,
    /// Conversation items.
    pub items: u64,
    /// Messages waiting in the queue.
    pub queued: u64,
    /// A turn started and has not ended (running, or left by a stopped process).
    pub open_turn: Option<u64>,
    /// The session's title, if it was given one ([`Entry::Titled`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The queued messages' ids (to count removals exactly once).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    waiting: BTreeSet<MessageId>,
}

impl Summary {
    /// The summary after `entry`.
    pub fn apply(&mut self, entry: &Entry) {
        match entry {
            Entry::MessageAccepted { message } => {
                self.waiting.insert(message.id);
            }
            Entry::MessagesDropped { ids, .. } if ids.is_empty() => self.waiting.clear(),
            Entry::MessagesDropped { ids, .. } => {
                for id in ids {
                    self.waiting.remove(id);
                }
            }
            Entry::Injected { ids, .. } => {
                for id in ids {
                    self.waiting.remove(id);
                }
                self.items += ids.len() as u64;
            }
            Entry::TurnStarted { turn, .. } => {
                self.turns = self.turns.max(*turn);
                self.open_turn = Some(*turn);
            }
            Entry::Appended { items, .. } => self.items += items.len() as u64,
            Entry::TurnEnded { turn, .. } if self.open_turn == Some(*turn) => self.open_turn = None,
            Entry::Titled { title } => self.title = Some(title.clone()),
            _ => {}
        }
        self.queued = self.waiting.len() as u64;
    }
}
