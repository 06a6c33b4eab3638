//! Steering checkpoints of one turn: what the tool loop polls, holds and injects.
//!
//! Messages taken from the queue at a checkpoint are *pending* until they are injected — as user messages, in
//! FIFO order, right before the next model request, which is also when they enter the history (exactly once).
//! If the turn ends before that, [`TurnSteering::return_pending`] puts them back at the head of the queue.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::queue::{SteerMessage, SteeringMode};
use super::session::SessionState;
use crate::context::{Context, EventKind, ExecutionId, lock};
use crate::model::Item;

pub use crate::context::SKIPPED_RESULT;

/// What happens to the rest of a tool batch when steering arrives mid-batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BatchPolicy {
    /// Tools after the checkpoint do not start; each gets a skipped result (the seed's behaviour).
    #[default]
    SkipRemaining,
    /// The batch runs to its end; steering is injected after it.
    FinishBatch,
}

/// A session's own steering settings: its dequeue mode, batch policy and queue capacity, starting from the
/// runtime's. Packed in one word (capacity in the high 32 bits, then the policy and mode bytes) so that idle
/// sessions stay small.
#[derive(Debug)]
pub(crate) struct SessionSettings {
    packed: AtomicU64,
}

impl SessionSettings {
    pub(crate) fn new(mode: SteeringMode, capacity: usize, batch_policy: BatchPolicy) -> Self {
        SessionSettings { packed: AtomicU64::new(pack(mode, capacity, batch_policy)) }
    }

    fn unpacked(&self) -> (SteeringMode, usize, BatchPolicy) {
        unpack(self.packed.load(Ordering::SeqCst))
    }

    fn update(&self, f: impl Fn((SteeringMode, usize, BatchPolicy)) -> (SteeringMode, usize, BatchPolicy)) {
        let _ = self.packed.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
            let (mode, capacity, policy) = f(unpack(v));
            Some(pack(mode, capacity, policy))
        });
    }

    pub(crate) fn mode(&self) -> SteeringMode {
        self.unpacked().0
    }

    pub(crate) fn set_mode(&self, mode: SteeringMode) {
        self.update(|(_, capacity, policy)| (mode, capacity, policy));
    }

    pub(crate) fn capacity(&self) -> usize {
        self.unpacked().1
    }

    pub(crate) fn set_capacity(&self, capacity: usize) {
        self.update(|(mode, _, policy)| (mode, capacity, policy));
    }

    pub(crate) fn batch_policy(&self) -> BatchPolicy {
        self.unpacked().2
    }

    pub(crate) fn set_batch_policy(&self, policy: BatchPolicy) {
        self.update(|(mode, capacity, _)| (mode, capacity, policy));
    }
}

fn unpack(v: u64) -> (SteeringMode, usize, BatchPolicy) {
    let policy = if (v >> 8) & 0xff == 1 { BatchPolicy::FinishBatch } else { BatchPolicy::SkipRemaining };
    (SteeringMode::from_u8((v & 0xff) as u8), usize::try_from(v >> 32).unwrap_or(usize::MAX), policy)
}

/// One word for the settings; the capacity is clamped to 1..=u32::MAX.
fn pack(mode: SteeringMode, capacity: usize, policy: BatchPolicy) -> u64 {
    let capacity = u64::try_from(capacity.clamp(1, u32::MAX as usize)).unwrap_or(u64::from(u32::MAX));
    (capacity << 32) | (u64::from(u8::from(policy == BatchPolicy::FinishBatch)) << 8) | u64::from(mode.to_u8())
}

/// The steering state of one running turn.
pub struct TurnSteering {
    /// The session's state, for its own settings (kept inline there: idle sessions cost no extra allocation).
    state: Arc<SessionState>,
    session: Arc<str>,
    root: ExecutionId,
    pending: Mutex<Vec<SteerMessage>>,
    initial_poll: AtomicBool,
    discarded: AtomicBool,
    /// The turn's span: steering-queue events are recorded on it.
    span: tracing::Span,
}

