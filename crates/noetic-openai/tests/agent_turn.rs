//! Full agent turns — runtime, tools and the steering layer — against a local server speaking chat completions.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{model_for, received_bodies};
use noetic::prelude::*;
use noetic::testing::{delete_file_tool, workspace_rule};
use serde_json::{Value, json};
use wiremock::matchers::{body_string_contains, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn completion(message: Value, finish_reason: &str) -> ResponseTemplate {
    let body = json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1742205538,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    });
    ResponseTemplate::new(200).set_body_json(body)
}

fn delete_calls() -> ResponseTemplate {
    completion(
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_etc", "type": "function", "function": {"name": "deleteFile", "arguments": "{\"path\":\"/etc/passwd\"}"}},
            {"id": "call_tmp", "type": "function", "function": {"name": "deleteFile", "arguments": "{\"path\":\"/workspace/tmp.txt\"}"}}
        ]}),
        "tool_calls",
    )
}

fn answer(text: &str) -> ResponseTemplate {
    completion(json!({"role": "assistant", "content": text}), "stop")
}

/// The agent's requests answer with tool calls first, then with `final_answer`.
async fn mount_agent(server: &MockServer, final_answer: &str) {
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(delete_calls())
        .up_to_n_times(1)
        .mount(server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(answer(final_answer))
        .mount(server)
        .await;
}

fn tool_calls_message() -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_etc", "type": "function", "function": {"name": "deleteFile", "arguments": "{\"path\":\"/etc/passwd\"}"}},
        {"id": "call_tmp", "type": "function", "function": {"name": "deleteFile", "arguments": "{\"path\":\"/workspace/tmp.txt\"}"}}
    ]})
}

#[tokio::test]
async fn a_denied_tool_call_reaches_the_model_as_a_steering_denied_result_and_the_turn_returns_the_answer() {
    let server = MockServer::start().await;
    mount_agent(&server, "Removed /workspace/tmp.txt; /etc/passwd is off limits.").await;
    let runs = Arc::new(AtomicUsize::new(0));
    let runtime = Runtime::builder()
        .model(Arc::new(model_for(&server)))
        .instructions("You clean up files.")
        .tool(delete_file_tool(&runs).unwrap())
        .layer(steering(SteeringConfig::new([workspace_rule()])).unwrap() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    let answer = runtime.session("user-1").send("free some disk").await.unwrap().await.unwrap();
    assert_eq!(answer, "Removed /workspace/tmp.txt; /etc/passwd is off limits.");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the allowed call ran");

    let bodies = received_bodies(&server).await;
    assert_eq!(bodies.len(), 2);
    let tools = json!([{"type": "function", "function": {
        "name": "deleteFile",
        "description": "Deletes a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    }}]);
    assert_eq!(bodies[0]["model"], "openai/gpt-4o-mini");
    assert_eq!(bodies[0]["tools"], tools);
    assert_eq!(
        bodies[1]["messages"],
        json!([
            {"role": "system", "content": "You clean up files."},
            {"role": "user", "content": "free some disk"},
            tool_calls_message(),
            {"role": "tool", "tool_call_id": "call_etc", "content": "Steering denied: Deletion outside /workspace/ is not allowed."},
            {"role": "tool", "tool_call_id": "call_tmp", "content": "deleted /workspace/tmp.txt"}
        ])
    );
}

#[tokio::test]
async fn an_llm_judged_rule_is_judged_through_the_same_provider() {
    let server = MockServer::start().await;
    // The judge's prompt always ends with the answer-format line; route it to a judge reply.
    Mock::given(method("POST"))
        .and(body_string_contains("Respond with exactly"))
        .respond_with(answer("DENY: never delete system files."))
        .with_priority(1)
        .mount(&server)
        .await;
    mount_agent(&server, "Done.").await;
    let runs = Arc::new(AtomicUsize::new(0));
    let judge = LlmEval::sync("Deny deleting anything outside /workspace/.").model("openai/gpt-4o-mini");
    let rule = SteeringRule::llm("judge-deletions", [Hook::BeforeToolCall], judge);
    let runtime = Runtime::builder()
        .model(Arc::new(model_for(&server)))
        .tool(delete_file_tool(&runs).unwrap())
        .layer(steering(SteeringConfig::new([rule])).unwrap() as Arc<dyn MemoryLayer>)
        .build()
        .unwrap();
    assert_eq!(runtime.session("user-1").send("free some disk").await.unwrap().await.unwrap(), "Done.");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the judge denied both calls");

    let bodies = received_bodies(&server).await;
    let judge_requests: Vec<_> = bodies.iter().filter(|b| b.to_string().contains("Respond with exactly")).collect();
    assert_eq!(judge_requests.len(), 2, "one judge call per tool call");
    assert_eq!(judge_requests[0]["model"], "openai/gpt-4o-mini");
    let last = bodies.last().unwrap();
    let results: Vec<_> =
        last["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").cloned().collect();
    assert_eq!(
        results,
        vec![
            json!({"role": "tool", "tool_call_id": "call_etc", "content": "Steering denied: never delete system files."}),
            json!({"role": "tool", "tool_call_id": "call_tmp", "content": "Steering denied: never delete system files."}),
        ]
    );
}
