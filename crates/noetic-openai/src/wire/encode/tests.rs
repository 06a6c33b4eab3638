#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use noetic::testing::wire;
use noetic_core::model::{Item, ModelRequest, Role, ToolCall, ToolResult, ToolSpec};
use serde_json::{Map, Value, json};

use super::*;
use crate::wire::request_body;

/// A `system` message as a `user` message starting `[system] `; any other message as it is.
fn demoted(message: Value) -> Value {
    if message["role"] != "system" {
        return message;
    }
    let content = message["content"].as_str().unwrap_or_default();
    json!({"role": "user", "content": format!("[system] {content}")})
}

/// Offers only the named tool and requires it.
fn narrow_to(body: &mut Map<String, Value>, name: &str) {
    let Some(Value::Array(tools)) = body.get_mut("tools") else { return };
    let Some(index) = tools.iter().position(|t| t["function"]["name"] == name) else { return };
    let tool = tools.swap_remove(index);
    *tools = vec![tool];
    body.insert("tool_choice".into(), Value::String("required".into()));
}

/// What the body must be: the plain JSON body with the options applied to it after the fact.
fn reference(request: &ModelRequest, stream: bool, options: &BodyOptions) -> Value {
    let mut body = request_body(request, stream);
    let obj = body.as_object_mut().unwrap();
    if let Some(model) = &options.model {
        obj.insert("model".into(), json!(model));
    }
    if !options.grammar {
        obj.remove("grammar");
    }
    if options.narrow_named_tool_choice
        && let Some(ToolChoice::Named(name)) = &request.tool_choice
    {
        narrow_to(obj, name);
    }
    if options.late_system_as_user
        && let Some(Value::Array(messages)) = obj.get_mut("messages")
    {
        for message in messages.iter_mut().skip(1) {
            *message = demoted(message.take());
        }
    }
    body
}

/// The body `encode_body` makes, parsed.
fn encoded(request: &ModelRequest, stream: bool, options: &BodyOptions, cache: &HistoryCache) -> Value {
    wire::json_of(encode_body(request, stream, options, cache).chunks()).unwrap()
}

/// A conversation that exercises every merge rule: text + calls in one message (the kit's first tool round), calls
/// alone, a second text, system and developer items in the middle, results, user messages.
fn items() -> Vec<Item> {
    let call = |id: &str| Item::ToolCall(ToolCall { id: id.into(), name: "search".into(), arguments: "{}".into() });
    let result = |id: &str| Item::ToolResult(ToolResult::ok(id, format!("r{id}")));
    let rest = [
        call("c3"),
        Item::Message { role: Role::System, content: "late system".into() },
        result("c3"),
        Item::developer("be brief"),
        Item::assistant("first"),
        Item::assistant("second"),
        Item::user("more"),
        call("c4"),
        result("c4"),
        Item::assistant("done"),
    ];
    wire::first_tool_round().into_iter().chain(rest).collect()
}

fn request(history: History, instructions: bool, context: bool) -> ModelRequest {
    ModelRequest {
        model: "gpt".into(),
        instructions: instructions.then(|| "Be helpful.".into()),
        context: if context { vec![Item::developer("memory: x")] } else { Vec::new() },
        history,
        tail: vec![Item::developer("correction")],
        tools: Arc::from(vec![
            ToolSpec { name: "search".into(), description: "d".into(), parameters: json!({"type": "object"}).into() },
            ToolSpec { name: "other".into(), description: "o".into(), parameters: json!({"type": "object"}).into() },
        ]),
        tool_choice: Some(ToolChoice::Named("search".into())),
        grammar: Some("root ::= x".into()),
        ..ModelRequest::default()
    }
}

#[test]
fn every_growing_request_of_a_log_encodes_exactly_like_the_plain_body_whatever_the_options() {
    for late_system_as_user in [false, true] {
        for (instructions, context) in [(false, false), (true, false), (false, true)] {
            for grammar in [false, true] {
                let options = BodyOptions {
                    model: Some("served-name".into()),
                    grammar,
                    narrow_named_tool_choice: late_system_as_user,
                    late_system_as_user,
                };
                let cache = HistoryCache::default();
                // One log growing item by item, as a session's does: each request reuses the cache.
                for history in wire::growing_histories(items()) {
                    let request = request(history, instructions, context);
                    assert_eq!(
                        encoded(&request, true, &options, &cache),
                        reference(&request, true, &options),
                        "{} items, options {options:?}, instructions {instructions}, context {context}",
                        request.history.len()
                    );
                }
                assert_eq!(cache.usage().0, 1, "one log, one entry");
            }
        }
    }
}

