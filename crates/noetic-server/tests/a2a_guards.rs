//! The A2A endpoint behind the API's rules: the same token (the card, public, says which scheme), the same body
//! and message limits, typed errors — a refused or bad request is a JSON-RPC error whose `data.code` is the API's
//! error code. (The `Host` and cross-site checks cover it with every other route.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use noetic::agent::Runtime;
use noetic::model::ModelResponse;
use noetic::testing::ScriptedModel;
use noetic_server::ServerConfig;
use serde_json::{Value, json};
use support::Running;

const LONG: Duration = Duration::from_secs(300);

fn send(context: &str, text: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {
        "message": { "messageId": "m1", "role": "ROLE_USER", "contextId": context, "parts": [{ "text": text }] },
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_request_needs_the_access_token_like_the_api_and_the_public_card_names_the_bearer_scheme() {
    let model = ScriptedModel::new([ModelResponse::text("hello")]);
    let config = ServerConfig { token: Some("s3cret".into()), ..ServerConfig::default() };
    let s = Running::start(Runtime::builder().model(Arc::new(model)), config, LONG).await;
    let card: Value = s.client.get(s.url("/.well-known/agent-card.json")).send().await.unwrap().json().await.unwrap();
    assert_eq!(card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer");
    assert_eq!(card["securityRequirements"], json!([{ "schemes": { "bearer": { "list": [] } } }]));
    assert_eq!(card["supportedInterfaces"][0]["url"], s.url("/a2a"));
    let url = s.url("/a2a");
    let refused = s.client.post(&url).json(&send("c1", "hi")).send().await.unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    let wrong = s.client.post(&url).bearer_auth("guess").json(&send("c1", "hi")).send().await.unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    let answer: Value =
        s.client.post(&url).bearer_auth("s3cret").json(&send("c1", "hi")).send().await.unwrap().json().await.unwrap();
    assert_eq!(answer["id"], 7);
    let task = &answer["result"]["task"];
    assert_eq!((task["id"].clone(), task["contextId"].clone()), (json!("c1:1"), json!("c1")), "{answer}");
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "hello", "{answer}");
    assert_eq!(task["metadata"]["noetic"]["routed"], "started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_request_over_the_limits_unreadable_or_naming_nothing_gets_a_json_rpc_error_with_the_api_code() {
    let config = ServerConfig { max_body_bytes: 4096, max_message_chars: 100, ..ServerConfig::default() };
    let s = Running::start(Runtime::builder().model(Arc::new(ScriptedModel::new([]))), config, LONG).await;
    let url = s.url("/a2a");
    let error = |answer: Value| {
        (answer["error"]["code"].as_i64().unwrap(), answer["error"]["data"]["code"].as_str().unwrap().to_owned())
    };
    let big = s.client.post(&url).json(&send("c", &"x".repeat(8000))).send().await.unwrap();
    assert_eq!(big.status().as_u16(), 413);
    assert_eq!(error(big.json().await.unwrap()), (-32600, "body_too_large".to_owned()));
    let call = |body: Value| {
        let request = s.client.post(&url).json(&body).send();
        async move { error(request.await.unwrap().json().await.unwrap()) }
    };
    assert_eq!(call(send("c", &"x".repeat(101))).await, (-32602, "message_too_long".into()));
    assert_eq!(call(send("c", "  ")).await, (-32602, "empty_message".into()));
    assert_eq!(call(send("..", "hi")).await, (-32602, "invalid_context_id".into()));
    let file = json!({ "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": { "message": {
        "role": "ROLE_USER", "parts": [{ "url": "https://example.invalid/cat.png" }] } } });
    assert_eq!(call(file).await, (-32005, "unsupported_content".into()));
    let to_unknown = json!({ "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": { "message": {
        "role": "ROLE_USER", "taskId": "c:3", "parts": [{ "text": "hi" }] } } });
    assert_eq!(call(to_unknown).await, (-32001, "task_not_found".into()));
    let get = json!({ "jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": { "id": "not a task" } });
    assert_eq!(call(get).await, (-32001, "task_not_found".into()));
    let old = json!({ "jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {} });
    assert_eq!(call(old).await, (-32601, "method_not_found".into()));
    assert_eq!(call(json!({ "id": 1, "method": "GetTask" })).await, (-32600, "invalid_request".into()));
    let garbled = s.client.post(&url).header("Content-Type", "application/json").body("{\"jsonrpc\":").send();
    assert_eq!(error(garbled.await.unwrap().json().await.unwrap()), (-32700, "invalid_json".into()));
    // Nothing reached the session.
    let (_, session) = s.get("/api/sessions/c").await;
    assert_eq!((session["turns"].clone(), session["history"].clone()), (json!(0), json!([])));
}
