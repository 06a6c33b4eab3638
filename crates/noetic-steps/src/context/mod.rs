//! The context of an execution: what every step, memory-layer hook and tool sees of where it runs.
//!
//! A [`Context`] is a cheap handle (one `Arc` and a depth) that carries:
//! * identity — an [`ExecutionId`], optional thread and resource ids, the parent context;
//! * cancellation — a [`CancellationToken`]; cancelling a context cancels all its descendants, never its parent;
//! * the item log — the conversation so far;
//! * token usage and cost, rolled up from spawned children on success;
//! * the event sink.
//!
//! The services an execution calls on are not here, nor the memory layers and tools in scope: a step runs in a
//! `StepContext` (the `scope` module, above the layer and tool modules whose traits take a `Context`), which holds
//! them beside its `Context`, typed, and hands memory layers' hooks a [`HookContext`] — the context and the
//! services ([`Services`], [`TurnServices`]: the model, the approver, and a session turn's steering, journal,
//! records and budget meter).
//!
//! Fork paths and spawned children run in child contexts ([`Context::fork_child`], [`Context::spawn_child`]).

mod approval;
mod builder;
mod cancel;
mod channel;
mod checkpoints;
mod events;
mod ids;
mod reuse;
mod services;
mod sink;

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;

use tokio_util::sync::CancellationToken;

pub use approval::{Approval, ApprovalRequest, Approver, FnApprover};
pub use builder::ContextBuilder;
use cancel::Cancel;
pub use channel::{Channel, ChannelMode, TrySendError, WakeHandle};
pub use checkpoints::{ApprovalRecord, Checkpoints, RecordSink, RewriteRecord, SKIPPED_RESULT};
pub use events::{Event, EventKind, StepKind};
pub use ids::ExecutionId;
pub use ids::new_v7;
pub(crate) use services::NONE as NO_SERVICES;
pub use services::{HookContext, Services, TurnServices};
pub use sink::{Backfill, EventFollower, EventReceiver, EventSink, Followed, POSITION_SHIFT, Positions};

use crate::error::NoeticError;
use crate::model::{History, Item, Log, StepMeta, Usage};

/// Steps may nest at most this deep (counting every composite step and child context).
pub const MAX_DEPTH: u32 = 64;

/// (A field added here is reset by `renew` in `reuse.rs` too: a fork path's context made in a finished one's.)
struct Inner {
    execution_id: ExecutionId,
    /// A root's tree-wide parts, or a child's parent (whose root has them).
    origin: Origin,
    cancel: Cancel,
    cancel_reason: OnceLock<String>,
    items: Mutex<Arc<Log>>,
    usage: Mutex<(Usage, f64)>,
    last_step_meta: Mutex<Option<Arc<StepMeta>>>,
}

/// Where an execution sits in its tree.
enum Origin {
    /// A root execution, with what its whole tree shares.
    Root(Tree),
    /// A spawned child or fork path, and its parent. A child reads the tree's parts from its root, so making one
    /// copies none of them (a fork of many paths writes no reference count per part and path).
    Child(Arc<Inner>),
}

/// What every execution of a tree shares: its thread, resource and events.
struct Tree {
    thread_id: Option<Arc<str>>,
    resource_id: Option<Arc<str>>,
    events: EventSink,
}

impl Inner {
    fn reason(&self) -> Option<String> {
        if let Some(r) = self.cancel_reason.get() {
            return Some(r.clone());
        }
        self.parent().and_then(|p| p.reason())
    }

    fn parent(&self) -> Option<&Arc<Inner>> {
        match &self.origin {
            Origin::Root(_) => None,
            Origin::Child(parent) => Some(parent),
        }
    }

    /// The tree's shared parts, kept by its root.
    fn tree(&self) -> &Tree {
        let mut inner = self;
        loop {
            match &inner.origin {
                Origin::Root(tree) => return tree,
                Origin::Child(parent) => inner = parent,
            }
        }
    }

    fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled(|| self.parent().is_some_and(|p| p.is_cancelled()))
    }

    fn cancel(&self) {
        self.cancel.cancel();
    }

    /// The cancellation token, made on first use for a child (a child token of its parent's).
    fn token(&self) -> &CancellationToken {
        self.cancel.token(|| match self.parent() {
            Some(parent) => parent.token().child_token(),
            None => CancellationToken::new(),
        })
    }
}

pub use crate::sync::lock;

/// The handle steps receive. Clone it freely; clones share everything.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
    depth: u32,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("execution_id", &self.inner.execution_id)
            .field("depth", &self.depth)
            .field("cancelled", &self.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Default for Context {
    fn default() -> Self {
        Context::new()
    }
}

impl Context {
    /// A root context with no events and an empty item log.
    pub fn new() -> Self {
        ContextBuilder::default().build()
    }

    /// Starts building a root context.
    pub fn builder() -> ContextBuilder {
        ContextBuilder::default()
    }

    /// This execution's id.
    pub fn execution_id(&self) -> ExecutionId {
        self.inner.execution_id
    }

    /// The parent execution's id, for spawned children and fork paths.
    pub fn parent_execution_id(&self) -> Option<ExecutionId> {
        self.inner.parent().map(|p| p.execution_id)
    }

    /// The thread id, if set.
    pub fn thread_id(&self) -> Option<&str> {
        self.inner.tree().thread_id.as_deref()
    }

    /// The resource id, if set.
    pub fn resource_id(&self) -> Option<&str> {
        self.inner.tree().resource_id.as_deref()
    }

    /// How deeply the current step is nested (0 at the root).
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// True once this context or an ancestor was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.is_cancelled()
    }

    /// Cancels this context and all its descendants. The first reason given wins. Idempotent.
    pub fn cancel(&self, reason: impl Into<String>) {
        let _ = self.inner.cancel_reason.set(reason.into());
        self.inner.cancel();
    }

    /// Why the context was cancelled, looking up the tree; `None` if not cancelled or no reason was given.
    pub fn cancel_reason(&self) -> Option<String> {
        if !self.is_cancelled() {
            return None;
        }
        self.inner.reason()
    }

    /// The [`NoeticError::Cancelled`] error for this context, carrying the reason.
    pub fn cancelled_error(&self) -> NoeticError {
        NoeticError::Cancelled { reason: self.inner.reason() }
    }

    /// Resolves when the context is cancelled.
    pub async fn cancelled(&self) {
        self.inner.token().cancelled().await
    }

    /// The cancellation token, for handing to code that takes one.
    pub fn cancellation_token(&self) -> &CancellationToken {
        self.inner.token()
    }

    /// Fails with [`NoeticError::Cancelled`] if the context is cancelled.
    pub fn check_cancelled(&self) -> Result<(), NoeticError> {
        if self.is_cancelled() { Err(self.cancelled_error()) } else { Ok(()) }
    }

    /// Runs `fut` unless the context is cancelled first; on cancellation `fut` is dropped and
    /// [`NoeticError::Cancelled`] is returned. When both are ready, `fut`'s result wins.
    pub async fn run_cancellable<T>(
        &self,
        fut: impl Future<Output = Result<T, NoeticError>>,
    ) -> Result<T, NoeticError> {
        let mut fut = std::pin::pin!(fut);
        // Most futures run here are ready at their first poll (hooks with no layers, a tool that needs no
        // approval, a quick tool): they need no cancellation waiter, which costs more to make than they take.
        if let Poll::Ready(r) = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await {
            return r;
        }
        tokio::select! {
            biased;
            r = fut => r,
            () = self.inner.token().cancelled() => Err(self.cancelled_error()),
        }
    }

    /// A child context for a fork path: fresh execution id, a copy of the item log, its own cancellation linked to
    /// this one, same thread and events, one level deeper.
    pub fn fork_child(&self) -> Context {
        self.child(self.history())
    }

    /// A child context for a spawned step: fresh execution id, the given item log (usually empty), cancellation
    /// linked to this one, usage starting at zero, same thread and events, one level deeper.
    pub fn spawn_child(&self, items: Vec<Item>) -> Context {
        self.child(History::new(items))
    }

    /// A child context: fresh execution id, the given item log, cancellation linked to this one, usage starting at
    /// zero. It shares its root's thread and events.
    fn child(&self, items: History) -> Context {
        Context {
            inner: Arc::new(Inner {
                execution_id: ExecutionId::new(),
                origin: Origin::Child(self.inner.clone()),
                cancel: Cancel::child(),
                cancel_reason: OnceLock::new(),
                items: Mutex::new(items.0),
                usage: Mutex::new((Usage::default(), 0.0)),
                last_step_meta: Mutex::new(None),
            }),
            depth: self.depth + 1,
        }
    }

    /// The same context, one nesting level deeper (used for the children of composite steps).
    pub(crate) fn nested(&self) -> Context {
        Context { inner: self.inner.clone(), depth: self.depth + 1 }
    }

    /// Appends an item to the conversation.
    pub fn push_item(&self, item: Item) {
        Arc::make_mut(&mut lock(&self.inner.items)).items_mut().push(item);
    }

    /// Appends items to the conversation.
    pub fn extend_items(&self, items: impl IntoIterator<Item = Item>) {
        Arc::make_mut(&mut lock(&self.inner.items)).items_mut().extend(items);
    }

    /// A copy of the conversation.
    pub fn items(&self) -> Vec<Item> {
        lock(&self.inner.items).items().to_vec()
    }

    /// A snapshot of the conversation, taken in constant time. The log is copy-on-write: the next append copies
    /// it only while a snapshot is still alive, so drop snapshots (model requests) when done with them.
    pub fn history(&self) -> History {
        History(lock(&self.inner.items).clone())
    }

    /// Records how much of the conversation requests skip since it was compacted (the items stay).
    pub fn set_folded(&self, folded: Option<crate::model::Folded>) {
        Arc::make_mut(&mut lock(&self.inner.items)).set_folded(folded.map(Arc::new));
    }

    /// Number of items in the conversation.
    pub fn item_count(&self) -> usize {
        lock(&self.inner.items).items().len()
    }

    /// Reads the conversation without copying it.
    pub fn with_items<R>(&self, f: impl FnOnce(&[Item]) -> R) -> R {
        f(lock(&self.inner.items).items())
    }

    /// Token usage accumulated in this context (including spawned children that succeeded).
    pub fn usage(&self) -> Usage {
        lock(&self.inner.usage).0
    }

    /// Cost in US dollars accumulated in this context.
    pub fn cost(&self) -> f64 {
        lock(&self.inner.usage).1
    }

    /// Adds usage and cost to this context.
    pub fn add_usage(&self, usage: &Usage, cost: f64) {
        let mut u = lock(&self.inner.usage);
        u.0.add(usage);
        u.1 += cost;
    }

    /// What the last `llm` step in this context produced (tool calls, usage).
    pub fn last_step_meta(&self) -> Option<Arc<StepMeta>> {
        lock(&self.inner.last_step_meta).clone()
    }

    /// Records what the last `llm` step produced.
    pub fn set_last_step_meta(&self, meta: StepMeta) {
        *lock(&self.inner.last_step_meta) = Some(Arc::new(meta));
    }

    /// True for a root context (a session turn's, or one built by [`ContextBuilder`]); false for a spawned child's
    /// or a fork path's.
    pub fn is_root(&self) -> bool {
        matches!(self.inner.origin, Origin::Root(_))
    }

    /// The event sink.
    pub fn events(&self) -> &EventSink {
        &self.inner.tree().events
    }

    /// Emits an event built by `kind` — only when someone listens, so an idle sink costs nothing.
    pub fn emit(&self, kind: impl FnOnce() -> EventKind) {
        self.inner.tree().events.emit(self.inner.execution_id, kind);
    }
}

#[cfg(test)]
mod tests;
