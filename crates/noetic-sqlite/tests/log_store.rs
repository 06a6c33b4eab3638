//! The session log on SQLite (`SqliteLogStore`): the conformance kit, appends heard across connections, group
//! commit, damaged entries and files it must refuse. Migration from every older schema is in `log_migration.rs`,
//! leases in `log_leases.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::Duration;

use noetic::agent::log::{Appended, DecodeError, Entry, Expect, LogStore, StoreError};
use noetic::testing::check_log_store;
use noetic_sqlite::{LOG_SCHEMA_VERSION, SqliteLogStore};
use tokio::sync::broadcast;

/// A fresh directory under the temp dir (kept for inspection when a test fails).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("noetic-sqlite-log-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn stop(reason: &str) -> Entry {
    Entry::StopRequested { reason: reason.into() }
}

fn reasons(records: &[noetic::agent::log::Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| match &r.entry {
            Entry::StopRequested { reason } => reason.clone(),
            other => format!("{other:?}"),
        })
        .collect()
}

async fn next(watch: &mut broadcast::Receiver<Appended>) -> Appended {
    tokio::time::timeout(Duration::from_secs(30), watch.recv()).await.expect("heard within 30 s").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_log_store_passes_the_conformance_kit() {
    let store = SqliteLogStore::open(scratch("kit").join("noetic.db")).await.unwrap();
    check_log_store(&store, "sqlite").await.unwrap();
}

#[tokio::test]
async fn the_sqlite_log_store_passes_the_conformance_kit_on_a_single_threaded_runtime() {
    let store = SqliteLogStore::open(scratch("kit-current").join("noetic.db")).await.unwrap();
    check_log_store(&store, "current").await.unwrap();
}

#[tokio::test]
async fn an_append_through_another_store_on_the_file_is_heard_and_a_stores_own_append_only_once() {
    let db = scratch("watch").join("noetic.db");
    let here = SqliteLogStore::open(&db).await.unwrap();
    let elsewhere = SqliteLogStore::open(&db).await.unwrap();
    let mut watch = here.watch();
    here.append("mine", Expect::At(0), &[stop("a")]).await.unwrap();
    elsewhere.append("theirs", Expect::At(0), &[stop("b"), stop("c")]).await.unwrap();
    assert_eq!(next(&mut watch).await, Appended { key: "mine".into(), last: 1 });
    // Found in the file: the look that finds it also sees "mine" again, and must not announce it twice.
    assert_eq!(next(&mut watch).await, Appended { key: "theirs".into(), last: 2 });
    elsewhere.append("mine", Expect::At(1), &[stop("d")]).await.unwrap();
    assert_eq!(next(&mut watch).await, Appended { key: "mine".into(), last: 2 });
    assert_eq!(reasons(&here.read("mine", 0, 10).await.unwrap()), ["a", "d"]);
}

#[tokio::test]
async fn an_append_elsewhere_after_the_last_appended_session_was_deleted_is_still_heard() {
    let db = scratch("watch-delete").join("noetic.db");
    let here = SqliteLogStore::open(&db).await.unwrap();
    let elsewhere = SqliteLogStore::open(&db).await.unwrap();
    let mut watch = here.watch();
    elsewhere.append("gone", Expect::At(0), &[stop("a")]).await.unwrap();
    assert_eq!(next(&mut watch).await, Appended { key: "gone".into(), last: 1 });
    // The deleted row held the highest counter: the next append must not take it again, or it goes unheard.
    assert!(elsewhere.delete("gone").await.unwrap());
    elsewhere.append("next", Expect::At(0), &[stop("b")]).await.unwrap();
    assert_eq!(next(&mut watch).await, Appended { key: "next".into(), last: 1 });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_that_arrive_together_share_one_transaction_and_each_is_fenced_on_its_own() {
    let db = scratch("group").join("noetic.db");
    let store = SqliteLogStore::open(&db).await.unwrap();
    // While another connection holds the write lock, the writer waits and every request below queues up.
    let held = noetic_sqlite::testing::write_lock(&db).unwrap();
    let keys: Vec<String> = (0..100).map(|i| format!("session-{i}")).collect();
    let (first, rival, then) = ([stop("first")], [stop("rival")], [stop("then")]);
    let mut appends = Vec::new();
    for key in &keys {
        appends.push(store.append(key, Expect::At(0), &first));
        appends.push(store.append(key, Expect::At(0), &rival));
        appends.push(store.append(key, Expect::End, &then));
    }
    for append in &mut appends {
        // Its first poll sends the request.
        assert!(futures::poll!(append).is_pending());
    }
    drop(held);
    let results = futures::future::join_all(appends).await;
    for (key, answers) in keys.iter().zip(results.chunks(3)) {
        assert!(matches!(answers[0], Ok(1)), "{key}: {:?}", answers[0]);
        assert!(
            matches!(&answers[1], Err(StoreError::Conflict { key: k, expected: 0, actual: 1 }) if k == key),
            "{key}: the rival got {:?}",
            answers[1]
        );
        assert!(matches!(answers[2], Ok(2)), "{key}: {:?}", answers[2]);
        assert_eq!(reasons(&store.read(key, 0, 10).await.unwrap()), ["first", "then"]);
    }
    // The writer may have taken the first request alone before the others arrived; everything else is one group.
    let commits = store.commits();
    assert!((1..=2).contains(&commits), "300 appends took {commits} transactions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_appending_in_loops_at_once_all_land_in_order() {
    let store = SqliteLogStore::open(scratch("loops").join("noetic.db")).await.unwrap();
    let tasks: Vec<_> = (0..100)
        .map(|s| {
            let store = store.clone();
            tokio::spawn(async move {
                let key = format!("loop-{s}");
                for i in 0..10u64 {
                    let last = store.append(&key, Expect::At(i), &[stop(&i.to_string())]).await.unwrap();
                    assert_eq!(last, i + 1);
                }
                key
            })
        })
        .collect();
    for task in tasks {
        let key = task.await.unwrap();
        let expected: Vec<String> = (0..10).map(|i: u64| i.to_string()).collect();
        assert_eq!(reasons(&store.read(&key, 0, 100).await.unwrap()), expected, "{key}");
    }
    let listed = store.list().await.unwrap();
    assert_eq!(listed.len(), 100);
    assert!(listed.iter().all(|line| line.last == 10));
    assert!(store.commits() <= 1000, "{} transactions for 1000 appends", store.commits());
}

#[tokio::test]
async fn an_append_is_one_row_and_reads_back_entry_by_entry_from_any_position_in_pages_of_any_size() {
    let db = scratch("rows").join("noetic.db");
    let store = SqliteLogStore::open(&db).await.unwrap();
    store.append("k", Expect::At(0), &[stop("a"), stop("b"), stop("c")]).await.unwrap();
    store.append("k", Expect::At(3), &[stop("d")]).await.unwrap();
    store.append("k", Expect::At(4), &[stop("e"), stop("f")]).await.unwrap();
    let reasons_at = |records: &[noetic::agent::log::Record]| -> Vec<(u64, String)> {
        records.iter().map(|r| (r.pos, reasons(std::slice::from_ref(r)).concat())).collect()
    };
    for after in 0..=6u64 {
        for limit in 1..=7usize {
            let got = reasons_at(&store.read("k", after, limit).await.unwrap());
            let want: Vec<(u64, String)> = (after + 1..=6)
                .take(limit)
                .map(|pos| (pos, ["a", "b", "c", "d", "e", "f"][pos as usize - 1].into()))
                .collect();
            assert_eq!(got, want, "after {after}, at most {limit}");
        }
    }
    // Three rows: the append of three entries broken in the middle reads as damaged at its second entry only.
    noetic_sqlite::testing::execute(
        &db,
        "UPDATE log_entries SET entry = substr(entry, 1, instr(entry, char(10))) || 'not json' ||
             substr(entry, instr(entry, char(10)) + instr(substr(entry, instr(entry, char(10)) + 1), char(10)))
         WHERE session = 'k' AND pos = 1;",
    )
    .unwrap();
    let err = store.read("k", 0, 10).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { pos: 2, .. }), "{err:?}");
    assert_eq!(reasons(&store.read("k", 2, 10).await.unwrap()), ["c", "d", "e", "f"]);
    assert_eq!(reasons(&store.read("k", 0, 1).await.unwrap()), ["a"]);
}

#[tokio::test]
async fn a_damaged_entry_is_corrupt_naming_its_position_and_the_entries_around_it_still_read() {
    let db = scratch("corrupt").join("noetic.db");
    let store = SqliteLogStore::open(&db).await.unwrap();
    // An append each: a row each (rows of several entries: `an_append_is_one_row_…`).
    for (at, reason) in ["a", "b", "c", "d"].into_iter().enumerate() {
        store.append("k", Expect::At(at as u64), &[stop(reason)]).await.unwrap();
    }
    noetic_sqlite::testing::execute(
        &db,
        "UPDATE log_entries SET entry = 'not json' WHERE session = 'k' AND pos = 2;
         UPDATE log_entries SET entry = '{\"v\":99,\"at_ms\":0,\"type\":\"stop_requested\",\"reason\":\"x\"}'
             WHERE session = 'k' AND pos = 4;",
    )
    .unwrap();
    match store.read("k", 0, 10).await {
        Err(StoreError::Corrupt { key, pos: 2, source: DecodeError::Unreadable { .. } }) => assert_eq!(key, "k"),
        other => panic!("reading over a damaged entry gave {other:?}"),
    }
    let err = store.read("k", 3, 10).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { pos: 4, source: DecodeError::Newer { found: 99 }, .. }), "{err:?}");
    assert!(err.to_string().contains("entry 4") && err.to_string().contains("upgrade noetic"), "{err}");
    assert_eq!(reasons(&store.read("k", 2, 1).await.unwrap()), ["c"]);
}

