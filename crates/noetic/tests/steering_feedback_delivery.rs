//! Async verdicts reach the model exactly once and are never dropped (seed 1, SPEC 3.8): within a turn, across
//! turns, in a hand-built loop; and a spawned child never shares its parent's feedback queue.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use noetic::context::ExecutionId;
use noetic::layer::ScopeKey;
use noetic::model::HeldCall;
use noetic::prelude::*;
use noetic::steering::Evaluator;
use noetic::step::until as stop;
use noetic::testing::{EventCollector, JudgeRouter, steering_state, until};
use serde_json::{Value, json};

/// The steering feedback block the model is shown for these `(rule, guidance)` lines.
fn feedback_block(lines: &[(&str, &str)]) -> Item {
    let body: Vec<String> = lines.iter().map(|(rule, text)| format!("[{rule}] {text}")).collect();
    Item::developer(format!("<steering_feedback>\n{}\n</steering_feedback>", body.join("\n")))
}

fn async_rule(scope: Scope) -> Arc<SteeringLayer> {
    let rule = SteeringRule::llm("report", [Hook::BeforeToolCall], LlmEval::asynchronous("Report what ran."));
    steering(SteeringConfig::new([rule]).with_scope(scope)).unwrap()
}

/// A judge that allows, except for the held verdicts pushed onto it.
fn allowing_judge() -> ScriptedModel {
    ScriptedModel::new([]).with_responder(|_| Ok(ModelResponse::text("ALLOW")))
}

/// A tool `t` that counts its calls; on the call numbered `release_on` (0-based) it releases `held` and waits
/// until the verdict is queued in its execution's steering state.
fn releasing_tool(layer: &Arc<SteeringLayer>, release_on: usize, held: HeldCall) -> Arc<dyn Tool> {
    let (layer, held) = (layer.clone(), Arc::new(Mutex::new(Some(held))));
    let calls = Arc::new(AtomicUsize::new(0));
    Arc::new(
        FnTool::builder("t", "A tool.")
            .handler(move |_, tcx| {
                let (layer, held) = (layer.clone(), held.clone());
                let n = calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n == release_on {
                        let held = held.lock().unwrap().take().unwrap();
                        held.entered().await;
                        held.release();
                        until("the verdict is queued", || {
                            !steering_state(&layer, &tcx.ctx).pending_feedback.is_empty()
                        })
                        .await
                        .unwrap();
                    }
                    Ok(Value::Null)
                }
            })
            .build()
            .unwrap(),
    )
}

fn plain_tool() -> Arc<dyn Tool> {
    Arc::new(FnTool::builder("t", "A tool.").handler(|_, _| async { Ok(Value::Null) }).build().unwrap())
}

fn contexts(model: &ScriptedModel) -> Vec<Vec<Item>> {
    model.requests().into_iter().map(|r| r.context).collect()
}

fn call(id: &str) -> ModelResponse {
    ModelResponse::tool_calls([(id, "t", json!({}))])
}

/// The execution id of each turn, from the session's events.
fn turn_executions(events: &mut EventCollector) -> Vec<ExecutionId> {
    events.events().iter().filter(|e| matches!(e.kind, EventKind::TurnStarted { .. })).map(|e| e.execution_id).collect()
}

fn async_entries(layer: &SteeringLayer, execution: ExecutionId) -> usize {
    layer.ledger(execution).iter().filter(|e| e.evaluator == Some(Evaluator::LlmAsync)).count()
}

