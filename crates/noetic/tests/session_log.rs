//! Sessions kept in a session log (#30): a session is what its log says, and a turn a stopped process left is
//! resumed by replaying its log — nothing in the log is done again. A "crash" is a copy of the store taken while
//! the first runtime's turn is somewhere in the middle ([`MemoryLogStore::copy`]): a second runtime opens the copy.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use futures::future::BoxFuture;
use noetic::agent::log::{Entry, Expect, LogStore, MemoryLogStore, TurnOutcome};
use noetic::agent::{RuntimeBuilder, SessionError, SteeringMode};
use noetic::layer::ModelCallParams;
use noetic::model::{ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::testing::{Gate, transcript};
use noetic::turn::INTERRUPTED_RESULT;
use serde_json::json;
use tokio::sync::Notify;

fn runtime_with(
    model: &ScriptedModel,
    store: &MemoryLogStore,
    build: impl FnOnce(RuntimeBuilder) -> RuntimeBuilder,
) -> Runtime {
    let builder = Runtime::builder().model(Arc::new(model.clone())).log_store(Arc::new(store.clone()));
    build(builder).build().unwrap()
}

async fn entries(store: &MemoryLogStore, key: &str) -> Vec<Entry> {
    store.read(key, 0, usize::MAX).await.unwrap().into_iter().map(|r| r.entry).collect()
}

fn call(id: &str, tool: &str) -> ModelResponse {
    ModelResponse::tool_calls([(id, tool, json!({}))])
}

#[tokio::test]
async fn a_session_opened_again_is_what_its_log_says_conversation_queue_settings_and_turns() {
    let store = MemoryLogStore::new();
    let model = ScriptedModel::new([ModelResponse::text("hello")]);
    let first = runtime_with(&model, &store, |b| b);
    let session = first.open("s").await.unwrap();
    session.set_steering_mode(SteeringMode::All).await;
    assert_eq!(session.send("hi").await.unwrap().await.unwrap(), "hello");
    session.steer("later, please").await.unwrap();

    let again = runtime_with(&ScriptedModel::new([]), &store, |b| b);
    let reopened = again.open("s").await.unwrap();
    assert_eq!(transcript(&reopened.history()), ["User: hi", "Assistant: hello"]);
    assert_eq!(reopened.queued_messages().iter().map(|m| m.text.as_str()).collect::<Vec<_>>(), ["later, please"]);
    assert_eq!(reopened.steering_mode(), SteeringMode::All);
    assert_eq!(reopened.turns(), 1);
    assert!(reopened.unfinished_turn().is_none(), "the turn ended: nothing to resume");
}

#[tokio::test]
async fn a_handle_taken_before_the_log_was_read_reads_it_at_its_first_use() {
    let store = MemoryLogStore::new();
    let first = runtime_with(&ScriptedModel::new([ModelResponse::text("one")]), &store, |b| b);
    first.session("s").send("a").await.unwrap().await.unwrap();
    let model = ScriptedModel::new([ModelResponse::text("two")]);
    let again = runtime_with(&model, &store, |b| b);
    let session = again.session("s");
    assert_eq!(session.send("b").await.unwrap().await.unwrap(), "two");
    assert_eq!(transcript(model.requests()[0].history.as_slice()), ["User: a", "Assistant: one", "User: b"]);
    assert_eq!(session.turns(), 2, "the turn count continues the log's");
}

/// A layer whose review of a model response waits until the test lets it go: a slow LLM judge.
struct SlowReview {
    entered: Notify,
    release: Notify,
}

impl MemoryLayer for SlowReview {
    fn id(&self) -> &str {
        "slow-review"
    }

    fn as_gates(&self) -> Option<&dyn Gates> {
        Some(self)
    }
}

impl Gates for SlowReview {
    fn after_model_call<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        _call: ModelCallParams<'a>,
    ) -> BoxFuture<'a, Result<SteeringDecision, NoeticError>> {
        Box::pin(async move {
            self.entered.notify_one();
            self.release.notified().await;
            Ok(SteeringDecision::allow())
        })
    }
}

#[tokio::test]
async fn a_response_that_arrived_is_not_requested_again_when_the_process_dies_during_its_review() {
    let store = MemoryLogStore::new();
    let review = Arc::new(SlowReview { entered: Notify::new(), release: Notify::new() });
    let model = ScriptedModel::new([ModelResponse::text("the first answer")]);
    let first = runtime_with(&model, &store, |b| b.layer(review.clone()));
    let _turn = first.session("s").send("question").await.unwrap();
    review.entered.notified().await;
    let crashed = store.copy();

    let review2 = Arc::new(SlowReview { entered: Notify::new(), release: Notify::new() });
    review2.release.notify_one();
    let model2 = ScriptedModel::new([ModelResponse::text("a different answer")]);
    let next = runtime_with(&model2, &crashed, |b| b.layer(review2.clone()));
    let session = next.open("s").await.unwrap();
    assert!(session.unfinished_turn().is_some());
    assert_eq!(session.resume().await.unwrap().unwrap().await.unwrap(), "the first answer");
    assert_eq!(model2.calls(), 0, "the response in the log is reviewed again, never requested again");
    assert_eq!(transcript(&session.history()), ["User: question", "Assistant: the first answer"]);
    review.release.notify_one();
}

