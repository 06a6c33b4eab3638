//! Tool sets, sources that change while the runtime runs, and tool error kinds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use noetic::model::{ModelResponse, ScriptedModel, ToolErrorKind};
use noetic::prelude::*;
use noetic::testing::{Counter, EventCollector};
use noetic::tool::{DynamicTools, ToolSet};
use serde_json::json;

fn offered(model: &ScriptedModel) -> Vec<Vec<String>> {
    model.requests().iter().map(|r| r.tools.iter().map(|t| t.name.clone()).collect()).collect()
}

#[test]
fn two_tools_with_one_name_are_a_config_error_in_a_set_a_runtime_and_a_step() {
    let counter = Counter::new();
    let twice = || [counter.tool("x", json!(1)).unwrap(), counter.tool("x", json!(2)).unwrap()];
    let err = ToolSet::new(twice()).unwrap_err();
    assert_eq!(err.code, ConfigCode::DuplicateToolName);
    let err = Runtime::builder().model(Arc::new(ScriptedModel::new([]))).tools(twice()).build().err().unwrap();
    assert_eq!(err.code, ConfigCode::DuplicateToolName);
    assert!(err.to_string().contains("the runtime has two tools named 'x'"), "{err}");
    let err = Step::<String, String>::llm("a", "m").tools(twice()).build().err().unwrap();
    assert_eq!(err.code, ConfigCode::DuplicateToolName);
    let source = DynamicTools::new();
    source.add(counter.tool("y", json!(1)).unwrap()).unwrap();
    assert_eq!(source.add(counter.tool("y", json!(2)).unwrap()).unwrap_err().code, ConfigCode::DuplicateToolName);
}

#[tokio::test]
async fn a_tool_added_through_a_source_while_the_runtime_runs_is_offered_in_the_next_request_and_runs() {
    let source = Arc::new(DynamicTools::new());
    let counter = Counter::new();
    let model = ScriptedModel::new([
        ModelResponse::text("I have no tools yet."),
        ModelResponse::tool_calls([("c1", "late", json!({}))]),
        ModelResponse::text("Used it."),
    ]);
    let runtime = Runtime::builder()
        .model(Arc::new(model.clone()))
        .tool(counter.tool("fixed", json!("f")).unwrap())
        .tool_source(source.clone())
        .build()
        .unwrap();
    let session = runtime.session("s");
    session.send("first").await.unwrap().await.unwrap();
    source.add(counter.tool("late", json!("late result")).unwrap()).unwrap();
    assert_eq!(session.send("second").await.unwrap().await.unwrap(), "Used it.");
    assert_eq!(offered(&model), [vec!["fixed"], vec!["fixed", "late"], vec!["fixed", "late"]]);
    assert_eq!(counter.count(), 1, "the added tool ran");

    // Removed: later requests no longer offer it, and a call to it is an unknown tool.
    assert!(source.remove("late"));
    model.push(ModelResponse::tool_calls([("c2", "late", json!({}))]));
    model.push(ModelResponse::text("It is gone."));
    session.send("third").await.unwrap().await.unwrap();
    assert_eq!(offered(&model)[3], ["fixed"]);
    assert_eq!(counter.count(), 1);
    let last_result = session.history().into_iter().rev().find_map(|i| match i {
        Item::ToolResult(r) => Some(r),
        _ => None,
    });
    assert!(last_result.unwrap().content.starts_with("Error: unknown tool 'late'"));
}

#[tokio::test]
async fn the_kind_of_a_tool_failure_travels_with_its_completed_event_and_the_model_reads_the_message() {
    let denied = Arc::new(
        FnTool::builder("guarded", "Refuses.")
            .handler(|_, _| async {
                Err::<serde_json::Value, _>(ToolError::of(ToolErrorKind::PermissionDenied, "not your file"))
            })
            .build()
            .unwrap(),
    );
    let picky = Arc::new(
        FnTool::builder("picky", "Needs n.")
            .input_schema(json!({"type": "object", "required": ["n"]}))
            .handler(|_, _| async { Ok(json!(1)) })
            .build()
            .unwrap(),
    );
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([
            ("c1", "guarded", json!({})),
            ("c2", "nope", json!({})),
            ("c3", "picky", json!({})),
        ]),
        ModelResponse::text("ok"),
    ]);
    let runtime = Runtime::builder().model(Arc::new(model)).tools([denied as Arc<dyn Tool>, picky]).build().unwrap();
    let session = runtime.session("s");
    let mut events = EventCollector::of(&session);
    session.send("go").await.unwrap().await.unwrap();
    let kinds: Vec<(std::sync::Arc<str>, Option<ToolErrorKind>, std::sync::Arc<str>)> = events
        .kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::ToolCallCompleted { call_id, error_kind, output, .. } => Some((call_id, error_kind, output)),
            _ => None,
        })
        .collect();
    assert_eq!(kinds[0], ("c1".into(), Some(ToolErrorKind::PermissionDenied), "Error: not your file".into()));
    assert_eq!(kinds[1].1, Some(ToolErrorKind::NotFound));
    assert_eq!(kinds[2].1, Some(ToolErrorKind::InvalidArguments));
}
