//! The request bytes, exactly: every body `encode_body` makes for a matrix of requests (a log growing item by item
//! through every merge rule, leading system items, a model override, streamed or not, every optional field, text
//! that needs escaping) must be byte for byte the body the encoder made before request bodies became shared chunks.
//! The committed `fixtures/wire_bytes.txt` holds each body's length and FNV-1a hash, one line per body;
//! `NOETIC_BLESS_WIRE=1` writes it anew (only for a deliberate change of the wire format).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use noetic::model::{ContentBlock, History, Item, ModelRequest, ToolCall, ToolResult};
use noetic::step::ToolChoice;
use noetic::testing::wire;
use noetic_anthropic::{HistoryCache, encode_body};

/// One body as bytes, with the cache an `AnthropicModel` keeps.
fn encode(request: &ModelRequest, stream: bool, model: Option<&str>, cache: &HistoryCache) -> Vec<u8> {
    encode_body(request, stream, model, cache).to_vec()
}

fn call(id: &str, name: &str, args: &str) -> Item {
    Item::ToolCall(ToolCall { id: id.into(), name: name.into(), arguments: args.into() })
}

/// Leading system items, the kit's first tool round, then every other merge rule, then the kit's last tool round
/// with the provider's rich result.
fn items() -> Vec<Item> {
    let rich = ToolResult {
        blocks: vec![
            ContentBlock::text("The plot:"),
            ContentBlock::image_base64("image/png", "iVBORw0KGgo="),
            ContentBlock::image_url("image/jpeg", "https://example.com/a.jpg"),
            ContentBlock::image_base64("image/svg+xml", "PHN2Zz4="),
        ],
        ..ToolResult::ok("c5", "ignored when blocks are sent")
    };
    let leading = [Item::system("early system"), Item::developer("early developer")];
    let middle = [
        Item::developer("steering: be brief"),
        call("c3", "search", "{\"path\": \"fo"),
        Item::ToolResult(ToolResult::ok("c3", "")),
        Item::system("late system"),
        Item::assistant(""),
        Item::assistant("first"),
        Item::assistant("second"),
        Item::user("more"),
        Item::user("even more"),
    ];
    leading.into_iter().chain(wire::first_tool_round()).chain(middle).chain(wire::last_tool_round(rich)).collect()
}

/// The kit's request shapes; in shape 3, a conversational context item and a required tool choice.
fn request(shape: usize, history: History) -> ModelRequest {
    let mut request = wire::request_shape(shape, "anthropic/claude-x", history);
    if shape == 3 {
        request.context = vec![Item::user("context that is not a system message")];
        request.tool_choice = Some(ToolChoice::Required);
    }
    request
}

#[test]
fn a_request_hands_on_the_bytes_earlier_requests_encoded_instead_of_copying_them() {
    let cache = HistoryCache::default();
    let encode = |history| encode_body(&request(1, history), false, None, &cache).chunks().to_vec();
    wire::check_chunk_sharing(encode).unwrap();
}

/// Every body of the matrix.
fn bodies() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for shape in 0..4 {
        for model in [None, Some("claude-served")] {
            for stream in [false, true] {
                let cache = HistoryCache::default();
                for history in wire::growing_then_again_and_copied(items()) {
                    out.push(encode(&request(shape, history), stream, model, &cache));
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
