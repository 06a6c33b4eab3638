//! Event numbers of a session kept in a log (#30 behaviour 5, SPEC 7.1): they never repeat or go back, across
//! restarts and resumes, and a follower that reconnects to another process gets every durable event after the last
//! one it saw — from the log — then an explicit gap for what it can no longer get, then live events.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use noetic::agent::log::MemoryLogStore;
use noetic::context::{EventFollower, Followed};
use noetic::model::{ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::testing::{Counter, Gate};
use serde_json::json;

fn runtime(model: &ScriptedModel, store: &MemoryLogStore, tools: Vec<Arc<dyn Tool>>) -> Runtime {
    Runtime::builder().model(Arc::new(model.clone())).tools(tools).log_store(Arc::new(store.clone())).build().unwrap()
}

fn call(id: &str, tool: &str) -> ModelResponse {
    ModelResponse::tool_calls([(id, tool, json!({}))])
}

/// Reads a follower until `done` says the last thing read ends what the test waits for.
async fn read_until(follower: &mut EventFollower, done: impl Fn(&Followed) -> bool) -> Vec<Followed> {
    let mut read = Vec::new();
    loop {
        let next = follower.next().await.expect("the follower ended");
        let end = done(&next);
        read.push(next);
        if end {
            return read;
        }
    }
}

fn ends_turn(f: &Followed) -> bool {
    matches!(f, Followed::Event(e) if matches!(e.kind, EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. }))
}

fn numbers(read: &[Followed]) -> Vec<u64> {
    read.iter()
        .map(|f| match f {
            Followed::Event(e) => e.seq,
            Followed::Gap { to, .. } => *to,
        })
        .collect()
}

fn kinds(read: &[Followed]) -> Vec<String> {
    read.iter()
        .map(|f| match f {
            Followed::Event(e) => noetic::testing::event_type(e),
            Followed::Gap { .. } => "gap".to_owned(),
        })
        .collect()
}

#[tokio::test]
async fn event_numbers_go_on_rising_after_a_restart_and_a_reconnecting_follower_gets_the_durable_events_it_missed() {
    let store = MemoryLogStore::new();
    let counter = Counter::new();
    let model = ScriptedModel::new([call("c1", "t"), ModelResponse::text("one")]);
    let first = runtime(&model, &store, vec![counter.tool("t", json!(1)).unwrap()]);
    let session = first.open("s").await.unwrap();
    let mut follower = session.follow(0);
    session.send("go").await.unwrap().await.unwrap();
    let seen = read_until(&mut follower, ends_turn).await;
    let numbers_seen = numbers(&seen);
    assert!(numbers_seen.windows(2).all(|w| w[0] < w[1]), "rising: {numbers_seen:?}");
    // The client saw events up to the tool call's start, then lost its connection; the process restarts.
    let started = seen
        .iter()
        .position(|f| matches!(f, Followed::Event(e) if matches!(e.kind, EventKind::ToolCallStarted { .. })))
        .unwrap();
    let last_seen = numbers_seen[started];
    drop(first);

    let model2 = ScriptedModel::new([ModelResponse::text("two")]);
    let second = runtime(&model2, &store, vec![counter.tool("t", json!(1)).unwrap()]);
    let session = second.open("s").await.unwrap();
    let mut reconnected = session.follow(last_seen);
    session.send("again").await.unwrap().await.unwrap();
    let got = read_until(
        &mut reconnected,
        |f| matches!(f, Followed::Event(e) if matches!(e.kind, EventKind::TurnCompleted { turn: 2, .. })),
    )
    .await;
    let got_numbers = numbers(&got);
    let events: Vec<u64> = got_numbers[1..].to_vec();
    assert!(events.windows(2).all(|w| w[0] < w[1]), "the events' numbers rise: {got_numbers:?}");
    assert!(events[0] > last_seen, "nothing the client saw comes again");
    let got_kinds = kinds(&got);
    assert_eq!(
        &got_kinds[..4],
        ["gap", "tool_call_completed", "model_call_completed", "turn_completed"],
        "what the first process only held in memory is an explicit gap; its durable events come from the log: {got_kinds:?}"
    );
    assert_eq!(got_kinds[4], "turn_started", "then the second turn, live");
    let second_turn = got
        .iter()
        .find_map(|f| match f {
            Followed::Event(e) if matches!(e.kind, EventKind::TurnStarted { turn: 2, .. }) => Some(e.seq),
            _ => None,
        })
        .unwrap();
    assert!(second_turn > *numbers_seen.last().unwrap(), "the second turn's numbers are above every first-process one");
}

#[tokio::test]
async fn a_follower_reconnecting_after_a_crash_gets_the_resumed_turn_from_its_start() {
    let store = MemoryLogStore::new();
    let gate = Gate::new();
    let model = ScriptedModel::new([call("c1", "slow")]);
    let first = runtime(&model, &store, vec![gate.tool("slow").unwrap()]);
    let session = first.open("s").await.unwrap();
    let mut follower = session.follow(0);
    let _turn = session.send("go").await.unwrap();
    gate.started().await;
    let seen = read_until(
        &mut follower,
        |f| matches!(f, Followed::Event(e) if matches!(e.kind, EventKind::ToolCallStarted { .. })),
    )
    .await;
    let last_seen = *numbers(&seen).last().unwrap();
    let crashed = store.copy();

    let model2 = ScriptedModel::new([ModelResponse::text("done")]);
    let second = runtime(&model2, &crashed, vec![Gate::new().tool("slow").unwrap()]);
    let session = second.open("s").await.unwrap();
    let mut reconnected = session.follow(last_seen);
    session.resume().await.unwrap().unwrap().await.unwrap();
    let got = read_until(&mut reconnected, ends_turn).await;
    let got_kinds = kinds(&got);
    let resumed = got_kinds.iter().position(|k| k == "turn_started").expect("the resumed turn's start is not missed");
    assert!(got_kinds[resumed..].contains(&"tool_call_completed".to_owned()), "{got_kinds:?}");
    assert_eq!(got_kinds.last().map(String::as_str), Some("turn_completed"));
    assert_eq!(got_kinds[0], "gap", "the first process's events after the last one seen are gone: {got_kinds:?}");
    let got_numbers = numbers(&got[1..]);
    assert!(got_numbers.windows(2).all(|w| w[0] < w[1]) && got_numbers[0] > last_seen, "{got_numbers:?}");
    gate.release();
}
