//! A session's events are numbered and logged (SPEC 7.1): a follower resumes after the last number it saw, is
//! told explicitly what the bounded log no longer holds, catches up when it falls behind, and a subscriber that
//! arrives mid-turn sees the rest of the turn.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use noetic::prelude::*;
use noetic::{EventFollower, ExecutionId, Followed};
use serde_json::json;

fn echo() -> Arc<dyn Tool> {
    Arc::new(FnTool::builder("echo", "Echoes.").handler(|a, _| async move { Ok(a) }).build().unwrap())
}

fn tool_then_answer() -> [ModelResponse; 2] {
    [ModelResponse::tool_calls([("c1", "echo", json!({"x": 1}))]), ModelResponse::text("done")]
}

/// Everything the follower has without waiting for a new live event: (seq, type) pairs and gaps.
async fn drain(follower: &mut EventFollower, until_seq: u64) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        match follower.next().await {
            Some(Followed::Event(e)) => {
                let name = serde_json::to_value(&e).unwrap()["type"].as_str().unwrap().to_owned();
                out.push(format!("{} {name}", e.seq));
                if e.seq >= until_seq {
                    return out;
                }
            }
            Some(Followed::Gap { from, to }) => out.push(format!("gap {from}..={to}")),
            None => return out,
        }
    }
}

fn seqs(lines: &[String]) -> Vec<u64> {
    lines.iter().filter_map(|l| l.split(' ').next()?.parse().ok()).collect()
}

#[tokio::test]
async fn session_events_are_numbered_one_by_one_and_stamped_with_their_turn() {
    let model = ScriptedModel::new(tool_then_answer());
    let rt = Runtime::builder().model(Arc::new(model)).tool(echo()).build().unwrap();
    let session = rt.session("s");
    let mut events = session.subscribe();
    session.send("go").await.unwrap().await.unwrap();
    let mut seen = Vec::new();
    while let Ok(e) = events.try_recv() {
        seen.push((e.seq, e.turn));
    }
    assert!(seen.len() > 5, "{seen:?}");
    let expected: Vec<(u64, Option<u64>)> = (1..=seen.len() as u64).map(|n| (n, Some(1))).collect();
    assert_eq!(seen, expected);
    assert_eq!(session.last_event_seq(), seen.len() as u64);
}

#[tokio::test]
async fn a_follower_resumes_after_the_last_number_it_saw_without_losing_or_repeating_events() {
    let model = ScriptedModel::new(tool_then_answer());
    model.push(ModelResponse::text("again"));
    let rt = Runtime::builder().model(Arc::new(model)).tool(echo()).build().unwrap();
    let session = rt.session("s");
    let mut first = session.follow(0);
    session.send("go").await.unwrap().await.unwrap();
    let end_of_turn_one = session.last_event_seq();
    let seen = drain(&mut first, end_of_turn_one).await;
    assert_eq!(seqs(&seen), (1..=end_of_turn_one).collect::<Vec<_>>());
    drop(first);

    // The client went away; turn 2 ran meanwhile; it comes back with the last number it saw.
    session.send("more").await.unwrap().await.unwrap();
    let end_of_turn_two = session.last_event_seq();
    let mut resumed = session.follow(end_of_turn_one);
    let seen = drain(&mut resumed, end_of_turn_two).await;
    assert_eq!(seqs(&seen), (end_of_turn_one + 1..=end_of_turn_two).collect::<Vec<_>>());
    assert!(seen[0].ends_with("turn_started"), "{seen:?}");
    assert!(seen.last().unwrap().ends_with("turn_completed"), "{seen:?}");
}

fn emit_n(sink: &EventSink, n: usize) {
    let id = ExecutionId::new();
    for i in 0..n {
        sink.emit(id, || EventKind::SteeringInjected { session: Arc::from("s"), count: i });
    }
}

#[tokio::test]
async fn a_follower_is_told_exactly_which_events_the_bounded_log_no_longer_holds() {
    let sink = EventSink::with_log(64, 3);
    emit_n(&sink, 10);
    let mut follower = sink.follow(2).unwrap();
    assert_eq!(
        drain(&mut follower, 10).await,
        ["gap 3..=7", "8 steering_injected", "9 steering_injected", "10 steering_injected"]
    );
    let mut from_start = sink.follow(0).unwrap();
    assert_eq!(drain(&mut from_start, 10).await[0], "gap 1..=7");
}

#[tokio::test]
async fn a_follower_that_falls_behind_the_live_channel_catches_up_from_the_log() {
    // The live channel holds 2 events per receiver; the log holds 100.
    let sink = EventSink::with_log(2, 100);
    let mut follower = sink.follow(0).unwrap();
    emit_n(&sink, 10);
    let seen = drain(&mut follower, 10).await;
    assert_eq!(seqs(&seen), (1..=10).collect::<Vec<_>>(), "nothing lost, nothing twice: {seen:?}");
    assert!(!seen.iter().any(|l| l.starts_with("gap")), "{seen:?}");
}

#[tokio::test]
async fn a_follower_that_falls_behind_further_than_the_log_gets_a_gap_then_the_rest() {
    let sink = EventSink::with_log(2, 3);
    let mut follower = sink.follow(0).unwrap();
    emit_n(&sink, 10);
    assert_eq!(
        drain(&mut follower, 10).await,
        ["gap 1..=7", "8 steering_injected", "9 steering_injected", "10 steering_injected"]
    );
}

#[tokio::test]
async fn a_number_past_the_newest_event_follows_from_the_next_live_event() {
    let sink = EventSink::with_log(8, 8);
    emit_n(&sink, 2);
    // A client holding a number from an older log (a restarted process) still gets everything new.
    let mut follower = sink.follow(500).unwrap();
    emit_n(&sink, 1);
    assert_eq!(drain(&mut follower, 3).await, ["3 steering_injected"]);
}

#[tokio::test]
async fn a_subscriber_arriving_mid_turn_sees_the_rest_of_the_turn() {
    let model = ScriptedModel::new([]);
    let held = model.push_held(ModelResponse::text("late answer"));
    let rt = Runtime::builder().model(Arc::new(model)).build().unwrap();
    let session = rt.session("s");
    let turn = session.send("go").await.unwrap();
    held.entered().await;
    let mut events = session.subscribe();
    held.release();
    turn.await.unwrap();
    let mut names = Vec::new();
    while let Ok(e) = events.try_recv() {
        assert_eq!(e.turn, Some(1));
        names.push(serde_json::to_value(&e).unwrap()["type"].as_str().unwrap().to_owned());
    }
    assert!(names.contains(&"model_call_completed".to_owned()), "{names:?}");
    assert_eq!(names.last().map(String::as_str), Some("turn_completed"), "{names:?}");
}
