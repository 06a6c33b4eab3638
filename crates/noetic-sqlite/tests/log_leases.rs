//! Leases on an SQLite file: two stores on one file (two processes, as far as the file can tell) see one holder;
//! a holder whose process died holds nothing, so its session is taken over at once; a deleted session's lease goes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::Duration;

use noetic::agent::log::{Entry, Expect, LogStore};
use noetic_sqlite::SqliteLogStore;

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
