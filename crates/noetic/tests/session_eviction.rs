//! Idle sessions can leave memory and come back from their log: history, queued steering, settings and turn
//! numbers survive; memory stays bounded by the sessions in use; a session whose log cannot be read runs nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::FlakyLog;
use noetic::agent::log::{LogStore, MemoryLogStore};
use noetic::agent::{BatchPolicy, SessionError, SteerError, SteeringMode};
use noetic::prelude::*;

fn answers(n: usize) -> ScriptedModel {
    ScriptedModel::new((0..n).map(|i| ModelResponse::text(format!("answer {i}"))))
}

fn runtime(model: &ScriptedModel, store: Arc<dyn LogStore>) -> Runtime {
    Runtime::builder().model(Arc::new(model.clone())).log_store(store).build().unwrap()
}

#[tokio::test]
async fn an_evicted_idle_session_comes_back_with_its_history_queue_settings_and_turn_numbers() {
    let model = answers(2);
    let store = MemoryLogStore::new();
    let runtime = runtime(&model, Arc::new(store.clone()));
    let session = runtime.open("s").await.unwrap();
    assert_eq!(session.send("first").await.unwrap().await.unwrap(), "answer 0");
    session.set_steering_mode(SteeringMode::All).await;
    session.set_steering_capacity(3).await;
    session.set_batch_policy(BatchPolicy::FinishBatch).await;
    let queued = session.steer("later").await.unwrap();

    assert!(runtime.evict("s").unwrap());
    assert_eq!(runtime.session_count(), 0);
    assert_eq!(store.list().await.unwrap().len(), 1);

    let back = runtime.open("s").await.unwrap();
    assert_eq!(back.history(), vec![Item::user("first"), Item::assistant("answer 0")]);
    let messages = back.queued_messages();
    assert_eq!(messages.len(), 1);
    assert_eq!((messages[0].id, messages[0].text.as_str()), (queued, "later"));
    assert_eq!(back.steering_mode(), SteeringMode::All);
    assert_eq!(back.steering_capacity(), 3);
    assert_eq!(back.batch_policy(), BatchPolicy::FinishBatch);
    let turn = back.continue_session().await.unwrap().unwrap();
    assert_eq!(turn.number(), 2, "turn numbers continue after the eviction");
    assert_eq!(turn.await.unwrap(), "answer 1");
    assert_eq!(back.history().len(), 4);
}

#[tokio::test]
async fn a_handle_held_across_an_eviction_talks_to_the_reopened_session() {
    let model = answers(2);
    let runtime = runtime(&model, Arc::new(MemoryLogStore::new()));
    let held = runtime.open("s").await.unwrap();
    held.send("one").await.unwrap().await.unwrap();
    assert!(runtime.evict("s").unwrap());
    // The old handle neither runs on the dropped state nor forks the conversation.
    held.send("two").await.unwrap().await.unwrap();
    assert_eq!(runtime.open("s").await.unwrap().history().len(), 4);
    assert_eq!(held.history(), runtime.session("s").history());
    assert_eq!(runtime.session_count(), 1);
}

#[tokio::test]
async fn a_running_or_followed_session_is_not_evicted() {
    let runtime = runtime(&ScriptedModel::new([]), Arc::new(MemoryLogStore::new()));
    let gate = noetic::testing::Gate::new();
    let gated = Runtime::builder()
        .model(Arc::new(ScriptedModel::new([
            ModelResponse::tool_calls([("c1", "wait", serde_json::json!({}))]),
            ModelResponse::text("done"),
        ])))
        .tool(gate.tool("wait").unwrap())
        .log_store(Arc::new(MemoryLogStore::new()))
        .build()
        .unwrap();
    let busy = gated.open("busy").await.unwrap();
    let turn = busy.send("go").await.unwrap();
    gate.started().await;
    assert!(!gated.evict("busy").unwrap(), "a running session stays");
    gate.release();
    turn.await.unwrap();
    assert!(gated.evict("busy").unwrap(), "once idle it may go");

    let watched = runtime.session("watched");
    let _follower = watched.follow(0);
    assert!(!runtime.evict("watched").unwrap(), "its follower would stop hearing from it");
    assert!(!runtime.evict("never-opened").unwrap());
}

#[tokio::test]
async fn beyond_max_idle_sessions_the_least_recently_used_idle_sessions_leave_memory_and_their_logs_stay() {
    let model = answers(40);
    let store = MemoryLogStore::new();
    let runtime = Runtime::builder()
        .model(Arc::new(model))
        .log_store(Arc::new(store.clone()))
        .max_idle_sessions(5)
        .build()
        .unwrap();
    for i in 0..20 {
        runtime.session(&format!("s{i}")).send("hi").await.unwrap().await.unwrap();
        assert!(runtime.session_count() <= 5, "after session {i}: {} in memory", runtime.session_count());
    }
    assert_eq!(store.list().await.unwrap().len(), 20);
    // The oldest comes back whole, and using it makes it recent again.
    let oldest = runtime.open("s0").await.unwrap();
    assert_eq!(oldest.history().len(), 2);
    oldest.send("again").await.unwrap().await.unwrap();
    assert_eq!(runtime.session("s0").history().len(), 4);
    assert!(runtime.session_count() <= 5);
}

#[test]
fn eviction_without_a_log_store_is_refused_as_a_configuration_error() {
    let model = answers(0);
    let err = Runtime::builder().model(Arc::new(model.clone())).max_idle_sessions(3).build().err().unwrap();
    assert_eq!(err.code, ConfigCode::MissingArchive);
    let runtime = Runtime::builder().model(Arc::new(model)).build().unwrap();
    runtime.session("s");
    let err = runtime.evict("s").unwrap_err();
    assert!(matches!(err, NoeticError::Config(ref c) if c.code == ConfigCode::MissingArchive), "{err}");
    assert_eq!(runtime.session_count(), 1);
}

#[tokio::test]
async fn a_session_whose_log_cannot_be_read_runs_and_queues_nothing_and_says_why() {
    let model = answers(2);
    let store = Arc::new(FlakyLog::default());
    let runtime = runtime(&model, store.clone());
    runtime.session("s").send("one").await.unwrap().await.unwrap();
    assert!(runtime.evict("s").unwrap());
    store.hooks.fail_reads.store(true, Ordering::SeqCst);

    let err = runtime.open("s").await.err().unwrap();
    assert!(err.to_string().contains("database unreachable"), "{err}");
    let broken = runtime.session("s");
    assert!(matches!(broken.send("two").await, Err(SessionError::Unavailable { .. })));
    assert!(matches!(broken.steer("hey").await, Err(SteerError::Unavailable { .. })));
    assert_eq!(model.calls(), 1);

    // Once the log answers again, the session comes back whole.
    store.hooks.fail_reads.store(false, Ordering::SeqCst);
    let back = runtime.open("s").await.unwrap();
    assert_eq!(back.history().len(), 2);
    assert_eq!(back.send("two").await.unwrap().await.unwrap(), "answer 1");
}
