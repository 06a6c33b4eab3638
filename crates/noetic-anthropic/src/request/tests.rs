use std::sync::Arc;

use noetic_core::model::ModelParams;
use noetic_core::model::{History, ToolCall};

use super::*;

fn call(id: &str, name: &str, args: &str) -> Item {
    Item::ToolCall(ToolCall { id: id.into(), name: name.into(), arguments: args.into() })
}

fn result(id: &str, content: &str, is_error: bool) -> Item {
    Item::ToolResult(ToolResult::new(id, content, is_error))
}

fn request(history: Vec<Item>) -> ModelRequest {
    ModelRequest { model: "claude-x".into(), history: History::new(history), ..Default::default() }
}

#[test]
fn a_plain_request_has_model_max_tokens_and_one_user_message() {
    let body = request_body(&request(vec![Item::user("hi")]), false);
    assert_eq!(
        body,
        json!({
            "model": "claude-x",
            "max_tokens": 4096,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        })
    );
}

#[test]
fn a_tool_result_with_images_sends_text_and_image_blocks_and_a_plain_one_sends_its_text() {
    // Each block beside what it becomes on the wire.
    let blocks = [
        (ContentBlock::text("The plot:"), json!({"type": "text", "text": "The plot:"})),
        (
            ContentBlock::image_base64("image/png", "iVBORw0KGgo="),
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}),
        ),
        (
            ContentBlock::image_url("image/jpeg", "https://example.com/a.jpg"),
            json!({"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}}),
        ),
        (
            ContentBlock::image_base64("image/svg+xml", "PHN2Zz4="),
            json!({"type": "text", "text": "[image image/svg+xml, 5 bytes]"}),
        ),
        (ContentBlock::json(json!({"n": 1})), json!({"type": "text", "text": "{\"n\":1}"})),
        (
            ContentBlock::resource("file:///a.txt", None, Some("hello".into())),
            json!({"type": "text", "text": "[resource file:///a.txt]\nhello"}),
        ),
    ];
    let (blocks, wire): (Vec<ContentBlock>, Vec<Value>) = blocks.into_iter().unzip();
    let rich = ToolResult { blocks, ..ToolResult::ok("c1", "ignored when blocks are sent") };
    let body = request_body(&request(vec![call("c1", "plot", "{}"), Item::ToolResult(rich)]), false);
    assert_eq!(body["messages"][1]["content"][0]["content"], Value::Array(wire));
    let text_only = ToolResult { blocks: vec![ContentBlock::text("a")], ..ToolResult::ok("c2", "a") };
    let body = request_body(&request(vec![call("c2", "say", "{}"), Item::ToolResult(text_only)]), false);
    assert_eq!(body["messages"][1]["content"][0]["content"], "a");
}

#[test]
fn openrouter_style_ids_lose_the_anthropic_prefix() {
    assert_eq!(model_id("anthropic/claude-sonnet-4-5"), "claude-sonnet-4-5");
    assert_eq!(model_id("claude-sonnet-4-5"), "claude-sonnet-4-5");
    assert_eq!(model_id("openai/gpt-4o"), "openai/gpt-4o");
}

#[test]
fn leading_system_and_developer_items_join_the_instructions_in_the_system_prompt() {
    let mut req = request(vec![Item::user("hi")]);
    req.instructions = Some("Be brief.".into());
    req.context = vec![Item::developer("Remember: the user is Ada."), Item::system("Today is Monday.")];
    let body = request_body(&req, false);
    assert_eq!(body["system"], "Be brief.\n\nRemember: the user is Ada.\n\nToday is Monday.");
    assert_eq!(body["messages"].as_array().map(Vec::len), Some(1));
}

#[test]
fn developer_messages_inside_the_conversation_become_prefixed_user_text_merged_with_the_turn() {
    let mut req = request(vec![Item::user("delete it"), call("c1", "rm", r#"{"p":"/x"}"#), result("c1", "ok", false)]);
    req.tail = vec![Item::developer("Be polite.")];
    let body = request_body(&req, false);
    assert_eq!(
        body["messages"][2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "ok", "is_error": false},
            {"type": "text", "text": format!("{DEVELOPER_PREFIX}Be polite.")},
        ]})
    );
}

