//! The bounded ledger a steering state keeps, oldest first. A gate's usual entry — an allow that no rule made, of one
//! tool call or model turn — is kept as the few fields it has (what the hook saw, when, how long), and becomes a
//! [`LedgerEntry`] only when the ledger is read; every other entry is kept whole. A full ledger renews its oldest
//! slot in place (a slot of a tool call keeps its name's buffer), so no entry moves and a usual entry allocates
//! nothing but its copy of the tool's arguments.

use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::{LedgerEntry, LedgerKind};
use crate::model::Usage;
use crate::steering::SteeringAction;
use crate::steering::rules::HookParams;

/// The ledger: at most `max` entries (given with each append), oldest dropped first.
#[derive(Clone, Default)]
pub(crate) struct Ledger {
    /// The slots. While fewer than the ledger's bound they are in order; once it is full, `head` is the oldest and
    /// the ring turns one slot per append.
    slots: Vec<Kept>,
    head: usize,
}

/// One slot.
#[derive(Clone)]
enum Kept {
    /// An allow no rule made.
    Allow(Allowed),
    /// Any other entry, whole.
    Entry(Box<LedgerEntry>),
}

/// What a gate's allow that no rule made records.
#[derive(Clone)]
struct Allowed {
    timestamp: SystemTime,
    duration: Duration,
    of: Subject,
}

/// The hook call an allow was about.
#[derive(Clone)]
enum Subject {
    Tool { name: String, args: Value },
    Turn(Usage),
}

impl Ledger {
    /// A ledger of `entries`, oldest first, keeping the last `max`.
    pub(crate) fn of(entries: Vec<LedgerEntry>, max: usize) -> Self {
        let skip = entries.len().saturating_sub(max);
        Ledger { slots: entries.into_iter().skip(skip).map(|e| Kept::Entry(Box::new(e))).collect(), head: 0 }
    }

    /// The entries, oldest first.
    pub(crate) fn entries(&self) -> impl Iterator<Item = LedgerEntry> + '_ {
        let (newer, older) = self.slots.split_at(self.head);
        older.iter().chain(newer).map(Kept::entry)
    }

    /// Appends `entry`, dropping the oldest entries beyond `max`.
    pub(crate) fn push(&mut self, entry: LedgerEntry, max: usize) {
        let entry = Kept::Entry(Box::new(entry));
        match self.room(max) {
            Room::None => {}
            Room::Push => self.slots.push(entry),
            Room::Renew(i) => self.slots[i] = entry,
        }
    }

    /// Appends the entry of an allow that no rule made about `params`, stamped `timestamp`, the evaluation having
    /// taken `duration`; drops the oldest entries beyond `max`.
    pub(crate) fn push_allow(
        &mut self,
        max: usize,
        params: &HookParams<'_>,
        timestamp: SystemTime,
        duration: Duration,
    ) {
        let i = match self.room(max) {
            Room::None => return,
            Room::Push => {
                self.slots.push(Kept::Allow(Allowed { timestamp, duration, of: Subject::of(params) }));
                return;
            }
            Room::Renew(i) => i,
        };
        match (&mut self.slots[i], params) {
            // The usual case: a tool call's allow in the place of another's, in the buffers that one used.
            (
                Kept::Allow(Allowed { timestamp: t, duration: d, of: Subject::Tool { name, args } }),
                HookParams::BeforeToolCall(call),
            ) => {
                name.clear();
                name.push_str(call.name);
                match (args, call.args) {
                    // No arguments in the place of others: the old map, emptied, holds them.
                    (Value::Object(old), Value::Object(new)) if new.is_empty() => {
                        if !old.is_empty() {
                            old.clear();
                        }
                    }
                    (args, new) => args.clone_from(new),
                }
                (*t, *d) = (timestamp, duration);
            }
            (
                Kept::Allow(Allowed { timestamp: t, duration: d, of: Subject::Turn(usage) }),
                HookParams::AfterModelCall(turn),
            ) => {
                (*t, *d, *usage) = (timestamp, duration, turn.response.usage);
            }
            (slot, _) => *slot = Kept::Allow(Allowed { timestamp, duration, of: Subject::of(params) }),
        }
    }

    /// Makes room for one entry within `max`.
    #[inline(always)]
    fn room(&mut self, max: usize) -> Room {
        if self.slots.len() > max {
            // Only after the bound changed (a ledger read back from a store): put the slots in order and drop
            // the oldest.
            self.slots.rotate_left(self.head);
            self.head = 0;
            self.slots.drain(..self.slots.len() - max);
        }
        if max == 0 {
            return Room::None;
        }
        if self.slots.len() < max {
            return Room::Push;
        }
        let oldest = self.head;
        self.head = if oldest + 1 == self.slots.len() { 0 } else { oldest + 1 };
        Room::Renew(oldest)
    }
}

/// Where the next entry goes.
enum Room {
    /// Nowhere: the ledger keeps no entries.
    None,
    /// After the others.
    Push,
    /// In the place of the oldest, which it drops.
    Renew(usize),
}

