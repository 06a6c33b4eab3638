//! The SQLite store: sessions written through and reopened, resume after a crash, the schema's versions and
//! migrations, and files it must refuse without touching them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use noetic::agent::{JournalWrite, LayerStateWrite, SessionStore, SteerMessage, SteeringMode, StoreCommit};
use noetic::model::{ModelResponse, ScriptedModel, ToolResult};
use noetic::prelude::*;
use noetic::testing::{Counter, Gate};
use noetic::turn::INTERRUPTED_RESULT;
use noetic_sqlite::{LOG_SCHEMA_VERSION, SCHEMA_VERSION, SqliteStore};
use serde_json::json;

/// A fresh directory under the target dir (kept for inspection when a test fails).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("noetic-sqlite-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn runtime(model: &ScriptedModel, store: Arc<dyn SessionStore>, tools: Vec<Arc<dyn Tool>>) -> Runtime {
    Runtime::builder().model(Arc::new(model.clone())).tools(tools).store(store).build().unwrap()
}

#[tokio::test]
async fn a_session_continues_across_two_runtimes_on_one_file() {
    let db = scratch("continue").join("noetic.db");
    {
        let store = Arc::new(SqliteStore::open(&db).unwrap());
        let first = runtime(&ScriptedModel::new([ModelResponse::text("hello")]), store.clone(), Vec::new());
        assert_eq!(first.session("chat").send("hi").await.unwrap().await.unwrap(), "hello");
        first.session("chat").steer("and then?").await.unwrap();
    }
    let store = Arc::new(SqliteStore::open(&db).unwrap());
    let next = runtime(&ScriptedModel::new([ModelResponse::text("then this")]), store.clone(), Vec::new());
    let session = next.session("chat");
    assert_eq!(session.history(), vec![Item::user("hi"), Item::assistant("hello")]);
    assert_eq!(session.queued(), 1);
    assert_eq!(session.continue_session().await.unwrap().unwrap().await.unwrap(), "then this");
    let list = store.list().unwrap();
    assert_eq!((list[0].key.as_str(), list[0].turns, list[0].items, list[0].queued), ("chat", 2, 4, 0));
    assert!(store.delete("chat").unwrap());
    assert!(store.list().unwrap().is_empty());
}