#[tokio::test]
async fn a_call_id_reused_by_a_later_turn_gets_exactly_one_result_when_that_turn_is_resumed() {
    let store = MemoryLogStore::new();
    let gate = Gate::new();
    let counter = noetic::testing::Counter::new();
    let model = ScriptedModel::new([call("c1", "quick"), ModelResponse::text("one"), call("c1", "slow")]);
    let first = runtime_with(&model, &store, |b| {
        b.tool(gate.tool("slow").unwrap()).tool(counter.tool("quick", json!("ok")).unwrap())
    });
    let session = first.session("s");
    assert_eq!(session.send("first").await.unwrap().await.unwrap(), "one");
    let _turn = session.send("second").await.unwrap();
    gate.started().await;
    let crashed = store.copy();

    let model2 = ScriptedModel::new([ModelResponse::text("two")]);
    let next = runtime_with(&model2, &crashed, |b| {
        b.tool(Gate::new().tool("slow").unwrap()).tool(counter.tool("quick", json!("ok")).unwrap())
    });
    let resumed = next.open("s").await.unwrap();
    let turn = resumed.resume().await.unwrap().unwrap();
    assert_eq!(turn.number(), 2, "a resumed turn keeps its number");
    assert_eq!(turn.await.unwrap(), "two");
    assert_eq!(resumed.turns(), 2, "resuming does not count another turn");
    assert_eq!(
        transcript(model2.requests()[0].history.as_slice()),
        [
            "User: first",
            "call c1 quick({})",
            "result c1 ok",
            "Assistant: one",
            "User: second",
            "call c1 slow({})",
            &format!("result c1 (error) {INTERRUPTED_RESULT}"),
        ],
        "turn 2's c1 got exactly one result, the interrupted one"
    );
    gate.release();
}

/// Plan, then act on the plan: one pass of a loop of two `llm` steps.
fn plan_then_act() -> Step<String, String> {
    let plan = Step::llm("plan", "scripted").instructions("Plan the work.").build().unwrap();
    let act = Step::llm("act", "scripted").instructions("Do what the plan says.").build().unwrap();
    Step::loop_("agent", [plan, act]).until(until::max_steps(1)).build().unwrap()
}