impl Kept {
    fn entry(&self) -> LedgerEntry {
        match self {
            Kept::Entry(entry) => LedgerEntry::clone(entry),
            Kept::Allow(Allowed { timestamp, duration, of }) => {
                let kind = match of {
                    Subject::Tool { .. } => LedgerKind::ToolCall,
                    Subject::Turn(_) => LedgerKind::ModelTurn,
                };
                let mut entry = LedgerEntry::new(kind, SteeringAction::Allow);
                (entry.timestamp, entry.duration) = (*timestamp, *duration);
                match of {
                    Subject::Tool { name, args } => {
                        (entry.tool_name, entry.tool_args) = (Some(name.clone()), Some(args.clone()))
                    }
                    Subject::Turn(usage) => entry.usage = Some(*usage),
                }
                entry
            }
        }
    }
}

impl Subject {
    fn of(params: &HookParams<'_>) -> Self {
        match params {
            HookParams::BeforeToolCall(call) => Subject::Tool { name: call.name.to_owned(), args: call.args.clone() },
            HookParams::AfterModelCall(turn) => Subject::Turn(turn.response.usage),
        }
    }
}

/// The entry of an allow that no rule made about `params`: what the ledger gives back for one it kept.
pub(crate) fn allowed_entry(params: &HookParams<'_>, timestamp: SystemTime, duration: Duration) -> LedgerEntry {
    let kind = match params {
        HookParams::BeforeToolCall(_) => LedgerKind::ToolCall,
        HookParams::AfterModelCall(_) => LedgerKind::ModelTurn,
    };
    let mut entry = LedgerEntry::new(kind, SteeringAction::Allow);
    (entry.timestamp, entry.duration) = (timestamp, duration);
    match params {
        HookParams::BeforeToolCall(call) => {
            (entry.tool_name, entry.tool_args) = (Some(call.name.to_owned()), Some(call.args.clone()));
        }
        HookParams::AfterModelCall(turn) => entry.usage = Some(turn.response.usage),
    }
    entry
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::layer::{ModelCallParams, ToolCallParams};
    use crate::model::ModelResponse;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn tool(ledger: &mut Ledger, max: usize, name: &str, args: Value, secs: u64) {
        let params = HookParams::BeforeToolCall(ToolCallParams { call_id: "c", name, args: &args });
        ledger.push_allow(max, &params, at(secs), Duration::from_nanos(secs));
    }

    fn turn(ledger: &mut Ledger, max: usize, secs: u64) {
        let response = ModelResponse::text("ok");
        let params = HookParams::AfterModelCall(ModelCallParams { step_id: "s", model: "m", response: &response });
        ledger.push_allow(max, &params, at(secs), Duration::from_nanos(secs));
    }

    fn denied(secs: u64) -> LedgerEntry {
        let mut entry = LedgerEntry::new(LedgerKind::ToolCall, SteeringAction::Deny);
        (entry.timestamp, entry.rule_id, entry.guidance) = (at(secs), Some("no".into()), Some("never".into()));
        entry
    }

    /// An entry as (kind, seconds, tool name, arguments, rule).
    type Read = (LedgerKind, u64, Option<String>, Option<Value>, Option<String>);

    fn read(ledger: &Ledger) -> Vec<Read> {
        let secs = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        ledger.entries().map(|e| (e.kind, secs(e.timestamp), e.tool_name, e.tool_args, e.rule_id)).collect()
    }

    #[test]
    fn a_full_ledger_keeps_the_newest_entries_in_order_whatever_the_slot_held_before() {
        let mut ledger = Ledger::default();
        tool(&mut ledger, 3, "a", json!({"x": 1}), 1);
        turn(&mut ledger, 3, 2);
        ledger.push(denied(3), 3);
        // Each of these takes the place of the oldest: a tool call's, a model turn's, a whole entry's, then its own.
        tool(&mut ledger, 3, "b", json!({}), 4);
        tool(&mut ledger, 3, "c", json!({"y": [2]}), 5);
        tool(&mut ledger, 3, "d", json!({}), 6);
        turn(&mut ledger, 3, 7);
        assert_eq!(
            read(&ledger),
            vec![
                (LedgerKind::ToolCall, 5, Some("c".into()), Some(json!({"y": [2]})), None),
                (LedgerKind::ToolCall, 6, Some("d".into()), Some(json!({})), None),
                (LedgerKind::ModelTurn, 7, None, None, None),
            ]
        );
        let entries: Vec<LedgerEntry> = ledger.entries().collect();
        assert_eq!(entries[2].usage, Some(ModelResponse::text("ok").usage));
        assert_eq!((entries[1].duration, entries[1].action), (Duration::from_nanos(6), SteeringAction::Allow));
    }

    #[test]
    fn a_smaller_bound_drops_the_oldest_and_a_bound_of_zero_keeps_nothing() {
        let mut ledger = Ledger::of((1..=4).map(denied).collect(), 3);
        assert_eq!(read(&ledger).iter().map(|e| e.1).collect::<Vec<_>>(), [2, 3, 4]);
        tool(&mut ledger, 3, "a", json!({}), 5);
        tool(&mut ledger, 2, "b", json!({}), 6);
        assert_eq!(read(&ledger).iter().map(|e| e.1).collect::<Vec<_>>(), [5, 6]);
        ledger.push(denied(7), 0);
        assert_eq!(ledger.entries().count(), 0);
    }
}
