//! The AG-UI endpoint behind the API's rules: the same token, the same body and message limits, typed errors —
//! a refused request is the API's HTTP error, a bad input is one `RUN_ERROR` whose `code` is the API's error code.
//! (The `Host` and cross-site checks cover it with every other route: `tests/host_check.rs`, `tests/cross_site.rs`.)
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

fn input(thread: &str, text: &str) -> Value {
    json!({ "threadId": thread, "runId": "r1", "messages": [{ "id": "u1", "role": "user", "content": text }] })
}

/// The events of an AG-UI run's response (its status must be 200).
async fn events(response: reqwest::Response) -> Vec<Value> {
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    text.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agui_run_needs_the_access_token_like_the_api() {
    let model = ScriptedModel::new([ModelResponse::text("hello")]);
    let config = ServerConfig { token: Some("s3cret".into()), ..ServerConfig::default() };
    let s = Running::start(Runtime::builder().model(Arc::new(model)), config, LONG).await;
    let url = s.url("/ag-ui/default");
    let refused = s.client.post(&url).json(&input("t1", "hi")).send().await.unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    assert_eq!(refused.json::<Value>().await.unwrap()["error"]["code"], "unauthorized");
    let wrong = s.client.post(&url).bearer_auth("guess").json(&input("t1", "hi")).send().await.unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    let run = events(s.client.post(&url).bearer_auth("s3cret").json(&input("t1", "hi")).send().await.unwrap()).await;
    let kinds: Vec<&str> = run.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"RUN_STARTED"));
    assert_eq!(kinds.last(), Some(&"RUN_FINISHED"), "{run:?}");
    assert!(run.iter().any(|e| e["type"] == "TEXT_MESSAGE_CONTENT" && e["delta"] == "hello"), "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agui_input_over_the_body_or_message_limit_or_unreadable_gets_run_error_with_the_api_code() {
    let config = ServerConfig { max_body_bytes: 4096, max_message_chars: 100, ..ServerConfig::default() };
    let s = Running::start(Runtime::builder().model(Arc::new(ScriptedModel::new([]))), config, LONG).await;
    let url = s.url("/ag-ui/default");
    let run_error = |events: Vec<Value>| {
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0]["type"], "RUN_ERROR");
        assert!(!events[0]["message"].as_str().unwrap().is_empty());
        events[0]["code"].as_str().unwrap().to_owned()
    };
    let big = s.client.post(&url).json(&input("t", &"x".repeat(8000))).send().await.unwrap();
    assert_eq!(run_error(events(big).await), "body_too_large");
    let long = s.client.post(&url).json(&input("t", &"x".repeat(101))).send().await.unwrap();
    assert_eq!(run_error(events(long).await), "message_too_long");
    let garbled = s.client.post(&url).header("Content-Type", "application/json").body("{\"threadId\":").send();
    assert_eq!(run_error(events(garbled.await.unwrap()).await), "invalid_json");
    let dots = s.client.post(&url).json(&input("..", "hi")).send().await.unwrap();
    assert_eq!(run_error(events(dots).await), "invalid_thread_id");
    let resume = json!({ "threadId": "t", "runId": "r", "messages": [], "resume": [{ "interruptId": "nope", "status": "resolved", "payload": { "approved": true } }] });
    let unknown = s.client.post(&url).json(&resume).send().await.unwrap();
    assert_eq!(run_error(events(unknown).await), "unknown_interrupt");
    // Nothing reached the session.
    let (_, session) = s.get("/api/sessions/t").await;
    assert_eq!((session["turns"].clone(), session["history"].clone()), (json!(0), json!([])));
}
