//! The message bus claims a session when it accepts a message, also while the turn waits for a slot (SPEC 4.8),
//! and `publish` never blocks without bound: not on turn slots, not on unread replies, not on a hung
//! transcription.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use noetic::agent::{BusReplies, BusReply, Delivery, InboundMessage, MessageBus, Transcriber};
use noetic::prelude::*;
use noetic::testing::{Gate, gated_tool, until_within};
use serde_json::json;
use tokio::time::timeout;

/// Publishing must return well within this (paused time: a publish that waits for anything times out).
const BOUND: Duration = Duration::from_secs(1);

async fn publish(bus: &MessageBus, session: &str, text: &str) -> Delivery {
    timeout(BOUND, bus.publish(InboundMessage::text(session, text)))
        .await
        .unwrap_or_else(|_| panic!("publishing {text:?} to {session:?} blocked"))
        .unwrap()
}

/// A runtime whose tool `work` is gated; the model's answers are `script`.
fn held_runtime(script: Vec<ModelResponse>) -> (Runtime, ScriptedModel, Gate) {
    let (tool, gate) = gated_tool("work").unwrap();
    let model = ScriptedModel::new(script);
    let rt = Runtime::builder().model(Arc::new(model.clone())).tool(tool).build().unwrap();
    (rt, model, gate)
}

async fn two_replies(replies: &mut BusReplies) -> (BusReply, BusReply) {
    let (x, y) = (replies.recv().await.unwrap(), replies.recv().await.unwrap());
    if x.session == "a" { (x, y) } else { (y, x) }
}

fn users(history: &[Item]) -> Vec<&str> {
    history.iter().filter(|i| i.role() == Some(Role::User)).filter_map(|i| i.text()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_message_waiting_for_a_turn_slot_owns_its_session_and_later_messages_steer_into_that_turn() {
    let script = vec![
        ModelResponse::tool_calls([("c1", "work", json!({}))]),
        ModelResponse::text("a done"),
        ModelResponse::text("b done"),
    ];
    let (rt, model, gate) = held_runtime(script);
    let (bus, mut replies) = MessageBus::new(rt.clone(), 1);
    assert_eq!(publish(&bus, "a", "start a").await, Delivery::Started);
    gate.started().await;
    assert_eq!(publish(&bus, "b", "first").await, Delivery::Started, "accepted while a holds the only slot");
    assert!(matches!(publish(&bus, "b", "second").await, Delivery::Steered(_)), "steered into b's waiting turn");
    gate.release();
    let (a, b) = two_replies(&mut replies).await;
    assert_eq!(a.result.unwrap(), "a done");
    assert_eq!((b.continuation, b.result.unwrap()), (false, "b done".to_owned()));
    assert_eq!(model.calls(), 3, "one turn for b, no second turn");
    assert_eq!(users(model.requests()[2].history.as_slice()), vec!["first", "second"], "both reached b's model call");
    assert_eq!(users(&rt.session("b").history()), vec!["first", "second"]);
    assert!(replies.try_recv().is_err(), "no other turn ran");
}

#[tokio::test(start_paused = true)]
async fn stop_cancels_a_turn_still_waiting_for_a_slot_before_it_reaches_the_model() {
    let script = vec![
        ModelResponse::tool_calls([("c1", "work", json!({}))]),
        ModelResponse::text("a done"),
        ModelResponse::text("b again"),
    ];
    let (rt, model, gate) = held_runtime(script);
    let (bus, mut replies) = MessageBus::new(rt.clone(), 1);
    publish(&bus, "a", "start a").await;
    gate.started().await;
    assert_eq!(publish(&bus, "b", "first").await, Delivery::Started);
    assert!(matches!(publish(&bus, "b", "second").await, Delivery::Steered(_)));
    assert_eq!(publish(&bus, "b", "/stop").await, Delivery::Stopped { cleared: 1, cancelled: true });
    let stopped = replies.recv().await.unwrap();
    assert_eq!(stopped.session, "b");
    assert!(stopped.result.unwrap_err().is_cancelled(), "b's waiting turn reports that it was stopped");
    gate.release();
    assert_eq!(replies.recv().await.unwrap().result.unwrap(), "a done");
    assert_eq!(model.calls(), 2, "the stopped turn never reached the model");
    assert!(rt.session("b").history().is_empty());
    assert_eq!(rt.session("b").queued(), 0);
    // The session is free again: a new message starts a new turn.
    assert_eq!(publish(&bus, "b", "again").await, Delivery::Started);
    assert_eq!(replies.recv().await.unwrap().result.unwrap(), "b again");
    assert_eq!(users(&rt.session("b").history()), vec!["again"]);
}

#[tokio::test(start_paused = true)]
async fn publish_never_blocks_when_nobody_reads_replies_and_the_oldest_replies_are_dropped() {
    let agent = Step::run("echo", |input: String, _| async move { Ok(format!("answered {input}")) }).build().unwrap();
    let rt = Runtime::builder().model(Arc::new(ScriptedModel::new([]))).agent(agent).build().unwrap();
    let (bus, mut replies) = MessageBus::with_reply_capacity(rt, 2, 8);
    const MESSAGES: usize = 3000;
    for i in 0..MESSAGES {
        assert_eq!(publish(&bus, &format!("s{i}"), &format!("m{i}")).await, Delivery::Started);
    }
    let dropped = (MESSAGES - 8) as u64;
    until_within(100_000, "every reply was sent", || replies.dropped() == dropped).await.unwrap();
    assert_eq!((replies.dropped(), replies.len()), (dropped, 8), "the newest 8 replies are kept");
    let kept: Vec<BusReply> = (0..8).map(|_| replies.try_recv().unwrap()).collect();
    assert_eq!(kept[0].dropped_before, dropped, "the first reply read says how many were dropped before it");
    assert!(kept[1..].iter().all(|r| r.dropped_before == 0));
    let mut answers: Vec<String> = kept.into_iter().map(|r| r.result.unwrap()).collect();
    answers.sort();
    let mut expected: Vec<String> = (MESSAGES - 8..MESSAGES).map(|i| format!("answered m{i}")).collect();
    expected.sort();
    assert_eq!(answers, expected);
    // Nothing is stuck: the bus still routes and replies.
    assert_eq!(publish(&bus, "late", "hello").await, Delivery::Started);
    assert_eq!(replies.recv().await.unwrap().result.unwrap(), "answered hello");
}

struct HungTranscriber;

impl Transcriber for HungTranscriber {
    fn transcribe<'a>(&'a self, _: &'a InboundMessage) -> BoxFuture<'a, Result<String, NoeticError>> {
        Box::pin(std::future::pending())
    }
}

#[tokio::test(start_paused = true)]
async fn a_hung_transcription_gives_up_after_its_timeout_and_routes_the_original_text() {
    let model = ScriptedModel::new([ModelResponse::text("ok")]);
    let rt = Runtime::builder().model(Arc::new(model.clone())).build().unwrap();
    let (bus, mut replies) = MessageBus::new(rt, 1);
    let bus = bus.with_transcriber(Arc::new(HungTranscriber)).with_transcription_timeout(Duration::from_secs(5));
    let message = InboundMessage { session: "s".into(), text: "[voice]".into(), audio: Some(Arc::from(&[1u8][..])) };
    let start = tokio::time::Instant::now();
    assert_eq!(bus.publish(message).await.unwrap(), Delivery::Started);
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    replies.recv().await.unwrap().result.unwrap();
    assert_eq!(model.requests()[0].history.as_slice(), &[Item::user("[voice]")]);
}