#[tokio::test]
async fn a_turn_left_mid_batch_resumes_from_the_file_without_repeating_the_model_call_or_the_running_tool() {
    let dir = scratch("resume");
    let db = dir.join("noetic.db");
    let gate = Gate::new();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "slow", json!({})), ("c2", "quick", json!({}))])]);
    let store = Arc::new(SqliteStore::open(&db).unwrap());
    let first =
        runtime(&model, store, vec![gate.tool("slow").unwrap(), Counter::new().tool("quick", json!(1)).unwrap()]);
    let _turn = first.session("s").send("go").await.unwrap();
    gate.started().await;
    // A killed process leaves the file as it is now: copy it (with its WAL) and open the copy.
    let copy = dir.join("crashed.db");
    for suffix in ["", "-wal"] {
        let from = PathBuf::from(format!("{}{suffix}", db.display()));
        if from.exists() {
            std::fs::copy(&from, format!("{}{suffix}", copy.display())).unwrap();
        }
    }
    let counter = Counter::new();
    let model2 = ScriptedModel::new([ModelResponse::text("recovered")]);
    let next = runtime(
        &model2,
        Arc::new(SqliteStore::open(&copy).unwrap()),
        vec![Gate::new().tool("slow").unwrap(), counter.tool("quick", json!("two")).unwrap()],
    );
    let session = next.session("s");
    assert_eq!(session.unfinished_turn().as_deref(), Some("assistant"));
    assert_eq!(session.resume().await.unwrap().unwrap().await.unwrap(), "recovered");
    assert_eq!((model2.calls(), counter.count()), (1, 1));
    let results: Vec<ToolResult> = session
        .history()
        .into_iter()
        .filter_map(|i| match i {
            Item::ToolResult(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(results[0], ToolResult::error("c1", INTERRUPTED_RESULT));
    assert_eq!(results[1].call_id, "c2");
    gate.release();
}

#[test]
fn an_empty_file_gets_the_current_schema_and_a_version_1_file_is_migrated_with_its_data() {
    let dir = scratch("migrate");
    let fresh = SqliteStore::open(dir.join("fresh.db")).unwrap();
    assert_eq!(fresh.schema_version().unwrap(), SCHEMA_VERSION);

    let old = dir.join("v1.db");
    noetic_sqlite::testing::create_v1(&old).unwrap();
    noetic_sqlite::testing::execute(
        &old,
        "INSERT INTO sessions (key, mode, capacity, batch_policy, turns, items, updated_ms)
         VALUES ('kept', 'all', 3, 'finish-batch', 1, 1, 1000);
         INSERT INTO items (session, seq, item) VALUES ('kept', 0, '{\"type\":\"message\",\"role\":\"user\",\"content\":\"from v1\"}');",
    )
    .unwrap();
    let store = SqliteStore::open(&old).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let kept = store.peek("kept").unwrap().unwrap();
    assert_eq!(kept.snapshot.history, vec![Item::user("from v1")]);
    assert_eq!(kept.snapshot.capacity, 3);
    assert_eq!(store.list().unwrap().len(), 1);
    // Version 5's table is there.
    let write = LayerStateWrite { scope: "thread:kept", layer: "notes", state: Some("{}") };
    store.save_layer_states(&[write]).unwrap();
    assert_eq!(store.layer_states("thread:kept").unwrap(), [("notes".to_owned(), "{}".to_owned())]);
}

#[test]
fn a_file_that_is_not_sqlite_or_is_from_a_newer_schema_is_refused_and_left_untouched() {
    let dir = scratch("refuse");
    let text = dir.join("notes.db");
    std::fs::write(&text, "these are my notes, not a database ".repeat(100)).unwrap();
    let before = std::fs::read(&text).unwrap();
    let err = SqliteStore::open(&text).unwrap_err().to_string();
    assert!(err.contains("not an SQLite database") && err.contains("notes.db"), "{err}");
    assert_eq!(std::fs::read(&text).unwrap(), before, "nothing was written");

    let newer = dir.join("newer.db");
    // The newest version this build knows is the session log's (the old store opens that one as it is).
    noetic_sqlite::testing::execute(&newer, &format!("PRAGMA user_version = {};", LOG_SCHEMA_VERSION + 1)).unwrap();
    let before = std::fs::read(&newer).unwrap();
    let err = SqliteStore::open(&newer).unwrap_err().to_string();
    assert!(err.contains(&format!("version {}", LOG_SCHEMA_VERSION + 1)) && err.contains("upgrade noetic"), "{err}");
    assert_eq!(std::fs::read(&newer).unwrap(), before);
}

#[test]
fn a_commit_that_does_not_continue_the_stored_conversation_is_refused_and_writes_nothing() {
    let store = SqliteStore::open(scratch("order").join("noetic.db")).unwrap();
    let items = [Item::user("a")];
    let commit = |first, items| StoreCommit { first, items, injected: &[], journal: JournalWrite::Keep, ledger: &[] };
    store.commit("s", commit(0, &items)).unwrap();
    let err = store.commit("s", commit(0, &items)).unwrap_err();
    assert!(err.to_string().contains("does not continue the stored conversation"), "{err}");
    assert_eq!(store.peek("s").unwrap().unwrap().snapshot.history, items);
}

#[test]
fn many_openers_of_one_new_file_at_once_all_succeed() {
    let db = scratch("openers").join("noetic.db");
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let openers: Vec<_> = (0..8)
        .map(|i| {
            let (db, barrier) = (db.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let store = SqliteStore::open(&db)?;
                store.save_settings(&format!("s{i}"), Default::default(), 10, Default::default(), 0)?;
                Ok::<_, NoeticError>(())
            })
        })
        .collect();
    for opener in openers {
        opener.join().unwrap().unwrap();
    }
    assert_eq!(SqliteStore::open(&db).unwrap().list().unwrap().len(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_queued_through_another_connection_reaches_the_owners_running_turn_at_its_next_checkpoint() {
    let db = scratch("elsewhere").join("noetic.db");
    let owner_store = Arc::new(SqliteStore::open(&db).unwrap());
    let gate = Gate::new();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "build", json!({})), ("c2", "build", json!({}))]),
        ModelResponse::text("switched to the docs"),
    ]);
    let owner = runtime(&model, owner_store.clone(), vec![gate.tool("build").unwrap()]);
    let session = owner.session("shared");
    let turn = session.send("build everything").await.unwrap();
    gate.started().await;
    // Another process (here: another connection to the file, which is all a process has) steers the session.
    let other = SqliteStore::open(&db).unwrap();
    let message = noetic::agent::SteerMessage::new("only the docs, please");
    other.steer_elsewhere("shared", &message).unwrap();
    assert_eq!(other.peek("shared").unwrap().unwrap().snapshot.queued, vec![message.clone()], "durable at once");
    gate.release();
    assert_eq!(turn.await.unwrap(), "switched to the docs");
    assert_eq!(gate.runs(), 1, "the rest of the batch was skipped, as for a local steer");
    let second = model.requests()[1].history.as_slice().to_vec();
    assert_eq!(second.last(), Some(&Item::user("only the docs, please")));
    let users = session.history().iter().filter(|i| **i == Item::user("only the docs, please")).count();
    assert_eq!(users, 1, "shown to the model once");
    assert!(other.peek("shared").unwrap().unwrap().snapshot.queued.is_empty(), "injected, so no longer queued");
    // Nothing new: the owner's check is a version read, and finds nothing twice.
    assert_eq!(owner_store.take_inbox("shared").unwrap(), noetic::agent::Inbox::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_from_another_process_and_from_the_owner_reaches_the_model_in_acceptance_order() {
    let db = scratch("order").join("noetic.db");
    let owner_store = Arc::new(SqliteStore::open(&db).unwrap());
    let gate = Gate::new();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "build", json!({})), ("c2", "build", json!({}))]),
        ModelResponse::text("done"),
    ]);
    let owner = runtime(&model, owner_store, vec![gate.tool("build").unwrap()]);
    let session = owner.session("ordered");
    session.set_steering_mode(noetic::agent::SteeringMode::All).await;
    let turn = session.send("build everything").await.unwrap();
    gate.started().await;
    // Elsewhere, here, elsewhere: each accepted before the next is sent.
    let other = SqliteStore::open(&db).unwrap();
    other.steer_elsewhere("ordered", &noetic::agent::SteerMessage::new("first: do X")).unwrap();
    session.steer("no, do Y instead").await.unwrap();
    other.steer_elsewhere("ordered", &noetic::agent::SteerMessage::new("and then Z")).unwrap();
    gate.release();
    assert_eq!(turn.await.unwrap(), "done");
    let second = model.requests()[1].history.as_slice().to_vec();
    let tail: Vec<&Item> = second.iter().rev().take(3).rev().collect();
    assert_eq!(
        tail,
        [&Item::user("first: do X"), &Item::user("no, do Y instead"), &Item::user("and then Z")],
        "acceptance order, whichever process accepted each"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_asked_through_another_connection_cancels_the_owners_turn_at_its_next_checkpoint() {
    let db = scratch("stop-elsewhere").join("noetic.db");
    let owner_store = Arc::new(SqliteStore::open(&db).unwrap());
    let gate = Gate::new();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "build", json!({})), ("c2", "build", json!({}))]),
        ModelResponse::text("never asked"),
    ]);
    let owner = runtime(&model, owner_store, vec![gate.tool("build").unwrap()]);
    let session = owner.session("stoppable");
    let turn = session.send("build").await.unwrap();
    gate.started().await;
    let other = SqliteStore::open(&db).unwrap();
    other.steer_elsewhere("stoppable", &noetic::agent::SteerMessage::new("queued then stopped")).unwrap();
    assert!(other.request_stop("stoppable", "stopped from another process").unwrap());
    assert!(other.peek("stoppable").unwrap().unwrap().snapshot.queued.is_empty(), "the stop clears the queue");
    gate.release();
    let error = turn.await.unwrap_err();
    assert!(error.to_string().contains("stopped from another process"), "{error}");
    assert_eq!(model.calls(), 1, "the model is not asked again");
    assert_eq!(gate.runs(), 1);
    assert!(!other.request_stop("never-was", "x").unwrap(), "no such session");
}

