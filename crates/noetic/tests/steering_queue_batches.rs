//! The live steering queue (seed 3): a message steered during the first, middle or last tool of a batch skips exactly
//! the tools after it; one steered during a denied tool still stops the next; messages keep their order across
//! requests; steering at the round limit gets one more round.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use noetic::agent::{BatchPolicy, SKIPPED_RESULT};
use noetic::prelude::*;
use noetic::testing::{Counter, Gate, gated_tool, transcript};
use serde_json::json;

fn three_calls() -> ModelResponse {
    ModelResponse::tool_calls([("c1", "first", json!({})), ("c2", "second", json!({})), ("c3", "third", json!({}))])
}

/// A runtime whose three tools are each gated, so a test can steer during any one of them.
fn three_gated(policy: BatchPolicy) -> (ScriptedModel, Runtime, Vec<Gate>) {
    let model = ScriptedModel::new([three_calls(), ModelResponse::text("done")]);
    let gates: Vec<Gate> = (0..3).map(|_| Gate::new()).collect();
    let tools = ["first", "second", "third"].iter().zip(&gates).map(|(n, g)| g.tool(n).unwrap()).collect::<Vec<_>>();
    let rt = Runtime::builder().model(Arc::new(model.clone())).tools(tools).batch_policy(policy).build().unwrap();
    (model, rt, gates)
}

/// Runs of all the gated tools together.
fn runs(gates: &[Gate]) -> usize {
    gates.iter().map(Gate::runs).sum()
}

#[tokio::test]
async fn steering_during_the_middle_tool_skips_only_the_later_ones() {
    let (model, rt, gates) = three_gated(BatchPolicy::SkipRemaining);
    let session = rt.session("s");
    let turn = session.send("go").await.unwrap();
    gates[0].started().await;
    gates[0].release();
    gates[1].started().await;
    session.steer("new plan").await.unwrap();
    gates[1].release();
    turn.await.unwrap();
    assert_eq!(runs(&gates), 2);
    assert_eq!(
        &transcript(model.requests()[1].history.as_slice())[4..],
        &[
            "result c1 first done".to_owned(),
            "result c2 second done".into(),
            format!("result c3 (error) {SKIPPED_RESULT}"),
            "User: new plan".into()
        ]
    );
}

#[tokio::test]
async fn steering_during_the_last_tool_skips_nothing_and_is_injected() {
    let (model, rt, gates) = three_gated(BatchPolicy::SkipRemaining);
    let session = rt.session("s");
    let turn = session.send("go").await.unwrap();
    for gate in &gates[..2] {
        gate.started().await;
        gate.release();
    }
    gates[2].started().await;
    session.steer("after all three").await.unwrap();
    gates[2].release();
    turn.await.unwrap();
    assert_eq!(runs(&gates), 3);
    let second = transcript(model.requests()[1].history.as_slice());
    assert!(second.iter().all(|l| !l.contains("Skipped")));
    assert_eq!(second.last().unwrap(), "User: after all three");
}

#[tokio::test]
async fn steering_during_a_tool_that_steering_denies_still_stops_the_next_tool() {
    let counter = Counter::new();
    let session_slot: Arc<std::sync::Mutex<Option<Session>>> = Arc::default();
    let slot = session_slot.clone();
    // The rule denies "first"; while it decides, the user types (the rule steers on their behalf).
    let rule = SteeringRule::predicate("deny-first", [Hook::BeforeToolCall], move |p| match p.tool_call() {
        Some(c) if c.name == "first" => {
            if let Some(s) = slot.lock().unwrap().as_ref() {
                // A predicate is synchronous; steering with no store completes at once.
                futures::FutureExt::now_or_never(s.steer("never mind")).unwrap().unwrap();
            }
            SteeringDecision::deny("first is not allowed")
        }
        _ => SteeringDecision::allow(),
    });
    let model = ScriptedModel::new([three_calls(), ModelResponse::text("ok")]);
    let rt = Runtime::builder()
        .model(Arc::new(model.clone()))
        .tools(["first", "second", "third"].map(|name| counter.tool(name, json!(format!("{name} done"))).unwrap()))
        .layer(steering(SteeringConfig::new([rule])).unwrap() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    let session = rt.session("s");
    *session_slot.lock().unwrap() = Some(session.clone());
    session.send("go").await.unwrap().await.unwrap();
    assert_eq!(counter.count(), 0, "first denied, second and third skipped");
    assert_eq!(
        &transcript(model.requests()[1].history.as_slice())[4..],
        &[
            "result c1 (error) Steering denied: first is not allowed".to_owned(),
            format!("result c2 (error) {SKIPPED_RESULT}"),
            format!("result c3 (error) {SKIPPED_RESULT}"),
            "User: never mind".into()
        ]
    );
}

#[tokio::test]
async fn two_messages_in_one_at_a_time_mode_reach_two_successive_requests_in_order() {
    let model = ScriptedModel::new([]);
    let held = model.push_held(ModelResponse::text("a0"));
    model.push(ModelResponse::text("a1"));
    model.push(ModelResponse::text("a2"));
    let rt = Runtime::builder().model(Arc::new(model.clone())).build().unwrap();
    let session = rt.session("s");
    let turn = session.send("q").await.unwrap();
    held.entered().await;
    session.steer("m1").await.unwrap();
    session.steer("m2").await.unwrap();
    held.release();
    assert_eq!(turn.await.unwrap(), "a2");
    let last_user = |i: usize| transcript(model.requests()[i].history.as_slice()).last().cloned().unwrap();
    assert_eq!((last_user(1), last_user(2)), ("User: m1".to_owned(), "User: m2".to_owned()));
}

#[tokio::test]
async fn steering_at_the_round_limit_gets_one_more_round() {
    let (tool, gate) = gated_tool("first").unwrap();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "first", json!({}))]),
        ModelResponse::text("answered the steer"),
    ]);
    let agent = Step::llm("assistant", "m").max_rounds(1).build().unwrap();
    let rt = Runtime::builder().model(Arc::new(model.clone())).tool(tool).agent(agent).build().unwrap();
    let session = rt.session("s");
    let turn = session.send("go").await.unwrap();
    gate.started().await;
    session.steer("one more thing").await.unwrap();
    gate.release();
    assert_eq!(turn.await.unwrap(), "answered the steer", "the steer bought a round past max_rounds = 1");
}