#[tokio::test]
async fn a_turn_of_two_llm_steps_resumed_in_the_second_does_not_ask_for_the_first_again() {
    let store = MemoryLogStore::new();
    let gate = Gate::new();
    let model = ScriptedModel::new([ModelResponse::text("the plan: run slow"), call("c1", "slow")]);
    let first = runtime_with(&model, &store, |b| b.agent(plan_then_act()).tool(gate.tool("slow").unwrap()));
    let _turn = first.session("s").send("tidy up").await.unwrap();
    gate.started().await;
    let crashed = store.copy();

    let model2 = ScriptedModel::new([ModelResponse::text("acted")]);
    let next = runtime_with(&model2, &crashed, |b| b.agent(plan_then_act()).tool(Gate::new().tool("slow").unwrap()));
    let session = next.open("s").await.unwrap();
    assert_eq!(session.unfinished_turn().as_deref(), Some("act"));
    assert_eq!(session.resume().await.unwrap().unwrap().await.unwrap(), "acted");
    assert_eq!(model2.calls(), 1, "the finished plan step is not asked again; the act step continues");
    assert_eq!(
        transcript(model2.requests()[0].history.as_slice()),
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
async fn messages_steered_into_a_turn_that_died_wait_in_the_log_in_acceptance_order_and_reach_the_resumed_turn() {
    let store = MemoryLogStore::new();
    let gate = Gate::new();
    let model = ScriptedModel::new([call("c1", "slow")]);
    let first = runtime_with(&model, &store, |b| b.tool(gate.tool("slow").unwrap()));
    let session = first.session("s");
    session.set_steering_mode(SteeringMode::All).await;
    let _turn = session.send("go").await.unwrap();
    gate.started().await;
    session.steer("one").await.unwrap();
    session.steer("two").await.unwrap();
    let crashed = store.copy();

    let model2 = ScriptedModel::new([ModelResponse::text("done")]);
    let next = runtime_with(&model2, &crashed, |b| b.tool(Gate::new().tool("slow").unwrap()));
    let resumed = next.open("s").await.unwrap();
    assert_eq!(resumed.queued(), 2);
    assert_eq!(resumed.resume().await.unwrap().unwrap().await.unwrap(), "done");
    let history = transcript(model2.requests()[0].history.as_slice());
    assert_eq!(&history[history.len() - 2..], ["User: one", "User: two"], "shown in the order they were accepted");
    assert_eq!(resumed.queued(), 0);
    let shown = entries(&crashed, "s").await;
    assert_eq!(shown.iter().filter(|e| matches!(e, Entry::Injected { .. })).count(), 1, "injected once");
    gate.release();
}

#[tokio::test]
async fn discarding_a_dead_turn_gives_its_open_calls_the_interrupted_result_and_ends_it_in_the_log() {
    let store = MemoryLogStore::new();
    let gate = Gate::new();
    let first = runtime_with(&ScriptedModel::new([call("c1", "slow")]), &store, |b| b.tool(gate.tool("slow").unwrap()));
    let _turn = first.session("s").send("go").await.unwrap();
    gate.started().await;
    let crashed = store.copy();

    let model2 = ScriptedModel::new([ModelResponse::text("fresh")]);
    let next = runtime_with(&model2, &crashed, |b| b.tool(Gate::new().tool("slow").unwrap()));
    let session = next.open("s").await.unwrap();
    assert!(matches!(session.send("other").await, Err(SessionError::Unfinished { .. })));
    assert!(session.discard_unfinished().await.unwrap());
    assert!(!session.discard_unfinished().await.unwrap(), "nothing left to discard");
    assert_eq!(session.send("other").await.unwrap().await.unwrap(), "fresh");
    let log = entries(&crashed, "s").await;
    assert!(log.iter().any(|e| matches!(e, Entry::TurnEnded { turn: 1, outcome: TurnOutcome::Discarded })));
    let reopened = runtime_with(&ScriptedModel::new([]), &crashed, |b| b).open("s").await.unwrap();
    assert_eq!(
        transcript(&reopened.history()),
        [
            "User: go",
            "call c1 slow({})",
            &format!("result c1 (error) {INTERRUPTED_RESULT}"),
            "User: other",
            "Assistant: fresh"
        ]
    );
    gate.release();
}

#[tokio::test]
async fn each_tool_call_is_logged_as_started_before_its_outcome_and_the_turn_ends_with_its_answer() {
    let store = MemoryLogStore::new();
    let counter = noetic::testing::Counter::new();
    let model = ScriptedModel::new([call("c1", "t"), call("c2", "t"), ModelResponse::text("done")]);
    let rt = runtime_with(&model, &store, |b| b.tool(counter.tool("t", json!(1)).unwrap()));
    rt.session("s").send("go").await.unwrap().await.unwrap();
    let log = entries(&store, "s").await;
    let at = |wanted: &dyn Fn(&Entry) -> bool| log.iter().position(wanted).unwrap();
    for id in ["c1", "c2"] {
        let started = at(&|e| matches!(e, Entry::ToolStarted { call_id, .. } if **call_id == *id));
        let outcome =
            at(&|e| matches!(e, Entry::Core { input: noetic::turn::Input::ToolDone(r), .. } if *r.call_id == *id));
        assert!(started < outcome, "{id} is started in the log before its outcome");
    }
    assert!(matches!(&log[0], Entry::Settings { .. }), "a session's log starts with its settings");
    assert!(
        matches!(log.last(), Some(Entry::TurnEnded { turn: 1, outcome: TurnOutcome::Completed { answer } }) if answer == "done")
    );
}

/// Yields until `done` holds (the log's writer runs on its own task), or fails after many tries.
async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    for _ in 0..10_000 {
        if done().await {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("gave up waiting for {what}");
}

fn async_rule_layer() -> Arc<SteeringLayer> {
    let rule = SteeringRule::llm("report", [Hook::BeforeToolCall], LlmEval::asynchronous("Report what ran."));
    steering(SteeringConfig::new([rule])).unwrap()
}

#[tokio::test]
async fn an_async_verdict_resolving_after_its_turn_ended_survives_a_restart_in_the_ledger_and_as_feedback() {
    let store = MemoryLogStore::new();
    let agent = ScriptedModel::new([call("c1", "t"), ModelResponse::text("first")]);
    let judge = ScriptedModel::new([]).with_responder(|_| Ok(ModelResponse::text("ALLOW")));
    let held = judge.push_held(ModelResponse::text("GUIDE: tell the user c1 ran"));
    let counter = noetic::testing::Counter::new();
    let first = Runtime::builder()
        .model(noetic::testing::JudgeRouter::new(agent, judge))
        .tool(counter.tool("t", json!(null)).unwrap())
        .layer(async_rule_layer() as Arc<dyn MemoryLayer>)
        .log_store(Arc::new(store.clone()))
        .build()
        .unwrap();
    assert_eq!(first.session("s").send("one").await.unwrap().await.unwrap(), "first");
    held.entered().await;
    held.release();
    let guided = |e: &Entry| matches!(e, Entry::Decision { entry, .. } if entry.action == SteeringAction::Guide);
    eventually("the late verdict in the log", async || entries(&store, "s").await.iter().any(guided)).await;
    let crashed = store.copy();

    let agent2 = ScriptedModel::new([ModelResponse::text("second")]);
    let judge2 = ScriptedModel::new([]).with_responder(|_| Ok(ModelResponse::text("ALLOW")));
    let next = Runtime::builder()
        .model(noetic::testing::JudgeRouter::new(agent2.clone(), judge2))
        .tool(counter.tool("t", json!(null)).unwrap())
        .layer(async_rule_layer() as Arc<dyn MemoryLayer>)
        .log_store(Arc::new(crashed))
        .build()
        .unwrap();
    let session = next.open("s").await.unwrap();
    assert!(
        session
            .ledger()
            .iter()
            .any(|e| e.action == SteeringAction::Guide && e.guidance.as_deref() == Some("tell the user c1 ran")),
        "the late verdict is in the ledger the log keeps"
    );
    assert_eq!(session.send("two").await.unwrap().await.unwrap(), "second");
    let feedback = Item::developer("<steering_feedback>\n[report] tell the user c1 ran\n</steering_feedback>");
    assert_eq!(
        agent2.requests()[0].context,
        vec![feedback],
        "the carried feedback reaches the next turn after the restart"
    );
}

#[tokio::test]
async fn a_message_another_process_appends_reaches_the_running_turn_and_the_owner_keeps_writing() {
    let store = MemoryLogStore::new();
    let gate = Gate::new();
    let model = ScriptedModel::new([call("c1", "slow"), ModelResponse::text("done")]);
    let owner = runtime_with(&model, &store, |b| b.tool(gate.tool("slow").unwrap()));
    let session = owner.open("s").await.unwrap();
    let turn = session.send("go").await.unwrap();
    gate.started().await;
    // Another process (the CLI's `sessions steer`) accepts a message for the session: it appends at the end.
    let message = noetic::agent::SteerMessage::new("from elsewhere");
    store.append("s", Expect::End, &[Entry::MessageAccepted { message }]).await.unwrap();
    eventually("the message is taken in", async || session.queued() == 1).await;
    gate.release();
    assert_eq!(turn.await.unwrap(), "done");
    let history = transcript(model.requests()[1].history.as_slice());
    assert_eq!(history.last().map(String::as_str), Some("User: from elsewhere"), "shown at the next checkpoint");
    let log = entries(&store, "s").await;
    assert!(matches!(log.last(), Some(Entry::TurnEnded { outcome: TurnOutcome::Completed { .. }, .. })), "not fenced");
    assert_eq!(log.iter().filter(|e| matches!(e, Entry::Injected { .. })).count(), 1);
}

#[tokio::test]
async fn a_stop_another_process_appends_cancels_the_running_turn() {
    let store = MemoryLogStore::new();
    let gate = Gate::new();
    let model = ScriptedModel::new([call("c1", "slow"), ModelResponse::text("never")]);
    let owner = runtime_with(&model, &store, |b| b.tool(gate.tool("slow").unwrap()));
    let session = owner.open("s").await.unwrap();
    let turn = session.send("go").await.unwrap();
    gate.started().await;
    store.append("s", Expect::End, &[Entry::StopRequested { reason: "stopped from the CLI".into() }]).await.unwrap();
    let error = turn.await.unwrap_err();
    assert!(matches!(error, NoeticError::Cancelled { .. }), "{error:?}");
    assert_eq!(model.calls(), 1, "the model is not asked again after the stop");
    gate.release();
}

#[tokio::test]
async fn deleting_a_session_removes_its_log_and_refuses_while_a_turn_runs() {
    let store = MemoryLogStore::new();
    let gate = Gate::new();
    let model = ScriptedModel::new([ModelResponse::text("one"), call("c1", "slow"), ModelResponse::text("two")]);
    let rt = runtime_with(&model, &store, |b| b.tool(gate.tool("slow").unwrap()));
    let session = rt.open("s").await.unwrap();
    let _follower = session.follow(0);
    session.send("a").await.unwrap().await.unwrap();
    let turn = session.send("b").await.unwrap();
    gate.started().await;
    assert!(matches!(rt.delete_session("s").await, Err(SessionError::Busy { .. })));
    gate.release();
    turn.await.unwrap();
    assert!(rt.delete_session("s").await.unwrap(), "a followed session is deleted too");
    assert!(entries(&store, "s").await.is_empty(), "its log is gone");
    assert!(rt.open("s").await.unwrap().history().is_empty());
    assert!(!rt.delete_session("s").await.unwrap(), "nothing left to delete");
}