#[tokio::test]
async fn a_file_from_a_newer_schema_or_not_sqlite_is_refused_and_left_untouched() {
    let dir = scratch("refuse");
    let newer = dir.join("newer.db");
    let version = LOG_SCHEMA_VERSION + 1;
    noetic_sqlite::testing::execute(&newer, &format!("PRAGMA user_version = {version};")).unwrap();
    let before = std::fs::read(&newer).unwrap();
    let err = SqliteLogStore::open(&newer).await.unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, StoreError::Refused { .. }), "{err:?}");
    assert!(message.contains(&format!("version {version}")) && message.contains("upgrade noetic"), "{message}");
    assert_eq!(std::fs::read(&newer).unwrap(), before, "nothing was written");

    let text = dir.join("notes.db");
    std::fs::write(&text, "these are my notes, not a database ".repeat(100)).unwrap();
    let before = std::fs::read(&text).unwrap();
    let err = SqliteLogStore::open(&text).await.unwrap_err().to_string();
    assert!(err.contains("not an SQLite database") && err.contains("notes.db"), "{err}");
    assert_eq!(std::fs::read(&text).unwrap(), before);
}

#[tokio::test]
async fn dropping_the_last_handle_lets_the_writer_finish_its_queue_and_close_the_file() {
    let db = scratch("drop").join("noetic.db");
    let store = SqliteLogStore::open(&db).await.unwrap();
    let handle = store.clone();
    drop(store);
    let entries = [stop("queued")];
    let mut append = handle.append("k", Expect::At(0), &entries);
    // Sent, then given up on: the request is the writer's now.
    let _ = futures::poll!(&mut append);
    drop(append);
    drop(handle);
    // The writer commits it, then closes the file: the last connection to close folds the WAL back and removes it.
    let wal = PathBuf::from(format!("{}-wal", db.display()));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while wal.exists() {
        assert!(std::time::Instant::now() < deadline, "the writer thread did not close the file");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reopened = SqliteLogStore::open(&db).await.unwrap();
    assert_eq!(reasons(&reopened.read("k", 0, 10).await.unwrap()), ["queued"]);
}

#[tokio::test]
async fn a_store_appends_after_what_another_store_on_the_file_appended_since_its_own_last_append() {
    let db = scratch("heads").join("noetic.db");
    let (a, b) = (SqliteLogStore::open(&db).await.unwrap(), SqliteLogStore::open(&db).await.unwrap());
    let titled = |title: &str| Entry::Titled { title: title.into() };
    assert_eq!(a.append("s", Expect::At(0), &[stop("a1"), titled("from a")]).await.unwrap(), 2);
    assert_eq!(b.append("s", Expect::At(2), &[stop("b1"), titled("from b")]).await.unwrap(), 4);
    // `a` last wrote the log at 2: the file says 4, and the summary it writes next folds in what `b` wrote.
    let stale = a.append("s", Expect::At(2), &[stop("a2")]).await;
    assert!(matches!(stale, Err(StoreError::Conflict { expected: 2, actual: 4, .. })), "{stale:?}");
    assert_eq!(a.append("s", Expect::At(4), &[stop("a2")]).await.unwrap(), 5);
    let line = a.list().await.unwrap().into_iter().find(|l| l.key == "s").unwrap();
    assert_eq!((line.last, line.summary.title.as_deref()), (5, Some("from b")));
    assert!(b.delete("s").await.unwrap());
    assert_eq!(a.append("s", Expect::At(0), &[stop("again")]).await.unwrap(), 1, "a deleted log starts again");
}

#[tokio::test]
async fn an_append_that_fails_halfway_alone_in_its_transaction_leaves_nothing_behind() {
    let path = scratch("halfway").join("sessions.db");
    let store = SqliteLogStore::open(&path).await.unwrap();
    store.append("other", Expect::At(0), &[stop("a")]).await.unwrap();
    // An append's second statement (its session's row) fails for "boom", after its entries' row went in.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER boom BEFORE INSERT ON log_sessions WHEN NEW.key = 'boom' BEGIN SELECT RAISE(ABORT, 'boom'); END;",
    )
    .unwrap();
    let err = store.append("boom", Expect::At(0), &[stop("x")]).await.unwrap_err();
    assert!(err.to_string().contains("boom"), "{err}");
    let rows: i64 =
        conn.query_row("SELECT COUNT(*) FROM log_entries WHERE session = 'boom'", [], |r| r.get(0)).unwrap();
    assert_eq!(rows, 0, "the entries' row went with the failed append");
    conn.execute_batch("DROP TRIGGER boom").unwrap();
    assert_eq!(store.append("boom", Expect::At(0), &[stop("y")]).await.unwrap(), 1);
    assert_eq!(reasons(&store.read("boom", 0, 10).await.unwrap()), ["y"]);
    assert_eq!(reasons(&store.read("other", 0, 10).await.unwrap()), ["a"]);
}
