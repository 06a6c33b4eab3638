//! `POST /api/sessions/{key}/compact` (#32 item 3): the turns before the last one are folded into a summary in
//! what later requests send; the conversation keeps every item; a running turn is not compacted under it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use noetic::agent::Runtime;
use noetic::model::{Item, ModelResponse};
use noetic::testing::{ScriptedModel, gated_tool};
use noetic_server::ServerConfig;
use serde_json::json;
use support::Running;

const LONG: Duration = Duration::from_secs(300);

fn summarising() -> ScriptedModel {
    ScriptedModel::responder(|request| {
        Ok(if request.instructions.as_deref().is_some_and(|i| i.starts_with("You compact a conversation")) {
            ModelResponse::text("SUMMARY")
        } else {
            ModelResponse::text("ok")
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compacting_a_session_folds_the_turns_before_the_last_one_and_keeps_the_conversation() {
    let model = summarising();
    let s = Running::start(Runtime::builder().model(Arc::new(model.clone())), ServerConfig::default(), LONG).await;
    let (status, nothing) = s.post("/api/sessions/c/compact", json!({})).await;
    assert_eq!((status, nothing), (200, json!({ "compacted": false })));
    let mut events = s.events("c", 0, false).await;
    for text in ["one", "two", "three"] {
        s.say("c", text).await;
        events.until("turn_completed").await;
    }
    let (status, done) = s.post("/api/sessions/c/compact", json!({ "model": "m" })).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        (done["compacted"].clone(), done["folded"].clone(), done["upto"].clone()),
        (json!(true), json!(4), json!(4))
    );
    s.say("c", "four").await;
    events.until("turn_completed").await;
    let last = model.requests().last().cloned().unwrap();
    let sent: Vec<&str> = last.history.iter().filter_map(Item::text).collect();
    assert!(sent[0].contains("SUMMARY") && sent[1..] == ["three", "ok", "four"], "{sent:?}");
    let (_, session) = s.get("/api/sessions/c").await;
    assert_eq!(session["history"].as_array().unwrap().len(), 8, "the conversation keeps every message");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_a_running_turn_is_not_compacted() {
    let (tool, gate) = gated_tool("build").unwrap();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "build", json!({}))]), ModelResponse::text("built")]);
    let s = Running::start(Runtime::builder().model(Arc::new(model)).tool(tool), ServerConfig::default(), LONG).await;
    s.say("b", "build").await;
    gate.started().await;
    let (status, error) = s.post("/api/sessions/b/compact", json!({})).await;
    assert_eq!(status, 409);
    assert_eq!(error["error"]["code"], "busy");
    gate.release();
}
