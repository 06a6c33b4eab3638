//! A full agent turn — runtime, a tool, the steering layer — against a local server speaking the Messages API.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use noetic::prelude::*;
use noetic::testing::{delete_file_tool, workspace_rule};
use serde_json::{Value, json};
use wiremock::matchers::{body_string_contains, method, path};
use wiremock::{Mock, MockServer};

fn tool_use_message() -> String {
    json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [
            {"type": "text", "text": "I'll free some space."},
            {"type": "tool_use", "id": "toolu_deny", "name": "deleteFile", "input": {"path": "/etc/passwd"}},
            {"type": "tool_use", "id": "toolu_ok", "name": "deleteFile", "input": {"path": "/workspace/tmp.txt"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 120, "output_tokens": 40},
    })
    .to_string()
}

fn final_message(text: &str) -> String {
    json!({
        "id": "msg_02", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 200, "output_tokens": 12},
    })
    .to_string()
}

/// The bodies of the agent's requests (judge requests left out).
async fn agent_bodies(server: &MockServer) -> Vec<Value> {
    let requests = server.received_requests().await.unwrap();
    requests
        .iter()
        .map(|r| r.body_json::<Value>().unwrap())
        .filter(|b| !b.to_string().contains(noetic::steering::ANSWER_FORMAT))
        .collect()
}

#[tokio::test]
async fn a_denied_call_is_reported_to_the_model_as_a_tool_result_and_the_turn_returns_the_final_answer() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(json_response(&tool_use_message()))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(json_response(&final_message("I removed /workspace/tmp.txt; /etc/passwd is off limits.")))
        .mount(&server)
        .await;

    let runs = Arc::new(AtomicUsize::new(0));
    let runtime = Runtime::builder()
        .model(Arc::new(model(&server)))
        .model_id("anthropic/claude-sonnet-4-5")
        .instructions("You clean up disks.")
        .tool(delete_file_tool(&runs).unwrap())
        .layer(steering(SteeringConfig::new([workspace_rule()])).unwrap() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    let answer = runtime.session("user-1").send("free some disk").await.unwrap().await.unwrap();

    assert_eq!(answer, "I removed /workspace/tmp.txt; /etc/passwd is off limits.");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the allowed call ran");
    let bodies = agent_bodies(&server).await;
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0]["model"], "claude-sonnet-4-5", "the anthropic/ prefix is stripped");
    assert_eq!(bodies[0]["system"], "You clean up disks.");
    assert_eq!(bodies[0]["tools"][0]["name"], "deleteFile");
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(
        messages[messages.len() - 2..],
        [
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "I'll free some space."},
                {"type": "tool_use", "id": "toolu_deny", "name": "deleteFile", "input": {"path": "/etc/passwd"}},
                {"type": "tool_use", "id": "toolu_ok", "name": "deleteFile", "input": {"path": "/workspace/tmp.txt"}},
            ]}),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_deny",
                 "content": "Steering denied: Deletion outside /workspace/ is not allowed.", "is_error": true},
                {"type": "tool_result", "tool_use_id": "toolu_ok",
                 "content": "deleted /workspace/tmp.txt", "is_error": false},
            ]}),
        ],
        "the second request carries the denial and the real result, each under its call id"
    );
}

#[tokio::test]
async fn a_judged_rule_asks_its_verdict_through_the_same_anthropic_model() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_string_contains("Respond with exactly"))
        .respond_with(json_response(&final_message("GUIDE: Say please.")))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(body_string_contains("Respond with exactly"))
        .respond_with(json_response(&final_message("ALLOW")))
        .with_priority(2)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(json_response(&final_message("Run the build.")))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(json_response(&final_message("Please run the build.")))
        .mount(&server)
        .await;

    let rule = SteeringRule::llm("polite", [Hook::AfterModelCall], LlmEval::sync("Answers must be polite."));
    let runtime = Runtime::builder()
        .model(Arc::new(claude_haiku(&server)))
        .layer(steering(SteeringConfig::new([rule])).unwrap() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    let answer = runtime.session("user-2").send("how do I build?").await.unwrap().await.unwrap();

    assert_eq!(answer, "Please run the build.");
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 4, "agent, judge (guide), agent again, judge (allow)");
    let retry: Value = requests[2].body_json().unwrap();
    let last = retry["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        last["content"].as_array().unwrap().last().unwrap()["text"],
        format!("{}Say please.", noetic_anthropic::DEVELOPER_PREFIX),
        "the judge's guidance reaches the model as a marked developer message"
    );
    assert!(requests.iter().all(|r| r.body_json::<Value>().unwrap()["model"] == "claude-haiku-4-5"));
}

/// A model that sends `claude-haiku-4-5` whatever the request names: the runtime's default model id and the
/// judge's default are OpenAI ids.
fn claude_haiku(server: &MockServer) -> noetic_anthropic::AnthropicModel {
    noetic_anthropic::AnthropicModel::new(config(server).model_override("claude-haiku-4-5")).unwrap()
}
