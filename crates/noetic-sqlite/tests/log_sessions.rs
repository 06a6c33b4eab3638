//! Sessions on a SQLite session log (#30): a turn a process left is resumed from the file by another runtime,
//! and the process that left it can no longer write to the session (it is fenced by the log's position).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;

use noetic::agent::log::{Entry, LogStore, TurnOutcome};
use noetic::model::{ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::testing::{Gate, transcript};
use noetic::turn::INTERRUPTED_RESULT;
use noetic_sqlite::SqliteLogStore;
use serde_json::json;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("noetic-sqlite-sessions-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn runtime(model: &ScriptedModel, store: Arc<SqliteLogStore>, gate: &Gate) -> Runtime {
    Runtime::builder().model(Arc::new(model.clone())).tool(gate.tool("slow").unwrap()).log_store(store).build().unwrap()
}

#[tokio::test]
async fn a_turn_left_in_a_sqlite_log_is_resumed_by_another_runtime_and_its_first_process_is_fenced() {
    let path = scratch("resume").join("sessions.db");
    let gate = Gate::new();
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c1", "slow", json!({}))])]);
    let first = runtime(&model, Arc::new(SqliteLogStore::open(&path).await.unwrap()), &gate);
    let turn = first.session("s").send("go").await.unwrap();
    gate.started().await;

    // Another process opens the file while the first one's call is running (as after a crash).
    let store = Arc::new(SqliteLogStore::open(&path).await.unwrap());
    let model2 = ScriptedModel::new([ModelResponse::text("done")]);
    let next = runtime(&model2, store.clone(), &Gate::new());
    let session = next.open("s").await.unwrap();
    assert_eq!(session.unfinished_turn().as_deref(), Some("assistant"));
    let resumed = session.resume().await.unwrap().unwrap();
    assert_eq!(resumed.number(), 1);
    assert_eq!(resumed.await.unwrap(), "done");
    assert_eq!(
        transcript(model2.requests()[0].history.as_slice()),
        ["User: go", "call c1 slow({})", &format!("result c1 (error) {INTERRUPTED_RESULT}")]
    );

    // The first process's call ends now: it cannot write over the turn the second one finished.
    gate.release();
    let stale = turn.await;
    assert!(stale.is_err(), "the fenced turn fails instead of writing: {stale:?}");
    let log: Vec<Entry> = store.read("s", 0, usize::MAX).await.unwrap().into_iter().map(|r| r.entry).collect();
    let ends: Vec<&TurnOutcome> = log
        .iter()
        .filter_map(|e| match e {
            Entry::TurnEnded { outcome, .. } => Some(outcome),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 1, "one end for turn 1: the resumed turn's");
    assert!(matches!(ends[0], TurnOutcome::Completed { answer } if answer == "done"));
}

#[tokio::test]
async fn a_message_another_connection_appends_to_the_file_reaches_the_running_turn() {
    let path = scratch("steer").join("sessions.db");
    let gate = Gate::new();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "slow", json!({}))]), ModelResponse::text("done")]);
    let owner = runtime(&model, Arc::new(SqliteLogStore::open(&path).await.unwrap()), &gate);
    let session = owner.open("s").await.unwrap();
    let turn = session.send("go").await.unwrap();
    gate.started().await;
    // `noetic sessions steer` in another process: its own connection to the file, an append at the end.
    let elsewhere = SqliteLogStore::open(&path).await.unwrap();
    let message = noetic::agent::SteerMessage::new("from the other process");
    elsewhere.append("s", noetic::agent::log::Expect::End, &[Entry::MessageAccepted { message }]).await.unwrap();
    for _ in 0..2000 {
        if session.queued() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(session.queued(), 1, "the owner heard the other connection's append");
    gate.release();
    assert_eq!(turn.await.unwrap(), "done");
    let last = transcript(model.requests()[1].history.as_slice()).pop();
    assert_eq!(last.as_deref(), Some("User: from the other process"));
}

#[tokio::test]
async fn a_turn_of_n_idempotent_calls_is_n_plus_one_commits_with_its_lease() {
    const CALLS: usize = 4;
    let path = scratch("commits").join("sessions.db");
    // A lease's transaction waits for the turn's start as long as the test needs (the real wait is 5 ms).
    let long = std::time::Duration::from_secs(600);
    let store =
        Arc::new(SqliteLogStore::open_lingering(&path, noetic_sqlite::Durability::Process, long).await.unwrap());
    let model = ScriptedModel::responder(|request| {
        // This turn's results: those after the last user message.
        let turn =
            request.history.iter().rev().take_while(|item| !matches!(item, Item::Message { role: Role::User, .. }));
        let done = turn.filter(|item| matches!(item, Item::ToolResult(_))).count();
        Ok(if done < CALLS {
            ModelResponse::tool_calls([(format!("c{done}").as_str(), "search", json!({"q": done}))])
        } else {
            ModelResponse::text("found it")
        })
    });
    let search = FnTool::builder("search", "Searches.")
        .handler(|_, _| async { Ok(serde_json::Value::from("src/lib.rs:1")) })
        .idempotent(true)
        .build()
        .unwrap();
    let rt = Runtime::builder().model(Arc::new(model)).tool(Arc::new(search)).log_store(store.clone()).build().unwrap();
    let session = rt.open("s").await.unwrap();
    for turn in 1..=2 {
        let before = store.commits();
        assert_eq!(session.send("find it").await.unwrap().await.unwrap(), "found it");
        // The lease with the turn's start and the first call's start, each next call's start with the previous
        // outcome, the turn's end with the last outcome, the answer, the step's end and the lease given back.
        assert_eq!(store.commits() - before, CALLS as u64 + 1, "turn {turn}");
    }
}
