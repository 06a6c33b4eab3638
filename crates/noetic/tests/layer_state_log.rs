//! The state of layers whose scope is not `execution` outlives the process (SPEC 6.1): logged when a turn ends —
//! a thread's in the session's log, a global one in the log `scope:global` — and restored before the next
//! runtime's first turn; a state its layer refuses fails the turn before anything runs; a layer that keeps nothing
//! writes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use noetic::agent::log::{Entry, Expect, LogStore, MemoryLogStore, Projection};
use noetic::layer::ScopeKey;
use noetic::prelude::*;
use noetic::testing::{EventCollector, JudgeRouter, until};
use serde_json::{Value, json};

/// Counts the turns it saw per scope key and tells the model: a layer with durable state.
struct TurnCounter {
    scope: Scope,
    counts: Mutex<HashMap<ScopeKey, u64>>,
}

impl TurnCounter {
    fn new(scope: Scope) -> Arc<TurnCounter> {
        Arc::new(TurnCounter { scope, counts: Mutex::new(HashMap::new()) })
    }
}

impl MemoryLayer for TurnCounter {
    fn id(&self) -> &str {
        "turn-counter"
    }

    fn scope(&self) -> Scope {
        self.scope
    }

    fn as_recall(&self) -> Option<&dyn Recall> {
        Some(self)
    }

    fn as_lifecycle(&self) -> Option<&dyn Lifecycle> {
        Some(self)
    }

    fn as_persistence(&self) -> Option<&dyn Persistence> {
        Some(self)
    }
}

impl Recall for TurnCounter {
    fn recall<'a>(&'a self, ctx: &'a HookContext<'a>, _budget: u32) -> BoxFuture<'a, Result<Vec<Item>, NoeticError>> {
        let key = ScopeKey::for_context(ctx, self.scope);
        let seen = self.counts.lock().unwrap().get(&key).copied().unwrap_or(0);
        Box::pin(async move { Ok(vec![Item::developer(format!("turns before this one: {seen}"))]) })
    }
}

impl Lifecycle for TurnCounter {
    fn on_complete<'a>(
        &'a self,
        ctx: &'a HookContext<'a>,
        _outcome: Outcome,
    ) -> BoxFuture<'a, Result<(), NoeticError>> {
        let key = ScopeKey::for_context(ctx, self.scope);
        *self.counts.lock().unwrap().entry(key).or_default() += 1;
        Box::pin(async { Ok(()) })
    }
}

impl Persistence for TurnCounter {
    fn save_state(&self, key: &ScopeKey) -> Option<Value> {
        self.counts.lock().unwrap().get(key).map(|n| json!({ "turns": n }))
    }

    fn load_state(&self, key: &ScopeKey, state: Value) -> Result<(), NoeticError> {
        let n = state["turns"].as_u64().ok_or_else(|| NoeticError::other("no turn count in the saved state"))?;
        self.counts.lock().unwrap().insert(key.clone(), n);
        Ok(())
    }
}

fn runtime(model: &ScriptedModel, store: &MemoryLogStore, layer: Arc<dyn MemoryLayer>) -> Runtime {
    Runtime::builder().model(Arc::new(model.clone())).layer(layer).log_store(Arc::new(store.clone())).build().unwrap()
}

/// The layer states the log `key` holds for `scope`, by layer id.
async fn saved(store: &MemoryLogStore, key: &str, scope: &str) -> Vec<(String, Value)> {
    let projection = Projection::load(store, key).await.unwrap();
    projection.layer_states.get(scope).map(|m| m.clone().into_iter().collect()).unwrap_or_default()
}

/// How many layer states the logs `keys` hold entries for.
async fn layer_writes(store: &MemoryLogStore, keys: &[&str]) -> usize {
    let mut n = 0;
    for key in keys {
        let records = store.read(key, 0, usize::MAX).await.unwrap();
        n += records.iter().filter(|r| matches!(r.entry, Entry::LayerState { .. })).count();
    }
    n
}

async fn save(store: &MemoryLogStore, state: Value) {
    let entry = Entry::LayerState { scope: "thread:s".into(), layer: "turn-counter".into(), state: Some(state) };
    store.append("s", Expect::End, &[entry]).await.unwrap();
}

/// The developer lines each request showed the model.
fn shown(model: &ScriptedModel) -> Vec<String> {
    model.requests().into_iter().flat_map(|r| r.context).filter_map(|i| i.text().map(str::to_owned)).collect()
}

fn answers(n: usize) -> ScriptedModel {
    ScriptedModel::new((0..n).map(|i| ModelResponse::text(format!("answer {i}"))))
}

