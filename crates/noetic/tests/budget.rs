//! Budgets (#31 item 4): a scripted agent that would run on and on is stopped by each kind of limit before its
//! next model request or tool call, nothing more runs, the `budget_reached` event and ledger entry are there, the
//! session stays paused (also when opened again) and resumes once the limit is raised; spawned children and fork
//! paths count towards their turn's budget.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use noetic::agent::log::{Entry, LogStore, MemoryLogStore};
use noetic::agent::{RuntimeBuilder, SessionError, default_agent};
use noetic::budget::{Amount, Budget, Limit, Limits, Scope};
use noetic::model::{ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::step::ForkMode;
use noetic::testing::{EventCollector, Gate, transcript};
use noetic::tool::FnTool;
use serde_json::json;

/// Every call costs 100 tokens in, 10 out and a cent.
fn usage() -> Usage {
    Usage { input_tokens: 100, output_tokens: 10, cached_tokens: 0, cost: Some(0.01) }
}

/// A model that asks for the `work` tool every time: it never stops by itself.
fn endless() -> ScriptedModel {
    ScriptedModel::responder(|request| {
        let n = request.messages().count();
        Ok(ModelResponse::tool_calls([(format!("c{n}").as_str(), "work", json!({}))]).with_usage(usage()))
    })
}

/// Counts the `work` tool's calls.
#[derive(Clone, Default)]
struct Counter(Arc<AtomicUsize>);

impl Counter {
    fn new() -> Self {
        Counter::default()
    }

    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// The `work` tool: counts its calls, and takes four minutes (of paused time) each.
fn work(counter: &Counter) -> Arc<dyn Tool> {
    let count = counter.0.clone();
    let tool = FnTool::builder("work", "Works for four minutes.")
        .handler(move |_, _| {
            count.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(Duration::from_secs(240)).await;
                Ok(json!("ok"))
            }
        })
        .build()
        .unwrap();
    Arc::new(tool)
}

fn runtime(model: &ScriptedModel, counter: &Counter, store: &MemoryLogStore, budget: Budget) -> Runtime {
    runtime_with(model, counter, store, |b| b.budget(budget))
}

fn runtime_with(
    model: &ScriptedModel,
    counter: &Counter,
    store: &MemoryLogStore,
    build: impl FnOnce(RuntimeBuilder) -> RuntimeBuilder,
) -> Runtime {
    let builder =
        Runtime::builder().model(Arc::new(model.clone())).tool(work(counter)).log_store(Arc::new(store.clone()));
    build(builder).build().unwrap()
}

async fn entries(store: &MemoryLogStore, key: &str) -> Vec<Entry> {
    store.read(key, 0, usize::MAX).await.unwrap().into_iter().map(|r| r.entry).collect()
}

#[tokio::test(start_paused = true)]
async fn each_kind_of_limit_ends_the_turn_before_the_next_call_and_nothing_more_runs() {
    // (limits, model calls made, tool calls run, what was used when the turn ended)
    let cases = [
        (Limits::default().tokens_in(250), 3, 2, Amount::Count(300)),
        (Limits::default().tokens_out(25), 3, 2, Amount::Count(30)),
        (Limits::default().cost(0.025), 3, 2, Amount::Dollars(0.03)),
        (Limits::default().tool_calls(2), 3, 2, Amount::Count(2)),
        (Limits::default().model_calls(3), 3, 3, Amount::Count(3)),
        (Limits::default().wall_time(Duration::from_secs(600)), 3, 3, Amount::Millis { ms: 720_000 }),
    ];
    for (limits, model_calls, tool_calls, used) in cases {
        let (model, counter, store) = (endless(), Counter::new(), MemoryLogStore::new());
        let limit = limits.amounts().next().unwrap().0;
        let runtime = runtime(&model, &counter, &store, Budget::default().turn(limits));
        let session = runtime.open("s").await.unwrap();
        let mut events = EventCollector::of(&session);
        let error = session.send("go").await.unwrap().await.unwrap_err();

        let NoeticError::BudgetReached { scope, limit: named, used: spent, .. } = &error else {
            panic!("{limit}: the turn ended with {error}")
        };
        assert_eq!((scope.as_str(), named.as_str()), ("turn", limit.name()));
        assert_eq!(*spent, used.to_string(), "{limit}");
        assert_eq!((model.calls(), counter.count()), (model_calls, tool_calls), "{limit}: calls made");
        let reached: Vec<_> = events
            .kinds()
            .into_iter()
            .filter_map(|k| match k {
                EventKind::BudgetReached { reached, .. } => Some(reached),
                _ => None,
            })
            .collect();
        assert_eq!(reached.len(), 1, "{limit}: one budget_reached event");
        assert_eq!((reached[0].scope, reached[0].limit, reached[0].used), (Scope::Turn, limit, used));
        let ledgered = session.ledger().into_iter().filter_map(|e| e.budget).collect::<Vec<_>>();
        assert_eq!(ledgered, reached, "{limit}: the ledger names the limit and the amount");
        assert_eq!(session.budget().paused, Some(reached[0].clone()), "{limit}: the session is paused");
        assert!(
            entries(&store, "s").await.iter().any(|e| matches!(e, Entry::BudgetReached { .. })),
            "{limit}: the log records the limit reached"
        );

        // Paused: a message queues, and nothing runs.
        let Err(SessionError::Paused { queued: Some(id), .. }) = session.send("more").await else {
            panic!("{limit}: a paused session started a turn")
        };
        assert_eq!(session.queued_messages().iter().map(|m| m.id).collect::<Vec<_>>(), [id]);
        assert!(matches!(session.continue_session().await, Err(SessionError::Paused { queued: None, .. })));
        assert!(!session.is_busy());
        assert_eq!((model.calls(), counter.count()), (model_calls, tool_calls), "{limit}: nothing ran after the limit");
    }
}

#[tokio::test]
async fn a_paused_session_resumes_with_its_queued_messages_once_the_limit_is_raised() {
    let (counter, store) = (Counter::new(), MemoryLogStore::new());
    let model = ScriptedModel::new([
        ModelResponse::text("one").with_usage(usage()),
        ModelResponse::text("two").with_usage(usage()),
    ]);
    let budget = Budget::default().session(Limits::default().model_calls(1));
    let runtime = runtime(&model, &counter, &store, budget);
    let session = runtime.open("s").await.unwrap();
    assert_eq!(session.send("hi").await.unwrap().await.unwrap(), "one");
    let error = session.send("again").await.unwrap().await.unwrap_err();
    assert!(matches!(&error, NoeticError::BudgetReached { limit, .. } if limit == "model_calls"), "{error}");
    assert!(error.to_string().contains("raise the limit to continue"), "{error}");
    let paused = session.send("and then?").await.map(|_| ()).unwrap_err();
    assert!(paused.to_string().contains("paused over its budget"), "{paused}");
    assert!(paused.to_string().contains("the message was queued"), "{paused}");
    assert_eq!(model.calls(), 1);

    let same = Budget::default().session(Limits::default().model_calls(1));
    let error = session.raise_budget(same).await.map(|_| ()).unwrap_err();
    assert!(error.to_string().contains("raise the session model_calls limit above 1"), "{error}");
    assert!(session.budget().paused.is_some(), "a raise that would not let anything run changes nothing");
    let raised = Budget::default().session(Limits::default().model_calls(5));
    let turn = session.raise_budget(raised).await.unwrap().expect("the queued message runs");
    assert_eq!(turn.await.unwrap(), "two");
    assert_eq!(session.budget().paused, None);
    assert_eq!(session.budget().budget, raised);
    assert_eq!(session.budget().spent.model_calls, 2);
    assert_eq!(
        transcript(&session.history()),
        ["User: hi", "Assistant: one", "User: again", "User: and then?", "Assistant: two"]
    );
}

#[tokio::test]
async fn the_session_budget_counts_every_turn_and_a_session_without_a_log_pauses_too() {
    let counter = Counter::new();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "work", json!({}))]).with_usage(usage()),
        ModelResponse::text("done").with_usage(usage()),
        ModelResponse::tool_calls([("c2", "work", json!({}))]).with_usage(usage()),
        ModelResponse::text("never").with_usage(usage()),
    ]);
    let budget = Budget::default().session(Limits::default().tool_calls(1));
    let runtime =
        Runtime::builder().model(Arc::new(model.clone())).tool(work(&counter)).budget(budget).build().unwrap();
    let session = runtime.session("s");
    tokio::time::pause();
    assert_eq!(session.send("first").await.unwrap().await.unwrap(), "done");
    let error = session.send("second").await.unwrap().await.unwrap_err();
    assert!(matches!(&error, NoeticError::BudgetReached { scope, .. } if scope == "session"), "{error}");
    assert_eq!((model.calls(), counter.count()), (3, 1), "the second turn's tool call did not run");
    assert!(session.budget().paused.is_some());
    assert!(matches!(session.send("third").await, Err(SessionError::Paused { .. })));
}

