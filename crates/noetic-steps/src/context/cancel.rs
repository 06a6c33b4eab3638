//! A context's cancellation, made lazily for children.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use tokio_util::sync::CancellationToken;

use crate::sync::lock;

/// A context's cancellation. A root's token is made with it; a child's only once something waits on it or asks
/// for it — most fork paths and spawned children end without ever waiting, and a token of their own would cost
/// each an allocation and two locks of the parent's token — and until then the child is cancelled when its own
/// flag is set or its parent is cancelled.
pub(super) struct Cancel {
    token: OnceLock<CancellationToken>,
    cancelled: AtomicBool,
    /// Orders cancelling against making the token, so that a token made after a cancel is made cancelled.
    making: Mutex<()>,
}

impl Cancel {
    /// A root's cancellation, with its token.
    pub(super) fn root(token: CancellationToken) -> Self {
        Cancel { token: OnceLock::from(token), cancelled: AtomicBool::new(false), making: Mutex::new(()) }
    }

    /// A child's cancellation, with no token yet.
    pub(super) fn child() -> Self {
        Cancel { token: OnceLock::new(), cancelled: AtomicBool::new(false), making: Mutex::new(()) }
    }

    /// True once cancelled: the token says so once it exists (it is linked to the parent's), until then the own
    /// flag or `parent_cancelled`.
    pub(super) fn is_cancelled(&self, parent_cancelled: impl FnOnce() -> bool) -> bool {
        match self.token.get() {
            Some(token) => token.is_cancelled(),
            None => self.cancelled.load(Ordering::Acquire) || parent_cancelled(),
        }
    }

    /// Cancels this one (and, through the tokens, its descendants').
    pub(super) fn cancel(&self) {
        let _making = lock(&self.making);
        self.cancelled.store(true, Ordering::Release);
        if let Some(token) = self.token.get() {
            token.cancel();
        }
    }

    /// The token, made by `make` (a child token of the parent's) on first use, and cancelled at once if this was
    /// cancelled before.
    pub(super) fn token(&self, make: impl FnOnce() -> CancellationToken) -> &CancellationToken {
        if let Some(token) = self.token.get() {
            return token;
        }
        let _making = lock(&self.making);
        let token = self.token.get_or_init(make);
        if self.cancelled.load(Ordering::Acquire) {
            token.cancel();
        }
        token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_made_after_a_cancel_is_cancelled_and_one_made_before_is_cancelled_by_it() {
        let parent = CancellationToken::new();
        let early = Cancel::child();
        assert!(!early.token(|| parent.child_token()).is_cancelled());
        early.cancel();
        assert!(early.token(|| parent.child_token()).is_cancelled());
        assert!(early.is_cancelled(|| false));

        let late = Cancel::child();
        late.cancel();
        assert!(late.is_cancelled(|| false), "cancelled with no token yet");
        assert!(late.token(|| parent.child_token()).is_cancelled());
        assert!(!parent.is_cancelled(), "a child never cancels its parent");
    }

    #[test]
    fn a_child_without_a_token_is_cancelled_when_its_parent_is_and_its_token_follows_the_parent() {
        let parent = CancellationToken::new();
        let child = Cancel::child();
        assert!(!child.is_cancelled(|| parent.is_cancelled()));
        parent.cancel();
        assert!(child.is_cancelled(|| parent.is_cancelled()));
        assert!(child.token(|| parent.child_token()).is_cancelled());

        let parent = CancellationToken::new();
        let child = Cancel::child();
        let token = child.token(|| parent.child_token()).clone();
        parent.cancel();
        assert!(token.is_cancelled() && child.is_cancelled(|| false));
    }
}
