//! Databases of schema versions 1 and 2 (as the store before the session log left them) opened with the session-log store: every session
//! becomes a log whose projection is the old session, once, in place; a row that does not read stops the migration
//! with nothing written; the old store goes on working on the migrated database.
//!
//! Needs a server (see `tests/log_store.rs`); each test makes a database of its own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use noetic::agent::log::{Expect, LogStore, Projection};
use noetic::agent::{BatchPolicy, SteerMessage, SteeringMode, setting_text};
use noetic::model::{Item, ToolCall, ToolResult};
use noetic::steering::{LedgerEntry, LedgerKind, SteeringAction};
use noetic_postgres::testing::{Throwaway, create_at_version};
use noetic_postgres::{LOG_SCHEMA_VERSION, PgLogStore};

/// A database of the test's own, or `None` (with the reason printed) when there is no server and none is required.
async fn database(name: &str) -> Option<Throwaway> {
    Throwaway::or_skip(name).await.unwrap_or_else(|e| panic!("{e}"))
}

fn call(id: &str) -> Item {
    Item::ToolCall(ToolCall { id: id.into(), name: "search".into(), arguments: "{\"q\":1}".into() })
}

/// What the old sessions held, to compare the logs with.
struct Old {
    done_history: Vec<Item>,
    cut_history: Vec<Item>,
    queued: SteerMessage,
    ledger: LedgerEntry,
}

/// Two sessions as versions 1–2 stored them: `done` (two turns, a tool call, a queued message, a ledger entry) and
/// `cut` (a turn left running: its journal is in the row, one of its two calls has no result); with version 2,
/// layer states of `done`'s thread and of the global scope.
async fn old_sessions(client: &tokio_postgres::Client, version: i32) -> Old {
    create_at_version(client, version).await.unwrap();
    let done_history = vec![
        Item::user("q"),
        call("c1"),
        Item::ToolResult(ToolResult::ok("c1", "found")),
        Item::assistant("the answer"),
    ];
    let cut_history = vec![Item::user("go"), call("c1"), call("c2"), Item::ToolResult(ToolResult::ok("c1", "r"))];
    let queued = SteerMessage::new("next, please");
    let mut ledger = LedgerEntry::new(LedgerKind::ToolCall, SteeringAction::Allow);
    ledger.tool_name = Some("search".into());
    let insert_session = "INSERT INTO noetic_sessions (key, mode, capacity, batch_policy, turns, items, updated_at,
                          journal_step, journal_core) VALUES ($1, $2, $3, $4, $5, $6, $7::text::timestamptz, $8, $9)";
    let (all, finish) = (setting_text(&SteeringMode::All), setting_text(&BatchPolicy::FinishBatch));
    let no_journal: Option<&str> = None;
    client
        .execute(
            insert_session,
            &[&"done", &all, &3i64, &finish, &2i64, &4i64, &"2024-01-01", &no_journal, &no_journal],
        )
        .await
        .unwrap();
    client
        .execute(
            insert_session,
            &[&"cut", &all, &3i64, &finish, &1i64, &4i64, &"2024-01-02", &Some("llm"), &Some("{}")],
        )
        .await
        .unwrap();
    for (key, history) in [("done", &done_history), ("cut", &cut_history)] {
        for (seq, item) in history.iter().enumerate() {
            let text = serde_json::to_string(item).unwrap();
            client
                .execute(
                    "INSERT INTO noetic_items (session, seq, item) VALUES ($1, $2, $3)",
                    &[&key, &(seq as i64), &text],
                )
                .await
                .unwrap();
        }
    }
    let message = serde_json::to_string(&queued).unwrap();
    client
        .execute(
            "INSERT INTO noetic_queue (session, pos, id, message) VALUES ('done', 1, $1, $2)",
            &[&queued.id.to_string(), &message],
        )
        .await
        .unwrap();
    let entry = serde_json::to_string(&ledger).unwrap();
    // As the old store reads it back (its JSON keeps the time to the millisecond).
    let ledger = serde_json::from_str(&entry).unwrap();
    client.execute("INSERT INTO noetic_ledger (session, seq, entry) VALUES ('done', 0, $1)", &[&entry]).await.unwrap();
    if version >= 2 {
        client
            .batch_execute(
                "INSERT INTO noetic_layer_state (scope, layer, state) VALUES
                 ('thread:done', 'notes', '{\"n\":1}'), ('global', 'memo', '\"g\"')",
            )
            .await
            .unwrap();
    }
    Old { done_history, cut_history, queued, ledger }
}

