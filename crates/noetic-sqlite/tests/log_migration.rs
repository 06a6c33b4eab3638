//! Files of every schema before the session log (versions 1 to 5) migrate into logs once, in place: the
//! projection of each migrated log is the session the old tables held.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use noetic::agent::SteerMessage;
use noetic::agent::SteeringMode;
use noetic::agent::log::{Entry, Expect, LogStore, Projection, Record, StoreError, TurnOutcome};
use noetic::model::{Item, ToolCall, ToolResult};
use noetic::steering::SteeringAction;
use noetic::steering::{LedgerEntry, LedgerKind};
use noetic::turn::interrupted_result;
use noetic_sqlite::{LOG_SCHEMA_VERSION, SqliteLogStore};
use serde_json::json;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("noetic-sqlite-logmig-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn call(id: &str) -> Item {
    Item::ToolCall(ToolCall { id: id.into(), name: "search".into(), arguments: "{}".into() })
}

/// What the old tables hold for the test's sessions.
struct Old {
    done_history: Vec<Item>,
    crashed_history: Vec<Item>,
    queue: Vec<SteerMessage>,
    ledger: Vec<LedgerEntry>,
}

fn old() -> Old {
    let mut denied = LedgerEntry::new(LedgerKind::ToolCall, SteeringAction::Deny);
    denied.tool_name = Some("rm".into());
    Old {
        done_history: vec![
            Item::user("first"),
            Item::assistant("one"),
            Item::user("second"),
            call("c1"),
            Item::ToolResult(ToolResult::ok("c1", "found it")),
            Item::assistant("two"),
        ],
        // Turn 1 ran c1 and c2 in one batch; the process died while c2 ran.
        crashed_history: vec![Item::user("go"), call("c1"), call("c2"), Item::ToolResult(ToolResult::ok("c1", "ok"))],
        queue: vec![SteerMessage::new("then the docs"), SteerMessage::new("and the tests")],
        // As stored: the ledger's JSON keeps times to the millisecond.
        ledger: [LedgerEntry::new(LedgerKind::ModelTurn, SteeringAction::Allow), denied]
            .iter()
            .map(|entry| serde_json::from_str(&serde_json::to_string(entry).unwrap()).unwrap())
            .collect(),
    }
}

fn quote(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap().replace('\'', "''")
}

/// A file at `version` holding the sessions `done` (2 turns, a queue, a ledger from version 3, layer states from
/// version 5), `crashed` (an unfinished turn) and `empty`.
fn create(path: &Path, version: i64, old: &Old) {
    noetic_sqlite::testing::create(path, version).unwrap();
    let mut sql = String::from(
        "INSERT INTO sessions (key, mode, capacity, batch_policy, turns, items, updated_ms)
             VALUES ('done', 'all', 3, 'finish-batch', 2, 6, 2000), ('empty', 'one-at-a-time', 10, 'skip-remaining', 0, 0, 1000);
         INSERT INTO sessions (key, mode, capacity, batch_policy, turns, items, updated_ms, journal_step, journal_core)
             VALUES ('crashed', 'one-at-a-time', 10, 'skip-remaining', 1, 4, 3000, 'assistant', '{}');",
    );
    for (key, history) in [("done", &old.done_history), ("crashed", &old.crashed_history)] {
        for (seq, item) in history.iter().enumerate() {
            sql += &format!("INSERT INTO items (session, seq, item) VALUES ('{key}', {seq}, '{}');", quote(item));
        }
    }
    for (pos, message) in old.queue.iter().enumerate() {
        sql += &format!(
            "INSERT INTO queue (session, pos, id, message) VALUES ('done', {}, '{}', '{}');",
            pos + 1,
            message.id,
            quote(message)
        );
    }
    if version >= 3 {
        for (seq, entry) in old.ledger.iter().enumerate() {
            sql +=
                &format!("INSERT INTO ledger (session, seq, entry) VALUES ('done', {}, '{}');", seq + 1, quote(entry));
        }
    }
    if version >= 5 {
        sql += "INSERT INTO layer_state (scope, layer, state, updated_ms) VALUES
                    ('thread:done', 'notes', '{\"n\":1}', 1500), ('global', 'prefs', '{\"p\":true}', 500);";
    }
    noetic_sqlite::testing::execute(path, &sql).unwrap();
}

