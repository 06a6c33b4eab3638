//! What memory-layer hooks see (#35 item 2): a `Context` carries no services; the hooks receive a `HookContext` —
//! the context and the services of the step context they run in. In a session turn that is the runtime's model
//! and the turn's own services (its session, budget meter, records), for the turn's root and for the children it
//! spawns; outside one, what the step context was built with.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use noetic::agent::default_agent;
use noetic::agent::log::MemoryLogStore;
use noetic::layer::ToolCallParams;
use noetic::model::{ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::tool::FnTool;
use serde_json::json;

/// What one hook call saw.
#[derive(Debug, Clone, PartialEq)]
struct Saw {
    hook: &'static str,
    root: bool,
    session: Option<String>,
    model: bool,
    meter: bool,
    records: bool,
}

/// Notes what each hook's `HookContext` gives.
#[derive(Default)]
struct Watch(Mutex<Vec<Saw>>);

impl Watch {
    fn note(&self, hook: &'static str, ctx: &HookContext<'_>) {
        self.0.lock().unwrap().push(Saw {
            hook,
            root: ctx.is_root(),
            session: ctx.session_key().map(str::to_owned),
            model: ctx.model().is_some(),
            meter: ctx.meter().is_some(),
            records: ctx.records().is_some(),
        });
    }

    fn seen(&self) -> Vec<Saw> {
        self.0.lock().unwrap().clone()
    }
}

impl MemoryLayer for Watch {
    fn id(&self) -> &str {
        "watch"
    }
    fn as_gates(&self) -> Option<&dyn Gates> {
        Some(self)
    }
    fn as_lifecycle(&self) -> Option<&dyn Lifecycle> {
        Some(self)
    }
}

impl Gates for Watch {
    fn before_tool_call_now(
        &self,
        ctx: &HookContext<'_>,
        _call: ToolCallParams<'_>,
    ) -> Option<Result<ToolCallAction, NoeticError>> {
        self.note("before_tool_call", ctx);
        Some(Ok(ToolCallAction::Allow))
    }
}

impl Lifecycle for Watch {
    fn init<'a>(&'a self, ctx: &'a HookContext<'a>) -> BoxFuture<'a, Result<(), NoeticError>> {
        self.note("init", ctx);
        Box::pin(async { Ok(()) })
    }

    fn on_spawn<'a>(
        &'a self,
        parent: &'a HookContext<'a>,
        child: &'a HookContext<'a>,
    ) -> BoxFuture<'a, Result<Vec<Item>, NoeticError>> {
        self.note("on_spawn parent", parent);
        self.note("on_spawn child", child);
        Box::pin(async { Ok(Vec::new()) })
    }
}

fn work() -> Arc<dyn Tool> {
    Arc::new(FnTool::builder("work", "Works.").handler(|_, _| async { Ok(json!("done")) }).build().unwrap())
}

/// Asks for `work` once, then answers.
fn model() -> ScriptedModel {
    ScriptedModel::responder(|request| {
        Ok(if request.messages().any(|m| matches!(m, Item::ToolResult(_))) {
            ModelResponse::text("finished")
        } else {
            ModelResponse::tool_calls([("c1", "work", json!({}))])
        })
    })
}

#[tokio::test]
async fn hooks_in_a_session_turn_see_the_runtimes_model_and_the_turns_session_meter_and_records_also_in_a_spawned_child()
 {
    let watch = Arc::new(Watch::default());
    let runtime = Runtime::builder()
        .model(Arc::new(model()))
        .tool(work())
        .layer(watch.clone())
        .agent(Step::spawn("helper", default_agent("m", None).unwrap()).build().unwrap())
        .log_store(Arc::new(MemoryLogStore::new()))
        .build()
        .unwrap();
    let session = runtime.open("s1").await.unwrap();
    assert_eq!(session.send("go").await.unwrap().await.unwrap(), "finished");

    let seen = watch.seen();
    let hooks: Vec<_> = seen.iter().map(|s| (s.hook, s.root)).collect();
    assert_eq!(
        hooks,
        [("init", true), ("on_spawn parent", true), ("on_spawn child", false), ("before_tool_call", false)],
        "{seen:?}"
    );
    for saw in &seen {
        assert_eq!(saw.session.as_deref(), Some("s1"), "{saw:?}");
        assert!(saw.model && saw.meter && saw.records, "every hook of the turn's tree sees its services: {saw:?}");
    }
}

#[tokio::test]
async fn hooks_outside_a_session_turn_see_what_the_step_context_was_built_with_and_a_bare_context_sees_none() {
    let watch = Arc::new(Watch::default());
    let ctx = StepContext::builder().model(Arc::new(model())).tools([work()]).layers([watch.clone() as _]).build();
    let agent = default_agent("m", None).unwrap();
    assert_eq!(noetic::run(&agent, "go".to_owned(), &ctx).await.unwrap(), "finished");
    let seen = watch.seen();
    assert_eq!(seen.iter().map(|s| s.hook).collect::<Vec<_>>(), ["init", "before_tool_call"]);
    for saw in &seen {
        assert_eq!((saw.session.as_deref(), saw.model, saw.meter, saw.records), (None, true, false, false), "{saw:?}");
    }

    // The `Context` alone carries no services: a hook called with one sees none.
    let watch = Watch::default();
    let bare = ctx.context().clone();
    watch.note("by hand", &HookContext::from(&bare));
    assert_eq!(
        watch.seen(),
        [Saw { hook: "by hand", root: true, session: None, model: false, meter: false, records: false }]
    );
}