#[test]
fn a_message_queued_for_a_session_nobody_owns_waits_in_its_queue_for_the_next_owner() {
    let db = scratch("unowned").join("noetic.db");
    let store = SqliteStore::open(&db).unwrap();
    store.steer_elsewhere("later", &noetic::agent::SteerMessage::new("read me first")).unwrap();
    assert!(store.steer_elsewhere("later", &noetic::agent::SteerMessage::new("   ")).is_err(), "empty");
    let opened = store.open("later").unwrap().unwrap();
    assert_eq!(opened.snapshot.queued.len(), 1);
    assert_eq!(opened.snapshot.queued[0].text, "read me first");
    // Loaded with the queue when opened: not handed over a second time as news from elsewhere.
    assert!(store.take_inbox("later").unwrap().messages.is_empty());
    let other = SqliteStore::open(&db).unwrap();
    for i in 0..9 {
        other.steer_elsewhere("later", &noetic::agent::SteerMessage::new(format!("m{i}"))).unwrap();
    }
    let full = other.steer_elsewhere("later", &noetic::agent::SteerMessage::new("one too many")).unwrap_err();
    assert!(full.to_string().contains("is full"), "{full}");
}

/// Makes `path` immutable (`chattr +i`: even root cannot write it) and returns a guard that undoes it; `None`, after
/// saying why, where the file system or the sandbox cannot (the permission bits do not stop root, who runs CI).
fn immutable(path: &std::path::Path) -> Option<impl Drop> {
    struct Undo(PathBuf);
    impl Drop for Undo {
        fn drop(&mut self) {
            let _ = std::process::Command::new("chattr").arg("-i").arg(&self.0).status();
        }
    }
    let made = std::process::Command::new("chattr").arg("+i").arg(path).status().is_ok_and(|s| s.success());
    let written = made && std::fs::OpenOptions::new().append(true).open(path).is_ok();
    if made && !written {
        return Some(Undo(path.to_owned()));
    }
    if made {
        let _ = std::process::Command::new("chattr").arg("-i").arg(path).status();
    }
    let _ = writeln!(
        std::io::stderr(),
        "skipped: this file system cannot make {} immutable with chattr +i",
        path.display()
    );
    None
}

