//! Fork paths' contexts made in a finished sibling's allocation.

use std::sync::{Arc, Mutex, OnceLock};

use super::cancel::Cancel;
use super::{Context, ExecutionId, Inner, Origin};
use crate::model::{Log, Usage};

impl Context {
    /// [`Context::fork_child`], made in `spare`'s allocation when `spare` is a fork path of this context that has
    /// finished and that nothing else holds any more: a fork of many short paths then allocates and frees no
    /// context per path. The context made is as fresh as `fork_child`'s: a new execution id, no cancellation,
    /// a copy of this context's item log, no usage and no step meta.
    pub(crate) fn fork_child_reusing(&self, spare: Option<Context>) -> Context {
        let Some(mut ctx) = spare else { return self.fork_child() };
        let reusable = ctx.depth == self.depth + 1;
        match Arc::get_mut(&mut ctx.inner) {
            Some(inner) if reusable && inner.is_child_of(&self.inner) => {
                inner.renew(self.history().0);
                ctx
            }
            _ => self.fork_child(),
        }
    }
}

impl Inner {
    fn is_child_of(&self, parent: &Arc<Inner>) -> bool {
        matches!(&self.origin, Origin::Child(p) if Arc::ptr_eq(p, parent))
    }

    /// Resets everything of its own that a child has (all but its origin) to what [`Context::child`] starts with.
    fn renew(&mut self, items: Arc<Log>) {
        self.execution_id = ExecutionId::new();
        self.cancel = Cancel::child();
        self.cancel_reason = OnceLock::new();
        self.items = Mutex::new(items);
        self.usage = Mutex::new((Usage::default(), 0.0));
        self.last_step_meta = Mutex::new(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Item, StepMeta};

    #[test]
    fn a_reused_fork_path_context_starts_as_fresh_as_a_new_one() {
        let root = Context::new();
        root.push_item(Item::user("from parent"));
        let used = root.fork_child();
        let first_id = used.execution_id();
        used.push_item(Item::assistant("only in the first path"));
        used.add_usage(&Usage { input_tokens: 5, ..Usage::default() }, 1.5);
        used.set_last_step_meta(StepMeta::default());
        used.cancel("the first path gave up");
        let ptr = Arc::as_ptr(&used.inner);

        let next = root.fork_child_reusing(Some(used));

        assert_eq!(Arc::as_ptr(&next.inner), ptr, "made in the finished path's allocation");
        assert_ne!(next.execution_id(), first_id);
        assert_eq!(next.parent_execution_id(), Some(root.execution_id()));
        assert!(!next.is_cancelled() && next.cancel_reason().is_none());
        assert_eq!(next.items(), vec![Item::user("from parent")]);
        assert_eq!((next.usage(), next.cost()), (Usage::default(), 0.0));
        assert!(next.last_step_meta().is_none());
        assert_eq!(next.depth(), 1);
        root.cancel("root");
        assert!(next.is_cancelled(), "still linked to its parent's cancellation");
    }

    #[test]
    fn a_path_context_still_held_elsewhere_or_of_another_parent_is_not_reused() {
        let root = Context::new();
        let held = root.fork_child();
        let kept = held.clone();
        let next = root.fork_child_reusing(Some(held));
        assert_ne!(next.execution_id(), kept.execution_id());
        assert!(!Arc::ptr_eq(&next.inner, &kept.inner), "a clone is alive: a new context");

        let other = Context::new().fork_child();
        let ptr = Arc::as_ptr(&other.inner);
        let next = root.fork_child_reusing(Some(other));
        assert_ne!(Arc::as_ptr(&next.inner), ptr, "another parent's path");
        assert_eq!(next.parent_execution_id(), Some(root.execution_id()));
    }
}
