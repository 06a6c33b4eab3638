//! A memory layer implements only the purposes it uses (`Recall`, `Gates`, `Lifecycle`, `Persistence`) and hands
//! them out from `MemoryLayer`'s accessors: each hook asks only the layers that have its purpose, and a stack
//! without a purpose skips its hook altogether.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::any::Any;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use noetic::layer::lifecycle;
use noetic::layer::{ModelCallParams, ScopeKey, ToolCallParams};
use noetic::prelude::*;
use serde_json::json;

type Log = Arc<Mutex<Vec<String>>>;

fn note(log: &Log, line: String) {
    log.lock().unwrap().push(line);
}

/// Recalls one item and notes what it stores.
struct Notes(Log);

impl MemoryLayer for Notes {
    fn id(&self) -> &str {
        "notes"
    }
    fn as_recall(&self) -> Option<&dyn Recall> {
        Some(self)
    }
}

impl Recall for Notes {
    fn recall_now(&self, _ctx: &HookContext<'_>, _budget: u32) -> Option<Result<Vec<Item>, NoeticError>> {
        note(&self.0, "notes recall".into());
        Some(Ok(vec![Item::developer("a note")]))
    }
    fn store<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        response: &'a ModelResponse,
    ) -> BoxFuture<'a, Result<(), NoeticError>> {
        note(&self.0, format!("notes store {}", response.text_output()));
        Box::pin(async { Ok(()) })
    }
}

/// Guides every tool call and reviews every response.
struct Guard(Log);

impl MemoryLayer for Guard {
    fn id(&self) -> &str {
        "guard"
    }
    fn slot(&self) -> Slot {
        Slot::STEERING
    }
    fn as_gates(&self) -> Option<&dyn Gates> {
        Some(self)
    }
}

impl Gates for Guard {
    fn before_tool_call_now(
        &self,
        _ctx: &HookContext<'_>,
        call: ToolCallParams<'_>,
    ) -> Option<Result<ToolCallAction, NoeticError>> {
        note(&self.0, format!("guard before {}", call.name));
        Some(Ok(ToolCallAction::guide("careful")))
    }
    fn after_model_call<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        _call: ModelCallParams<'a>,
    ) -> BoxFuture<'a, Result<SteeringDecision, NoeticError>> {
        note(&self.0, "guard after".into());
        Box::pin(async { Ok(SteeringDecision::allow()) })
    }
}

/// Sees executions start and end.
struct Counter(Log);

impl MemoryLayer for Counter {
    fn id(&self) -> &str {
        "counter"
    }
    fn as_lifecycle(&self) -> Option<&dyn Lifecycle> {
        Some(self)
    }
}

impl Lifecycle for Counter {
    fn init<'a>(&'a self, _ctx: &'a HookContext<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        note(&self.0, "counter init".into());
        Box::pin(async { Ok(()) })
    }
    fn on_complete<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        outcome: Outcome,
    ) -> BoxFuture<'a, Result<(), NoeticError>> {
        note(&self.0, format!("counter complete {outcome:?}"));
        Box::pin(async { Ok(()) })
    }
    fn dispose<'a>(&'a self, _ctx: &'a HookContext<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        note(&self.0, "counter dispose".into());
        Box::pin(async { Ok(()) })
    }
}

/// Keeps a fixed state and nothing else.
struct Keeper;

impl MemoryLayer for Keeper {
    fn id(&self) -> &str {
        "keeper"
    }
    fn as_persistence(&self) -> Option<&dyn Persistence> {
        Some(self)
    }
}

impl Persistence for Keeper {
    fn state(&self, _key: &ScopeKey) -> Option<Box<dyn Any + Send>> {
        Some(Box::new(42u32))
    }
}

fn tool_call() -> ToolCallParams<'static> {
    static ARGS: std::sync::LazyLock<serde_json::Value> = std::sync::LazyLock::new(|| json!({}));
    ToolCallParams { call_id: "c1", name: "search", args: &ARGS }
}

#[tokio::test]
async fn each_hook_asks_only_the_layers_that_have_its_purpose() {
    let log: Log = Arc::default();
    let layers: Vec<Arc<dyn MemoryLayer>> = vec![
        Arc::new(Notes(log.clone())),
        Arc::new(Guard(log.clone())),
        Arc::new(Counter(log.clone())),
        Arc::new(Keeper),
    ];
    let ctx = StepContext::builder().layers(layers).build();
    let response = ModelResponse::text("done");

    lifecycle::init(&HookContext::from(&ctx), ctx.layers()).await.unwrap();
    let recalled = lifecycle::recall(&HookContext::from(&ctx), ctx.layers()).await.unwrap();
    let gate = lifecycle::before_tool_call(&HookContext::from(&ctx), ctx.layers(), tool_call()).await.unwrap();
    let review = lifecycle::after_model_call(
        &ctx.hooks(),
        ctx.layers(),
        ModelCallParams { step_id: "s", model: "m", response: &response },
    )
    .await;
    lifecycle::store(&HookContext::from(&ctx), ctx.layers(), &response).await;
    lifecycle::complete(&HookContext::from(&ctx), ctx.layers(), Outcome::Success).await.unwrap();

    assert_eq!(recalled, vec![Item::developer("a note")]);
    assert_eq!(gate.decision, SteeringDecision::guide("careful"));
    assert_eq!(gate.layers, vec!["guard"], "only the gating layer decided");
    assert_eq!(review.unwrap().decision, SteeringDecision::allow());
    assert_eq!(
        *log.lock().unwrap(),
        vec![
            "counter init",
            "notes recall",
            "guard before search",
            "guard after",
            "notes store done",
            "counter complete Success",
            "counter dispose"
        ]
    );
    let state: Option<u32> = lifecycle::get_layer_state(ctx.layers(), ctx.execution_id(), "keeper");
    assert_eq!(state, Some(42));
    assert_eq!(lifecycle::get_layer_state::<u32>(ctx.layers(), ctx.execution_id(), "notes"), None);
}

#[tokio::test]
async fn a_stack_without_gates_allows_a_tool_call_without_asking_a_layer() {
    let log: Log = Arc::default();
    let layers: Vec<Arc<dyn MemoryLayer>> = vec![Arc::new(Notes(log.clone())), Arc::new(Counter(log.clone()))];
    let ctx = StepContext::builder().layers(layers).build();

    assert!(!ctx.layers().has_gates(), "neither layer gates");
    assert!(ctx.layers().has_recall() && ctx.layers().has_lifecycle());
    let gate = lifecycle::before_tool_call(&HookContext::from(&ctx), ctx.layers(), tool_call()).await.unwrap();

    assert_eq!(gate.decision, SteeringDecision::allow());
    assert!(gate.layers.is_empty());
    assert!(log.lock().unwrap().is_empty(), "no layer was asked: {:?}", log.lock().unwrap());
}

#[tokio::test]
async fn a_run_with_only_gating_layers_calls_no_lifecycle_or_recall_hook() {
    let log: Log = Arc::default();
    let model = ScriptedModel::new([ModelResponse::text("hi")]);
    let ctx = StepContext::builder()
        .model(Arc::new(model))
        .layers([Arc::new(Guard(log.clone())) as Arc<dyn MemoryLayer>])
        .build();
    let step = Step::<String, String>::llm("answer", "m").build().unwrap();

    let out = noetic::run(&step, "hello".to_owned(), &ctx).await.unwrap();

    assert_eq!(out, "hi");
    assert_eq!(*log.lock().unwrap(), vec!["guard after"], "the guard was asked about the response only");
}
