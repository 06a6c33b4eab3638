//! A runtime with a store writes its sessions through, opens them in the next runtime, and resumes a turn a
//! stopped process left: nothing committed is lost, nothing is shown twice, no call runs twice unknowingly.
//! A "crash" here is a copy of the store taken while a turn is in flight (`MemoryStore::snapshot`): exactly what
//! a killed process leaves behind. The SQLite store's crash test kills real processes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::ProbedStore;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use noetic::agent::{
    BatchPolicy, JournalWrite, MemoryStore, Routed, SessionError, SessionStore, SessionSummary, SteerError,
    SteeringMode, StoreCommit,
};
use noetic::model::{ModelResponse, ScriptedModel, ToolResult};
use noetic::prelude::*;
use noetic::testing::{Counter, Gate, transcript};
use noetic::turn::INTERRUPTED_RESULT;
use serde_json::json;

fn runtime(model: &ScriptedModel, store: Arc<dyn SessionStore>, tools: Vec<Arc<dyn Tool>>) -> Runtime {
    Runtime::builder().model(Arc::new(model.clone())).tools(tools).store(store).build().unwrap()
}

fn results(history: &[Item]) -> Vec<ToolResult> {
    history
        .iter()
        .filter_map(|item| match item {
            Item::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_session_written_through_opens_in_the_next_runtime_with_history_queue_settings_and_turns() {
    let store = Arc::new(MemoryStore::new());
    let first = runtime(&ScriptedModel::new([ModelResponse::text("hello")]), store.clone(), Vec::new());
    let session = first.session("s");
    assert_eq!(session.send("hi").await.unwrap().await.unwrap(), "hello");
    session.set_steering_mode(SteeringMode::All).await;
    session.set_batch_policy(BatchPolicy::FinishBatch).await;
    let queued = session.steer("later, please").await.unwrap();
    drop(first);

    let next = runtime(&ScriptedModel::new([ModelResponse::text("again")]), store.clone(), Vec::new());
    let session = next.session("s");
    assert_eq!(session.history(), vec![Item::user("hi"), Item::assistant("hello")]);
    assert_eq!(
        session.queued_messages().iter().map(|m| (m.id, m.text.as_str())).collect::<Vec<_>>(),
        [(queued, "later, please")]
    );
    assert_eq!((session.steering_mode(), session.batch_policy()), (SteeringMode::All, BatchPolicy::FinishBatch));
    let turn = session.continue_session().await.unwrap().unwrap();
    assert_eq!(turn.number(), 2);
    assert_eq!(turn.await.unwrap(), "again");
    let stored = store.open("s").unwrap().unwrap();
    assert!(stored.snapshot.queued.is_empty(), "the injected message left the stored queue");
    assert_eq!(stored.snapshot.history, session.history(), "every item is stored, the steering message once");
    assert!(stored.unfinished.is_none());
}

#[tokio::test]
async fn a_turn_left_while_a_tool_ran_resumes_without_asking_the_model_again_or_running_the_call_twice() {
    let store = Arc::new(MemoryStore::new());
    let (gate, counter) = (Gate::new(), Counter::new());
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "slow", json!({})), ("c2", "quick", json!({}))])]);
    let first =
        runtime(&model, store.clone(), vec![gate.tool("slow").unwrap(), counter.tool("quick", json!("ok")).unwrap()]);
    let _turn = first.session("s").send("go").await.unwrap();
    gate.started().await;
    // The process dies here: what it leaves is what the store holds now.
    let crashed = Arc::new(store.snapshot());

    let (gate2, counter2) = (Gate::new(), Counter::new());
    let model2 = ScriptedModel::new([ModelResponse::text("done after the crash")]);
    let next = runtime(
        &model2,
        crashed.clone(),
        vec![gate2.tool("slow").unwrap(), counter2.tool("quick", json!("ok")).unwrap()],
    );
    let session = next.session("s");
    assert_eq!(session.unfinished_turn().as_deref(), Some("assistant"));
    assert!(matches!(session.send("something else").await, Err(SessionError::Unfinished { .. })));
    assert_eq!(session.resume().await.unwrap().unwrap().await.unwrap(), "done after the crash");

    assert_eq!(model2.calls(), 1, "the journaled response is not requested again");
    assert_eq!(gate2.runs(), 0, "the call that was running is not run again");
    assert_eq!(counter2.count(), 1, "the rest of the batch runs");
    assert_eq!(results(&session.history()), [ToolResult::error("c1", INTERRUPTED_RESULT), ToolResult::ok("c2", "ok"),]);
    assert_eq!(session.history().iter().filter(|i| **i == Item::user("go")).count(), 1);
    assert!(session.unfinished_turn().is_none());
    let stored = crashed.open("s").unwrap().unwrap();
    assert_eq!(stored.snapshot.history, session.history());
    assert!(stored.unfinished.is_none());
    gate.release();
}