#[test]
fn assistant_text_and_tool_calls_form_one_message_and_results_merge_into_one_user_message() {
    let req = request(vec![
        Item::user("weather?"),
        Item::assistant("Looking up."),
        call("a", "weather", r#"{"city":"Oslo"}"#),
        call("b", "weather", r#"{"city":"Rome"}"#),
        result("a", "-3", false),
        result("b", "boom", true),
    ]);
    let body = request_body(&req, true);
    assert_eq!(body["stream"], true);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Looking up."},
                {"type": "tool_use", "id": "a", "name": "weather", "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "b", "name": "weather", "input": {"city": "Rome"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "-3", "is_error": false},
                {"type": "tool_result", "tool_use_id": "b", "content": "boom", "is_error": true},
            ]},
        ])
    );
}

#[test]
fn tool_results_come_before_text_in_a_merged_user_message() {
    let req =
        request(vec![Item::user("go"), call("a", "t", "{}"), Item::developer("stop soon"), result("a", "x", false)]);
    let body = request_body(&req, false);
    assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
    assert_eq!(body["messages"][2]["content"][1]["type"], "text");
}

#[test]
fn malformed_or_non_object_arguments_are_wrapped_and_empty_arguments_are_an_empty_object() {
    assert_eq!(tool_input("{not json"), json!({"_raw": "{not json"}));
    assert_eq!(tool_input("[1,2]"), json!({"_raw": "[1,2]"}));
    assert_eq!(tool_input("  "), json!({}));
    assert_eq!(tool_input(r#"{"a":1}"#), json!({"a": 1}));
}

#[test]
fn empty_text_is_left_out_and_empty_messages_are_dropped() {
    let req = request(vec![Item::user("go"), Item::assistant(""), call("a", "t", "{}")]);
    let body = request_body(&req, false);
    assert_eq!(body["messages"][1]["content"], json!([{"type": "tool_use", "id": "a", "name": "t", "input": {}}]));
}

#[test]
fn params_tools_and_tool_choice_are_forwarded() {
    let mut req = request(vec![Item::user("hi")]);
    req.params = ModelParams {
        temperature: Some(0.2),
        top_p: Some(0.9),
        max_tokens: Some(100),
        stop_sequences: vec!["END".into()],
    };
    req.tools = Arc::from(vec![
        ToolSpec { name: "t".into(), description: "d".into(), parameters: json!({"type": "object"}).into() },
        ToolSpec { name: "u".into(), description: "e".into(), parameters: Value::Null.into() },
    ]);
    for (choice, wire) in [
        (ToolChoice::Auto, json!({"type": "auto"})),
        (ToolChoice::Required, json!({"type": "any"})),
        (ToolChoice::None, json!({"type": "none"})),
        (ToolChoice::Named("t".into()), json!({"type": "tool", "name": "t"})),
    ] {
        req.tool_choice = Some(choice);
        let body = request_body(&req, false);
        assert_eq!(body["tool_choice"], wire);
        assert_eq!(body["temperature"], json!(0.2));
        assert_eq!(body["top_p"], json!(0.9));
        assert_eq!(body["max_tokens"], 100);
        assert_eq!(body["stop_sequences"], json!(["END"]));
        assert_eq!(
            body["tools"],
            json!([
                {"name": "t", "description": "d", "input_schema": {"type": "object"}},
                {"name": "u", "description": "e", "input_schema": {"type": "object", "properties": {}}},
            ])
        );
    }
}

#[test]
fn tool_choice_without_tools_is_not_sent() {
    let mut req = request(vec![Item::user("hi")]);
    req.tool_choice = Some(ToolChoice::Required);
    let body = request_body(&req, false);
    assert!(body.get("tool_choice").is_none() && body.get("tools").is_none());
}

#[test]
fn an_output_schema_becomes_a_system_instruction() {
    let mut req = request(vec![Item::user("hi")]);
    req.output_schema = Some(json!({"type": "object", "required": ["x"]}));
    let body = request_body(&req, false);
    let system = body["system"].as_str().unwrap_or_default();
    assert!(system.starts_with("Answer with only a JSON value"), "{system}");
    assert!(system.contains(r#"{"required":["x"],"type":"object"}"#), "{system}");
}