#[tokio::test]
async fn async_verdict_resolving_in_a_tool_round_reaches_the_next_request_of_the_turn_exactly_once() {
    let agent = ScriptedModel::new([call("c1"), call("c2"), call("c3"), ModelResponse::text("done")]);
    let judge = ScriptedModel::new([ModelResponse::text("ALLOW")]);
    let held = judge.push_held(ModelResponse::text("GUIDE: say what c2 changed"));
    let judge = judge.with_responder(|_| Ok(ModelResponse::text("ALLOW")));
    let layer = async_rule(Scope::Execution);
    let rt = Runtime::builder()
        .model(JudgeRouter::new(agent.clone(), judge))
        .tool(releasing_tool(&layer, 1, held))
        .layer(layer.clone() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    assert_eq!(rt.session("s").send("go").await.unwrap().await.unwrap(), "done");
    let block = feedback_block(&[("report", "say what c2 changed")]);
    // The verdict on c2 (round 1) resolved while c2 ran: request 2 shows it, no other request does.
    assert_eq!(contexts(&agent), vec![vec![], vec![], vec![block], vec![]]);
}

/// A session of a runtime with the async rule whose first turn (answering "first") called `c1`, and whose verdict
/// on it ("tell the user c1 ran") resolved after the turn ended: the runtime, the session and the layer.
async fn session_with_a_late_verdict(agent: &ScriptedModel) -> (Runtime, Session, Arc<SteeringLayer>) {
    let judge = allowing_judge();
    let held = judge.push_held(ModelResponse::text("GUIDE: tell the user c1 ran"));
    let layer = async_rule(Scope::Execution);
    let rt = Runtime::builder()
        .model(JudgeRouter::new(agent.clone(), judge))
        .tool(plain_tool())
        .layer(layer.clone() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    let session = rt.session("s");
    let mut events = EventCollector::of(&session);
    assert_eq!(session.send("one").await.unwrap().await.unwrap(), "first");
    let first = turn_executions(&mut events)[0];
    held.entered().await;
    held.release();
    until("the late verdict resolved", || async_entries(&layer, first) == 1).await.unwrap();
    (rt, session, layer)
}

#[tokio::test]
async fn async_verdict_resolving_after_the_turn_ended_reaches_the_next_turn_first_request_exactly_once() {
    let agent = ScriptedModel::new([call("c1"), ModelResponse::text("first"), ModelResponse::text("second")]);
    agent.push(ModelResponse::text("third"));
    let (_rt, session, _layer) = session_with_a_late_verdict(&agent).await;
    assert_eq!(session.send("two").await.unwrap().await.unwrap(), "second");
    assert_eq!(session.send("three").await.unwrap().await.unwrap(), "third");
    let block = feedback_block(&[("report", "tell the user c1 ran")]);
    assert_eq!(contexts(&agent), vec![vec![], vec![], vec![block], vec![]], "shown once, in turn two's request");
}

#[tokio::test]
async fn a_carried_verdict_survives_more_sessions_ending_with_nothing_to_carry_than_the_carry_over_holds_threads() {
    // Executions that end with nothing undelivered carry nothing: they used to leave an empty entry for their
    // thread, so enough of them pushed a real verdict out of the carry-over (with a warning that it was full).
    let others = noetic::steering::MAX_CARRIED_THREADS + 8;
    let agent = ScriptedModel::new([call("c1"), ModelResponse::text("first")]);
    for _ in 0..others {
        agent.push(ModelResponse::text("other"));
    }
    agent.push(ModelResponse::text("second"));
    let (rt, session, layer) = session_with_a_late_verdict(&agent).await;
    assert_eq!(layer.carried_feedback("s").len(), 1);
    for i in 0..others {
        assert_eq!(rt.session(&format!("other-{i}")).send("hi").await.unwrap().await.unwrap(), "other");
    }
    assert_eq!(layer.carried_feedback("s").len(), 1, "the verdict was pushed out of the carry-over");
    assert_eq!(session.send("two").await.unwrap().await.unwrap(), "second");
    let block = feedback_block(&[("report", "tell the user c1 ran")]);
    let requests = contexts(&agent);
    assert_eq!(requests.last(), Some(&vec![block]), "turn two's request shows the carried verdict");
    assert!(requests[..requests.len() - 1].iter().all(Vec::is_empty), "and no other request does");
}

#[tokio::test]
async fn async_verdict_queued_when_the_turn_ends_reaches_the_next_turn_first_request_exactly_once() {
    let agent = ScriptedModel::new([call("c1")]);
    let last_answer = agent.push_held(ModelResponse::text("first"));
    agent.push(ModelResponse::text("second"));
    agent.push(ModelResponse::text("third"));
    let judge = allowing_judge();
    let held = judge.push_held(ModelResponse::text("GUIDE: c1 needs a follow-up"));
    let layer = async_rule(Scope::Execution);
    let rt = Runtime::builder()
        .model(JudgeRouter::new(agent.clone(), judge))
        .tool(plain_tool())
        .layer(layer.clone() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    let session = rt.session("s");
    let mut events = EventCollector::of(&session);
    let turn = session.send("one").await.unwrap();
    // The verdict resolves while the model writes the turn's last answer: no later request of this turn.
    last_answer.entered().await;
    let first = turn_executions(&mut events)[0];
    held.entered().await;
    held.release();
    until("the verdict is queued", || layer.state_of(first).is_some_and(|s| s.pending_feedback.len() == 1))
        .await
        .unwrap();
    last_answer.release();
    assert_eq!(turn.await.unwrap(), "first");
    assert_eq!(session.send("two").await.unwrap().await.unwrap(), "second");
    assert_eq!(session.send("three").await.unwrap().await.unwrap(), "third");
    let block = feedback_block(&[("report", "c1 needs a follow-up")]);
    assert_eq!(contexts(&agent), vec![vec![], vec![], vec![block], vec![]]);
}

#[tokio::test]
async fn async_verdicts_in_a_hand_built_loop_reach_a_later_request_and_the_thread_next_run_exactly_once() {
    let agent = ScriptedModel::new([call("c1")]);
    let answer_one = agent.push_held(ModelResponse::text("one"));
    agent.push(ModelResponse::text("two"));
    agent.push(call("c2"));
    agent.push(ModelResponse::text("three"));
    agent.push(ModelResponse::text("four"));
    let judge = allowing_judge();
    let during = judge.push_held(ModelResponse::text("GUIDE: first verdict"));
    let after = judge.push_held(ModelResponse::text("GUIDE: second verdict"));
    let layer = async_rule(Scope::Execution);
    let model = JudgeRouter::new(agent.clone(), judge);
    let loop_of = |steps: u32| -> Step<String, String> {
        let body: Step<String, String> = Step::llm("assistant", "m").build().unwrap();
        Step::loop_("agent", [body])
            .until(stop::max_steps(steps))
            .prepare_next(|_, _, _| "go on".to_owned())
            .build()
            .unwrap()
    };
    let context = || {
        StepContext::builder()
            .model(model.clone())
            .tools([plain_tool()])
            .layers([layer.clone() as Arc<dyn MemoryLayer>])
            .thread_id("thread-1")
            .build()
    };
    let ctx = context();
    let (l, c) = (loop_of(2), ctx.clone());
    let run = tokio::spawn(async move { noetic::run(&l, "start".to_owned(), &c).await });
    // Iteration one: the verdict on c1 resolves while the model answers; iteration two's request shows it.
    answer_one.entered().await;
    during.entered().await;
    during.release();
    until("the first verdict is queued", || steering_state(&layer, &ctx).pending_feedback.len() == 1).await.unwrap();
    answer_one.release();
    assert_eq!(run.await.unwrap().unwrap(), "two");
    // The second run of the thread: the verdict on c2 resolves after the run ended; the next run shows it.
    let ctx2 = context();
    assert_eq!(noetic::run(&loop_of(1), "again".to_owned(), &ctx2).await.unwrap(), "three");
    after.entered().await;
    after.release();
    until("the second verdict resolved", || async_entries(&layer, ctx2.execution_id()) == 1).await.unwrap();
    assert_eq!(noetic::run(&loop_of(1), "more".to_owned(), &context()).await.unwrap(), "four");
    let first = feedback_block(&[("report", "first verdict")]);
    let second = feedback_block(&[("report", "second verdict")]);
    assert_eq!(contexts(&agent), vec![vec![], vec![], vec![first], vec![], vec![], vec![second]]);
}

#[tokio::test]
async fn a_spawned_child_never_drains_its_parent_feedback_and_keeps_its_decisions_to_itself() {
    for scope in [Scope::Thread, Scope::Resource, Scope::Global] {
        let agent =
            ScriptedModel::new([call("c1"), ModelResponse::text("child done"), ModelResponse::text("parent done")]);
        let judge = ScriptedModel::new([ModelResponse::text("GUIDE: parent feedback")])
            .with_responder(|_| Ok(ModelResponse::text("ALLOW")));
        let layer = async_rule(scope);
        let child_id = Arc::new(Mutex::new(None));
        let seen = child_id.clone();
        let tool = FnTool::builder("t", "A tool.")
            .handler(move |_, tcx| {
                *seen.lock().unwrap() = Some(tcx.ctx.execution_id());
                async { Ok(Value::Null) }
            })
            .build()
            .unwrap();
        let ctx = StepContext::builder()
            .model(JudgeRouter::new(agent.clone(), judge))
            .tools([Arc::new(tool) as Arc<dyn Tool>])
            .layers([layer.clone() as Arc<dyn MemoryLayer>])
            .thread_id("thread-1")
            .resource_id("resource-1")
            .build();
        let args = json!({});
        let call = noetic::layer::ToolCallParams { call_id: "p1", name: "parent-tool", args: &args };
        layer.before_tool_call(&HookContext::from(&ctx), call).await.unwrap();
        until("the parent's verdict is queued", || steering_state(&layer, &ctx).pending_feedback.len() == 1)
            .await
            .unwrap();
        let parent_ledger = steering_state(&layer, &ctx).ledger;

        let child: Step<String, String> = Step::llm("child", "m").build().unwrap();
        let spawn = Step::spawn("spawn", child).build().unwrap();
        assert_eq!(spawn.execute("child task".to_owned(), &ctx).await.unwrap(), "child done");
        let child_id = child_id.lock().unwrap().unwrap();
        until("the child's verdict resolved", || async_entries(&layer, child_id) == 1).await.unwrap();
        assert_eq!(
            steering_state(&layer, &ctx).ledger,
            parent_ledger,
            "{scope:?}: the child's decisions stay in the child"
        );
        let child_ledger = layer.ledger(child_id);
        assert_eq!(child_ledger[..parent_ledger.len()], parent_ledger[..], "{scope:?}: the child starts with a copy");
        assert!(child_ledger.iter().any(|e| e.tool_name.as_deref() == Some("t")), "{scope:?}");

        let parent: Step<String, String> = Step::llm("parent", "m").build().unwrap();
        assert_eq!(parent.execute("next".to_owned(), &ctx).await.unwrap(), "parent done");
        let block = feedback_block(&[("report", "parent feedback")]);
        assert_eq!(contexts(&agent), vec![vec![], vec![], vec![block]], "{scope:?}: only the parent sees its feedback");
    }
}

#[tokio::test]
async fn verdicts_restored_from_a_store_reach_the_model_also_through_a_layer_of_predicates_only() {
    // A layer without async judges never queues a verdict itself, so it skips looking for one — except once a
    // store handed it some: a thread's carried verdicts and a thread-scoped state's undelivered ones.
    let predicate = SteeringRule::predicate("any", [Hook::BeforeToolCall], |_| SteeringDecision::allow());
    for (scope, saved) in [
        (Scope::Execution, json!({"carried": [{"rule_id": "report", "guidance": "tell the user c1 ran"}]})),
        (Scope::Thread, json!({"pending": [{"rule_id": "report", "guidance": "tell the user c1 ran"}]})),
    ] {
        let layer = steering(SteeringConfig::new([predicate.clone()]).with_scope(scope)).unwrap();
        let ctx = StepContext::builder().thread_id("s").build();
        assert_eq!(layer.recall(&HookContext::from(&ctx), 500).await.unwrap(), Vec::<Item>::new());
        layer.load_state(&ScopeKey::Thread(Arc::from("s")), saved).unwrap();
        let block = feedback_block(&[("report", "tell the user c1 ran")]);
        assert_eq!(layer.recall(&HookContext::from(&ctx), 500).await.unwrap(), vec![block], "{scope:?}");
        assert_eq!(
            layer.recall(&HookContext::from(&ctx), 500).await.unwrap(),
            Vec::<Item>::new(),
            "shown once ({scope:?})"
        );
    }
}
