//! The exact body and headers `AnthropicModel` sends to `POST /v1/messages`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::*;
use futures::StreamExt;
use noetic::model::{History, Item, Model, ModelRequest, ToolCall, ToolResult, ToolSpec};
use noetic::step::{ModelParams, ToolChoice};
use noetic_anthropic::{AnthropicConfig, AnthropicModel};
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer};

fn rich_request() -> ModelRequest {
    let call = |id: &str, args: &str| {
        Item::ToolCall(ToolCall { id: id.into(), name: "get_weather".into(), arguments: args.into() })
    };
    let result = |id: &str, content: &str, is_error| Item::ToolResult(ToolResult::new(id, content, is_error));
    ModelRequest {
        model: "anthropic/claude-sonnet-4-5".into(),
        instructions: Some("You are a weather assistant. Use the tools.".into()),
        context: vec![Item::developer("The user prefers Celsius.")],
        history: History::new(vec![
            Item::user("What's the weather in Oslo and Paris?"),
            Item::assistant("Let me look both up."),
            call("toolu_01", r#"{"city":"Oslo"}"#),
            call("toolu_02", r#"{"city": "Par"#),
            result("toolu_01", r#"{"celsius":-3.5}"#, false),
            result("toolu_02", "Invalid arguments: expected JSON", true),
            Item::assistant("Oslo is -3.5 °C; Paris failed."),
            Item::user("Try Paris again."),
        ]),
        tail: vec![Item::developer("Retry with valid JSON arguments.")],
        tools: Arc::from(vec![ToolSpec {
            name: "get_weather".into(),
            description: "Current weather in a city.".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
                .into(),
        }]),
        params: ModelParams {
            temperature: Some(0.2),
            top_p: Some(0.9),
            max_tokens: Some(1024),
            stop_sequences: vec!["</answer>".into(), "STOP".into()],
        },
        tool_choice: Some(ToolChoice::Named("get_weather".into())),
        output_schema: None,
        grammar: None,
        step: None,
    }
}

async fn sent_body(server: &MockServer) -> Value {
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1);
    requests[0].body_json().unwrap()
}

#[tokio::test]
async fn a_rich_request_is_sent_as_the_exact_messages_body_with_key_and_version_headers() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", KEY))
        .and(header("anthropic-version", "2023-06-01"))
        .and(header("content-type", "application/json"))
        .respond_with(json_response(&fixture("text_response.json")))
        .expect(1)
        .mount(&server)
        .await;
    model(&server).call(rich_request()).await.unwrap();
    assert_eq!(sent_body(&server).await, fixture_json("rich_request.json"));
}

#[tokio::test]
async fn a_streamed_request_is_the_same_body_with_stream_true() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(sse_response(&fixture("stream_text.sse"))).mount(&server).await;
    let mut stream = model(&server).stream(rich_request());
    while stream.next().await.is_some() {}
    let mut expected = fixture_json("rich_request.json");
    expected["stream"] = json!(true);
    assert_eq!(sent_body(&server).await, expected);
}

#[tokio::test]
async fn without_a_key_no_x_api_key_header_is_sent() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(json_response(&fixture("text_response.json"))).mount(&server).await;
    let model = AnthropicModel::new(AnthropicConfig::without_key().base_url(server.uri())).unwrap();
    model.call(hello()).await.unwrap();
    let requests = server.received_requests().await.unwrap();
    assert!(requests[0].headers.get("x-api-key").is_none());
    assert_eq!(requests[0].headers.get("anthropic-version").map(|v| v.as_bytes()), Some(&b"2023-06-01"[..]));
}

#[tokio::test]
async fn a_model_override_replaces_the_requested_model() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(json_response(&fixture("text_response.json"))).mount(&server).await;
    let model = AnthropicModel::new(config(&server).model_override("claude-haiku-4-5")).unwrap();
    let mut request = hello();
    request.model = "openai/gpt-4o-mini".into();
    model.call(request).await.unwrap();
    assert_eq!(sent_body(&server).await["model"], "claude-haiku-4-5");
}

#[tokio::test]
async fn configured_headers_are_sent_with_every_request_beside_the_key_and_version() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(header("x-api-key", KEY))
        .and(header("anthropic-version", "2023-06-01"))
        .and(header("anthropic-beta", "prompt-caching-2024-07-31"))
        .and(header("x-team", "agents"))
        .respond_with(json_response(&fixture("text_response.json")))
        .expect(2)
        .mount(&server)
        .await;
    let config = config(&server).header("anthropic-beta", "prompt-caching-2024-07-31").header("x-team", "agents");
    let model = AnthropicModel::new(config).unwrap();
    model.call(hello()).await.unwrap();
    let mut stream = model.stream(hello());
    while stream.next().await.is_some() {}
}
