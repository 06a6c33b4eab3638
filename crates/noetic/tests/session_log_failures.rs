//! What a session does when its log cannot be written, and a resumed turn with an idempotent tool: nothing runs on
//! what the log does not hold; a call that was running is run again only when its tool says that is harmless.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::FlakyLog;
use noetic::agent::SteerError;
use noetic::agent::log::{LogStore, MemoryLogStore};
use noetic::model::ToolResult;
use noetic::prelude::*;
use noetic::testing::{Counter, Gate};
use serde_json::json;

fn runtime(model: &ScriptedModel, store: Arc<dyn LogStore>, tool: Arc<dyn Tool>) -> Runtime {
    Runtime::builder().model(Arc::new(model.clone())).tool(tool).log_store(store).build().unwrap()
}

fn results(history: &[Item]) -> Vec<ToolResult> {
    history
        .iter()
        .filter_map(|i| match i {
            Item::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn when_the_log_cannot_be_written_a_message_is_not_queued_and_a_turn_fails_before_its_tools_run() {
    let store = Arc::new(FlakyLog::default());
    let counter = Counter::new();
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c1", "quick", json!({}))])]);
    let runtime = runtime(&model, store.clone(), counter.tool("quick", json!("ok")).unwrap());
    let session = runtime.open("s").await.unwrap();
    store.hooks.fail_writes.store(true, Ordering::SeqCst);
    assert!(matches!(session.steer("hey").await, Err(SteerError::Store { .. })));
    assert_eq!(session.queued(), 0);
    let err = session.send("go").await.unwrap().await.unwrap_err();
    assert!(err.to_string().contains("disk full"), "{err}");
    assert_eq!(counter.count(), 0, "no tool runs on what could not be written");
    // The turn's start goes with its first response (one write): the model may have been asked once meanwhile,
    // never more.
    assert!(model.calls() <= 1, "the model was asked {} times", model.calls());
}

#[tokio::test]
async fn a_resumed_turn_runs_again_a_call_that_was_running_when_its_tool_is_idempotent() {
    let store = MemoryLogStore::new();
    let gate = Gate::new();
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c1", "slow", json!({}))])]);
    let first = runtime(&model, Arc::new(store.clone()), gate.tool("slow").unwrap());
    let _turn = first.session("s").send("go").await.unwrap();
    gate.started().await;
    // The process dies here: the next one goes on with what the log held.
    let crashed = store.copy();
    crashed.expire_leases();

    let reads = Counter::new();
    let counted = reads.tool("slow", json!("read again")).unwrap();
    let idempotent = Arc::new(
        FnTool::builder("slow", "Reads; running it twice is harmless.")
            .idempotent(true)
            .rich_handler(move |args, tcx| counted.call(args, tcx))
            .build()
            .unwrap(),
    );
    let next = runtime(&ScriptedModel::new([ModelResponse::text("done")]), Arc::new(crashed), idempotent);
    let session = next.open("s").await.unwrap();
    assert_eq!(session.resume().await.unwrap().unwrap().await.unwrap(), "done");
    assert_eq!(reads.count(), 1, "the idempotent call ran again");
    assert_eq!(results(&session.history()), [ToolResult::ok("c1", "read again")]);
    gate.release();
}

#[tokio::test]
async fn a_turn_whose_start_cannot_be_logged_fails_even_when_it_makes_no_write_of_its_own() {
    let store = Arc::new(FlakyLog::default());
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = ran.clone();
    // An agent without an `llm` step: nothing it does waits for the log before the turn's end.
    let agent = Step::run("echo", move |input: String, _ctx| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move { Ok(format!("echo {input}")) }
    })
    .build()
    .unwrap();
    let rt = Runtime::builder().model(Arc::new(ScriptedModel::new([]))).agent(agent).log_store(store.clone());
    let session = rt.build().unwrap().open("s").await.unwrap();
    store.hooks.fail_writes.store(true, Ordering::SeqCst);
    let err = session.send("hi").await.unwrap().await.unwrap_err();
    assert!(err.to_string().contains("could not be logged"), "{err}");
    assert!(err.to_string().contains("disk full"), "{err}");
    store.hooks.fail_writes.store(false, Ordering::SeqCst);
    assert_eq!(session.send("again").await.unwrap().await.unwrap(), "echo again", "the next turn is written");
    assert_eq!(ran.load(Ordering::SeqCst), 2);
}
