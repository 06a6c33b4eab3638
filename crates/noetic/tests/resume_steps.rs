//! An agent of several `llm` steps resumes at the step it was in (SPEC 6.3; #30 behaviour 3): a finished step
//! gives its answer back without asking the model, the step that was running continues where it was.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use noetic::agent::{MemoryStore, SessionStore};
use noetic::model::{ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::testing::{Gate, transcript};
use noetic::turn::INTERRUPTED_RESULT;
use serde_json::json;

/// Plan, then act on the plan: one pass of a loop of two `llm` steps.
fn plan_then_act() -> Step<String, String> {
    let plan = Step::llm("plan", "scripted").instructions("Plan the work.").build().unwrap();
    let act = Step::llm("act", "scripted").instructions("Do what the plan says.").build().unwrap();
    Step::loop_("agent", [plan, act]).until(until::max_steps(1)).build().unwrap()
}

fn runtime(model: &ScriptedModel, store: Arc<dyn SessionStore>, gate: &Gate) -> Runtime {
    Runtime::builder()
        .model(Arc::new(model.clone()))
        .agent(plan_then_act())
        .tool(gate.tool("slow").unwrap())
        .store(store)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_turn_of_two_llm_steps_resumed_in_the_second_does_not_ask_for_the_first_again() {
    let store = Arc::new(MemoryStore::new());
    let gate = Gate::new();
    let model = ScriptedModel::new([
        ModelResponse::text("the plan: run slow"),
        ModelResponse::tool_calls([("c1", "slow", json!({}))]),
    ]);
    let first = runtime(&model, store.clone(), &gate);
    let _turn = first.session("s").send("tidy up").await.unwrap();
    gate.started().await;
    let crashed = Arc::new(store.snapshot());

    let model2 = ScriptedModel::new([ModelResponse::text("acted")]);
    let next = runtime(&model2, crashed, &Gate::new());
    let session = next.session("s");
    assert_eq!(session.resume().await.unwrap().unwrap().await.unwrap(), "acted");
    assert_eq!(model2.calls(), 1, "the finished plan step is not asked again; the act step continues");
    let request = &model2.requests()[0];
    assert_eq!(
        transcript(request.history.as_slice()),
        [
            "User: tidy up",
            "Assistant: the plan: run slow",
            "User: the plan: run slow",
            "call c1 slow({})",
            &format!("result c1 (error) {INTERRUPTED_RESULT}"),
        ],
        "the act step's request holds each item once and every call has its result"
    );
    gate.release();
}

#[tokio::test]
async fn a_turn_stopped_while_its_second_step_waited_for_the_model_asks_only_that_step_again() {
    let store = Arc::new(MemoryStore::new());
    let gate = Gate::new();
    let model = ScriptedModel::new([ModelResponse::text("the plan")]);
    let held = model.push_held(ModelResponse::text("never seen"));
    let first = runtime(&model, store.clone(), &gate);
    let _turn = first.session("s").send("tidy up").await.unwrap();
    held.entered().await;
    let crashed = Arc::new(store.snapshot());

    let model2 = ScriptedModel::new([ModelResponse::text("acted")]);
    let next = runtime(&model2, crashed, &gate);
    let session = next.session("s");
    assert_eq!(session.resume().await.unwrap().unwrap().await.unwrap(), "acted");
    assert_eq!(model2.calls(), 1, "only the act step's request is made again");
    assert_eq!(
        transcript(&session.history()),
        ["User: tidy up", "Assistant: the plan", "User: the plan", "Assistant: acted"]
    );
    held.release();
}