async fn projection(store: &SqliteLogStore, key: &str) -> (Projection, Vec<Record>) {
    let records = store.read(key, 0, 1000).await.unwrap();
    let mut projection = Projection::default();
    records.iter().for_each(|r| projection.apply(r));
    (projection, records)
}

async fn sessions_of_a_file_at(version: i64) {
    let db = scratch(&format!("v{version}")).join("noetic.db");
    let old = old();
    create(&db, version, &old);
    let store = SqliteLogStore::open(&db).await.unwrap();
    assert_eq!(noetic_sqlite::testing::user_version(&db).unwrap(), LOG_SCHEMA_VERSION);

    let (done, records) = projection(&store, "done").await;
    assert_eq!(done.conversation, old.done_history);
    assert_eq!(done.queue, old.queue);
    assert_eq!(done.turns, 2);
    assert!(done.open_turn.is_none());
    assert_eq!((done.settings.mode, done.settings.capacity), (SteeringMode::All, 3));
    assert_eq!(done.ledger, if version >= 3 { old.ledger.clone() } else { Vec::new() });
    let ended = records.iter().find_map(|r| match &r.entry {
        Entry::TurnEnded { turn: 2, outcome: TurnOutcome::Completed { answer } } => Some(answer.clone()),
        _ => None,
    });
    assert_eq!(ended.as_deref(), Some("two"));

    let (crashed, records) = projection(&store, "crashed").await;
    let mut given_up = old.crashed_history.clone();
    given_up.push(Item::ToolResult(interrupted_result("c2")));
    assert_eq!(crashed.conversation, given_up, "the open call got the interrupted result");
    assert_eq!((crashed.turns, crashed.open_turn.is_none()), (1, true));
    assert!(matches!(records.last().map(|r| &r.entry), Some(Entry::TurnEnded { outcome: TurnOutcome::Discarded, .. })));

    let (empty, records) = projection(&store, "empty").await;
    assert_eq!((records.len(), empty.turns), (1, 0), "{records:?}");
    assert!(matches!(records[0].entry, Entry::Settings { .. }));

    let lines = store.list().await.unwrap();
    let keys: Vec<&str> = lines.iter().map(|l| l.key.as_str()).collect();
    if version >= 5 {
        assert_eq!(done.layer_states["thread:done"]["notes"], json!({"n": 1}));
        let (global, _) = projection(&store, "scope:global").await;
        assert_eq!(global.layer_states["global"]["prefs"], json!({"p": true}));
        assert_eq!(keys, ["crashed", "done", "empty", "scope:global"], "most recently written first");
    } else {
        assert_eq!(keys, ["crashed", "done", "empty"], "most recently written first");
    }
    let summary = &lines[1].summary;
    assert_eq!((summary.turns, summary.items, summary.queued, summary.open_turn), (2, 6, 2, None));

    // Once: opening it again migrates nothing more.
    drop(store);
    let again = SqliteLogStore::open(&db).await.unwrap();
    assert_eq!(again.read("done", 0, 1000).await.unwrap().len(), projection(&again, "done").await.1.len());
    assert_eq!(again.list().await.unwrap().len(), lines.len());
}

#[tokio::test]
async fn sessions_of_a_version_1_file_become_logs() {
    sessions_of_a_file_at(1).await;
}

#[tokio::test]
async fn sessions_of_a_version_2_file_become_logs() {
    sessions_of_a_file_at(2).await;
}

#[tokio::test]
async fn sessions_of_a_version_3_file_become_logs_with_their_ledger() {
    sessions_of_a_file_at(3).await;
}

#[tokio::test]
async fn sessions_of_a_version_4_file_become_logs() {
    sessions_of_a_file_at(4).await;
}

#[tokio::test]
async fn sessions_of_a_version_5_file_become_logs_with_their_layer_states() {
    sessions_of_a_file_at(5).await;
}

