//! Tool-declared memory (SPEC 5.5): a tool's `init` / `recall` become a memory layer (slot 110, scope execution, one
//! per memory id) whose text the model sees as a developer message while the tool is in scope.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use noetic::layer::Scope;
use noetic::prelude::*;
use noetic::tool::{TOOL_MEMORY_SLOT, ToolMemory, tool_memory_layers};
use serde_json::json;

type List = Arc<Mutex<Vec<String>>>;

/// A to-do tool whose list is its memory.
fn todo_tool(list: &List) -> Arc<dyn Tool> {
    let shown = list.clone();
    let added = list.clone();
    Arc::new(
        FnTool::builder("add_todo", "Adds an item to the to-do list.")
            .input_schema(json!({"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}))
            .memory(ToolMemory::new(
                move || shown.clone(),
                |list: &List| {
                    let list = list.lock().unwrap();
                    (!list.is_empty()).then(|| format!("To-do list: {}", list.join(", ")))
                },
            ))
            .handler(move |args, _| {
                added.lock().unwrap().push(args["item"].as_str().unwrap().to_owned());
                async { Ok(json!("added")) }
            })
            .build()
            .unwrap(),
    )
}

fn plain_tool(name: &str, memory: Option<ToolMemory>) -> Arc<dyn Tool> {
    let mut builder = FnTool::builder(name, "A tool.").handler(|_, _| async { Ok(json!("ok")) });
    if let Some(memory) = memory {
        builder = builder.memory(memory);
    }
    Arc::new(builder.build().unwrap())
}

fn context_texts(request: &ModelRequest) -> Vec<String> {
    request.context.iter().map(|i| i.to_string()).collect()
}

#[tokio::test]
async fn the_model_sees_the_tools_state_from_the_next_model_request_on() {
    let list: List = Arc::default();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "add_todo", json!({"item": "buy milk"}))]),
        ModelResponse::text("Added."),
        ModelResponse::text("You need milk."),
    ]);
    let runtime = Runtime::builder().model(Arc::new(model.clone())).tool(todo_tool(&list)).build().unwrap();
    let session = runtime.session("s");
    assert_eq!(session.send("remember milk").await.unwrap().await.unwrap(), "Added.");
    assert_eq!(session.send("what do I need?").await.unwrap().await.unwrap(), "You need milk.");
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[0].context.is_empty(), "an empty list recalls nothing: {:?}", requests[0].context);
    // Recall runs before every model request: the tool loop's second call already shows the new state.
    assert_eq!(requests[1].context.len(), 1, "{:?}", requests[1].context);
    assert!(context_texts(&requests[1])[0].contains("To-do list: buy milk"), "{:?}", context_texts(&requests[1]));
    assert_eq!(requests[2].context.len(), 1, "{:?}", requests[2].context);
    assert!(matches!(&requests[2].context[0], Item::Message { role: Role::Developer, .. }));
    assert!(context_texts(&requests[2])[0].contains("To-do list: buy milk"), "{:?}", context_texts(&requests[2]));
}

#[test]
fn the_layer_is_slot_110_scope_execution_one_per_memory_id_first_declaration_wins() {
    let calls = Arc::new(AtomicUsize::new(0));
    let first = calls.clone();
    let tools = vec![
        plain_tool(
            "a",
            Some(ToolMemory::new(move || first.fetch_add(1, Ordering::SeqCst), |_: &usize| None).id("shared")),
        ),
        plain_tool("b", Some(ToolMemory::new(|| (), |_: &()| Some("b".into())).id("shared"))),
        plain_tool("c", Some(ToolMemory::new(|| (), |_: &()| None))),
        plain_tool("d", None),
    ];
    let layers = tool_memory_layers(&tools);
    let ids: Vec<_> = layers.iter().map(|l| l.id().to_owned()).collect();
    assert_eq!(ids, ["tool:shared", "tool:c"]);
    for layer in &layers {
        assert_eq!(layer.slot(), TOOL_MEMORY_SLOT);
        assert_eq!(TOOL_MEMORY_SLOT.0, 110);
        assert_eq!(layer.scope(), Scope::Execution);
    }
}

#[tokio::test]
async fn init_runs_once_per_execution_so_each_turn_starts_from_a_fresh_state() {
    let inits = Arc::new(AtomicUsize::new(0));
    let counter = inits.clone();
    let memory = ToolMemory::new(
        move || counter.fetch_add(1, Ordering::SeqCst) + 1,
        |n: &usize| Some(format!("execution #{n}")),
    );
    let model = ScriptedModel::responder(|_| Ok(ModelResponse::text("ok")));
    let runtime =
        Runtime::builder().model(Arc::new(model.clone())).tool(plain_tool("counter", Some(memory))).build().unwrap();
    let session = runtime.session("s");
    session.send("one").await.unwrap().await.unwrap();
    session.send("two").await.unwrap().await.unwrap();
    assert_eq!(inits.load(Ordering::SeqCst), 2, "one init per turn");
    let texts: Vec<_> = model.requests().iter().map(context_texts).collect();
    assert!(texts[0][0].contains("execution #1"), "{texts:?}");
    assert!(texts[1][0].contains("execution #2"), "each turn starts from a fresh init: {texts:?}");
}

#[tokio::test]
async fn a_context_built_with_memory_tools_has_their_layers_without_duplicates() {
    let list: List = Arc::default();
    let tool = todo_tool(&list);
    let explicit = tool_memory_layers(std::slice::from_ref(&tool));
    let ctx = StepContext::builder().tools([tool.clone()]).layers(explicit).build();
    let ids: Vec<_> = ctx.layers().iter().map(|l| l.id().to_owned()).collect();
    assert_eq!(ids, ["tool:add_todo"], "a layer already given is not added again");
    let ctx = StepContext::builder().tools([tool]).build();
    assert_eq!(ctx.layers().len(), 1);
}

#[tokio::test]
async fn a_panicking_recall_is_skipped_and_a_panicking_init_fails_the_turn_with_a_clear_error() {
    let model = ScriptedModel::responder(|_| Ok(ModelResponse::text("ok")));
    let recall_panics = ToolMemory::new(|| (), |_: &()| -> Option<String> { panic!("broken recall") });
    let runtime =
        Runtime::builder().model(Arc::new(model.clone())).tool(plain_tool("r", Some(recall_panics))).build().unwrap();
    assert_eq!(runtime.session("s").send("hi").await.unwrap().await.unwrap(), "ok");
    assert!(model.requests()[0].context.is_empty());

    let init_panics = ToolMemory::new(|| -> usize { panic!("broken init") }, |_: &usize| None);
    let runtime = Runtime::builder().model(Arc::new(model)).tool(plain_tool("i", Some(init_panics))).build().unwrap();
    let error = runtime.session("s").send("hi").await.unwrap().await.unwrap_err();
    assert!(error.to_string().contains("the init of tool memory 'tool:i' panicked"), "{error}");
}
