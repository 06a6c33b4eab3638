//! Rich tool results: content blocks and structured data beside the text every provider shows.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use noetic::model::{ContentBlock, ModelResponse, ScriptedModel, ToolResult};
use noetic::prelude::*;
use noetic::testing::EventCollector;
use noetic::tool::ToolOutput;
use serde_json::{Value, json};

fn plot_tool() -> Arc<dyn Tool> {
    Arc::new(
        FnTool::builder("plot", "Plots the sales of a month.")
            .rich_handler(|_, _| async {
                Ok(ToolOutput::text("Sales per day in May:")
                    .with_block(ContentBlock::image_base64("image/png", "iVBORw0KGgo="))
                    .with_structured(json!({"total": 1234})))
            })
            .build()
            .unwrap(),
    )
}

fn tool_results(items: &[Item]) -> Vec<ToolResult> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_tool_returning_an_image_gives_the_model_its_text_and_keeps_the_blocks_and_data_in_the_result() {
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c1", "plot", json!({}))]), ModelResponse::text("ok")]);
    let runtime = Runtime::builder().model(Arc::new(model.clone())).tool(plot_tool()).build().unwrap();
    let session = runtime.session("s");
    let mut events = EventCollector::of(&session);
    session.send("plot May").await.unwrap().await.unwrap();

    let results = tool_results(model.requests()[1].history.as_slice());
    assert_eq!(results.len(), 1);
    let result = &results[0];
    assert_eq!(&*result.content, "Sales per day in May:\n[image image/png, 8 bytes]");
    assert!(!result.is_error);
    assert_eq!(
        result.blocks,
        [ContentBlock::text("Sales per day in May:"), ContentBlock::image_base64("image/png", "iVBORw0KGgo=")]
    );
    assert_eq!(result.structured, Some(json!({"total": 1234})));
    let completed = events.kinds().into_iter().find_map(|k| match k {
        EventKind::ToolCallCompleted { output, error_kind, .. } => Some((output, error_kind)),
        _ => None,
    });
    assert_eq!(completed, Some((result.content.clone(), None)), "the event carries the text the model saw");
}

#[tokio::test]
async fn a_tool_with_an_output_schema_that_returns_no_structured_data_gets_an_error_result() {
    let tool = Arc::new(
        FnTool::builder("count", "Counts.")
            .output_schema(json!({"type": "object", "required": ["n"]}))
            .rich_handler(|_, _| async { Ok(ToolOutput::text("three")) })
            .build()
            .unwrap(),
    );
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "count", json!({}))]), ModelResponse::text("ok")]);
    let runtime = Runtime::builder().model(Arc::new(model.clone())).tool(tool).build().unwrap();
    runtime.session("s").send("count").await.unwrap().await.unwrap();
    let result = tool_results(model.requests()[1].history.as_slice()).remove(0);
    assert!(result.is_error);
    assert_eq!(
        result.content,
        "Error: tool 'count' returned an invalid result: it declares an output schema but returned no structured data"
            .into()
    );
}

#[tokio::test]
async fn a_tool_step_reads_its_output_from_the_structured_data_or_else_the_text() {
    let step: Step<Value, Value> = Step::tool("plot", plot_tool()).build().unwrap();
    assert_eq!(step.execute(json!({}), &StepContext::new()).await.unwrap(), json!({"total": 1234}));
    let texts = Arc::new(
        FnTool::builder("say", "Says two lines.")
            .rich_handler(|_, _| async { Ok(ToolOutput::blocks([ContentBlock::text("a"), ContentBlock::text("b")])) })
            .build()
            .unwrap(),
    );
    let step: Step<Value, String> = Step::tool("say", texts).build().unwrap();
    assert_eq!(step.execute(json!({}), &StepContext::new()).await.unwrap(), "a\nb");
}

#[test]
fn a_plain_result_serialises_without_the_rich_fields_and_an_old_result_reads_back() {
    let plain = ToolResult::ok("c1", "sunny");
    assert_eq!(serde_json::to_value(&plain).unwrap(), json!({"call_id": "c1", "content": "sunny", "is_error": false}));
    let old: Item =
        serde_json::from_value(json!({"type": "tool_result", "call_id": "c1", "content": "sunny", "is_error": false}))
            .unwrap();
    assert_eq!(old, Item::ToolResult(plain));
    let rich = ToolResult {
        blocks: vec![ContentBlock::resource("file:///notes.md", Some("text/markdown".into()), None)],
        structured: Some(json!({"lines": 3})),
        ..ToolResult::ok("c2", "[resource file:///notes.md]")
    };
    let json = serde_json::to_value(&rich).unwrap();
    assert_eq!(json["blocks"], json!([{"type": "resource", "uri": "file:///notes.md", "media_type": "text/markdown"}]));
    assert_eq!(serde_json::from_value::<ToolResult>(json).unwrap(), rich);
}
