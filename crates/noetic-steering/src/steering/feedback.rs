//! Where async verdicts go: the queue of the execution that fired them, or — once that execution has ended — its
//! parent's queue (a spawned child or fork path) or its thread's carry-over, which the thread's next execution
//! takes at its first recall (SPEC 3.8: feedback is never dropped with an execution's state).
//!
//! The carry-over is bounded: at most [`MAX_CARRIED_PER_THREAD`] verdicts per thread and
//! [`MAX_CARRIED_THREADS`] threads. Past either bound the oldest verdicts (or the thread carried longest) are
//! dropped with a `tracing` warning; each dropped verdict is still in the ledger of the execution that fired it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::ledger::Ledger;
use crate::context::{ExecutionId, lock};
use crate::error::ConfigError;

/// Verdicts a thread's carry-over keeps for its next execution; the oldest are dropped past this.
pub const MAX_CARRIED_PER_THREAD: usize = 100;
/// Threads with a carry-over at once; the one carried longest is dropped past this.
pub const MAX_CARRIED_THREADS: usize = 1024;

/// An async verdict waiting to be shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Feedback {
    /// The rule that produced it.
    pub rule_id: String,
    /// What the model should know.
    pub guidance: String,
}

/// What an async judge hands back when it resolves.
pub(super) enum Late {
    /// A non-allow verdict for the model.
    Feedback(Feedback),
    /// The judge's model call failed with a configuration error: the next gate or recall fails the step with it.
    Fault(ConfigError),
}

/// Where an ended execution's verdicts go.
#[derive(Clone)]
pub(super) enum Forward {
    /// The state of the execution that spawned it.
    Parent(Arc<Mutex<Inner>>),
    /// The carry-over of its thread.
    Thread(Arc<str>),
}

/// The layer's state for one scope key.
#[derive(Default)]
pub(super) struct Inner {
    pub(super) ledger: Ledger,
    pub(super) pending: VecDeque<Feedback>,
    /// The first configuration error an async judge hit, until a gate or recall surfaces it.
    pub(super) fault: Option<ConfigError>,
    /// Set when the execution ended: verdicts resolving later go there.
    pub(super) forward: Option<Forward>,
    /// GUIDE verdicts per escalating rule in the current turn.
    pub(super) guides: GuideCounts,
}

impl Inner {
    fn take(&mut self, late: Late) {
        match late {
            Late::Feedback(f) => self.pending.push_back(f),
            Late::Fault(e) => {
                self.fault.get_or_insert(e);
            }
        }
    }
}

#[derive(Default)]
struct Carried {
    /// Insertion order, to find the thread carried longest.
    seq: u64,
    pending: VecDeque<Feedback>,
    fault: Option<ConfigError>,
}

/// Verdicts waiting for a thread's next execution.
#[derive(Default)]
pub(super) struct CarryOver {
    threads: Mutex<(u64, HashMap<Arc<str>, Carried>)>,
    /// How many threads have something carried (written under the lock): almost always 0, and then a turn
    /// taking its thread's carry-over needs no lock that all turns share.
    carried: AtomicUsize,
}

impl CarryOver {
    fn put(&self, thread: &Arc<str>, late: impl IntoIterator<Item = Late>) {
        // Nothing to carry leaves no entry: an empty one would count against the threads the carry-over holds
        // and push out a thread's real verdicts.
        let mut late = late.into_iter().peekable();
        if late.peek().is_none() {
            return;
        }
        let mut guard = lock(&self.threads);
        let (next_seq, threads) = &mut *guard;
        if !threads.contains_key(thread) && threads.len() >= MAX_CARRIED_THREADS {
            let oldest = threads.iter().min_by_key(|(_, c)| c.seq).map(|(t, _)| t.clone());
            if let Some(evicted) = oldest.and_then(|t| threads.remove_entry(&t)) {
                tracing::warn!(
                    thread = %evicted.0,
                    dropped = evicted.1.pending.len(),
                    "steering carry-over full ({MAX_CARRIED_THREADS} threads): dropped the verdicts carried longest"
                );
            }
        }
        *next_seq += 1;
        let seq = *next_seq;
        let carried = threads.entry(thread.clone()).or_insert_with(|| Carried { seq, ..Carried::default() });
        for late in late {
            match late {
                Late::Feedback(f) => {
                    carried.pending.push_back(f);
                    if carried.pending.len() > MAX_CARRIED_PER_THREAD
                        && let Some(dropped) = carried.pending.pop_front()
                    {
                        tracing::warn!(
                            thread = %thread,
                            rule_id = %dropped.rule_id,
                            "steering carry-over full ({MAX_CARRIED_PER_THREAD} verdicts): dropped the oldest"
                        );
                    }
                }
                Late::Fault(e) => {
                    carried.fault.get_or_insert(e);
                }
            }
        }
        self.carried.store(threads.len(), Ordering::Release);
    }