#[tokio::test]
async fn a_thread_scoped_layers_state_is_saved_when_a_turn_ends_and_restored_in_the_next_runtime() {
    let store = MemoryLogStore::new();
    let first = answers(2);
    let rt = runtime(&first, &store, TurnCounter::new(Scope::Thread));
    let session = rt.session("s");
    session.send("one").await.unwrap().await.unwrap();
    session.send("two").await.unwrap().await.unwrap();
    drop((session, rt));
    assert_eq!(shown(&first), ["turns before this one: 0", "turns before this one: 1"]);

    let next = answers(1);
    let rt = runtime(&next, &store, TurnCounter::new(Scope::Thread));
    rt.session("s").send("three").await.unwrap().await.unwrap();
    assert_eq!(shown(&next), ["turns before this one: 2"], "the count came back from the log");
    assert_eq!(saved(&store, "s", "thread:s").await, [("turn-counter".to_owned(), json!({"turns": 3}))]);
    // Another session of the same runtime has a thread of its own.
    let other = answers(1);
    let rt = runtime(&other, &store, TurnCounter::new(Scope::Thread));
    rt.session("t").send("hi").await.unwrap().await.unwrap();
    assert_eq!(shown(&other), ["turns before this one: 0"]);
}

#[tokio::test]
async fn a_global_layers_state_is_shared_by_sessions_and_restored_in_the_next_runtime() {
    let store = MemoryLogStore::new();
    let first = answers(2);
    let rt = runtime(&first, &store, TurnCounter::new(Scope::Global));
    rt.session("a").send("one").await.unwrap().await.unwrap();
    rt.session("b").send("two").await.unwrap().await.unwrap();
    drop(rt);
    assert_eq!(shown(&first), ["turns before this one: 0", "turns before this one: 1"]);

    let next = answers(1);
    let rt = runtime(&next, &store, TurnCounter::new(Scope::Global));
    rt.session("c").send("three").await.unwrap().await.unwrap();
    assert_eq!(shown(&next), ["turns before this one: 2"]);
    assert_eq!(saved(&store, "scope:global", "global").await, [("turn-counter".to_owned(), json!({"turns": 3}))]);
    assert!(saved(&store, "c", "thread:c").await.is_empty(), "a global state is not kept in a session's log");
}

#[tokio::test]
async fn a_saved_state_that_cannot_be_restored_fails_the_turn_before_the_model_is_asked() {
    let store = MemoryLogStore::new();
    save(&store, json!({"count": 1})).await;
    let model = answers(1);
    let rt = runtime(&model, &store, TurnCounter::new(Scope::Thread));
    let err = rt.session("s").send("go").await.unwrap().await.unwrap_err();
    assert!(err.to_string().contains("layer 'turn-counter' could not restore its saved state for thread:s"), "{err}");
    assert!(err.to_string().contains("no turn count in the saved state"), "{err}");
    assert_eq!(model.calls(), 0, "a layer that refuses its state does not run");

    // Once the state is readable the session runs, from the count it holds (read by the next runtime).
    save(&store, json!({"turns": 7})).await;
    let rt = runtime(&model, &store, TurnCounter::new(Scope::Thread));
    rt.session("s").send("go").await.unwrap().await.unwrap();
    assert_eq!(shown(&model), ["turns before this one: 7"]);
}

#[tokio::test]
async fn deleting_a_session_deletes_its_threads_layer_state() {
    let store = MemoryLogStore::new();
    let rt = runtime(&answers(1), &store, TurnCounter::new(Scope::Thread));
    rt.session("s").send("one").await.unwrap().await.unwrap();
    assert_eq!(saved(&store, "s", "thread:s").await.len(), 1);
    assert!(rt.delete_session("s").await.unwrap());
    assert!(saved(&store, "s", "thread:s").await.is_empty());
}

#[tokio::test]
async fn a_layer_that_keeps_nothing_writes_nothing_and_an_unchanged_state_is_not_written_again() {
    let store = MemoryLogStore::new();
    // The steering layer in execution scope with nothing carried keeps nothing for the thread.
    let deny = SteeringRule::predicate("no-rm", [Hook::BeforeToolCall], |_| SteeringDecision::allow());
    let steering = steering(SteeringConfig::new([deny])).unwrap();
    let rt = runtime(&answers(3), &store, steering as Arc<dyn MemoryLayer>);
    for text in ["one", "two", "three"] {
        rt.session("s").send(text).await.unwrap().await.unwrap();
    }
    let logs = ["s", "t", "scope:global"];
    assert_eq!(layer_writes(&store, &logs).await, 0);

    // A state that changes every turn is written every turn; one that did not change is not.
    let counter = TurnCounter::new(Scope::Global);
    let rt = runtime(&answers(2), &store, counter.clone());
    rt.session("s").send("one").await.unwrap().await.unwrap();
    assert_eq!(layer_writes(&store, &logs).await, 1);
    // The global count is the same in the other session's thread key: nothing is saved for it.
    rt.session("t").send("two").await.unwrap().await.unwrap();
    assert_eq!(layer_writes(&store, &logs).await, 2, "only the global count changed");
}

fn call(id: &str) -> ModelResponse {
    ModelResponse::tool_calls([(id, "t", json!({}))])
}

fn feedback_block(rule: &str, text: &str) -> Item {
    Item::developer(format!("<steering_feedback>\n[{rule}] {text}\n</steering_feedback>"))
}

fn plain_tool() -> Arc<dyn Tool> {
    Arc::new(FnTool::builder("t", "A tool.").handler(|_, _| async { Ok(Value::Null) }).build().unwrap())
}