#[tokio::test]
async fn a_steering_message_injected_before_a_crash_is_shown_once_and_one_still_queued_stays_queued() {
    let store = Arc::new(MemoryStore::new());
    let gate = Gate::new();
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c1", "slow", json!({})), ("c2", "slow", json!({}))])]);
    let held = model.push_held(ModelResponse::text("never seen"));
    let first = runtime(&model, store.clone(), vec![gate.tool("slow").unwrap()]);
    let session = first.session("s");
    let _turn = session.send("go").await.unwrap();
    gate.started().await;
    session.steer("use the cache").await.unwrap();
    gate.release();
    // The checkpoint after c1 takes the message, skips c2 and injects it before the next request, which hangs.
    held.entered().await;
    session.set_steering_capacity(5).await;
    let before_crash = session.steer("second thought").await.unwrap();
    let crashed = Arc::new(store.snapshot());

    let next = runtime(
        &ScriptedModel::new([ModelResponse::text("resumed")]),
        crashed.clone(),
        vec![Gate::new().tool("slow").unwrap()],
    );
    let session = next.session("s");
    let history = session.history();
    assert_eq!(history.iter().filter(|i| **i == Item::user("use the cache")).count(), 1, "injected exactly once");
    assert_eq!(session.queued_messages().iter().map(|m| m.id).collect::<Vec<_>>(), [before_crash]);
    assert_eq!(session.unfinished_turn().as_deref(), Some("assistant"));
    // The turn resumes at the model request; the queued message reaches the model in that request.
    assert_eq!(session.resume().await.unwrap().unwrap().await.unwrap(), "resumed");
    assert_eq!(session.history().iter().filter(|i| **i == Item::user("second thought")).count(), 1);
    assert!(session.queued_messages().is_empty());
    held.release();
}

#[tokio::test]
async fn an_unfinished_turn_can_be_discarded_and_every_open_call_gets_the_interrupted_result() {
    let store = Arc::new(MemoryStore::new());
    let gate = Gate::new();
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c1", "slow", json!({})), ("c2", "slow", json!({}))])]);
    let first = runtime(&model, store.clone(), vec![gate.tool("slow").unwrap()]);
    let _turn = first.session("s").send("go").await.unwrap();
    gate.started().await;
    let crashed = Arc::new(store.snapshot());

    let next = runtime(
        &ScriptedModel::new([ModelResponse::text("fresh")]),
        crashed.clone(),
        vec![Gate::new().tool("slow").unwrap()],
    );
    let session = next.session("s");
    assert!(session.discard_unfinished().await.unwrap());
    assert_eq!(
        results(&session.history()).iter().map(|r| (r.call_id.as_str(), r.content.as_str())).collect::<Vec<_>>(),
        [("c1", INTERRUPTED_RESULT), ("c2", INTERRUPTED_RESULT)]
    );
    assert_eq!(session.send("next").await.unwrap().await.unwrap(), "fresh");
    assert!(!session.discard_unfinished().await.unwrap());
    assert_eq!(crashed.open("s").unwrap().unwrap().snapshot.history, session.history());
    gate.release();
}

#[tokio::test]
async fn an_evicted_stored_session_comes_back_from_the_store() {
    let store = Arc::new(MemoryStore::new());
    let model = ScriptedModel::new([ModelResponse::text("a"), ModelResponse::text("b")]);
    let runtime = Runtime::builder().model(Arc::new(model)).store(store.clone()).max_idle_sessions(1).build().unwrap();
    runtime.session("one").send("1").await.unwrap().await.unwrap();
    runtime.session("two").send("2").await.unwrap().await.unwrap();
    assert_eq!(runtime.session_count(), 1, "the least recently used went");
    assert_eq!(runtime.session("one").history(), vec![Item::user("1"), Item::assistant("a")]);
    let keys: Vec<String> = store.list().unwrap().into_iter().map(|s: SessionSummary| s.key).collect();
    assert_eq!(keys.len(), 2);
}

#[tokio::test]
async fn when_the_store_cannot_write_a_message_is_not_queued_and_a_turn_fails_before_its_tools_run() {
    let store = Arc::new(ProbedStore::default());
    let counter = Counter::new();
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c1", "quick", json!({}))])]);
    let runtime = runtime(&model, store.clone(), vec![counter.tool("quick", json!("ok")).unwrap()]);
    let session = runtime.session("s");
    store.fail.store(true, Ordering::SeqCst);
    assert!(matches!(session.steer("hey").await, Err(SteerError::Store { .. })));
    assert_eq!(session.queued(), 0);
    let err = session.send("go").await.unwrap().await.unwrap_err();
    assert!(err.to_string().contains("disk full"), "{err}");
    assert_eq!((model.calls(), counter.count()), (0, 0), "nothing runs on what could not be written");
}

