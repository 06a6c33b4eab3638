//! The request bytes, exactly: every body `encode_body` makes for a matrix of requests (a log growing item by item
//! through every merge rule, each server option, streamed or not, every optional field, text that needs escaping)
//! must be byte for byte the body the encoder made before request bodies became shared chunks. The committed
//! `fixtures/wire_bytes.txt` holds each body's length and FNV-1a hash, one line per body (the 640 bodies are 900 KB);
//! `NOETIC_BLESS_WIRE=1` writes it anew (only for a deliberate change of the wire format).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use noetic::model::{ContentBlock, History, ToolResult};
use noetic::prelude::*;
use noetic::testing::wire;
use noetic_openai::wire::{BodyOptions, HistoryCache, encode_body};

/// One body as bytes, with the cache an `OpenAiModel` keeps.
fn encode(request: &ModelRequest, stream: bool, options: &BodyOptions, cache: &HistoryCache) -> Vec<u8> {
    encode_body(request, stream, options, cache).to_vec()
}

fn call(id: &str, name: &str, args: &str) -> Item {
    Item::ToolCall(ToolCall { id: id.into(), name: name.into(), arguments: args.into() })
}

/// The kit's first tool round, then every other merge rule, then the kit's last tool round
/// with the provider's rich result.
fn items() -> Vec<Item> {
    let rich = ToolResult {
        blocks: vec![ContentBlock::text("The plot:"), ContentBlock::image_url("image/png", "https://x.test/p.png")],
        ..ToolResult::ok("c5", "The plot:\n[image image/png: https://x.test/p.png]")
    };
    let middle = [
        call("c3", "search", "{\"path\": \"fo"),
        Item::system("late system: answer in French"),
        Item::ToolResult(ToolResult::ok("c3", "")),
        Item::developer("<steering_feedback>be brief</steering_feedback>"),
        Item::assistant("first"),
        Item::assistant(""),
        Item::user("more"),
    ];
    wire::first_tool_round().into_iter().chain(middle).chain(wire::last_tool_round(rich)).collect()
}

/// The kit's request shapes, with a grammar from shape 2 on and, in shape 3, no context and a named tool choice
/// that names no tool.
fn request(shape: usize, history: History) -> ModelRequest {
    let mut request = wire::request_shape(shape, "openai/gpt-4o-mini", history);
    if shape >= 2 {
        request.grammar = Some("root ::= \"yes\" | \"no\"".into());
    }
    if shape == 3 {
        request.context = Vec::new();
        request.tool_choice = Some(ToolChoice::Named("missing".into()));
    }
    request
}

#[test]
fn a_request_hands_on_the_bytes_earlier_requests_encoded_instead_of_copying_them() {
    let cache = HistoryCache::default();
    let encode = |history| encode_body(&request(2, history), false, &BodyOptions::default(), &cache).chunks().to_vec();
    wire::check_chunk_sharing(encode).unwrap();
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
