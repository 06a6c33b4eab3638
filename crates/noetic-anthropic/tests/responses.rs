//! Parsed results of recorded response shapes, through `call` and through `stream`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use noetic::NoeticError;
use noetic::model::{FinishReason, Item, Model, ModelResponse, StreamDelta, ToolCall, Usage};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn server_answering(response: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(response).mount(&server).await;
    server
}

fn call(id: &str, name: &str, arguments: &str) -> Item {
    Item::ToolCall(ToolCall { id: id.into(), name: name.into(), arguments: arguments.into() })
}

#[tokio::test]
async fn a_text_response_becomes_one_assistant_message_with_usage() {
    let server = server_answering(json_response(&fixture("text_response.json"))).await;
    let response = model(&server).call(hello()).await.unwrap();
    assert_eq!(
        response,
        ModelResponse {
            items: vec![Item::assistant("Oslo is -3.5 °C right now — wrap up warm.")],
            usage: Usage { input_tokens: 2095, output_tokens: 503, cached_tokens: 0, cost: None },
            finish_reason: FinishReason::Stop,
            refusal: None,
            model: Some("claude-sonnet-4-5-20250929".into()),
        }
    );
}

#[tokio::test]
async fn a_tool_use_response_becomes_text_then_a_tool_call_with_cache_usage() {
    let server = server_answering(json_response(&fixture("tool_use_response.json"))).await;
    let response = model(&server).call(hello()).await.unwrap();
    assert_eq!(
        response,
        ModelResponse {
            items: vec![
                Item::assistant("I'll check the current weather in San Francisco for you."),
                call(
                    "toolu_01A09q90qw90lq917835lq9",
                    "get_weather",
                    r#"{"location":"San Francisco, CA","unit":"celsius"}"#
                ),
            ],
            usage: Usage { input_tokens: 472 + 100 + 1024, output_tokens: 89, cached_tokens: 1024, cost: None },
            finish_reason: FinishReason::ToolCalls,
            refusal: None,
            model: Some("claude-sonnet-4-5-20250929".into()),
        }
    );
}

#[tokio::test]
async fn a_streamed_text_response_yields_text_deltas_then_the_assembled_response() {
    let server = server_answering(sse_response(&fixture("stream_text.sse"))).await;
    let (deltas, response) = collect(&model(&server), hello()).await;
    let texts: Vec<_> = deltas
        .iter()
        .map(|d| match d {
            StreamDelta::Text { text } => text.as_str(),
            other => panic!("unexpected delta {other:?}"),
        })
        .collect();
    assert_eq!(texts, vec!["Oslo is -3.5 °C", " right now — wrap up ", "warm 🧣."]);
    assert_eq!(
        response.unwrap(),
        ModelResponse {
            items: vec![Item::assistant("Oslo is -3.5 °C right now — wrap up warm 🧣.")],
            usage: Usage { input_tokens: 25, output_tokens: 15, cached_tokens: 0, cost: None },
            finish_reason: FinishReason::Stop,
            refusal: None,
            model: Some("claude-sonnet-4-5-20250929".into()),
        }
    );
}

#[tokio::test]
async fn a_streamed_tool_use_yields_argument_pieces_and_assembles_each_call() {
    let server = server_answering(sse_response(&fixture("stream_tool_use.sse"))).await;
    let (deltas, response) = collect(&model(&server), hello()).await;
    let tool_pieces: Vec<_> = deltas
        .iter()
        .filter_map(|d| match d {
            StreamDelta::ToolCall { index, id, name, arguments } => {
                Some((*index, id.as_deref(), name.as_deref(), arguments.as_str()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        tool_pieces,
        vec![
            (0, Some("toolu_01T1x1fJ34qAmk2tNTrN7Up6"), Some("get_weather"), ""),
            (0, None, None, "{\"location\":"),
            (0, None, None, " \"San Fra"),
            (0, None, None, "ncisco, CA\", \"unit\": \"fah"),
            (0, None, None, "renheit\"}"),
            (1, Some("toolu_01NoArgs0000000000000000"), Some("get_time"), ""),
        ],
        "the id and name come with the first piece of each call"
    );
    assert_eq!(
        response.unwrap(),
        ModelResponse {
            items: vec![
                Item::assistant("Okay, let's check the weather for San Francisco, CA:"),
                call(
                    "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                    "get_weather",
                    r#"{"location": "San Francisco, CA", "unit": "fahrenheit"}"#
                ),
                call("toolu_01NoArgs0000000000000000", "get_time", "{}"),
            ],
            usage: Usage { input_tokens: 472 + 256, output_tokens: 89, cached_tokens: 256, cost: None },
            finish_reason: FinishReason::ToolCalls,
            refusal: None,
            model: Some("claude-sonnet-4-5-20250929".into()),
        }
    );
}

fn assert_provider_error(error: NoeticError, provider_message: &str, raw_contains: &str) {
    match error {
        NoeticError::ModelFailed { message, raw, .. } => {
            assert!(message.contains(provider_message), "{message}");
            assert!(raw.as_deref().is_some_and(|r| r.contains(raw_contains)), "{raw:?}");
        }
        other => panic!("expected ModelFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn an_error_object_in_a_200_response_is_a_typed_error_with_message_and_raw_body() {
    let body = fixture("error_in_200.json");
    let server = server_answering(json_response(&body)).await;
    let model = model(&server);
    let error = model.call(hello()).await.unwrap_err();
    assert_provider_error(error, "text content blocks must be non-empty", "req_011CSHoEeqs5C35K2UUqR7Fy");
    let (deltas, response) = collect(&model, hello()).await;
    assert!(deltas.is_empty());
    assert_provider_error(
        response.unwrap_err(),
        "text content blocks must be non-empty",
        "req_011CSHoEeqs5C35K2UUqR7Fy",
    );
    assert_eq!(request_count(&server).await, 2, "an invalid request is not retried");
}

#[tokio::test]
async fn an_error_event_mid_stream_ends_the_stream_with_the_provider_message() {
    let server = server_answering(sse_response(&fixture("stream_error_mid.sse"))).await;
    let (deltas, response) = collect(&model(&server), hello()).await;
    assert_eq!(deltas, vec![StreamDelta::Text { text: "Let me think".into() }]);
    let error = response.unwrap_err();
    assert!(!error.is_retryable(), "part of the answer was already delivered");
    assert_provider_error(error, "Overloaded", "overloaded_error");
}

#[tokio::test]
async fn a_body_that_is_not_json_is_a_typed_error_carrying_the_body() {
    let server =
        server_answering(ResponseTemplate::new(200).set_body_string("{\"type\":\"message\",\"content\":[")).await;
    let error = model(&server).call(hello()).await.unwrap_err();
    assert!(matches!(&error, NoeticError::ModelFailed { raw: Some(r), .. } if r.starts_with("{\"type\"")), "{error:?}");
}

#[tokio::test]
async fn a_server_that_ignores_stream_true_still_streams_the_whole_answer() {
    let server = server_answering(json_response(&fixture("tool_use_response.json"))).await;
    let model = model(&server);
    let (deltas, response) = collect(&model, hello()).await;
    assert_eq!(deltas.len(), 2, "{deltas:?}");
    assert_eq!(response.unwrap(), model.call(hello()).await.unwrap());
}