#[test]
fn a_commit_that_does_not_continue_the_stored_conversation_is_refused() {
    let store = MemoryStore::new();
    let commit = |first| StoreCommit { first, items: &[], injected: &[], journal: JournalWrite::Keep, ledger: &[] };
    store.commit("s", commit(0)).unwrap();
    let err = store.commit("s", commit(3)).unwrap_err();
    assert!(err.to_string().contains("does not continue the stored conversation"), "{err}");
}

/// A turn whose model asked for `c1` of the gated tool `slow`, and what the store held while `c1` ran (the gate,
/// to release at the end, and the first runtime, which keeps running).
async fn crashed_while_c1_runs() -> (Arc<MemoryStore>, Gate, Runtime) {
    let store = Arc::new(MemoryStore::new());
    let gate = Gate::new();
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c1", "slow", json!({}))])]);
    let first = runtime(&model, store.clone(), vec![gate.tool("slow").unwrap()]);
    let _turn = first.session("s").send("go").await.unwrap();
    gate.started().await;
    (Arc::new(store.snapshot()), gate, first)
}

#[tokio::test]
async fn a_resumed_turn_runs_again_a_call_that_was_running_when_its_tool_is_idempotent() {
    let (crashed, gate, _first) = crashed_while_c1_runs().await;

    let reads = Counter::new();
    let counted = reads.tool("slow", json!("read again")).unwrap();
    let idempotent = Arc::new(
        FnTool::builder("slow", "Reads; running it twice is harmless.")
            .idempotent(true)
            .rich_handler(move |args, tcx| counted.call(args, tcx))
            .build()
            .unwrap(),
    );
    let next = runtime(&ScriptedModel::new([ModelResponse::text("done")]), crashed, vec![idempotent]);
    let session = next.session("s");
    assert_eq!(session.resume().await.unwrap().unwrap().await.unwrap(), "done");
    assert_eq!(reads.count(), 1, "the idempotent call ran again");
    assert_eq!(results(&session.history()), [ToolResult::ok("c1", "read again")]);
    gate.release();
}

#[tokio::test]
async fn steering_decisions_are_kept_with_the_session_and_those_committed_before_a_crash_survive_it() {
    let store = Arc::new(MemoryStore::new());
    let gate = Gate::new();
    let rule = SteeringRule::predicate("no-rm", [Hook::BeforeToolCall], |p| match p.tool_call() {
        Some(c) if c.name == "rm" => SteeringDecision::deny("never delete"),
        _ => SteeringDecision::allow(),
    });
    let layer = steering(SteeringConfig::new(vec![rule])).unwrap();
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c1", "rm", json!({})), ("c2", "slow", json!({}))])]);
    let runtime = Runtime::builder()
        .model(Arc::new(model))
        .tools([gate.tool("slow").unwrap(), Counter::new().tool("rm", json!("gone")).unwrap()])
        .layer(layer)
        .store(store.clone())
        .build()
        .unwrap();
    let _turn = runtime.session("s").send("go").await.unwrap();
    gate.started().await;
    // The process dies while c2 runs: the deny of c1 was committed with c1's result before c2 started.
    let crashed = store.snapshot();
    let ledger: Vec<serde_json::Value> =
        crashed.ledger("s").unwrap().iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    let denied = ledger.iter().find(|e| e["tool_name"] == "rm").unwrap();
    assert_eq!((denied["action"].as_str(), denied["rule_id"].as_str()), (Some("deny"), Some("no-rm")));
    gate.release();
}

#[tokio::test]
async fn a_message_for_a_session_whose_turn_waits_to_be_resumed_is_queued_for_it_and_reaches_the_model_once() {
    let (crashed, gate, _first) = crashed_while_c1_runs().await;

    let model2 = ScriptedModel::new([ModelResponse::text("resumed with the new message")]);
    let next = runtime(&model2, crashed.clone(), vec![Gate::new().tool("slow").unwrap()]);
    let session = next.session("s");
    assert!(session.unfinished_turn().is_some());
    // Accepted, not refused: the message waits for the turn that is resumed next.
    let Routed::Steered(id) = session.send_or_steer("and also tidy up").await.unwrap() else {
        panic!("a message for a session with an unfinished turn starts no new turn")
    };
    assert_eq!(session.queued_messages().iter().map(|m| m.id).collect::<Vec<_>>(), [id]);
    assert_eq!(crashed.open("s").unwrap().unwrap().snapshot.queued.len(), 1, "queued durably");
    assert_eq!(session.resume().await.unwrap().unwrap().await.unwrap(), "resumed with the new message");
    let request = model2.requests().pop().unwrap();
    assert_eq!(request.history.iter().filter(|i| **i == Item::user("and also tidy up")).count(), 1);
    assert_eq!(session.history().iter().filter(|i| **i == Item::user("and also tidy up")).count(), 1);
    assert!(session.queued_messages().is_empty());
    gate.release();
}