#[tokio::test]
async fn the_session_stays_paused_when_opened_again_and_resumes_there() {
    let (counter, store) = (Counter::new(), MemoryLogStore::new());
    let model = ScriptedModel::new([ModelResponse::text("one").with_usage(usage())]);
    let budget = Budget::default().session(Limits::default().tokens_in(100));
    let first = runtime(&model, &counter, &store, budget);
    let session = first.open("s").await.unwrap();
    session.send("hi").await.unwrap().await.unwrap();
    session.send("again").await.unwrap().await.unwrap_err();
    drop((session, first));

    // Another process (no default budget of its own): the log holds the pause, the usage and nothing else.
    let model = ScriptedModel::new([ModelResponse::text("two").with_usage(usage())]);
    let again = runtime_with(&model, &counter, &store, |b| b);
    let session = again.open("s").await.unwrap();
    let status = session.budget();
    assert_eq!(status.paused.as_ref().map(|p| p.limit), Some(Limit::TokensIn));
    assert_eq!((status.spent.tokens_in, status.spent.model_calls), (100, 1));
    assert!(matches!(session.send("still there?").await, Err(SessionError::Paused { .. })));
    assert_eq!(model.calls(), 0);
    let turn = session.raise_budget(Budget::default().session(Limits::default().tokens_in(1000))).await.unwrap();
    assert_eq!(turn.unwrap().await.unwrap(), "two");
    let reopened = runtime_with(&ScriptedModel::new([]), &counter, &store, |b| b).open("s").await.unwrap();
    assert_eq!(reopened.budget().budget.session.tokens_in, Some(1000), "the raised budget is in the log");
    assert_eq!(reopened.budget().paused, None);
}

