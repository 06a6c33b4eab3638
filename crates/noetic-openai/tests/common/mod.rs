//! Helpers shared by the HTTP tests: fixtures and a client for a local server (a raw one, for what wiremock cannot
//! do, is the test kit's `noetic::testing::raw_http`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::time::Duration;

use noetic::prelude::*;
use noetic_openai::{OpenAiConfig, OpenAiModel};
use serde_json::Value;
use wiremock::MockServer;

/// The base URL (`…/v1`) of the local llama.cpp server, or `None` (after saying why) when no server answers and
/// none is required (`NOETIC_E2E_REQUIRED=1` turns a missing server into a failure). `NOETIC_LOCAL_LLM_URL`
/// overrides the URL (default `http://127.0.0.1:18080/v1`, or the port in `NOETIC_LOCAL_LLM_PORT`).
pub async fn local_server() -> Option<String> {
    let base = std::env::var("NOETIC_LOCAL_LLM_URL").unwrap_or_else(|_| match std::env::var("NOETIC_LOCAL_LLM_PORT") {
        Ok(port) => format!("http://127.0.0.1:{port}/v1"),
        Err(_) => "http://127.0.0.1:18080/v1".to_owned(),
    });
    let health = format!("{}/health", base.trim_end_matches('/').trim_end_matches("/v1"));
    let up = match reqwest::Client::new().get(&health).timeout(Duration::from_secs(5)).send().await {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(format!("{health} answered {}", r.status())),
        Err(e) => Err(format!("{health} did not answer ({e})")),
    };
    if let Err(why) = up {
        let reason = format!(
            "no local llama.cpp server: {why}; start one with `scripts/local-llm.sh setup && scripts/local-llm.sh start`"
        );
        if std::env::var("NOETIC_E2E_REQUIRED").is_ok_and(|v| v == "1") {
            panic!("NOETIC_E2E_REQUIRED=1 but {reason}");
        }
        // Straight to stderr: the harness captures print macros, and a skip must be visible.
        let _ = writeln!(std::io::stderr(), "skipped: {reason}");
        return None;
    }
    Some(base)
}

/// A committed fixture's text.
pub fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
}

/// A committed JSON fixture, parsed.
pub fn fixture_json(name: &str) -> Value {
    serde_json::from_str(&fixture(name)).unwrap()
}

/// Retries with 1 ms delays, so tests stay fast without pausing time.
pub fn fast_retry(attempts: u32) -> RetryPolicy {
    RetryPolicy::new(attempts, Backoff::Fixed, Duration::from_millis(1)).max_delay(Duration::from_millis(50))
}

/// A config pointing at a local server's `/v1`, with a key and fast retries.
pub fn config_for(base: &str) -> OpenAiConfig {
    OpenAiConfig::new().base_url(format!("{base}/v1")).api_key("sk-test").retry(fast_retry(3))
}

/// A model for a wiremock server.
pub fn model_for(server: &MockServer) -> OpenAiModel {
    OpenAiModel::new(config_for(&server.uri())).unwrap()
}

/// The JSON bodies the server received, in order.
pub async fn received_bodies(server: &MockServer) -> Vec<Value> {
    server.received_requests().await.unwrap().iter().map(|r| r.body_json::<Value>().unwrap()).collect()
}

/// Every delta of a stream, failing the test on an error.
pub async fn collect(model: &OpenAiModel, request: ModelRequest) -> Vec<noetic::model::StreamDelta> {
    use futures::StreamExt;
    model.stream(request).map(|d| d.unwrap()).collect().await
}

/// The response a stream ends with (its last delta must be `Done`).
pub fn done(deltas: &[noetic::model::StreamDelta]) -> ModelResponse {
    match deltas.last() {
        Some(noetic::model::StreamDelta::Done { response }) => response.clone(),
        other => panic!("the stream must end with Done, got {other:?}"),
    }
}

/// A user request for `model`.
pub fn user_request(text: &str) -> ModelRequest {
    ModelRequest {
        model: "openai/gpt-4o-mini".into(),
        history: noetic::model::History::new(vec![Item::user(text)]),
        ..ModelRequest::default()
    }
}
