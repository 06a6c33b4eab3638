//! A session log store that fails on demand, for the tests of what a session does when its log cannot be written
//! ("disk full") or read ("database unreachable"), and that can hold an accepted message's append back (a write
//! still on its way to the store).
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use noetic::agent::log::{Append, Entry, StoreError};
use noetic::testing::{HookedLogStore, ReadCall, StoreHooks};
use tokio::sync::Notify;

/// A memory store whose appends fail while `hooks.fail_writes` is set and whose reads fail while
/// `hooks.fail_reads` is. While `hooks.hold_messages` is set, an append with an accepted message notifies
/// `hooks.held` and waits for `hooks.release`.
pub type FlakyLog = HookedLogStore<Flaky>;

/// What makes a [`FlakyLog`] fail or hold.
#[derive(Default)]
pub struct Flaky {
    pub fail_writes: AtomicBool,
    pub fail_reads: AtomicBool,
    pub hold_messages: AtomicBool,
    pub held: Notify,
    pub release: Notify,
}

fn check(flag: &AtomicBool, doing: &str, why: &str) -> Result<(), StoreError> {
    if flag.load(Ordering::SeqCst) { Err(StoreError::unavailable(doing, why.to_owned())) } else { Ok(()) }
}

impl StoreHooks for Flaky {
    fn commit<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            check(&self.fail_writes, "appending", "disk full")?;
            if self.hold_messages.load(Ordering::SeqCst)
                && append.entries.iter().any(|e| matches!(e, Entry::MessageAccepted { .. }))
            {
                self.held.notify_one();
                self.release.notified().await;
            }
            Ok(())
        })
    }

    fn read<'a>(&'a self, _call: ReadCall, _key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(std::future::ready(check(&self.fail_reads, "reading", "database unreachable")))
    }
}