async fn projection(store: &PgLogStore, key: &str) -> Projection {
    let mut projection = Projection::default();
    for record in store.read(key, 0, 1000).await.unwrap() {
        projection.apply(&record);
    }
    projection
}

async fn schema_version(client: &tokio_postgres::Client) -> i32 {
    client.query_one("SELECT version FROM noetic_schema", &[]).await.unwrap().get(0)
}

/// Checks the logs of [`old_sessions`] after migration.
async fn check_converted(store: &PgLogStore, old: &Old) {
    let done = projection(store, "done").await;
    assert_eq!(done.conversation, old.done_history);
    assert_eq!((done.turns, done.open_turn.is_none()), (2, true));
    assert_eq!(
        done.queue.iter().map(|m| (m.id, m.text.clone())).collect::<Vec<_>>(),
        [(old.queued.id, old.queued.text.clone())]
    );
    assert_eq!(done.ledger, std::slice::from_ref(&old.ledger));
    assert_eq!(
        (done.settings.mode, done.settings.capacity, done.settings.batch_policy),
        (SteeringMode::All, 3, BatchPolicy::FinishBatch)
    );
    let cut = projection(store, "cut").await;
    let mut given_up = old.cut_history.clone();
    given_up.push(Item::ToolResult(noetic::turn::interrupted_result("c2")));
    assert_eq!(cut.conversation, given_up, "the unfinished turn is given up: c2 gets the interrupted result");
    assert_eq!((cut.turns, cut.open_turn), (1, None));
    assert!(cut.queue.is_empty() && cut.ledger.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_database_becomes_one_log_per_session_whose_projection_is_the_old_session() {
    let Some(db) = database("log_from_v1").await else { return };
    let client = db.client().await.unwrap();
    let old = old_sessions(&client, 1).await;
    let store = PgLogStore::connect(&db.url).await.unwrap();
    assert_eq!(schema_version(&client).await, LOG_SCHEMA_VERSION);
    check_converted(&store, &old).await;
    let list = store.list().await.unwrap();
    let keys: Vec<&str> = list.iter().map(|l| l.key.as_str()).collect();
    assert_eq!(keys, ["cut", "done"], "the old order, newest first");
    // The logs go on from where the conversion left them; connecting again converts nothing twice.
    let last = store.last("done").await.unwrap();
    let stop = noetic::agent::log::Entry::StopRequested { reason: "after".into() };
    assert_eq!(store.append("done", Expect::At(last), &[stop]).await.unwrap(), last + 1);
    drop(store);
    let again = PgLogStore::connect(&db.url).await.unwrap();
    assert_eq!(again.last("done").await.unwrap(), last + 1);
    assert_eq!(again.list().await.unwrap().len(), 2);
    drop((again, client));
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_database_becomes_logs_with_its_layer_states() {
    let Some(db) = database("log_from_v2").await else { return };
    let client = db.client().await.unwrap();
    let old = old_sessions(&client, 2).await;
    let store = PgLogStore::connect(&db.url).await.unwrap();
    assert_eq!(schema_version(&client).await, LOG_SCHEMA_VERSION);
    check_converted(&store, &old).await;
    let done = projection(&store, "done").await;
    assert_eq!(done.layer_states["thread:done"]["notes"], serde_json::json!({"n": 1}));
    let global = projection(&store, "scope:global").await;
    assert_eq!(global.layer_states["global"]["memo"], serde_json::json!("g"));
    drop((store, client));
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_row_that_does_not_read_stops_the_migration_naming_it_and_nothing_is_written() {
    let Some(db) = database("log_bad_ledger").await else { return };
    let client = db.client().await.unwrap();
    old_sessions(&client, 2).await;
    client.execute("INSERT INTO noetic_ledger (session, seq, entry) VALUES ('cut', 4, 'garbage')", &[]).await.unwrap();
    let e = PgLogStore::connect(&db.url).await.unwrap_err();
    let chain = format!("{e}: {}", std::error::Error::source(&e).map(ToString::to_string).unwrap_or_default());
    assert!(chain.contains("session 'cut'") && chain.contains("ledger entry 4"), "{chain}");
    assert!(chain.contains("nothing was migrated"), "{chain}");
    assert_eq!(schema_version(&client).await, 2);
    let log: Option<String> = client.query_one("SELECT to_regclass('noetic_log')::text", &[]).await.unwrap().get(0);
    assert_eq!(log, None, "no log table");
    drop(client);
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_database_keeps_its_entry_rows_converts_nothing_again_and_goes_on_with_a_row_per_append() {
    let Some(db) = database("log_from_v3").await else { return };
    let client = db.client().await.unwrap();
    // A version 3 database: the old tables still hold the sessions converted when it became version 3 (here
    // only in the old tables: were they converted again, they would show), and a log of one entry per row.
    old_sessions(&client, 3).await;
    let at = std::time::SystemTime::now();
    let entry = |text: &str| noetic::agent::log::Entry::MessageAccepted { message: SteerMessage::new(text) };
    for (pos, text) in [(1i64, "one"), (2, "two"), (3, "three")] {
        let stored = noetic::agent::log::encode(&entry(text), at).unwrap();
        client
            .execute("INSERT INTO noetic_log (session, pos, entry) VALUES ('s', $1, $2)", &[&pos, &stored])
            .await
            .unwrap();
    }
    client
        .execute(
            "INSERT INTO noetic_log_sessions (key, last, summary, seq, written_by, updated_at)
             VALUES ('s', 3, '{\"turns\":0,\"items\":0,\"queued\":3,\"open_turn\":null}', 1, pg_current_xact_id(), now())",
            &[],
        )
        .await
        .unwrap();
    client.execute("UPDATE noetic_schema SET version = 3", &[]).await.unwrap();

    let store = PgLogStore::connect(&db.url).await.unwrap();
    assert_eq!(schema_version(&client).await, LOG_SCHEMA_VERSION);
    let keys: Vec<String> = store.list().await.unwrap().into_iter().map(|l| l.key).collect();
    assert_eq!(keys, ["s"], "the old tables are not converted a second time");
    let texts = |records: Vec<noetic::agent::log::Record>| -> Vec<(u64, String)> {
        records
            .into_iter()
            .map(|r| match r.entry {
                noetic::agent::log::Entry::MessageAccepted { message } => (r.pos, message.text),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(texts(store.read("s", 1, 10).await.unwrap()), [(2, "two".into()), (3, "three".into())]);
    assert_eq!(store.append("s", Expect::At(3), &[entry("four"), entry("five")]).await.unwrap(), 5);
    assert_eq!(
        texts(store.read("s", 2, 10).await.unwrap()),
        [(3, "three".into()), (4, "four".into()), (5, "five".into())]
    );
    let rows: i64 = client.query_one("SELECT count(*) FROM noetic_log WHERE session = 's'", &[]).await.unwrap().get(0);
    assert_eq!(rows, 4, "three rows of version 3, one for the new append");
    let comment: String = client.query_one("SELECT obj_description('noetic_log'::regclass)", &[]).await.unwrap().get(0);
    assert!(comment.contains("one row per append"), "{comment}");
    drop((store, client));
    db.remove().await.unwrap();
}
