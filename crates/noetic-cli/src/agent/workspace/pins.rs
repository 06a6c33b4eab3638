//! Pins: what a path rule located for a tool call, kept until the tool runs, so that the rule's check and the
//! tool's work share one resolution — the tool acts on the folder the rule saw, not on whatever the path leads to
//! a moment later.
//!
//! A pin is keyed by call id, tool and path argument. Every path rule of a call looks at the same pin; a rule that
//! meets a pin it has already looked at is checking a new call with the same key (an id a scripted model reuses),
//! so it locates the path again. A call that never runs (another rule denied it) leaves its pin behind until
//! [`MAX_PINS`] newer ones push it out. The tools check the path rules again on what they act on, so a pin that
//! goes missing costs a second resolution, never a check.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::walk::Located;
use super::{Workspace, WsPath};

/// Most pins kept (each holds a folder open).
const MAX_PINS: usize = 64;

/// The pins of a workspace.
#[derive(Debug, Default)]
pub(super) struct Pins(Mutex<VecDeque<Pin>>);

#[derive(Debug)]
struct Pin {
    key: Key,
    located: Located,
    /// The rules that have looked at it.
    seen_by: Vec<String>,
}

#[derive(Debug, PartialEq, Eq)]
struct Key {
    call_id: String,
    tool: String,
    raw: String,
}

impl Key {
    fn new(call_id: &str, tool: &str, raw: &str) -> Self {
        Key { call_id: call_id.to_owned(), tool: tool.to_owned(), raw: raw.to_owned() }
    }
}

impl Pins {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Pin>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Workspace {
    /// The path rule `rule_id` checks for the call `call_id` of `tool` with the path argument `raw`: located as
    /// [`Workspace::locate`] does and pinned for the tool (see [`Workspace::take_pinned`]).
    pub fn locate_for_rule(
        &self,
        rule_id: &str,
        (call_id, tool): (&str, &str),
        raw: &str,
        follow_last: bool,
    ) -> Result<WsPath, String> {
        let key = Key::new(call_id, tool, raw);
        if let Some(pin) = self.pins.lock().iter_mut().find(|p| p.key == key)
            && !pin.seen_by.iter().any(|seen| seen == rule_id)
        {
            pin.seen_by.push(rule_id.to_owned());
            return Ok(pin.located.path.clone());
        }
        // Located outside the lock (it does I/O); the pins replaced or pushed out are closed after it.
        let located = self.locate(raw, follow_last);
        let path = located.as_ref().map(|l| l.path.clone()).map_err(String::clone);
        let stale: Vec<Pin> = {
            let mut pins = self.pins.lock();
            let mut stale: Vec<Pin> =
                pins.iter().position(|p| p.key == key).and_then(|at| pins.remove(at)).into_iter().collect();
            if let Ok(located) = located {
                pins.push_back(Pin { key, located, seen_by: vec![rule_id.to_owned()] });
                let excess = pins.len().saturating_sub(MAX_PINS);
                stale.extend(pins.drain(..excess));
            }
            stale
        };
        drop(stale);
        path
    }

    /// What the rules located for the call `call_id` of `tool` with the path argument `raw`, if they did: the tool
    /// acts on it. It is taken: a later call with the same key locates its path afresh.
    pub fn take_pinned(&self, call_id: &str, tool: &str, raw: &str) -> Option<Located> {
        let key = Key::new(call_id, tool, raw);
        let mut pins = self.pins.lock();
        let at = pins.iter().position(|p| p.key == key)?;
        pins.remove(at).map(|pin| pin.located)
    }
}
