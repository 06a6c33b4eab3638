//! What the `llm` step tests share: a model id, a call log, contexts, tools that record their calls, and checks on
//! the tool results a conversation holds.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use noetic::model::{History, ScriptedModel, ToolCall, ToolResult};
use noetic::prelude::*;
use serde_json::json;

pub const MODEL: &str = "openai/gpt-4o-mini";

pub type Log = Arc<Mutex<Vec<String>>>;

pub fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

pub fn context(model: &ScriptedModel, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> StepContext {
    StepContext::builder().model(Arc::new(model.clone())).tools(tools).build()
}

pub fn assistant() -> Step<String, String> {
    Step::llm("assistant", MODEL).build().unwrap()
}

/// `add(a, b)`: integer arguments, records `add(a,b)` when it runs.
pub fn add_tool(log: &Log) -> Arc<dyn Tool> {
    let log = log.clone();
    Arc::new(
        FnTool::builder("add", "Adds two integers.")
            .input_schema(json!({
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"]
            }))
            .handler(move |args, _tcx| {
                let log = log.clone();
                async move {
                    let (a, b) = (args["a"].as_i64().unwrap(), args["b"].as_i64().unwrap());
                    log.lock().unwrap().push(format!("add({a},{b})"));
                    Ok::<_, ToolError>(json!(a + b))
                }
            })
            .build()
            .unwrap(),
    )
}

/// A tool taking any object that records its name and returns `"<name> done"`.
pub fn recording_tool(name: &'static str, log: &Log) -> Arc<dyn Tool> {
    let log = log.clone();
    Arc::new(
        FnTool::builder(name, "Records that it ran.")
            .handler(move |_args, _tcx| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push(name.to_owned());
                    Ok::<_, ToolError>(json!(format!("{name} done")))
                }
            })
            .build()
            .unwrap(),
    )
}

pub fn tool_results(history: &History) -> Vec<ToolResult> {
    history
        .iter()
        .filter_map(|i| match i {
            Item::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// Checks that every tool call in `items` has exactly one result with its id.
pub fn assert_every_call_has_one_result(items: &[Item]) {
    let calls: Vec<&str> = items
        .iter()
        .filter_map(|i| match i {
            Item::ToolCall(c) => Some(&*c.id),
            _ => None,
        })
        .collect();
    let results: Vec<&str> = items
        .iter()
        .filter_map(|i| match i {
            Item::ToolResult(r) => Some(&*r.call_id),
            _ => None,
        })
        .collect();
    assert!(!calls.is_empty(), "expected tool calls in {items:?}");
    for id in &calls {
        assert_eq!(results.iter().filter(|r| *r == id).count(), 1, "call {id} must have exactly one result: {items:?}");
    }
    assert_eq!(calls.len(), results.len(), "no result without a call: {items:?}");
}
pub fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall::new(id, name, arguments)
}