fn async_rule(scope: Scope) -> Arc<SteeringLayer> {
    let rule = SteeringRule::llm("report", [Hook::BeforeToolCall], LlmEval::asynchronous("Report what ran."));
    steering(SteeringConfig::new([rule]).with_scope(scope)).unwrap()
}

fn steered_runtime(
    agent: &ScriptedModel,
    judge: ScriptedModel,
    layer: &Arc<SteeringLayer>,
    store: &MemoryLogStore,
) -> Runtime {
    Runtime::builder()
        .model(JudgeRouter::new(agent.clone(), judge))
        .tool(plain_tool())
        .layer(layer.clone() as Arc<dyn MemoryLayer>)
        .log_store(Arc::new(store.clone()))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_verdict_carried_to_the_sessions_next_turn_survives_a_restart_and_is_shown_exactly_once() {
    let store = MemoryLogStore::new();
    let agent = ScriptedModel::new([call("c1")]);
    let last_answer = agent.push_held(ModelResponse::text("first"));
    let judge = ScriptedModel::new([]).with_responder(|_| Ok(ModelResponse::text("ALLOW")));
    let held = judge.push_held(ModelResponse::text("GUIDE: c1 needs a follow-up"));
    let layer = async_rule(Scope::Execution);
    let rt = steered_runtime(&agent, judge, &layer, &store);
    let session = rt.session("s");
    let mut events = EventCollector::of(&session);
    let turn = session.send("one").await.unwrap();
    // The verdict resolves while the model writes the turn's last answer: it is carried to the next turn.
    last_answer.entered().await;
    let first = events.events().iter().find(|e| matches!(e.kind, EventKind::TurnStarted { .. })).unwrap().execution_id;
    held.entered().await;
    held.release();
    until("the verdict is queued", || layer.state_of(first).is_some_and(|s| s.pending_feedback.len() == 1))
        .await
        .unwrap();
    last_answer.release();
    assert_eq!(turn.await.unwrap(), "first");
    assert_eq!(layer.carried_feedback("s").len(), 1);
    drop((session, rt));

    // The next process: a new layer, nothing in memory.
    let agent = ScriptedModel::new([ModelResponse::text("second"), ModelResponse::text("third")]);
    let judge = ScriptedModel::new([]).with_responder(|_| Ok(ModelResponse::text("ALLOW")));
    let layer = async_rule(Scope::Execution);
    let rt = steered_runtime(&agent, judge, &layer, &store);
    assert_eq!(rt.session("s").send("two").await.unwrap().await.unwrap(), "second");
    assert_eq!(rt.session("s").send("three").await.unwrap().await.unwrap(), "third");
    let contexts: Vec<Vec<Item>> = agent.requests().into_iter().map(|r| r.context).collect();
    assert_eq!(contexts, vec![vec![feedback_block("report", "c1 needs a follow-up")], vec![]]);
    let kept = saved(&store, "s", "thread:s").await;
    assert!(kept.iter().all(|(_, state)| state.is_null()), "once shown, the carried verdict is not kept: {kept:?}");

    // And a third process does not show it again.
    let agent = ScriptedModel::new([ModelResponse::text("fourth")]);
    let judge = ScriptedModel::new([]).with_responder(|_| Ok(ModelResponse::text("ALLOW")));
    let rt = steered_runtime(&agent, judge, &async_rule(Scope::Execution), &store);
    rt.session("s").send("four").await.unwrap().await.unwrap();
    assert_eq!(agent.requests()[0].context, Vec::<Item>::new());
}

#[tokio::test]
async fn a_thread_scoped_steering_ledger_is_restored_in_the_next_runtime() {
    let store = MemoryLogStore::new();
    let deny = || {
        let rule = SteeringRule::predicate("no-t", [Hook::BeforeToolCall], |_| SteeringDecision::deny("not t"));
        steering(SteeringConfig::new([rule]).with_scope(Scope::Thread)).unwrap()
    };
    let layer = deny();
    let agent = ScriptedModel::new([call("c1"), ModelResponse::text("done")]);
    let judge = ScriptedModel::new([]);
    let rt = steered_runtime(&agent, judge, &layer, &store);
    rt.session("s").send("go").await.unwrap().await.unwrap();
    let thread = Context::builder().thread_id("s").build();
    let before = layer.state_for(&thread).unwrap().ledger;
    assert!(before.iter().any(|e| e.rule_id.as_deref() == Some("no-t")), "{before:?}");
    drop(rt);

    let layer = deny();
    assert!(layer.state_for(&thread).is_none());
    let agent = ScriptedModel::new([ModelResponse::text("again")]);
    let rt = steered_runtime(&agent, ScriptedModel::new([]), &layer, &store);
    rt.session("s").send("more").await.unwrap().await.unwrap();
    let after = layer.state_for(&thread).unwrap().ledger;
    // As stored: times are kept to the millisecond.
    let json = |entries: &[noetic::steering::LedgerEntry]| serde_json::to_value(entries).unwrap();
    assert_eq!(json(&after[..before.len()]), json(&before), "the earlier decisions come first, as they were");
    assert_eq!(after.len(), before.len() + 2, "plus this turn's model answer and its end");
}
