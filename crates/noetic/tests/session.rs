//! Sessions: turns, persistent history, one turn at a time, cancellation, events.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use noetic::agent::SessionError;
use noetic::prelude::*;
use noetic::testing::{EventCollector, transcript};
use serde_json::{Value, json};

fn runtime(model: &ScriptedModel, tools: Vec<Arc<dyn Tool>>) -> Runtime {
    Runtime::builder().model(Arc::new(model.clone())).tools(tools).build().unwrap()
}

#[tokio::test]
async fn history_persists_across_turns_and_the_model_sees_it() {
    let model = ScriptedModel::new([ModelResponse::text("Hi Ada."), ModelResponse::text("You are Ada.")]);
    let rt = runtime(&model, vec![]);
    let session = rt.session("s1");
    assert_eq!(session.send("I am Ada").await.unwrap().await.unwrap(), "Hi Ada.");
    assert_eq!(session.send("Who am I?").await.unwrap().await.unwrap(), "You are Ada.");
    let second = &model.requests()[1];
    assert_eq!(
        transcript(second.history.as_slice()),
        vec!["User: I am Ada", "Assistant: Hi Ada.", "User: Who am I?"],
        "the second call carries the first turn"
    );
    assert_eq!(session.history().len(), 4);
}

#[tokio::test]
async fn sessions_with_different_keys_do_not_share_history() {
    let model = ScriptedModel::new([ModelResponse::text("one"), ModelResponse::text("two")]);
    let rt = runtime(&model, vec![]);
    rt.session("a").send("for a").await.unwrap().await.unwrap();
    rt.session("b").send("for b").await.unwrap().await.unwrap();
    assert_eq!(transcript(model.requests()[1].history.as_slice()), vec!["User: for b"]);
    assert_eq!(rt.session("a").history().len(), 2, "the same key gives the same session");
    assert_eq!(rt.session_count(), 2);
}

#[tokio::test]
async fn a_second_send_while_a_turn_runs_is_refused_as_busy() {
    let model = ScriptedModel::new([]);
    let held = model.push_held(ModelResponse::text("done"));
    let rt = runtime(&model, vec![]);
    let session = rt.session("s");
    let turn = session.send("first").await.unwrap();
    held.entered().await;
    assert!(session.is_busy());
    assert_eq!(session.send("second").await.err(), Some(SessionError::Busy { session: "s".into() }));
    held.release();
    assert_eq!(turn.await.unwrap(), "done");
    session.idle().await;
    assert!(!session.is_busy());
}

#[tokio::test]
async fn cancelling_a_turn_reaches_the_running_tool_and_keeps_the_history_well_formed() {
    let started = Arc::new(tokio::sync::Notify::new());
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let (s, c) = (started.clone(), saw_cancel.clone());
    let slow = FnTool::builder("slow", "Takes forever.")
        .handler(move |_, tcx| {
            let (s, c) = (s.clone(), c.clone());
            async move {
                s.notify_one();
                tcx.ctx.cancelled().await;
                c.store(true, Ordering::SeqCst);
                Ok(Value::Null)
            }
        })
        .build()
        .unwrap();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "slow", json!({})), ("c2", "slow", json!({}))]),
        ModelResponse::text("after the cancel"),
    ]);
    let rt = runtime(&model, vec![Arc::new(slow)]);
    let session = rt.session("s");
    let turn = session.send("go").await.unwrap();
    started.notified().await;
    assert!(session.cancel("user pressed stop"));
    let err = turn.await.unwrap_err();
    assert!(matches!(err, NoeticError::Cancelled { reason: Some(ref r) } if r == "user pressed stop"), "{err:?}");
    assert!(saw_cancel.load(Ordering::SeqCst), "the tool observed the cancellation");
    let history = session.history();
    let results: Vec<&str> =
        history.iter().filter_map(|i| if let Item::ToolResult(r) = i { Some(&*r.call_id) } else { None }).collect();
    assert_eq!(results, vec!["c1", "c2"], "every call has exactly one result");
    assert!(!session.is_busy());
    assert_eq!(session.send("again").await.unwrap().await.unwrap(), "after the cancel", "the session is usable again");
}

#[tokio::test]
async fn turn_cancel_handle_cancels_the_turn() {
    let model = ScriptedModel::new([]);
    let held = model.push_held(ModelResponse::text("never seen"));
    let rt = runtime(&model, vec![]);
    let turn = rt.session("s").send("x").await.unwrap();
    held.entered().await;
    turn.cancel();
    assert!(turn.await.unwrap_err().is_cancelled());
}

#[tokio::test]
async fn the_session_event_stream_shows_turn_model_and_tool_events_in_order() {
    let echo = FnTool::builder("echo", "Echoes.").handler(|a, _| async move { Ok(a) }).build().unwrap();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "echo", json!({"x": 1}))]), ModelResponse::text("done")]);
    let rt = Runtime::builder().model(Arc::new(model.clone())).tool(Arc::new(echo)).stream(true).build().unwrap();
    let session = rt.session("s");
    let mut events = EventCollector::of(&session);
    session.send("go").await.unwrap().await.unwrap();
    let seen: Vec<String> = events.types().into_iter().filter(|name| !name.starts_with("step_")).collect();
    assert_eq!(
        seen,
        vec![
            "turn_started",
            "model_call_started",
            "model_call_completed",
            "tool_call_started",
            "tool_call_completed",
            "model_call_started",
            "model_text_delta",
            "model_call_completed",
            "turn_completed"
        ]
    );
}

#[tokio::test]
async fn a_turn_names_its_execution_the_one_its_events_and_steering_ledger_are_kept_under() {
    let model = ScriptedModel::new([ModelResponse::text("first"), ModelResponse::text("second")]);
    let layer = steering(SteeringConfig::new([])).unwrap();
    let rt = Runtime::builder().model(Arc::new(model)).layer(layer.clone() as Arc<dyn MemoryLayer>).build().unwrap();
    let session = rt.session("s");
    let mut events = EventCollector::of(&session);
    let first = session.send("one").await.unwrap();
    let id = first.execution_id();
    first.await.unwrap();
    let second = session.send("two").await.unwrap();
    assert_ne!(second.execution_id(), id, "each turn is an execution of its own");
    second.await.unwrap();

    let started: Vec<_> = events
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::TurnStarted { .. }))
        .map(|e| e.execution_id)
        .collect();
    assert_eq!(started.first(), Some(&id), "the turn_started event carries the turn's execution id");
    let ledger = layer.ledger(id);
    assert!(!ledger.is_empty(), "the steering layer recorded the first turn under its id");
    let state: noetic::steering::SteeringState = rt.get_layer_state(id, "steering").unwrap();
    assert_eq!(state.ledger, ledger, "the runtime finds the same ledger by the id");
}

#[tokio::test]
async fn a_failed_turn_reports_the_error_and_keeps_what_was_said() {
    let model = ScriptedModel::new([]);
    model.push_error(NoeticError::ModelFailed {
        message: "server down".into(),
        status: Some(503),
        raw: None,
        retryable: true,
        source: None,
    });
    let rt = runtime(&model, vec![]);
    let session = rt.session("s");
    let err = session.send("hello").await.unwrap().await.unwrap_err();
    assert!(err.to_string().contains("server down"), "{err}");
    assert_eq!(transcript(&session.history()), vec!["User: hello"], "the user's message is not lost");
}

#[test]
fn a_runtime_needs_a_model() {
    let err = Runtime::builder().build().err().unwrap();
    assert_eq!(err.code, ConfigCode::NoModelProvider);
}
