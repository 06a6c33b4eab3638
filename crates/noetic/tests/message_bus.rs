//! The message bus: claim-or-steer routing, continuations for late messages, `/stop`, parallel limit,
//! transcription.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use noetic::agent::{Delivery, InboundMessage, MessageBus, Transcriber};
use noetic::prelude::*;
use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore};

/// An agent that signals when it starts, waits for a permit, then answers with its input — or, for a
/// continuation (empty input), with the last user message in the conversation.
fn waiting_agent(started: &Arc<Notify>, proceed: &Arc<Semaphore>) -> Step<String, String> {
    let (started, proceed) = (started.clone(), proceed.clone());
    Step::run("agent", move |input: String, ctx: StepContext| {
        let (started, proceed) = (started.clone(), proceed.clone());
        async move {
            started.notify_one();
            proceed.acquire().await.map_err(NoeticError::other)?.forget();
            let last = ctx.with_items(|items| {
                items
                    .iter()
                    .rev()
                    .find_map(|i| (i.role() == Some(Role::User)).then(|| i.text().unwrap_or("").to_owned()))
            });
            Ok(format!("answered {}", if input.is_empty() { last.unwrap_or_default() } else { input }))
        }
    })
    .build()
    .unwrap()
}

fn runtime_with(agent: Step<String, String>) -> Runtime {
    Runtime::builder().model(Arc::new(ScriptedModel::new([]))).agent(agent).build().unwrap()
}

#[tokio::test]
async fn an_idle_session_starts_a_turn_and_the_reply_comes_back() {
    let model = ScriptedModel::new([ModelResponse::text("hello there")]);
    let rt = Runtime::builder().model(Arc::new(model)).build().unwrap();
    let (bus, mut replies) = MessageBus::new(rt, 4);
    assert_eq!(bus.publish(InboundMessage::text("chat-1", "hi")).await.unwrap(), Delivery::Started);
    let reply = replies.recv().await.unwrap();
    assert_eq!(reply.session, "chat-1");
    assert!(!reply.continuation);
    assert_eq!(reply.result.unwrap(), "hello there");
}

#[tokio::test]
async fn a_message_for_a_busy_session_is_steered_into_the_running_turn() {
    let gate = Arc::new(Notify::new());
    let started = Arc::new(Notify::new());
    let (g, st) = (gate.clone(), started.clone());
    let tool = FnTool::builder("work", "Works.")
        .handler(move |_, _| {
            let (g, st) = (g.clone(), st.clone());
            async move {
                st.notify_one();
                g.notified().await;
                Ok(Value::Null)
            }
        })
        .build()
        .unwrap();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "work", json!({})), ("c2", "work", json!({}))]),
        ModelResponse::text("switched"),
    ]);
    let rt = Runtime::builder().model(Arc::new(model.clone())).tool(Arc::new(tool)).build().unwrap();
    let (bus, mut replies) = MessageBus::new(rt.clone(), 1);
    bus.publish(InboundMessage::text("s", "start")).await.unwrap();
    started.notified().await;
    let delivery = bus.publish(InboundMessage::text("s", "change of plan")).await.unwrap();
    assert!(matches!(delivery, Delivery::Steered(_)), "steering does not wait for a turn slot: {delivery:?}");
    gate.notify_one();
    let reply = replies.recv().await.unwrap();
    assert_eq!(reply.result.unwrap(), "switched");
    let history = rt.session("s").history();
    assert!(history.contains(&Item::user("change of plan")));
    assert!(
        history
            .iter()
            .any(|i| matches!(i, Item::ToolResult(r) if &*r.call_id == "c2" && r.content.starts_with("Skipped")))
    );
    assert!(replies.try_recv().is_err(), "no extra turn ran");
}

#[tokio::test]
async fn a_message_after_the_last_checkpoint_runs_as_a_continuation_before_release() {
    let (started, proceed) = (Arc::new(Notify::new()), Arc::new(Semaphore::new(0)));
    let rt = runtime_with(waiting_agent(&started, &proceed));
    let (bus, mut replies) = MessageBus::new(rt.clone(), 1);
    bus.publish(InboundMessage::text("s", "first")).await.unwrap();
    started.notified().await;
    // The agent has no checkpoint left: this message can only be handled by a continuation.
    assert!(matches!(bus.publish(InboundMessage::text("s", "late")).await.unwrap(), Delivery::Steered(_)));
    proceed.add_permits(2);
    let first = replies.recv().await.unwrap();
    assert_eq!((first.continuation, first.result.unwrap()), (false, "answered first".to_owned()));
    let late = replies.recv().await.unwrap();
    assert_eq!((late.continuation, late.result.unwrap()), (true, "answered late".to_owned()));
    let users: Vec<_> = rt.session("s").history().into_iter().filter(|i| i.role() == Some(Role::User)).collect();
    assert_eq!(users, vec![Item::user("late")], "the late message entered the conversation exactly once");
    assert_eq!(rt.session("s").queued(), 0);
}

