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
        if let Some(touch) = Touch::of(entry) {
            self.touch(&touch);
        }
        self.queued = self.waiting.len() as u64;
    }

    /// The summary after the entries `change` was made of ([`SummaryChange::of`]).
    pub fn apply_change(&mut self, change: &SummaryChange) {
        change.touches.iter().for_each(|touch| self.touch(touch));
        if change.entries > 0 {
            self.queued = self.waiting.len() as u64;
        }
    }

    fn touch(&mut self, touch: &Touch) {
        match touch {
            Touch::Accepted(id) => {
                self.waiting.insert(*id);
            }
            Touch::Dropped(ids) if ids.is_empty() => self.waiting.clear(),
            Touch::Dropped(ids) => {
                for id in ids {
                    self.waiting.remove(id);
                }
            }
            Touch::Injected(ids) => {
                for id in ids {
                    self.waiting.remove(id);
                }
                self.items += ids.len() as u64;
            }
            Touch::Started(turn) => {
                self.turns = self.turns.max(*turn);
                self.open_turn = Some(*turn);
            }
            Touch::Items(n) => self.items += n,
            Touch::Ended(turn) if self.open_turn == Some(*turn) => self.open_turn = None,
            Touch::Ended(_) => {}
            Touch::Titled(title) => self.title = Some(title.clone()),
        }
    }
}

/// What a run of entries changes in a [`Summary`], without their payloads (a conversation's items are counted, not
/// kept): a store makes it on the caller's thread and folds it into the stored summary in its writer, so the
/// entries themselves need not be copied there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SummaryChange {
    touches: Vec<Touch>,
    /// How many entries it was made of.
    entries: usize,
}

impl SummaryChange {
    /// The change `entries` make, in order.
    pub fn of(entries: &[Entry]) -> SummaryChange {
        SummaryChange { touches: entries.iter().filter_map(Touch::of).collect(), entries: entries.len() }
    }
}

/// One entry's part of a [`SummaryChange`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Touch {
    Accepted(MessageId),
    Dropped(Vec<MessageId>),
    Injected(Vec<MessageId>),
    Started(u64),
    Items(u64),
    Ended(u64),
    Titled(String),
}

impl Touch {
    fn of(entry: &Entry) -> Option<Touch> {
        Some(match entry {
            Entry::MessageAccepted { message } => Touch::Accepted(message.id),
            Entry::MessagesDropped { ids, .. } => Touch::Dropped(ids.clone()),
            Entry::Injected { ids, .. } => Touch::Injected(ids.clone()),
            Entry::TurnStarted { turn, .. } => Touch::Started(*turn),
            Entry::Appended { items, .. } => Touch::Items(items.len() as u64),
            Entry::TurnEnded { turn, .. } => Touch::Ended(*turn),
            Entry::Titled { title } => Touch::Titled(title.clone()),
            _ => return None,
        })
    }
}
