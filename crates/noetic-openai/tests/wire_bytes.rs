//! The request bytes, exactly: every body `encode_body` makes for a matrix of requests (a log growing item by item
//! through every merge rule, each server option, streamed or not, every optional field, text that needs escaping)
//! must be byte for byte the body the encoder made before request bodies became shared chunks. The committed
//! `fixtures/wire_bytes.txt` holds each body's length and FNV-1a hash, one line per body (the 640 bodies are 900 KB);
//! `NOETIC_BLESS_WIRE=1` writes it anew (only for a deliberate change of the wire format).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::sync::Arc;

use noetic::model::{ContentBlock, History, ToolResult, ToolSpec};
use noetic::prelude::*;
use noetic::testing::wire;
use noetic_openai::wire::{BodyOptions, HistoryCache, encode_body};
use serde_json::json;

/// One body as bytes, with the cache an `OpenAiModel` keeps.
fn encode(request: &ModelRequest, stream: bool, options: &BodyOptions, cache: &HistoryCache) -> Vec<u8> {
    encode_body(request, stream, options, cache).to_vec()
}

fn call(id: &str, name: &str, args: &str) -> Item {
    Item::ToolCall(ToolCall { id: id.into(), name: name.into(), arguments: args.into() })
}

/// A conversation through every merge rule, with text that needs escaping.
fn items() -> Vec<Item> {
    let rich = ToolResult {
        blocks: vec![ContentBlock::text("The plot:"), ContentBlock::image_url("image/png", "https://x.test/p.png")],
        ..ToolResult::ok("c5", "The plot:\n[image image/png: https://x.test/p.png]")
    };
    vec![
        Item::user("Find \"retry\" in src/ — naïve? \u{1F600} \\ back\tslash \u{1}\u{1f} </script>"),
        Item::assistant("Let me look."),
        call("c1", "search", r#"{"query": "retry", "path":"src/lib.rs"}"#),
        call("c2", "search", ""),
        Item::ToolResult(ToolResult::ok("c1", "src/config.rs:42: retry = RetryPolicy::new(3, ...)\n")),
        Item::ToolResult(ToolResult::error("c2", "arguments are not JSON")),
        call("c3", "search", "{\"path\": \"fo"),
        Item::system("late system: answer in French"),
        Item::ToolResult(ToolResult::ok("c3", "")),
        Item::developer("<steering_feedback>be brief</steering_feedback>"),
        Item::assistant("first"),
        Item::assistant(""),
        Item::user("more"),
        call("c4", "other", "[1, 2]"),
        call("c5", "plot", "{}"),
        Item::ToolResult(ToolResult::ok("c4", "ok")),
        Item::ToolResult(rich),
        Item::assistant("done: ünïcödé"),
    ]
}

fn tools() -> Arc<[ToolSpec]> {
    Arc::from(vec![
        ToolSpec {
            name: "search".into(),
            description: "Searches the workspace for \"text\".".into(),
            parameters: json!({
                "type": "object",
                "properties": {"query": {"type": "string", "description": "what to find"},
                               "path": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 1e3}},
                "required": ["query"], "additionalProperties": false
            }),
        },
        ToolSpec { name: "other".into(), description: String::new(), parameters: serde_json::Value::Null },
        ToolSpec { name: "plot".into(), description: "Plots.".into(), parameters: json!({"type": "object"}) },
    ])
}

/// The request shapes: bare, with instructions, context and tail, with every optional field.
fn request(shape: usize, history: History) -> ModelRequest {
    let mut request = ModelRequest { model: "openai/gpt-4o-mini".into(), history, ..ModelRequest::default() };
    if shape >= 1 {
        request.instructions = Some("You are a careful agent.\nNever touch \"/etc\".".into());
        request.tools = tools();
        request.tool_choice = Some(ToolChoice::Auto);
    }
    if shape >= 2 {
        request.context = vec![Item::developer("memory: the user is Ada"), Item::system("context system")];
        request.tail = vec![Item::developer("correction: shorter")];
        request.tool_choice = Some(ToolChoice::Named("search".into()));
        request.params = ModelParams {
            temperature: Some(0.2),
            top_p: Some(0.9),
            max_tokens: Some(256),
            stop_sequences: vec!["\n\nUser:".into(), "</answer>".into()],
        };
        request.output_schema = Some(json!({"type": "object", "properties": {"summary": {"type": "string"}}}));
        request.grammar = Some("root ::= \"yes\" | \"no\"".into());
    }
    if shape == 3 {
        request.instructions = Some(String::new());
        request.context = Vec::new();
        request.tool_choice = Some(ToolChoice::Named("missing".into()));
        request.params.temperature = Some(f32::NAN);
        request.tools = Arc::from(Vec::new());
    }
    request
}

/// Every body of the matrix, one per line.
fn bodies() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for shape in 0..4 {
        for (late, narrow, grammar, model) in [
            (false, false, false, None),
            (true, true, true, Some("served-name".to_owned())),
            (true, false, false, None),
            (false, true, true, None),
        ] {
            let options = BodyOptions { model, grammar, narrow_named_tool_choice: narrow, late_system_as_user: late };
            for stream in [false, true] {
                let cache = HistoryCache::default();
                for history in wire::growing_then_again_and_copied(items()) {
                    out.push(encode(&request(shape, history), stream, &options, &cache));
                }
            }
        }
    }
    out
}

#[test]
fn every_request_body_is_byte_for_byte_the_committed_one() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/wire_bytes.txt");
    wire::check_fixture(&path, &bodies()).unwrap();
}

#[test]
fn a_request_hands_on_the_bytes_earlier_requests_encoded_instead_of_copying_them() {
    let cache = HistoryCache::default();
    let encode = |history| encode_body(&request(2, history), false, &BodyOptions::default(), &cache).chunks().to_vec();
    wire::check_chunk_sharing(encode).unwrap();
}

#[tokio::test]
async fn the_client_sends_the_encoded_bytes_with_a_content_length() {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(
            wiremock::ResponseTemplate::new(200).set_body_raw(common::fixture("chat_text.json"), "application/json"),
        )
        .mount(&server)
        .await;
    let model = common::model_for(&server);
    let mut expected = Vec::new();
    let cache = HistoryCache::default();
    for history in wire::growing_histories(items()) {
        let request = request(2, history);
        expected.push(encode(&request, false, &BodyOptions::default(), &cache));
        model.call(request).await.unwrap();
    }
    let received = server.received_requests().await.unwrap();
    assert_eq!(received.len(), expected.len());
    for (request, expected) in received.iter().zip(&expected) {
        assert_eq!(&request.body, expected);
        assert_eq!(
            request.headers.get("content-length").map(|v| v.to_str().unwrap()),
            Some(&*expected.len().to_string())
        );
        assert!(request.headers.get("transfer-encoding").is_none(), "not sent chunked");
    }
}
