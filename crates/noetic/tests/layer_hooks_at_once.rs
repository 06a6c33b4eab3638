//! Layers that answer a hook at once (`recall_now`, `before_tool_call_now`, `after_model_call_now`) and layers
//! that must be awaited on mix: every layer is asked exactly once, in slot order, and the aggregate is the same
//! as if all had been awaited on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use noetic::layer::lifecycle;
use noetic::layer::{MemoryLayer, ModelCallParams, ToolCallParams};
use noetic::prelude::*;
use serde_json::json;

type Log = Arc<Mutex<Vec<String>>>;

/// A layer that guides with its id and recalls one item named after it, either at once or through its hooks.
struct Layer {
    id: &'static str,
    slot: u32,
    at_once: bool,
    panics: bool,
    log: Log,
}

impl Layer {
    fn asked(&self, how: &str) -> SteeringDecision {
        self.log.lock().unwrap().push(format!("{} {how}", self.id));
        assert!(!self.panics, "layer {} broke", self.id);
        SteeringDecision::guide(self.id)
    }
}

impl MemoryLayer for Layer {
    fn id(&self) -> &str {
        self.id
    }

    fn slot(&self) -> Slot {
        Slot(self.slot)
    }

    fn as_recall(&self) -> Option<&dyn Recall> {
        Some(self)
    }

    fn as_gates(&self) -> Option<&dyn Gates> {
        Some(self)
    }
}

impl Recall for Layer {
    fn recall_now(&self, _ctx: &HookContext<'_>, _budget: u32) -> Option<Result<Vec<Item>, NoeticError>> {
        self.at_once.then(|| {
            self.asked("recall at once");
            Ok(vec![Item::developer(self.id)])
        })
    }

    fn recall<'a>(&'a self, _ctx: &'a HookContext<'a>, _budget: u32) -> BoxFuture<'a, Result<Vec<Item>, NoeticError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.asked("recall");
            Ok(vec![Item::developer(self.id)])
        })
    }
}

impl Gates for Layer {
    fn before_tool_call_now(
        &self,
        _ctx: &HookContext<'_>,
        _call: ToolCallParams<'_>,
    ) -> Option<Result<ToolCallAction, NoeticError>> {
        self.at_once.then(|| Ok(self.asked("before at once").into()))
    }

    fn before_tool_call<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        _call: ToolCallParams<'a>,
    ) -> BoxFuture<'a, Result<ToolCallAction, NoeticError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            Ok(self.asked("before").into())
        })
    }

    fn after_model_call_now(
        &self,
        _ctx: &HookContext<'_>,
        _call: ModelCallParams<'_>,
    ) -> Option<Result<SteeringDecision, NoeticError>> {
        self.at_once.then(|| Ok(self.asked("after at once")))
    }

    fn after_model_call<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        _call: ModelCallParams<'a>,
    ) -> BoxFuture<'a, Result<SteeringDecision, NoeticError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            Ok(self.asked("after"))
        })
    }
}

fn context(log: &Log, layers: &[(&'static str, bool)], panicking: Option<&str>) -> StepContext {
    let layers = layers.iter().enumerate().map(|(i, &(id, at_once))| {
        let layer = Layer { id, slot: i as u32 * 10, at_once, panics: panicking == Some(id), log: log.clone() };
        Arc::new(layer) as Arc<dyn MemoryLayer>
    });
    StepContext::builder().layers(layers).build()
}

fn taken(log: &Log) -> Vec<String> {
    std::mem::take(&mut *log.lock().unwrap())
}

#[tokio::test]
async fn layers_answering_at_once_and_layers_awaited_on_are_each_asked_once_in_slot_order() {
    let log = Log::default();
    let ctx = context(&log, &[("a", true), ("b", false), ("c", true), ("d", false)], None);
    let args = json!({});

    let gate = lifecycle::before_tool_call(
        &HookContext::from(&ctx),
        ctx.layers(),
        ToolCallParams { call_id: "c1", name: "t", args: &args },
    )
    .await;
    let gate = gate.unwrap();
    assert_eq!(gate.decision, SteeringDecision::guide("a\nb\nc\nd"));
    assert_eq!(gate.layers, ["a", "b", "c", "d"]);
    assert_eq!(taken(&log), ["a before at once", "b before", "c before at once", "d before"]);

    let response = ModelResponse::text("hi");
    let review = ModelCallParams { step_id: "s", model: "m", response: &response };
    let gate = lifecycle::after_model_call(&HookContext::from(&ctx), ctx.layers(), review).await.unwrap();
    assert_eq!(gate.layers, ["a", "b", "c", "d"]);
    assert_eq!(taken(&log), ["a after at once", "b after", "c after at once", "d after"]);

    let recalled = lifecycle::recall(&HookContext::from(&ctx), ctx.layers()).await.unwrap();
    assert_eq!(recalled, ["a", "b", "c", "d"].map(Item::developer));
    assert_eq!(taken(&log), ["a recall at once", "b recall", "c recall at once", "d recall"]);
}

#[tokio::test]
async fn layers_that_all_answer_at_once_give_the_same_aggregate() {
    let log = Log::default();
    let ctx = context(&log, &[("a", true), ("b", true)], None);
    let args = json!({});
    let gate = lifecycle::before_tool_call(
        &HookContext::from(&ctx),
        ctx.layers(),
        ToolCallParams { call_id: "c1", name: "t", args: &args },
    )
    .await;
    assert_eq!(gate.unwrap().decision, SteeringDecision::guide("a\nb"));
    assert_eq!(
        lifecycle::recall(&HookContext::from(&ctx), ctx.layers()).await.unwrap(),
        ["a", "b"].map(Item::developer)
    );
    assert_eq!(taken(&log), ["a before at once", "b before at once", "a recall at once", "b recall at once"]);
}

#[tokio::test]
async fn a_layer_panicking_while_answering_at_once_fails_the_hook_naming_it() {
    let log = Log::default();
    let ctx = context(&log, &[("a", true), ("broken", true), ("c", false)], Some("broken"));
    let args = json!({});
    let error = lifecycle::before_tool_call(
        &HookContext::from(&ctx),
        ctx.layers(),
        ToolCallParams { call_id: "c1", name: "t", args: &args },
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(error.contains("before_tool_call hook of memory layer 'broken' panicked"), "{error}");
    assert!(error.contains("layer broken broke"), "{error}");
    assert_eq!(taken(&log), ["a before at once", "broken before at once"], "no layer after it was asked");
    let error = lifecycle::recall(&HookContext::from(&ctx), ctx.layers()).await.unwrap_err().to_string();
    assert!(error.contains("recall hook of memory layer 'broken' panicked"), "{error}");
}
