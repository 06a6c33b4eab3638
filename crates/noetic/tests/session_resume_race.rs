//! A message steered into a turn a stopped process left open, while its append is still on the way to the store,
//! reaches that turn when it is resumed (found by the SQLite crash test's long mode: taking the lease saw the log
//! end where the process had last read it and rebuilt the turn without waiting for the process's own append).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::Ordering;

use noetic::agent::log::Entry;
use noetic::model::{ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::testing::RecordingLogStore;
use serde_json::json;

mod common;
use common::FlakyLog;

fn tool() -> Arc<dyn Tool> {
    Arc::new(FnTool::builder("read", "Reads.").handler(|_, _| async { Ok(json!("ok")) }).build().unwrap())
}

#[tokio::test]
async fn a_message_steered_into_a_left_turn_while_its_append_is_on_the_way_reaches_the_resumed_turn() {
    // A turn that calls a tool, cut after the call started: what a process killed during the call left.
    let recorded = RecordingLogStore::default();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "read", json!({}))]), ModelResponse::text("done")]);
    let first =
        Runtime::builder().model(Arc::new(model)).tool(tool()).log_store(Arc::new(recorded.clone())).build().unwrap();
    first.open("s").await.unwrap().send("go").await.unwrap().await.unwrap();
    let appends = recorded.appends();
    let started = appends.iter().position(|a| a.iter().any(|e| matches!(e, Entry::ToolStarted { .. }))).unwrap();
    let left = recorded.cut(started + 1).await.unwrap();

    let store = Arc::new(FlakyLog { inner: left, ..FlakyLog::default() });
    store.hooks.hold_messages.store(true, Ordering::SeqCst);
    let model = ScriptedModel::new([ModelResponse::text("done, as steered")]);
    let second =
        Runtime::builder().model(Arc::new(model.clone())).tool(tool()).log_store(store.clone()).build().unwrap();
    let session = second.open("s").await.unwrap();
    assert!(session.unfinished_turn().is_some(), "the cut left the turn open");

    let steer = tokio::spawn({
        let session = session.clone();
        async move { session.steer("use the cache").await }
    });
    store.hooks.held.notified().await;
    let resume = tokio::spawn({
        let session = session.clone();
        async move { session.resume().await }
    });
    // The resume goes as far as it can while the message's append is held (a resume that does not wait for it
    // runs its whole turn here).
    for _ in 0..1_000 {
        tokio::task::yield_now().await;
    }
    store.hooks.release.notify_one();
    steer.await.unwrap().unwrap();
    if let Some(turn) = resume.await.unwrap().unwrap() {
        turn.await.unwrap();
    }

    let history = session.history();
    let steered = history.iter().position(|i| *i == Item::user("use the cache"));
    let answered = history.iter().position(|i| *i == Item::assistant("done, as steered"));
    assert!(steered.is_some() && steered < answered, "the resumed turn showed the model the message: {history:#?}");
    assert_eq!(session.queued(), 0, "nothing left in the queue");
}