#[test]
fn requests_of_other_logs_or_with_leading_messages_that_moved_do_not_reuse_the_wrong_bytes() {
    let options = BodyOptions { late_system_as_user: true, ..BodyOptions::default() };
    let cache = HistoryCache::default();
    let ctx = noetic::Context::new();
    for item in items() {
        ctx.push_item(item);
    }
    // Cached with the history first in the body …
    let first = request(ctx.history(), false, false);
    assert_eq!(encoded(&first, false, &options, &cache), reference(&first, false, &options));
    // … then the same log behind instructions: its first message is no longer first (so it is demoted).
    let moved = request(ctx.history(), true, false);
    assert_eq!(encoded(&moved, false, &options, &cache), reference(&moved, false, &options));
    // A different log with the same items and one that diverged after a copy.
    let other = request(History::new(items()), false, false);
    assert_eq!(encoded(&other, false, &options, &cache), reference(&other, false, &options));
    let fork = ctx.fork_child();
    fork.push_item(Item::user("fork only"));
    ctx.push_item(Item::user("main only"));
    for history in [fork.history(), ctx.history()] {
        let request = request(history, false, false);
        assert_eq!(encoded(&request, false, &options, &cache), reference(&request, false, &options));
    }
}

#[test]
fn the_cache_stays_bounded_in_logs() {
    let cache = HistoryCache::default();
    for _ in 0..(noetic_http::LOG_CACHE_ENTRIES + 50) {
        let request = request(History::new(vec![Item::user("hi")]), false, false);
        encode_body(&request, false, &BodyOptions::default(), &cache);
    }
    assert_eq!(cache.usage().0, noetic_http::LOG_CACHE_ENTRIES);
}

/// An answer calling `search` with `escaped` as the arguments string's text (between its quotes, as a server wrote
/// it).
fn answer_with_arguments(escaped: &str) -> String {
    format!(
        r#"{{"id":"c","object":"chat.completion","model":"m","choices":[{{"index":0,"finish_reason":"tool_calls","message":{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_1","type":"function","function":{{"name":"search","arguments":"{escaped}"}}}}]}}}}]}}"#
    )
}

/// The request sending `call` back with its result.
fn sending_back(call: ToolCall) -> ModelRequest {
    let result = ToolResult::ok(call.id.clone(), "found");
    request(History::new(vec![Item::user("find it"), Item::ToolCall(call), Item::ToolResult(result)]), true, false)
}

#[test]
fn arguments_kept_as_the_answer_escaped_them_go_back_as_exactly_the_bytes_the_encoder_writes() {
    // (the arguments string as the server wrote it, whether it is kept)
    let cases = [
        (r#"{\"path\":\"src/lib.rs\",\"q\":\"say \\\"hi\\\"\\n\",\"x\":1}"#, true),
        (r#"{\"tab\":\"a\tb\",\"nl\":\"c\nd\",\"back\":\"e\\\\f\",\"cr\":\"\r\",\"bf\":\"\b\f\"}"#, true),
        (r#"{\"é\":\"ü — ☃\"}"#, true),
        // `\/` is JSON the encoder never writes (it writes `/`): escaped again instead.
        (r#"{\"url\":\"http:\/\/x\"}"#, false),
        // Not JSON: sent back wrapped, never as the answer held it.
        (r#"{\"a\":"#, true),
        // No escape at all: nothing to keep.
        ("{}", false),
        // Blank: the call gets `{}`, not what the answer held.
        (r#"\n "#, false),
    ];
    for (escaped, kept) in cases {
        let cache = HistoryCache::default();
        let response = crate::wire::parse_response_keeping(&answer_with_arguments(escaped), &cache).unwrap();
        assert_eq!(response, crate::wire::parse_response(&answer_with_arguments(escaped)).unwrap(), "{escaped}");
        assert_eq!(cache.1.len(), usize::from(kept), "{escaped}");
        let Some(Item::ToolCall(call)) = response.items.first().cloned() else { panic!("no call in {escaped}") };
        let request = sending_back(call);
        let options = BodyOptions::default();
        let with_kept = encode_body(&request, false, &options, &cache).to_vec();
        let escaped_again = encode_body(&request, false, &options, &HistoryCache::default()).to_vec();
        assert_eq!(String::from_utf8_lossy(&with_kept), String::from_utf8_lossy(&escaped_again), "{escaped}");
        assert_eq!(serde_json::from_slice::<Value>(&with_kept).unwrap(), reference(&request, false, &options));
        assert_eq!(cache.1.len(), 0, "taken when sent: {escaped}");
    }
}

#[test]
fn a_kept_wire_form_is_what_the_request_sends_for_that_very_call_only() {
    let call = ToolCall::new("call_1", "search", r#"{"q":"x"}"#);
    let cache = HistoryCache::default();
    // A marker instead of the real escaping shows which bytes went out.
    cache.1.note(&call.arguments, "MARK", String::new());
    let other = ToolCall::new("call_1", "search", r#"{"q":"x"}"#);
    let body = encode_body(&sending_back(other), false, &BodyOptions::default(), &cache).to_vec();
    assert!(!String::from_utf8_lossy(&body).contains("MARK"), "equal arguments of another call are escaped");
    let body = encode_body(&sending_back(call), false, &BodyOptions::default(), &HistoryCache::default()).to_vec();
    assert!(!String::from_utf8_lossy(&body).contains("MARK"));
    let call = ToolCall::new("call_1", "search", r#"{"q":"x"}"#);
    cache.1.note(&call.arguments, "MARK", String::new());
    let body = encode_body(&sending_back(call), false, &BodyOptions::default(), &cache).to_vec();
    assert!(String::from_utf8_lossy(&body).contains(r#""arguments":"MARK""#));
}