#[tokio::test]
async fn a_ledger_row_that_does_not_parse_fails_the_migration_naming_it_and_writes_nothing() {
    let db = scratch("bad-ledger").join("noetic.db");
    create(&db, 3, &old());
    noetic_sqlite::testing::execute(&db, "INSERT INTO ledger (session, seq, entry) VALUES ('done', 7, 'garbage');")
        .unwrap();
    let err = SqliteLogStore::open(&db).await.unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}");
    assert!(message.contains("session 'done'") && message.contains("ledger row 7"), "{message}");
    assert_eq!(noetic_sqlite::testing::user_version(&db).unwrap(), 3, "not even the old tables' steps were kept");
    let err = noetic_sqlite::testing::execute(&db, "SELECT * FROM log_entries;").unwrap_err();
    assert!(err.to_string().contains("no such table"), "{err}");
}

#[tokio::test]
async fn a_new_file_gets_the_log_and_the_old_tables_in_one_step() {
    let db = scratch("fresh").join("noetic.db");
    let store = SqliteLogStore::open(&db).await.unwrap();
    assert!(store.list().await.unwrap().is_empty());
    assert_eq!(noetic_sqlite::testing::user_version(&db).unwrap(), LOG_SCHEMA_VERSION);
}

#[tokio::test]
async fn another_programs_database_is_refused_and_left_as_it_was() {
    let db = scratch("foreign").join("notes.db");
    noetic_sqlite::testing::execute(
        &db,
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT); INSERT INTO notes (text) VALUES ('keep me');",
    )
    .unwrap();
    let before = std::fs::read(&db).unwrap();
    let error = SqliteLogStore::open(&db).await.expect_err("another program's database is not opened as a store");
    let message = error.to_string();
    assert!(matches!(error, StoreError::Refused { .. }), "{message}");
    assert!(message.contains("not a noetic database") && message.contains("notes"), "{message}");
    assert!(message.contains("nothing was changed"), "{message}");
    assert_eq!(std::fs::read(&db).unwrap(), before, "the file is byte for byte as it was");
    assert_eq!(noetic_sqlite::testing::user_version(&db).unwrap(), 0);
}

#[tokio::test]
async fn a_version_7_file_keeps_its_entry_rows_and_goes_on_with_a_row_per_append() {
    let db = scratch("from_v7").join("noetic.db");
    drop(SqliteLogStore::open(&db).await.unwrap());
    // A version 7 file: the same tables, one entry per row.
    let at = std::time::SystemTime::now();
    let stop = |reason: &str| Entry::StopRequested { reason: reason.into() };
    let mut sql = String::new();
    for (pos, reason) in [(1, "one"), (2, "two"), (3, "three")] {
        let stored = noetic::agent::log::encode(&stop(reason), at).unwrap().replace('\'', "''");
        sql.push_str(&format!("INSERT INTO log_entries (session, pos, entry) VALUES ('s', {pos}, '{stored}');\n"));
    }
    sql.push_str(
        "INSERT INTO log_sessions (key, last, summary, updated_ms, counter, writer)
         VALUES ('s', 3, '{\"turns\":0,\"items\":0,\"queued\":0,\"open_turn\":null}', 0, 1, 'v7');
         PRAGMA user_version = 7;",
    );
    noetic_sqlite::testing::execute(&db, &sql).unwrap();

    let store = SqliteLogStore::open(&db).await.unwrap();
    assert_eq!(noetic_sqlite::testing::user_version(&db).unwrap(), LOG_SCHEMA_VERSION);
    let reasons = |records: Vec<Record>| -> Vec<(u64, String)> {
        records
            .into_iter()
            .map(|r| match r.entry {
                Entry::StopRequested { reason } => (r.pos, reason),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(reasons(store.read("s", 1, 10).await.unwrap()), [(2, "two".into()), (3, "three".into())]);
    assert_eq!(store.append("s", Expect::At(3), &[stop("four"), stop("five")]).await.unwrap(), 5);
    assert_eq!(
        reasons(store.read("s", 2, 10).await.unwrap()),
        [(3, "three".into()), (4, "four".into()), (5, "five".into())]
    );
    assert_eq!(reasons(store.read("s", 4, 10).await.unwrap()), [(5, "five".into())]);
}
