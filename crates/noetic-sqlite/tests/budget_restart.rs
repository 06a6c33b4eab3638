//! Budgets on a SQLite session log (#31 item 4): a session paused over its budget stays paused in another
//! process that opens the file, knows what was spent, and continues once the limit is raised there.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;

use noetic::agent::SessionError;
use noetic::budget::{Budget, Limit, Limits};
use noetic::model::{ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::testing::Counter;
use noetic_sqlite::SqliteLogStore;
use serde_json::json;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("noetic-sqlite-budget-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn usage() -> Usage {
    Usage { input_tokens: 100, output_tokens: 10, cached_tokens: 0, cost: Some(0.01) }
}

async fn runtime(model: &ScriptedModel, counter: &Counter, path: &PathBuf, budget: Budget) -> Runtime {
    let store = Arc::new(SqliteLogStore::open(path).await.unwrap());
    let tool = counter.tool("work", json!("ok")).unwrap();
    Runtime::builder().model(Arc::new(model.clone())).tool(tool).log_store(store).budget(budget).build().unwrap()
}

#[tokio::test]
async fn a_session_paused_over_its_budget_stays_paused_after_a_restart_and_resumes_when_raised() {
    let path = scratch("restart").join("sessions.db");
    let counter = Counter::new();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "work", json!({}))]).with_usage(usage()),
        ModelResponse::tool_calls([("c2", "work", json!({}))]).with_usage(usage()),
        ModelResponse::text("never").with_usage(usage()),
    ]);
    let budget = Budget::default().session(Limits::default().tool_calls(1));
    let first = runtime(&model, &counter, &path, budget).await;
    let error = first.open("s").await.unwrap().send("go").await.unwrap().await.unwrap_err();
    assert!(matches!(&error, NoeticError::BudgetReached { limit, .. } if limit == "tool_calls"), "{error}");
    assert_eq!((model.calls(), counter.count()), (2, 1));
    drop(first);

    // Another process, with no budget of its own: the file holds the session's.
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c3", "work", json!({}))]).with_usage(usage())])
        .with_responder(|_| Ok(ModelResponse::text("done").with_usage(usage())));
    let again = runtime(&model, &counter, &path, Budget::default()).await;
    let session = again.open("s").await.unwrap();
    let status = session.budget();
    assert_eq!(status.paused.as_ref().map(|p| p.limit), Some(Limit::ToolCalls));
    assert_eq!((status.spent.model_calls, status.spent.tool_calls), (2, 1));
    assert!(status.budget.is_unlimited(), "a session without a budget of its own is held to the runtime's default");
    assert!(matches!(session.send("more").await, Err(SessionError::Paused { queued: Some(_), .. })));
    assert_eq!((model.calls(), counter.count()), (0, 1), "nothing ran in the paused session");
    assert!(session.ledger().iter().any(|e| e.budget.is_some()), "the ledger names the limit reached");

    let raised = Budget::default().session(Limits::default().tool_calls(3));
    let turn = session.raise_budget(raised).await.unwrap().expect("the queued message runs");
    assert_eq!(turn.await.unwrap(), "done");
    assert_eq!(counter.count(), 2);
    assert_eq!(session.budget().spent.tool_calls, 2);
}
