//! A panic anywhere in a turn ends that turn with an error naming where it happened, and leaves the session idle
//! with its history intact (no session stays busy forever).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use noetic::layer::{MemoryLayer, Outcome, ToolCallParams};
use noetic::prelude::*;
use noetic::testing::Counter;
use serde_json::json;

/// A layer that panics in one hook while armed.
struct Panicky {
    hook: &'static str,
    armed: AtomicBool,
}

impl Panicky {
    fn new(hook: &'static str) -> Arc<Self> {
        Arc::new(Panicky { hook, armed: AtomicBool::new(true) })
    }

    fn maybe_panic(&self, hook: &str) {
        if hook == self.hook && self.armed.load(Ordering::SeqCst) {
            panic!("boom in {hook}");
        }
    }
}

impl MemoryLayer for Panicky {
    fn id(&self) -> &str {
        "panicky"
    }

    fn as_gates(&self) -> Option<&dyn Gates> {
        Some(self)
    }

    fn as_lifecycle(&self) -> Option<&dyn Lifecycle> {
        Some(self)
    }
}

impl Gates for Panicky {
    fn before_tool_call<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        _call: ToolCallParams<'a>,
    ) -> BoxFuture<'a, Result<ToolCallAction, NoeticError>> {
        Box::pin(async move {
            self.maybe_panic("before_tool_call");
            Ok(ToolCallAction::Allow)
        })
    }
}

impl Lifecycle for Panicky {
    fn init<'a>(&'a self, _ctx: &'a HookContext<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        self.maybe_panic("init");
        Box::pin(async { Ok(()) })
    }

    fn on_complete<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        _outcome: Outcome,
    ) -> BoxFuture<'a, Result<(), NoeticError>> {
        Box::pin(async move {
            self.maybe_panic("on_complete");
            Ok(())
        })
    }
}

fn runtime(layer: &Arc<Panicky>, model: &ScriptedModel, runs: &Counter) -> Runtime {
    Runtime::builder()
        .model(Arc::new(model.clone()))
        .tool(runs.tool("touch", json!("touched")).unwrap())
        .layer(layer.clone() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap()
}

/// After the failed turn: the session is idle, `idle()` returns, and a new turn runs and answers.
async fn assert_released(session: &Session, layer: &Panicky, model: &ScriptedModel) {
    assert!(!session.is_busy(), "the session must be released");
    session.idle().await;
    layer.armed.store(false, Ordering::SeqCst);
    model.push(ModelResponse::text("fine again"));
    assert_eq!(session.send("again").await.unwrap().await.unwrap(), "fine again");
}

#[tokio::test]
async fn a_layer_panicking_in_init_fails_the_turn_naming_it_and_leaves_the_session_idle() {
    let layer = Panicky::new("init");
    let model = ScriptedModel::new([]);
    let runs = Counter::new();
    let session = runtime(&layer, &model, &runs).session("s");
    let err = session.send("hi").await.unwrap().await.unwrap_err().to_string();
    assert!(err.contains("init hook of memory layer 'panicky' panicked: boom in init"), "{err}");
    assert_eq!(model.calls(), 0);
    assert_released(&session, &layer, &model).await;
}

#[tokio::test]
async fn a_layer_panicking_in_on_complete_fails_the_turn_naming_it_and_keeps_the_history() {
    let layer = Panicky::new("on_complete");
    let model = ScriptedModel::new([ModelResponse::text("answer")]);
    let runs = Counter::new();
    let session = runtime(&layer, &model, &runs).session("s");
    let err = session.send("hi").await.unwrap().await.unwrap_err().to_string();
    assert!(err.contains("on_complete hook of memory layer 'panicky' panicked: boom in on_complete"), "{err}");
    assert_eq!(session.history(), vec![Item::user("hi"), Item::assistant("answer")], "history intact");
    assert_released(&session, &layer, &model).await;
}

#[tokio::test]
async fn a_gating_hook_that_panics_fails_the_turn_and_the_tool_does_not_run() {
    let layer = Panicky::new("before_tool_call");
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c1", "touch", json!({}))])]);
    let runs = Counter::new();
    let session = runtime(&layer, &model, &runs).session("s");
    let err = session.send("hi").await.unwrap().await.unwrap_err().to_string();
    assert!(err.contains("before_tool_call hook of memory layer 'panicky' panicked"), "{err}");
    assert_eq!(runs.count(), 0, "fail closed: the tool never ran");
    assert_released(&session, &layer, &model).await;
}
