#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use noetic::testing::wire;
use noetic_core::model::ToolChoice;
use noetic_core::model::{History, Item, ModelRequest, Role, ToolCall, ToolResult, ToolSpec};
use serde_json::{Value, json};

use super::*;
use crate::request_body;

fn reference(request: &ModelRequest, stream: bool, model: Option<&str>) -> Value {
    let mut body = request_body(request, stream);
    if let Some(model) = model {
        body["model"] = json!(model);
    }
    body
}

/// The body `encode_body` makes, parsed.
fn encoded(request: &ModelRequest, stream: bool, model: Option<&str>, cache: &HistoryCache) -> Value {
    wire::json_of(encode_body(request, stream, model, cache).chunks()).unwrap()
}

/// Leading system items, then every merge rule: text + calls (the kit's first tool round), results then text in one
/// user message (results first), developer and system items inside the conversation, empty texts, two assistant
/// texts in a row.
fn items() -> Vec<Item> {
    let call = |id: &str| Item::ToolCall(ToolCall { id: id.into(), name: "search".into(), arguments: "{}".into() });
    let result = |id: &str| Item::ToolResult(ToolResult::ok(id, format!("r{id}")));
    let leading = Item::Message { role: Role::System, content: "early system".into() };
    let rest = [
        Item::developer("steering: be brief"),
        call("c3"),
        result("c3"),
        Item::Message { role: Role::System, content: "late system".into() },
        Item::assistant(""),
        Item::assistant("first"),
        Item::assistant("second"),
        Item::user("more"),
        Item::user("even more"),
        call("c4"),
        result("c4"),
        Item::assistant("done"),
    ];
    std::iter::once(leading).chain(wire::first_tool_round()).chain(rest).collect()
}

fn request(history: History, context: Vec<Item>) -> ModelRequest {
    ModelRequest {
        model: "anthropic/claude-x".into(),
        instructions: Some("Be helpful.".into()),
        context,
        history,
        tail: vec![Item::developer("correction")],
        tools: Arc::from(vec![ToolSpec {
            name: "search".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}).into(),
        }]),
        tool_choice: Some(ToolChoice::Required),
        ..ModelRequest::default()
    }
}

#[test]
fn every_growing_request_of_a_log_encodes_exactly_like_the_plain_body() {
    let contexts = [
        Vec::new(),
        vec![Item::developer("memory: x")],
        // A conversational context item: the history no longer starts the conversation (no reuse, still right).
        vec![Item::user("from memory")],
    ];
    for context in contexts {
        for model in [None, Some("claude-override")] {
            let cache = HistoryCache::default();
            for history in wire::growing_histories(items()) {
                let request = request(history, context.clone());
                assert_eq!(
                    encoded(&request, true, model, &cache),
                    reference(&request, true, model),
                    "{} items, context {context:?}, model {model:?}",
                    request.history.len()
                );
            }
        }
    }
}

#[test]
fn a_cached_log_is_reused_and_other_logs_never_see_its_bytes() {
    let cache = HistoryCache::default();
    let ctx = noetic::Context::new();
    for item in items() {
        ctx.push_item(item);
        encode_body(&request(ctx.history(), Vec::new()), false, None, &cache);
    }
    let (logs, bytes) = cache.usage();
    assert_eq!(logs, 1);
    assert!(bytes > 0, "the closed messages are cached");
    let fork = ctx.fork_child();
    fork.push_item(Item::user("fork only"));
    ctx.push_item(Item::user("main only"));
    for history in [fork.history(), ctx.history(), History::new(items())] {
        let request = request(history, Vec::new());
        assert_eq!(encoded(&request, false, None, &cache), reference(&request, false, None));
    }
}
