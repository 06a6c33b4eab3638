//! The in-memory session-log store passes the conformance kit every store runs (`noetic::testing::check_log_store`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use noetic::agent::log::{Expect, LogStore, MemoryLogStore};
use noetic::testing::check_log_store;

#[tokio::test]
async fn the_memory_store_passes_the_conformance_kit() {
    let store = MemoryLogStore::new();
    check_log_store(&store, "memory").await.unwrap();
}

#[tokio::test]
async fn a_copy_of_the_memory_store_is_what_a_killed_process_leaves_and_goes_on_alone() {
    let store = MemoryLogStore::new();
    let message = noetic::agent::log::Entry::StopRequested { reason: "before".into() };
    store.append("s", Expect::End, std::slice::from_ref(&message)).await.unwrap();
    let crashed = store.copy();
    store.append("s", Expect::End, std::slice::from_ref(&message)).await.unwrap();
    assert_eq!(crashed.last("s").await.unwrap(), 1, "the copy holds what was appended before it was taken");
    assert_eq!(store.last("s").await.unwrap(), 2);
}

#[tokio::test]
async fn a_store_that_breaks_a_rule_fails_the_kit_naming_the_scenario() {
    /// A store that forgets fencing: it appends wherever the writer says.
    struct Unfenced(MemoryLogStore);
    impl LogStore for Unfenced {
        fn commit<'a>(
            &'a self,
            append: noetic::agent::log::Append<'a>,
        ) -> futures::future::BoxFuture<'a, Result<u64, noetic::agent::log::StoreError>> {
            self.0.commit(noetic::agent::log::Append { expect: Expect::End, ..append })
        }
        fn read<'a>(
            &'a self,
            key: &'a str,
            after: u64,
            limit: usize,
        ) -> futures::future::BoxFuture<'a, Result<Vec<noetic::agent::log::Record>, noetic::agent::log::StoreError>>
        {
            self.0.read(key, after, limit)
        }
        fn last<'a>(
            &'a self,
            key: &'a str,
        ) -> futures::future::BoxFuture<'a, Result<u64, noetic::agent::log::StoreError>> {
            self.0.last(key)
        }
        fn watch(&self) -> tokio::sync::broadcast::Receiver<noetic::agent::log::Appended> {
            self.0.watch()
        }
        fn list(
            &self,
        ) -> futures::future::BoxFuture<'_, Result<Vec<noetic::agent::log::SessionLine>, noetic::agent::log::StoreError>>
        {
            self.0.list()
        }
        fn delete<'a>(
            &'a self,
            key: &'a str,
        ) -> futures::future::BoxFuture<'a, Result<bool, noetic::agent::log::StoreError>> {
            self.0.delete(key)
        }
        fn save_snapshot<'a>(
            &'a self,
            key: &'a str,
            snapshot: noetic::agent::log::Snapshot,
        ) -> futures::future::BoxFuture<'a, Result<(), noetic::agent::log::StoreError>> {
            self.0.save_snapshot(key, snapshot)
        }
        fn snapshot<'a>(
            &'a self,
            key: &'a str,
        ) -> futures::future::BoxFuture<'a, Result<Option<noetic::agent::log::Snapshot>, noetic::agent::log::StoreError>>
        {
            self.0.snapshot(key)
        }
    }
    let failure = check_log_store(&Unfenced(MemoryLogStore::new()), "unfenced").await.unwrap_err();
    assert_eq!(failure.scenario, "a writer that missed an append is fenced", "{failure}");
}