    /// Takes everything carried for `thread`: the verdicts, oldest first, and a configuration error if one came.
    pub(super) fn take(&self, thread: &str) -> (VecDeque<Feedback>, Option<ConfigError>) {
        // Reading 0 orders this take before any put still under way: what it puts is taken next time.
        if self.carried.load(Ordering::Acquire) == 0 {
            return (VecDeque::new(), None);
        }
        let mut guard = lock(&self.threads);
        let taken = guard.1.remove(thread);
        self.carried.store(guard.1.len(), Ordering::Release);
        match taken {
            Some(c) => (c.pending, c.fault),
            None => (VecDeque::new(), None),
        }
    }

    /// Replaces what is carried for `thread` with `pending` (restoring it from a store); an empty list removes
    /// it. A configuration error carried meanwhile is kept.
    pub(super) fn restore(&self, thread: &Arc<str>, mut pending: Vec<Feedback>) {
        if pending.len() > MAX_CARRIED_PER_THREAD {
            pending.drain(..pending.len() - MAX_CARRIED_PER_THREAD);
        }
        let mut guard = lock(&self.threads);
        let (_, threads) = &mut *guard;
        match threads.get_mut(thread) {
            Some(carried) if pending.is_empty() && carried.fault.is_none() => {
                threads.remove(thread);
                self.carried.store(threads.len(), Ordering::Release);
            }
            Some(carried) => carried.pending = pending.into(),
            None if pending.is_empty() => {}
            None => {
                drop(guard);
                self.put(thread, pending.into_iter().map(Late::Feedback));
            }
        }
    }

    /// The verdicts carried for `thread`, oldest first.
    pub(super) fn peek(&self, thread: &str) -> Vec<Feedback> {
        lock(&self.threads).1.get(thread).map(|c| c.pending.iter().cloned().collect()).unwrap_or_default()
    }
}

/// Hands a resolved verdict to the state that fired it, or — if that execution has ended — along its forwards.
pub(super) fn deliver(state: &Arc<Mutex<Inner>>, late: Late, carry: &CarryOver) {
    let mut target = state.clone();
    loop {
        let next = {
            let mut inner = lock(&target);
            match &inner.forward {
                None => {
                    inner.take(late);
                    return;
                }
                Some(Forward::Thread(thread)) => {
                    carry.put(thread, [late]);
                    return;
                }
                Some(Forward::Parent(parent)) => parent.clone(),
            }
        };
        target = next;
    }
}

/// Ends a state's own queue: from now on its verdicts go to `forward`, starting with those still undelivered.
pub(super) fn seal(state: &Arc<Mutex<Inner>>, forward: Forward, carry: &CarryOver) {
    // Hold the lock while moving, so a verdict resolving meanwhile cannot overtake the ones already queued.
    let mut inner = lock(state);
    let mut late: Vec<Late> = inner.pending.drain(..).map(Late::Feedback).collect();
    late.extend(inner.fault.take().map(Late::Fault));
    inner.forward = Some(forward.clone());
    match forward {
        Forward::Thread(thread) => carry.put(&thread, late),
        Forward::Parent(parent) => {
            for item in late {
                deliver(&parent, item, carry);
            }
        }
    }
}

/// GUIDE verdicts per escalating rule (by index) in the turn `turn`.
#[derive(Debug, Default)]
pub(super) struct GuideCounts {
    turn: Option<ExecutionId>,
    by_rule: HashMap<usize, u32>,
}

impl GuideCounts {
    /// Counts one GUIDE of rule `index` in `turn` (counts of an earlier turn are dropped first); the count now.
    pub(super) fn bump(&mut self, turn: ExecutionId, index: usize) -> u32 {
        if self.turn != Some(turn) {
            self.turn = Some(turn);
            self.by_rule.clear();
        }
        let count = self.by_rule.entry(index).or_default();
        *count = count.saturating_add(1);
        *count
    }
}
