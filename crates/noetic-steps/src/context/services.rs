//! The services an execution may call on, kept apart from its [`Context`], and the view memory-layer hooks get.
//!
//! A [`Context`] is identity, cancellation, the item log and events. What an execution calls on besides — the
//! model, the approver, and a session turn's steering, journal, records and budget meter — is not in it: a step
//! context (the `scope` module) holds the [`Services`] of its runtime and the [`TurnServices`] of its session
//! turn beside the context, and hands hooks a [`HookContext`]: the context and those services, typed.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use super::{ApprovalRecord, Approver, Checkpoints, Context, RecordSink, RewriteRecord};
use crate::budget::Meter;
use crate::model::Model;
use crate::turn::TurnJournal;

/// What steps and hooks can call on: the model and the approver (and, outside a session turn, a journal, records
/// and steering of one's own). Shared by a whole execution tree.
#[derive(Clone, Default)]
pub struct Services {
    /// The model `llm` steps call.
    pub model: Option<Arc<dyn Model>>,
    /// Decides on calls of tools that need approval.
    pub approver: Option<Arc<dyn Approver>>,
    /// The live steering of the session turn this execution belongs to.
    pub steering: Option<Arc<dyn Checkpoints>>,
    /// Where the session turn's state goes so that another process can resume it (a durable store's).
    pub journal: Option<Arc<dyn TurnJournal>>,
    /// Where lasting records (steering ledger entries) go.
    pub records: Option<Arc<dyn RecordSink>>,
    /// Traces record prompts, responses, tool arguments and results (off: only sizes and ids; see
    /// [`crate::trace`]).
    pub capture_content: bool,
}

impl Services {
    /// True when nothing is set (no model, approver, steering, journal or records; content not captured).
    pub fn is_empty(&self) -> bool {
        self.model.is_none()
            && self.approver.is_none()
            && self.steering.is_none()
            && self.journal.is_none()
            && self.records.is_none()
            && !self.capture_content
    }
}

/// No services: what a hook called with a bare context sees (a `static`, not a lazily made one: reading it takes no
/// check).
pub(crate) static NONE: Services =
    Services { model: None, approver: None, steering: None, journal: None, records: None, capture_content: false };

/// What a session turn adds to its runtime's [`Services`]: its steering, journal, records and budget meter. They
/// are made per turn, while the model, tools and approver stay in the runtime's copy, so a turn clones one reference
/// count of its thread instead of one per service that every thread shares.
#[doc(hidden)]
pub struct TurnServices {
    /// The turn's live steering (its checkpoints).
    pub steering: Option<Arc<dyn Checkpoints>>,
    /// Where the turn's position is journalled.
    pub journal: Option<Arc<dyn TurnJournal>>,
    /// Where the turn's durable facts are recorded.
    pub records: Option<Arc<dyn RecordSink>>,
    /// What the turn may spend, and what it spent (its whole tree counts towards it).
    pub meter: Option<Arc<Meter>>,
}

/// What a memory layer's hooks receive: the execution's [`Context`] (what [`Deref`] gives) and the services it may
/// call on — the model (an LLM judge's), the session's records (a ledger's), the turn's budget meter. Cheap to copy.
///
/// The interpreter makes one from the step context it runs in; a hook called by hand gets one with
/// [`HookContext::new`] or, with no services, from a `&Context` (`(&ctx).into()`).
#[derive(Clone, Copy)]
pub struct HookContext<'a> {
    ctx: &'a Context,
    services: &'a Services,
    turn: Option<&'a TurnServices>,
}

impl<'a> HookContext<'a> {
    /// `ctx` with `services` (and a session turn's own, if it belongs to one).
    pub fn new(ctx: &'a Context, services: &'a Services, turn: Option<&'a TurnServices>) -> Self {
        HookContext { ctx, services, turn }
    }

    /// The context.
    pub fn context(&self) -> &'a Context {
        self.ctx
    }

    /// The model, if one is configured.
    pub fn model(&self) -> Option<&'a Arc<dyn Model>> {
        self.services.model.as_ref()
    }

    /// The approver, if one is configured.
    pub fn approver(&self) -> Option<&'a Arc<dyn Approver>> {
        self.services.approver.as_ref()
    }

    /// True when traces record content (see [`crate::trace`]).
    pub fn captures_content(&self) -> bool {
        self.services.capture_content
    }

    /// Where the session keeps its records (steering ledger entries, approvals), if it keeps any.
    pub fn records(&self) -> Option<&'a Arc<dyn RecordSink>> {
        self.turn.and_then(|t| t.records.as_ref()).or(self.services.records.as_ref())
    }

    /// Keeps a steering ledger entry where the session keeps its records, if it keeps any.
    pub fn record_ledger<T: Clone + Send + 'static>(&self, entry: &T) {
        if let Some(records) = self.records() {
            records.ledger_entry(Box::new(entry.clone()));
        }
    }

    /// The budget meter of the session turn this execution belongs to (also for spawned children and fork paths:
    /// what they spend counts towards the turn's budget).
    pub fn meter(&self) -> Option<&'a Arc<Meter>> {
        self.turn.and_then(|t| t.meter.as_ref())
    }

    /// The key of the session whose turn this execution belongs to (also for spawned children and fork paths).
    pub fn session_key(&self) -> Option<&'a str> {
        self.steering().map(|s| s.session())
    }

    /// The turn journal, when it applies to this execution: the root's own, not a spawned child's or a fork
    /// path's (those are not resumed).
    pub(crate) fn journal(&self) -> Option<&'a Arc<dyn TurnJournal>> {
        let journal = self.turn.and_then(|t| t.journal.as_ref()).or(self.services.journal.as_ref());
        journal.filter(|_| self.ctx.is_root())
    }

    /// Keeps an approval's request or decision where the session keeps its records, if it keeps any.
    pub(crate) fn record_approval(&self, approval: ApprovalRecord<'_>) {
        if let Some(records) = self.records() {
            records.approval(approval);
        }
    }

    /// Keeps a gating layer's rewrite of a call's arguments where the session keeps its records, if it keeps any.
    pub(crate) fn record_rewrite(&self, rewrite: RewriteRecord<'_>) {
        if let Some(records) = self.records() {
            records.rewrite(rewrite);
        }
    }

    /// The session turn's steering checkpoints (also for spawned children and fork paths).
    fn steering(&self) -> Option<&'a Arc<dyn Checkpoints>> {
        self.turn.and_then(|t| t.steering.as_ref()).or(self.services.steering.as_ref())
    }

    /// The steering checkpoints of the current session turn, when they apply to this execution.
    pub(crate) fn turn_steering(&self) -> Option<&'a Arc<dyn Checkpoints>> {
        self.steering().filter(|s| s.applies_to(self.ctx))
    }
}

impl<'a> From<&'a Context> for HookContext<'a> {
    /// `ctx` with no services (no model, approver, records or meter).
    fn from(ctx: &'a Context) -> Self {
        HookContext { ctx, services: &NONE, turn: None }
    }
}

impl Deref for HookContext<'_> {
    type Target = Context;

    fn deref(&self) -> &Context {
        self.ctx
    }
}

impl AsRef<Context> for HookContext<'_> {
    fn as_ref(&self) -> &Context {
        self.ctx
    }
}

impl fmt::Debug for HookContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookContext")
            .field("ctx", self.ctx)
            .field("model", &self.model().is_some())
            .field("approver", &self.approver().is_some())
            .field("records", &self.records().is_some())
            .field("meter", &self.meter().is_some())
            .finish()
    }
}