#[tokio::test]
async fn stop_clears_the_queue_and_cancels_the_running_turn() {
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Notify::new());
    let (sc, st) = (saw_cancel.clone(), started.clone());
    let tool = FnTool::builder("long", "Runs long.")
        .handler(move |_, tcx| {
            let (sc, st) = (sc.clone(), st.clone());
            async move {
                st.notify_one();
                tcx.ctx.cancelled().await;
                sc.store(true, Ordering::SeqCst);
                Ok(Value::Null)
            }
        })
        .build()
        .unwrap();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "long", json!({}))]), ModelResponse::text("never")]);
    let rt = Runtime::builder().model(Arc::new(model.clone())).tool(Arc::new(tool)).build().unwrap();
    let (bus, mut replies) = MessageBus::new(rt.clone(), 1);
    bus.publish(InboundMessage::text("s", "go")).await.unwrap();
    started.notified().await;
    bus.publish(InboundMessage::text("s", "queued one")).await.unwrap();
    bus.publish(InboundMessage::text("s", "queued two")).await.unwrap();
    let stopped = bus.publish(InboundMessage::text("s", "/stop")).await.unwrap();
    assert_eq!(stopped, Delivery::Stopped { cleared: 2, cancelled: true });
    let reply = replies.recv().await.unwrap();
    assert!(reply.result.unwrap_err().is_cancelled());
    assert!(saw_cancel.load(Ordering::SeqCst), "the running tool saw the cancellation");
    assert_eq!(rt.session("s").queued(), 0);
    assert_eq!(model.calls(), 1, "no continuation ran after the stop");
    assert!(replies.try_recv().is_err());
}

#[tokio::test]
async fn sessions_run_in_parallel_only_up_to_the_limit() {
    let (started, proceed) = (Arc::new(Notify::new()), Arc::new(Semaphore::new(0)));
    let rt = runtime_with(waiting_agent(&started, &proceed));
    let (bus, mut replies) = MessageBus::new(rt.clone(), 1);
    bus.publish(InboundMessage::text("a", "for a")).await.unwrap();
    started.notified().await;
    // Accepted at once (the session is claimed), but its turn waits for the slot.
    assert_eq!(bus.publish(InboundMessage::text("b", "for b")).await.unwrap(), Delivery::Started);
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert!(!rt.session("b").is_busy(), "session b's turn waits for a turn slot");
    proceed.add_permits(1);
    assert_eq!(replies.recv().await.unwrap().session, "a");
    started.notified().await;
    assert!(rt.session("b").is_busy(), "b's turn took the freed slot");
    proceed.add_permits(1);
    assert_eq!(replies.recv().await.unwrap().result.unwrap(), "answered for b");
}

struct FakeTranscriber {
    fail: bool,
}

impl Transcriber for FakeTranscriber {
    fn transcribe<'a>(&'a self, message: &'a InboundMessage) -> BoxFuture<'a, Result<String, NoeticError>> {
        let fail = self.fail;
        let bytes = message.audio.as_ref().map(|a| a.len()).unwrap_or(0);
        Box::pin(async move {
            if fail { Err(NoeticError::other("codec not supported")) } else { Ok(format!("transcribed {bytes} bytes")) }
        })
    }
}

#[tokio::test]
async fn audio_is_transcribed_before_routing_and_a_failed_transcription_keeps_the_original() {
    for (fail, expected) in [(false, "transcribed 3 bytes"), (true, "[voice message]")] {
        let model = ScriptedModel::new([ModelResponse::text("ok")]);
        let rt = Runtime::builder().model(Arc::new(model.clone())).build().unwrap();
        let (bus, mut replies) = MessageBus::new(rt, 1);
        let bus = bus.with_transcriber(Arc::new(FakeTranscriber { fail }));
        let message = InboundMessage {
            session: "s".into(),
            text: "[voice message]".into(),
            audio: Some(Arc::from(&[1u8, 2, 3][..])),
        };
        bus.publish(message).await.unwrap();
        replies.recv().await.unwrap().result.unwrap();
        assert_eq!(model.requests()[0].history.as_slice(), &[Item::user(expected)]);
    }
}
