//! The request bytes, exactly: every body `encode_body` makes for a matrix of requests (a log growing item by item
//! through every merge rule, leading system items, a model override, streamed or not, every optional field, text
//! that needs escaping) must be byte for byte the body the encoder made before request bodies became shared chunks.
//! The committed `fixtures/wire_bytes.txt` holds each body's length and FNV-1a hash, one line per body;
//! `NOETIC_BLESS_WIRE=1` writes it anew (only for a deliberate change of the wire format).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use noetic::model::{ContentBlock, History, Item, ModelRequest, ToolCall, ToolResult, ToolSpec};
use noetic::step::{ModelParams, ToolChoice};
use noetic_anthropic::{HistoryCache, encode_body};
use noetic_http::ChunkedBody;
use serde_json::json;

/// One body as bytes, with the cache an `AnthropicModel` keeps.
fn encode(request: &ModelRequest, stream: bool, model: Option<&str>, cache: &HistoryCache) -> Vec<u8> {
    encode_body(request, stream, model, cache).to_vec()
}

fn call(id: &str, name: &str, args: &str) -> Item {
    Item::ToolCall(ToolCall { id: id.into(), name: name.into(), arguments: args.into() })
}

/// Leading system items, then every merge rule, with text that needs escaping.
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
    vec![
        Item::system("early system"),
        Item::developer("early developer"),
        Item::user("Find \"retry\" in src/ — naïve? \u{1F600} \\ back\tslash \u{1}\u{1f} </script>"),
        Item::assistant("Let me look."),
        call("c1", "search", r#"{"query": "retry", "path":"src/lib.rs"}"#),
        call("c2", "search", ""),
        Item::ToolResult(ToolResult::ok("c1", "src/config.rs:42: retry = RetryPolicy::new(3, ...)\n")),
        Item::ToolResult(ToolResult::error("c2", "arguments are not JSON")),
        Item::developer("steering: be brief"),
        call("c3", "search", "{\"path\": \"fo"),
        Item::ToolResult(ToolResult::ok("c3", "")),
        Item::system("late system"),
        Item::assistant(""),
        Item::assistant("first"),
        Item::assistant("second"),
        Item::user("more"),
        Item::user("even more"),
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

/// The request shapes: bare, with instructions and tools, with context, tail and every optional field.
fn request(shape: usize, history: History) -> ModelRequest {
    let mut request = ModelRequest { model: "anthropic/claude-x".into(), history, ..ModelRequest::default() };
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
    }
    if shape == 3 {
        request.instructions = Some(String::new());
        request.context = vec![Item::user("context that is not a system message")];
        request.tool_choice = Some(ToolChoice::Required);
        request.params.temperature = Some(f32::NAN);
        request.tools = Arc::from(Vec::new());
    }
    request
}

/// A body's length and 64-bit FNV-1a hash.
fn fingerprint(body: &[u8]) -> String {
    let hash = body.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
    format!("{} {hash:016x}", body.len())
}

/// Every body of the matrix.
fn bodies() -> Vec<String> {
    let mut out = Vec::new();
    for shape in 0..4 {
        for model in [None, Some("claude-served")] {
            for stream in [false, true] {
                let cache = HistoryCache::default();
                let ctx = noetic::Context::new();
                for item in items() {
                    ctx.push_item(item);
                    out.push(String::from_utf8(encode(&request(shape, ctx.history()), stream, model, &cache)).unwrap());
                }
                // The same log again from the start of a new turn, and a copy of it (a new log).
                out.push(String::from_utf8(encode(&request(shape, ctx.history()), stream, model, &cache)).unwrap());
                let copy = request(shape, History::new(items()));
                out.push(String::from_utf8(encode(&copy, stream, model, &cache)).unwrap());
            }
        }
    }
    out
}

#[test]
fn every_request_body_is_byte_for_byte_the_committed_one() {
    let path = format!("{}/tests/fixtures/wire_bytes.txt", env!("CARGO_MANIFEST_DIR"));
    let bodies = bodies();
    let made: Vec<String> = bodies.iter().map(|b| fingerprint(b.as_bytes())).collect();
    if std::env::var_os("NOETIC_BLESS_WIRE").is_some() {
        std::fs::write(&path, made.join("\n") + "\n").unwrap();
    }
    let committed = common::fixture("wire_bytes.txt");
    for (line, (fingerprint, expected)) in made.iter().zip(committed.lines()).enumerate() {
        assert_eq!(
            fingerprint,
            expected,
            "body {} of the matrix differs from the committed one: {}",
            line + 1,
            bodies[line]
        );
    }
    assert_eq!(made.len(), committed.lines().count());
}

/// The bytes `body` holds that `earlier` does not hold in the same memory: what this request newly wrote.
fn new_bytes(body: &ChunkedBody, earlier: &ChunkedBody) -> usize {
    let shared = |c: &bytes::Bytes| earlier.chunks().iter().any(|e| e.as_ptr() == c.as_ptr() && e.len() == c.len());
    body.chunks().iter().filter(|c| !shared(c)).map(|c| c.len()).sum()
}

#[test]
fn a_request_hands_on_the_bytes_earlier_requests_encoded_instead_of_copying_them() {
    let cache = HistoryCache::default();
    let ctx = noetic::Context::new();
    ctx.push_item(Item::user("find the retry policy"));
    let rounds = 300;
    let (mut earlier, mut written) = (None::<ChunkedBody>, 0);
    for round in 0..rounds {
        let args = format!(r#"{{"query":"retry","context":"{}"}}"#, "x".repeat(300));
        ctx.push_item(call(&format!("c{round}"), "search", &args));
        ctx.push_item(Item::ToolResult(ToolResult::ok(format!("c{round}"), "y".repeat(350))));
        let body = encode_body(&request(1, ctx.history()), false, None, &cache);
        if let Some(earlier) = &earlier {
            let same =
                |a: Option<&bytes::Bytes>, b: Option<&bytes::Bytes>| a.map(|a| a.as_ptr()) == b.map(|b| b.as_ptr());
            assert!(same(body.chunks().first(), earlier.chunks().first()), "round {round}: the head was encoded again");
            assert!(same(body.chunks().last(), earlier.chunks().last()), "round {round}: the suffix was encoded again");
            written += new_bytes(&body, earlier);
        }
        assert!(body.chunks().len() <= 14, "round {round}: {} chunks", body.chunks().len());
        earlier = Some(body);
    }
    let last = earlier.map_or(0, |b| b.len());
    assert!(written < 12 * last, "{written} bytes written over {rounds} requests, the last body is {last} bytes");
}