impl TurnSteering {
    pub(crate) fn new(
        state: Arc<SessionState>,
        session: Arc<str>,
        root: ExecutionId,
        skip_initial_poll: bool,
        span: tracing::Span,
    ) -> Self {
        TurnSteering {
            state,
            session,
            root,
            pending: Mutex::new(Vec::new()),
            initial_poll: AtomicBool::new(!skip_initial_poll),
            discarded: AtomicBool::new(false),
            span,
        }
    }

    /// The turn's span.
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Steering applies to the turn's own execution, not to spawned children or fork paths.
    pub(crate) fn applies_to(&self, ctx: &Context) -> bool {
        ctx.execution_id() == self.root
    }

    /// The session's batch policy, read at each checkpoint (a change applies to the running turn's next one).
    pub(crate) fn policy(&self) -> BatchPolicy {
        self.state.settings().batch_policy()
    }

    /// The session's queue capacity: the extra rounds steering may buy beyond the round limit.
    pub(crate) fn capacity(&self) -> usize {
        self.state.settings().capacity()
    }

    /// Takes messages by the session's mode; returns true if any are now pending.
    pub(crate) fn poll(&self) -> bool {
        if self.discarded.load(Ordering::SeqCst) {
            return false;
        }
        let taken = self.state.queue().take(self.state.settings().mode());
        let mut pending = lock(&self.pending);
        pending.extend(taken);
        !pending.is_empty()
    }

    /// The turn-start checkpoint, at most once per turn (skipped for continuation turns).
    pub(crate) fn poll_at_turn_start(&self) {
        if self.initial_poll.swap(false, Ordering::SeqCst) {
            self.poll();
        }
    }

    /// True while messages are taken but not yet injected.
    pub(crate) fn has_pending(&self) -> bool {
        !lock(&self.pending).is_empty()
    }

    /// Injects the pending messages as user messages; returns their ids when `ids` is true.
    pub(crate) fn inject(&self, ctx: &Context, ids: bool) -> Vec<String> {
        let messages = std::mem::take(&mut *lock(&self.pending));
        let count = messages.len();
        if count == 0 {
            return Vec::new();
        }
        let ids = if ids { messages.iter().map(|m| m.id.to_string()).collect() } else { Vec::new() };
        ctx.extend_items(messages.into_iter().map(|m| Item::user(m.text)));
        ctx.emit(|| EventKind::SteeringInjected { session: self.session.clone(), count });
        tracing::info!(parent: &self.span, noetic.steering.count = count, "steering.injected");
        ids
    }

    /// Puts messages taken but not injected back at the head of the queue (unless the session was stopped).
    pub(crate) fn return_pending(&self) {
        let messages = std::mem::take(&mut *lock(&self.pending));
        if !self.discarded.load(Ordering::SeqCst) {
            self.state.queue().put_back(messages);
        }
    }

    /// A stop: pending messages are dropped, and later polls take nothing.
    pub(crate) fn discard_pending(&self) {
        self.discarded.store(true, Ordering::SeqCst);
        lock(&self.pending).clear();
    }
}

impl crate::context::Checkpoints for TurnSteering {
    fn session(&self) -> &str {
        &self.session
    }

    fn applies_to(&self, ctx: &Context) -> bool {
        TurnSteering::applies_to(self, ctx)
    }

    fn poll_at_turn_start(&self) {
        TurnSteering::poll_at_turn_start(self);
    }

    fn poll(&self) -> bool {
        TurnSteering::poll(self)
    }

    fn has_pending(&self) -> bool {
        TurnSteering::has_pending(self)
    }

    fn capacity(&self) -> usize {
        TurnSteering::capacity(self)
    }

    fn inject(&self, ctx: &Context, ids: bool) -> Vec<String> {
        TurnSteering::inject(self, ctx, ids)
    }

    fn skips_rest_of_batch(&self) -> bool {
        self.policy() == BatchPolicy::SkipRemaining
    }

    fn arrivals(&self) -> Option<Arc<tokio::sync::Notify>> {
        Some(self.state.queue().arrivals())
    }

    fn span(&self) -> Option<&tracing::Span> {
        Some(&self.span)
    }
}