#[test]
fn a_database_file_nobody_may_write_is_a_typed_error_naming_it_and_what_is_wrong() {
    let dir = scratch("read-only");
    let db = dir.join("noetic.db");
    {
        let store = SqliteStore::open(&db).unwrap();
        store.save_settings("kept", SteeringMode::default(), 10, Default::default(), 0).unwrap();
        store.close("kept");
    }
    // A clean close leaves no WAL; make the one file read-only for everyone, root included.
    let _ = std::fs::remove_file(dir.join("noetic.db-wal"));
    let _ = std::fs::remove_file(dir.join("noetic.db-shm"));
    let Some(_undo) = immutable(&db) else { return };
    let error = match SqliteStore::open(&db) {
        // Opening may work read-only; the first write must then fail.
        Ok(store) => store.save_settings("kept", SteeringMode::All, 10, Default::default(), 1).unwrap_err(),
        Err(e) => e,
    };
    let text = error.to_string();
    assert!(text.contains(&db.display().to_string()), "names the file: {text}");
    assert!(
        text.contains("read-only") || text.contains("readonly") || text.contains("cannot be opened"),
        "says what is wrong: {text}"
    );
}

#[test]
fn layer_states_are_saved_replaced_deleted_and_go_with_their_session() {
    let dir = scratch("layer-state");
    let store = SqliteStore::open(dir.join("noetic.db")).unwrap();
    let write = |scope, layer, state| LayerStateWrite { scope, layer, state };
    store
        .save_layer_states(&[
            write("thread:s", "steering", Some(r#"{"carried":[]}"#)),
            write("thread:s", "notes", Some("1")),
            write("global", "notes", Some("2")),
        ])
        .unwrap();
    store.save_layer_states(&[write("thread:s", "notes", Some("3")), write("thread:s", "steering", None)]).unwrap();
    assert_eq!(store.layer_states("thread:s").unwrap(), [("notes".to_owned(), "3".to_owned())]);
    assert_eq!(store.layer_states("global").unwrap(), [("notes".to_owned(), "2".to_owned())]);
    // Deleting the session deletes its thread's state, not the global one.
    store
        .commit("s", StoreCommit { first: 0, items: &[], injected: &[], journal: JournalWrite::Keep, ledger: &[] })
        .unwrap();
    assert!(store.delete("s").unwrap());
    assert!(store.layer_states("thread:s").unwrap().is_empty());
    assert_eq!(store.layer_states("global").unwrap().len(), 1);
}

#[tokio::test]
async fn a_thread_scoped_steering_ledger_comes_back_in_the_next_process_on_one_file() {
    let db = scratch("layer-ledger").join("noetic.db");
    let layer = || {
        let rule = SteeringRule::predicate("no-t", [Hook::BeforeToolCall], |_| SteeringDecision::deny("not t"));
        steering(SteeringConfig::new([rule]).with_scope(Scope::Thread)).unwrap()
    };
    let run = |layer: Arc<SteeringLayer>, model: ScriptedModel| {
        let tool = Arc::new(FnTool::builder("t", "A tool.").handler(|_, _| async { Ok(json!(null)) }).build().unwrap());
        Runtime::builder()
            .model(Arc::new(model))
            .tool(tool)
            .layer(layer as Arc<dyn MemoryLayer>)
            .store(Arc::new(SqliteStore::open(&db).unwrap()))
            .build()
            .unwrap()
    };
    let thread = Context::builder().thread_id("s").build();
    let first = layer();
    {
        let rt = run(
            first.clone(),
            ScriptedModel::new([ModelResponse::tool_calls([("c1", "t", json!({}))]), ModelResponse::text("done")]),
        );
        rt.session("s").send("go").await.unwrap().await.unwrap();
    }
    let denied = |l: &SteeringLayer| {
        l.state_for(&thread).map_or(0, |s| s.ledger.iter().filter(|e| e.rule_id.as_deref() == Some("no-t")).count())
    };
    assert_eq!(denied(&first), 1);
    let next = layer();
    let rt = run(next.clone(), ScriptedModel::new([ModelResponse::text("again")]));
    assert_eq!(denied(&next), 0, "nothing in memory before the session's first turn");
    rt.session("s").send("more").await.unwrap().await.unwrap();
    assert_eq!(denied(&next), 1, "the deny of the first process is in the thread's ledger");
}

#[tokio::test]
async fn a_message_another_process_queues_for_an_idle_session_is_listed_and_run_by_its_owner() {
    let db = scratch("idle-inbox").join("noetic.db");
    let store = Arc::new(SqliteStore::open(&db).unwrap());
    let model = ScriptedModel::new([ModelResponse::text("first"), ModelResponse::text("got it")]);
    let rt = runtime(&model, store.clone(), Vec::new());
    let session = rt.session("s");
    session.send("hi").await.unwrap().await.unwrap();
    assert!(store.orphaned().unwrap().is_empty());
    assert!(session.continue_session().await.unwrap().is_none(), "nothing waits");

    // `noetic sessions steer` from another process: its own connection to the file.
    let other = SqliteStore::open(&db).unwrap();
    other.steer_elsewhere("s", &SteerMessage::new("also check the tests")).unwrap();
    assert_eq!(store.orphaned().unwrap(), ["s"]);
    let turn = session.continue_session().await.unwrap().expect("the queued message starts a turn");
    assert_eq!(turn.await.unwrap(), "got it");
    assert_eq!(model.requests()[1].history.last(), Some(&Item::user("also check the tests")));
    assert!(store.orphaned().unwrap().is_empty(), "taken once");
    assert!(session.continue_session().await.unwrap().is_none(), "and shown once");
    assert_eq!(session.history().iter().filter(|i| **i == Item::user("also check the tests")).count(), 1);

    // A stop asked from elsewhere while idle empties what was queued here.
    session.steer("queued here").await.unwrap();
    assert!(other.request_stop("s", "stopped elsewhere").unwrap());
    assert!(session.continue_session().await.unwrap().is_none());
    assert_eq!(session.queued(), 0);
}
