//! Building a root [`Context`]: its identity, items, cancellation and events.

use super::*;

/// Builds a root [`Context`].
#[derive(Default)]
pub struct ContextBuilder {
    thread_id: Option<Arc<str>>,
    resource_id: Option<Arc<str>>,
    items: History,
    events: EventSink,
    cancel: Option<CancellationToken>,
    execution_id: Option<ExecutionId>,
}

impl ContextBuilder {
    /// The conversation thread this execution belongs to (scopes `Thread` layer state).
    pub fn thread_id(mut self, id: impl Into<Arc<str>>) -> Self {
        self.thread_id = Some(id.into());
        self
    }

    /// The resource (user, project …) this execution belongs to (scopes `Resource` layer state).
    pub fn resource_id(mut self, id: impl Into<Arc<str>>) -> Self {
        self.resource_id = Some(id.into());
        self
    }

    /// The conversation so far.
    pub fn items(mut self, items: Vec<Item>) -> Self {
        self.items = History::new(items);
        self
    }

    /// The conversation so far, shared without copying (copied on the first append only if still shared).
    pub fn history(mut self, history: History) -> Self {
        self.items = history;
        self
    }

    /// Where events go.
    pub fn events(mut self, events: EventSink) -> Self {
        self.events = events;
        self
    }

    /// Uses this execution id instead of a fresh one.
    pub fn execution_id(mut self, id: ExecutionId) -> Self {
        self.execution_id = Some(id);
        self
    }

    /// Cancel this context when `token` is cancelled (the context gets a child token of it).
    pub fn cancel_with(mut self, token: &CancellationToken) -> Self {
        self.cancel = Some(token.child_token());
        self
    }

    /// Builds the context.
    pub fn build(self) -> Context {
        Context {
            inner: Arc::new(Inner {
                execution_id: self.execution_id.unwrap_or_default(),
                origin: Origin::Root(Tree {
                    thread_id: self.thread_id,
                    resource_id: self.resource_id,
                    events: self.events,
                }),
                cancel: Cancel::root(self.cancel.unwrap_or_default()),
                cancel_reason: OnceLock::new(),
                items: Mutex::new(self.items.0),
                usage: Mutex::new((Usage::default(), 0.0)),
                last_step_meta: Mutex::new(None),
            }),
            depth: 0,
        }
    }
}