#[tokio::test(start_paused = true)]
async fn a_spawned_child_cannot_spend_past_its_parents_budget() {
    let (model, counter, store) = (endless(), Counter::new(), MemoryLogStore::new());
    let child = default_agent("m", None).unwrap();
    let agent = Step::spawn("helper", child).build().unwrap();
    let budget = Budget::default().turn(Limits::default().tool_calls(2));
    let runtime = runtime_with(&model, &counter, &store, |b| b.agent(agent).budget(budget));
    let session = runtime.open("s").await.unwrap();
    let error = session.send("go").await.unwrap().await.unwrap_err();
    assert!(format!("{error}").contains("tool_calls limit of 2 was reached"), "{error}");
    assert_eq!((model.calls(), counter.count()), (3, 2));
    assert_eq!(session.budget().spent.tool_calls, 2, "the child's calls are the session's");
    // The child's calls are not in the log as the parent's are: its turn's end records them.
    let spent: Vec<_> = entries(&store, "s")
        .await
        .into_iter()
        .filter_map(|e| match e {
            Entry::BudgetSpent { spent, .. } => Some((spent.model_calls, spent.tool_calls)),
            _ => None,
        })
        .collect();
    assert_eq!(spent, [(3, 2)]);
    let reopened = runtime_with(&model, &counter, &store, |b| b).open("s").await.unwrap();
    assert_eq!(reopened.budget().spent.tool_calls, 2, "a restarted process knows what the child spent");
}

#[tokio::test(start_paused = true)]
async fn fork_paths_share_their_turns_budget() {
    let (model, counter, store) = (endless(), Counter::new(), MemoryLogStore::new());
    let agent = Step::fork("both", ForkMode::All)
        .paths([
            default_agent("m", None).unwrap(),
            default_agent("m", None).unwrap(),
            default_agent("m", None).unwrap(),
        ])
        .merge(|parts: Vec<String>, _| Ok(parts.join(",")))
        .build()
        .unwrap();
    let budget = Budget::default().turn(Limits::default().model_calls(4));
    let runtime = runtime_with(&model, &counter, &store, |b| b.agent(agent).budget(budget));
    let session = runtime.open("s").await.unwrap();
    let error = session.send("go").await.unwrap().await.unwrap_err();
    let NoeticError::ForkPartial { failed, .. } = &error else { panic!("{error}") };
    assert!(
        failed.iter().any(|f| matches!(&f.error, NoeticError::BudgetReached { limit, .. } if limit == "model_calls"))
    );
    assert_eq!(model.calls(), 4, "three paths together made no more than four model calls");
    assert!(session.budget().paused.is_some());
}

