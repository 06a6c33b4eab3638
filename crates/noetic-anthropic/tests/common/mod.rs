//! Helpers shared by the integration tests: fixtures, a client pointed at a mock server, stream collection.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use futures::StreamExt;
use noetic::NoeticError;
use noetic::model::{Model, ModelRequest, ModelResponse, StreamDelta};
use noetic::step::{Backoff, RetryPolicy};
use noetic_anthropic::{AnthropicConfig, AnthropicModel};
use serde_json::Value;
use wiremock::{MockServer, ResponseTemplate};

/// The API key the tests send.
pub const KEY: &str = "sk-ant-test-key";

/// A fixture's text.
pub fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// A fixture parsed as JSON.
pub fn fixture_json(name: &str) -> Value {
    serde_json::from_str(&fixture(name)).unwrap()
}

/// Retries with delays of a millisecond, so tests never wait.
pub fn tiny_retry(attempts: u32) -> RetryPolicy {
    RetryPolicy::new(attempts, Backoff::Fixed, Duration::from_millis(1))
}

/// A configuration pointed at `server` with tiny retry delays.
pub fn config(server: &MockServer) -> AnthropicConfig {
    AnthropicConfig::new(KEY).base_url(server.uri()).retry(tiny_retry(3)).timeout(Duration::from_secs(30))
}

/// A model pointed at `server` with tiny retry delays.
pub fn model(server: &MockServer) -> AnthropicModel {
    AnthropicModel::new(config(server)).unwrap()
}

/// A 200 response with a JSON body.
pub fn json_response(body: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body.as_bytes().to_vec(), "application/json")
}

/// A 200 response with an SSE body.
pub fn sse_response(body: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body.as_bytes().to_vec(), "text/event-stream")
}

/// A response with `status` and an Anthropic error body.
pub fn error_response(status: u16, kind: &str, message: &str) -> ResponseTemplate {
    let body = serde_json::json!({"type": "error", "error": {"type": kind, "message": message}}).to_string();
    ResponseTemplate::new(status).set_body_raw(body.into_bytes(), "application/json")
}

/// A one-message request.
pub fn hello() -> ModelRequest {
    ModelRequest {
        model: "claude-sonnet-4-5".into(),
        history: noetic::model::History::new(vec![noetic::model::Item::user("Hello")]),
        ..Default::default()
    }
}

/// Everything a stream yields: the deltas before `Done`, then the final response or the error that ended it.
pub async fn collect(
    model: &AnthropicModel,
    request: ModelRequest,
) -> (Vec<StreamDelta>, Result<ModelResponse, NoeticError>) {
    let mut stream = model.stream(request);
    let mut deltas = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(StreamDelta::Done { response }) => {
                assert!(stream.next().await.is_none(), "nothing follows Done");
                return (deltas, Ok(response));
            }
            Ok(delta) => deltas.push(delta),
            Err(e) => {
                assert!(stream.next().await.is_none(), "nothing follows an error");
                return (deltas, Err(e));
            }
        }
    }
    panic!("the stream ended without Done or an error");
}

/// How many requests `server` received.
pub async fn request_count(server: &MockServer) -> usize {
    server.received_requests().await.map(|r| r.len()).unwrap_or(0)
}
