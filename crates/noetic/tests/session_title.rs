//! A session's title (#33): set by anyone, kept in the session log (so it survives a reopen and shows in the
//! store's list), checked as untrusted text, and never fencing a turn another worker runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use noetic::agent::log::{LogStore, MemoryLogStore};
use noetic::agent::{MAX_TITLE_CHARS, SessionError};
use noetic::model::{ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::testing::Gate;
use serde_json::json;

fn worker(name: &str, model: &ScriptedModel, store: &MemoryLogStore, gate: &Gate) -> Runtime {
    Runtime::builder()
        .model(Arc::new(model.clone()))
        .tool(gate.tool("slow").unwrap())
        .log_store(Arc::new(store.clone()))
        .worker_id(name)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_title_is_kept_in_the_log_shown_after_reopening_and_in_the_store_list() {
    let store = MemoryLogStore::new();
    let first = worker("a", &ScriptedModel::new([ModelResponse::text("hi")]), &store, &Gate::new());
    let session = first.open("s").await.unwrap();
    assert_eq!(session.title(), None);
    session.send("hello").await.unwrap().await.unwrap();
    session.set_title("  Fix the build  ").await.unwrap();
    session.set_title("Fix the release build").await.unwrap();
    assert_eq!(session.title().as_deref(), Some("Fix the release build"), "trimmed, the last one holds");

    let reopened = worker("b", &ScriptedModel::new([]), &store, &Gate::new()).open("s").await.unwrap();
    assert_eq!(reopened.title().as_deref(), Some("Fix the release build"));
    assert_eq!(reopened.key(), "s", "the key stays the key");
    assert_eq!(reopened.history().len(), 2, "the conversation is untouched");
    let listed = store.list().await.unwrap();
    assert_eq!(listed[0].summary.title.as_deref(), Some("Fix the release build"));
}

#[tokio::test]
async fn a_title_that_is_empty_too_long_or_holds_control_characters_is_refused_and_changes_nothing() {
    let store = MemoryLogStore::new();
    let session = worker("a", &ScriptedModel::new([]), &store, &Gate::new()).open("s").await.unwrap();
    session.set_title("kept").await.unwrap();
    let long = "x".repeat(MAX_TITLE_CHARS + 1);
    for (title, says) in
        [("   ", "empty"), (long.as_str(), "at most 120"), ("two\nlines", "U+000A"), ("\u{1b}[31mred", "U+001B")]
    {
        match session.set_title(title).await {
            Err(e @ SessionError::InvalidTitle { .. }) => assert!(e.to_string().contains(says), "{e}"),
            other => panic!("{title:?} must be refused: {other:?}"),
        }
    }
    assert_eq!(session.title().as_deref(), Some("kept"));
    assert!(session.set_title(&"é".repeat(MAX_TITLE_CHARS)).await.is_ok(), "the limit counts characters");
}

#[tokio::test]
async fn a_session_without_a_log_keeps_its_title_in_memory() {
    let runtime = Runtime::builder().model(Arc::new(ScriptedModel::new([]))).build().unwrap();
    let session = runtime.session("s");
    session.set_title("scratch").await.unwrap();
    assert_eq!(runtime.session("s").title().as_deref(), Some("scratch"));
}

#[tokio::test]
async fn renaming_a_session_on_another_worker_while_a_turn_runs_does_not_stop_or_fence_that_turn() {
    let store = MemoryLogStore::new();
    let gate = Gate::new();
    let model_a =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "slow", json!({}))]), ModelResponse::text("done")]);
    let a = worker("a", &model_a, &store, &gate);
    let b = worker("b", &ScriptedModel::new([]), &store, &Gate::new());
    let on_a = a.open("s").await.unwrap();
    let turn = on_a.send("go").await.unwrap();
    gate.started().await;
    b.open("s").await.unwrap().set_title("renamed on b").await.unwrap();
    noetic::testing::until("A hears of B's title", || on_a.title().as_deref() == Some("renamed on b")).await.unwrap();
    gate.release();
    assert_eq!(turn.await.unwrap(), "done", "the running turn kept writing its log");
    let answer = on_a.send("again").await;
    assert!(answer.is_ok(), "A still runs the session: {:?}", answer.err());
}