#[tokio::test]
async fn a_zero_or_negative_budget_is_refused_saying_what_to_do() {
    let zero = Budget::default().turn(Limits::default().tool_calls(0));
    let error = Runtime::builder().model(Arc::new(ScriptedModel::new([]))).budget(zero).build().err().unwrap();
    assert_eq!(error.code.as_str(), "INVALID_BUDGET");
    assert!(error.to_string().contains("turn.tool_calls = 0 must be a positive number"), "{error}");
    let runtime = Runtime::builder().model(Arc::new(ScriptedModel::new([]))).build().unwrap();
    let negative = Budget::default().session(Limits::default().cost(-1.0));
    let error = runtime.session("s").set_budget(negative).await.unwrap_err();
    assert!(matches!(&error, SessionError::InvalidBudget { .. }));
    assert!(error.to_string().contains("session.cost = $-1.0000 must be a positive number"), "{error}");
}

#[tokio::test]
async fn a_turn_resumed_after_a_crash_counts_what_it_spent_before_the_stop() {
    let (store, gate, quick) = (MemoryLogStore::new(), Gate::new(), noetic::testing::Counter::new());
    let budget = Budget::default().turn(Limits::default().tool_calls(2));
    let tools = |b: RuntimeBuilder, slow: Arc<dyn Tool>| {
        b.budget(budget).tool(slow).tool(quick.tool("quick", json!("ok")).unwrap())
    };
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "quick", json!({}))]),
        ModelResponse::tool_calls([("c2", "slow", json!({}))]),
    ]);
    let first = runtime_with(&model, &Counter::new(), &store, |b| tools(b, gate.tool("slow").unwrap()));
    let _turn = first.session("s").send("go").await.unwrap();
    gate.started().await;
    let crashed = store.copy();

    // The resumed turn already started two tool calls: a third would go past its limit.
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c3", "quick", json!({}))])]);
    let next = runtime_with(&model, &Counter::new(), &crashed, |b| tools(b, Gate::new().tool("slow").unwrap()));
    let session = next.open("s").await.unwrap();
    let error = session.resume().await.unwrap().unwrap().await.unwrap_err();
    assert!(
        matches!(&error, NoeticError::BudgetReached { limit, used, .. } if limit == "tool_calls" && used == "2"),
        "{error}"
    );
    assert_eq!((model.calls(), quick.count()), (1, 1), "the third call did not run");
    assert!(session.budget().paused.is_some());
    gate.release();
}

#[tokio::test]
async fn a_budget_set_by_another_worker_while_a_turn_runs_does_not_stop_that_turn_and_holds_from_the_next() {
    let (store, gate) = (MemoryLogStore::new(), Gate::new());
    let worker = |name: &str, model: &ScriptedModel, slow: Arc<dyn Tool>| {
        Runtime::builder()
            .model(Arc::new(model.clone()))
            .tool(slow)
            .log_store(Arc::new(store.clone()))
            .worker_id(name)
            .build()
            .unwrap()
    };
    let model_a = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "slow", json!({}))]),
        ModelResponse::text("done"),
        ModelResponse::text("never"),
    ]);
    let a = worker("a", &model_a, gate.tool("slow").unwrap());
    let b = worker("b", &ScriptedModel::new([]), Gate::new().tool("slow").unwrap());
    let on_a = a.open("s").await.unwrap();
    let turn = on_a.send("go").await.unwrap();
    gate.started().await;
    let budget = Budget::default().session(Limits::default().model_calls(2));
    b.open("s").await.unwrap().set_budget(budget).await.unwrap();
    gate.release();
    assert_eq!(turn.await.unwrap(), "done", "the running turn was not taken from its worker");
    on_a.idle().await;
    assert_eq!(on_a.budget().budget, budget, "the worker running the session heard of the budget");
    let error = on_a.send("more").await.unwrap().await.unwrap_err();
    assert!(matches!(&error, NoeticError::BudgetReached { limit, .. } if limit == "model_calls"), "{error}");
    assert_eq!(model_a.calls(), 2);
}
