//! Leases on an SQLite file: two stores on one file (two processes, as far as the file can tell) see one holder;
//! a holder whose process died holds nothing, so its session is taken over at once; a deleted session's lease goes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::Duration;

use noetic::agent::log::{Entry, Expect, LogStore, Taken};
use noetic_sqlite::{Durability, SqliteLogStore};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("noetic-sqlite-leases-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("noetic.db")
}

const TERM: Duration = Duration::from_secs(60);

#[tokio::test]
async fn two_stores_on_one_file_see_one_holder_until_it_gives_the_lease_up() {
    let db = scratch("two");
    let (a, b) = (SqliteLogStore::open(&db).await.unwrap(), SqliteLogStore::open(&db).await.unwrap());
    assert_eq!(a.leases().unwrap().acquire("s", "chat-1", TERM).await.unwrap(), None);
    assert_eq!(b.leases().unwrap().acquire("s", "chat-2", TERM).await.unwrap().as_deref(), Some("chat-1"));
    assert_eq!(b.leases().unwrap().holder("s").await.unwrap().as_deref(), Some("chat-1"));
    a.leases().unwrap().release("s", "chat-1").await.unwrap();
    assert_eq!(b.leases().unwrap().acquire("s", "chat-2", TERM).await.unwrap(), None);
    assert_eq!(a.leases().unwrap().holder("s").await.unwrap().as_deref(), Some("chat-2"));
}

#[tokio::test]
async fn a_lease_whose_process_died_holds_nothing_and_is_taken_at_once() {
    let db = scratch("dead");
    let store = SqliteLogStore::open(&db).await.unwrap();
    // A process that has exited: its pid names no process now (or another one, with another start time).
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_owned();
    let until = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() + 600_000;
    noetic_sqlite::testing::execute(
        &db,
        &format!(
            "INSERT INTO log_leases (session, holder, until_ms, pid, host, started) \
             VALUES ('s', 'killed-chat', {until}, {dead}, '{host}', 1)"
        ),
    )
    .unwrap();
    assert_eq!(store.leases().unwrap().holder("s").await.unwrap(), None, "a dead process holds nothing");
    assert_eq!(store.leases().unwrap().acquire("s", "resumer", TERM).await.unwrap(), None);
    assert_eq!(store.leases().unwrap().holder("s").await.unwrap().as_deref(), Some("resumer"));
}

#[tokio::test]
async fn deleting_a_session_gives_its_lease_up() {
    let db = scratch("delete");
    let store = SqliteLogStore::open(&db).await.unwrap();
    store.append("s", Expect::End, &[Entry::StopRequested { reason: "x".into() }]).await.unwrap();
    assert_eq!(store.leases().unwrap().acquire("s", "chat-1", TERM).await.unwrap(), None);
    assert!(store.delete("s").await.unwrap());
    assert_eq!(store.leases().unwrap().holder("s").await.unwrap(), None);
}

#[tokio::test]
async fn a_turns_last_append_and_giving_its_lease_up_are_one_commit() {
    let store = SqliteLogStore::open(scratch("end")).await.unwrap();
    let last = store.append("s", Expect::End, &[Entry::StopRequested { reason: "x".into() }]).await.unwrap();
    assert_eq!(store.take_lease("s", "chat-1", TERM).await.unwrap(), Some(Taken::Held { last }));
    let before = store.commits();
    let end = [Entry::StopRequested { reason: "y".into() }];
    assert_eq!(store.append_and_release("s", Expect::At(last), &end, "chat-1").await.unwrap(), last + 1);
    assert_eq!(store.commits() - before, 1, "the append and the release share a transaction");
    assert_eq!(store.leases().unwrap().holder("s").await.unwrap(), None, "the lease was given up");
}

#[tokio::test]
async fn taking_a_lease_says_where_the_log_ends_in_the_same_commit() {
    let db = scratch("take");
    let (a, b) = (SqliteLogStore::open(&db).await.unwrap(), SqliteLogStore::open(&db).await.unwrap());
    let last = a.append("s", Expect::End, &[Entry::StopRequested { reason: "x".into() }]).await.unwrap();
    let before = a.commits();
    assert_eq!(a.take_lease("s", "chat-1", TERM).await.unwrap(), Some(Taken::Held { last }));
    assert_eq!(b.take_lease("s", "chat-2", TERM).await.unwrap(), Some(Taken::Elsewhere("chat-1".into())));
    // No turn's start came: the lease was committed on its own, once.
    assert_eq!(a.commits() - before, 1);
    // A failed append gives nothing up: the lease stays with its holder.
    let late = [Entry::StopRequested { reason: "z".into() }];
    let stale = a.append_and_release("s", Expect::At(0), &late, "chat-1").await;
    assert!(matches!(stale, Err(noetic::agent::log::StoreError::Conflict { .. })), "{stale:?}");
    assert_eq!(b.leases().unwrap().holder("s").await.unwrap().as_deref(), Some("chat-1"));
}

/// A store that keeps a lease's transaction open for the turn's start as long as a test needs (the real wait is
/// short: the start follows at once).
async fn patient(db: &std::path::Path) -> SqliteLogStore {
    SqliteLogStore::open_lingering(db, Durability::Process, Duration::from_secs(600)).await.unwrap()
}

#[tokio::test]
async fn a_lease_taken_for_a_turn_and_the_turns_start_are_one_commit() {
    let store = patient(&scratch("start")).await;
    let before = store.commits();
    assert_eq!(store.take_lease("s", "chat-1", TERM).await.unwrap(), Some(Taken::Held { last: 0 }));
    let start = [Entry::StopRequested { reason: "the turn's start".into() }];
    assert_eq!(store.append("s", Expect::At(0), &start).await.unwrap(), 1);
    assert_eq!(store.commits() - before, 1, "the lease and the turn's start share a transaction");
    assert_eq!(store.leases().unwrap().holder("s").await.unwrap().as_deref(), Some("chat-1"));
}

#[tokio::test]
async fn a_lease_answered_before_its_commit_is_not_taken_by_another_store_meanwhile() {
    let db = scratch("window");
    let (a, b) = (patient(&db).await, SqliteLogStore::open(&db).await.unwrap());
    assert_eq!(a.take_lease("s", "chat-1", TERM).await.unwrap(), Some(Taken::Held { last: 0 }));
    // While the lease's transaction is open, the other store waits for the file's write lock; once the turn's
    // start committed with the lease, it finds the session held.
    let other = tokio::spawn(async move { b.take_lease("s", "chat-2", TERM).await.unwrap() });
    let start = [Entry::StopRequested { reason: "the turn's start".into() }];
    assert_eq!(a.append("s", Expect::At(0), &start).await.unwrap(), 1);
    assert_eq!(other.await.unwrap(), Some(Taken::Elsewhere("chat-1".into())));
}

#[tokio::test]
async fn a_turns_start_that_fails_leaves_the_lease_taken_with_it_in_one_commit() {
    let store = patient(&scratch("refused")).await;
    let before = store.commits();
    assert_eq!(store.take_lease("s", "chat-1", TERM).await.unwrap(), Some(Taken::Held { last: 0 }));
    // A start written against a log it did not read is refused; the lease it came with stays taken.
    let start = [Entry::StopRequested { reason: "the turn's start".into() }];
    let stale = store.append("s", Expect::At(7), &start).await;
    assert!(matches!(stale, Err(noetic::agent::log::StoreError::Conflict { .. })), "{stale:?}");
    assert_eq!(store.commits() - before, 1);
    assert_eq!(store.leases().unwrap().holder("s").await.unwrap().as_deref(), Some("chat-1"));
}