#[tokio::test]
async fn a_resumed_turn_keeps_its_number_and_the_session_count_does_not_grow() {
    let store = Arc::new(MemoryStore::new());
    let gate = Gate::new();
    let model =
        ScriptedModel::new([ModelResponse::text("first"), ModelResponse::tool_calls([("c1", "slow", json!({}))])]);
    let first = runtime(&model, store.clone(), vec![gate.tool("slow").unwrap()]);
    let session = first.session("s");
    session.send("one").await.unwrap().await.unwrap();
    let second = session.send("two").await.unwrap();
    assert_eq!(second.number(), 2);
    gate.started().await;
    let crashed = Arc::new(store.snapshot());

    let next = runtime(
        &ScriptedModel::new([ModelResponse::text("resumed")]),
        crashed,
        vec![Gate::new().tool("slow").unwrap()],
    );
    let session = next.session("s");
    let resumed = session.resume().await.unwrap().unwrap();
    assert_eq!(resumed.number(), 2, "turn 2 resumed is still turn 2");
    assert_eq!(session.turns(), 2);
    resumed.await.unwrap();
    assert_eq!(session.turns(), 2, "the session's count does not grow");
    assert_eq!(session.send("three").await.unwrap().number(), 3);
    gate.release();
}

/// Turn 1 answers call `c1`; turn 2's model asks for `c1` again (small and scripted models reuse ids) and the
/// process dies while it runs. What the next process holds.
async fn crashed_during_a_reused_call_id() -> (Arc<MemoryStore>, Gate) {
    let store = Arc::new(MemoryStore::new());
    let gate = Gate::new();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "quick", json!({}))]),
        ModelResponse::text("turn one done"),
        ModelResponse::tool_calls([("c1", "slow", json!({}))]),
    ]);
    let counter = Counter::new();
    let first =
        runtime(&model, store.clone(), vec![gate.tool("slow").unwrap(), counter.tool("quick", json!("ok")).unwrap()]);
    let session = first.session("s");
    session.send("one").await.unwrap().await.unwrap();
    let _turn = session.send("two").await.unwrap();
    gate.started().await;
    (Arc::new(store.snapshot()), gate)
}

/// Every call has exactly one result after it, pairing calls and results in order (ids may repeat across turns).
fn each_call_answered_once(history: &[Item]) -> bool {
    let mut open: Vec<&str> = Vec::new();
    for item in history {
        match item {
            Item::ToolCall(c) => open.push(&c.id),
            Item::ToolResult(r) => match open.iter().position(|id| *id == r.call_id) {
                Some(at) => {
                    open.remove(at);
                }
                None => return false,
            },
            _ => {}
        }
    }
    open.is_empty()
}

#[tokio::test]
async fn a_discarded_turn_gives_a_call_whose_id_an_earlier_turn_used_its_own_interrupted_result() {
    let (crashed, gate) = crashed_during_a_reused_call_id().await;
    let next =
        runtime(&ScriptedModel::new([ModelResponse::text("three")]), crashed, vec![Gate::new().tool("slow").unwrap()]);
    let session = next.session("s");
    assert!(session.discard_unfinished().await.unwrap());
    let history = session.history();
    assert!(each_call_answered_once(&history), "{:?}", transcript(&history));
    assert_eq!(results(&history).last(), Some(&ToolResult::error("c1", INTERRUPTED_RESULT)));
    session.send("three").await.unwrap().await.unwrap();
    gate.release();
}

#[tokio::test]
async fn a_resumed_turn_gives_a_call_whose_id_an_earlier_turn_used_its_own_result() {
    let (crashed, gate) = crashed_during_a_reused_call_id().await;
    let model = ScriptedModel::new([ModelResponse::text("resumed")]);
    let next = runtime(&model, crashed, vec![Gate::new().tool("slow").unwrap()]);
    let session = next.session("s");
    assert_eq!(session.resume().await.unwrap().unwrap().await.unwrap(), "resumed");
    let history = session.history();
    assert!(each_call_answered_once(&history), "{:?}", transcript(&history));
    assert!(each_call_answered_once(model.requests()[0].history.as_slice()), "the request is well-formed");
    gate.release();
}
