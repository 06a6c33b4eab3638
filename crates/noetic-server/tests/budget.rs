//! `PUT /api/sessions/{key}/budget` (#31 item 4): a session that reaches its budget is paused, a message sent to it
//! queues (and says why), and raising the limit through the API continues it with the queued messages; bad budgets
//! are 400 with a typed error, and the endpoint keeps the token rule and the body limit of the others.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use noetic::agent::Runtime;
use noetic::budget::{Budget, Limits};
use noetic::model::{ModelResponse, Usage};
use noetic::testing::{Counter, ScriptedModel};
use noetic_server::ServerConfig;
use serde_json::json;
use support::Running;

const LONG: Duration = Duration::from_secs(300);

fn usage() -> Usage {
    Usage { input_tokens: 100, output_tokens: 10, cached_tokens: 0, cost: Some(0.01) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_paused_over_its_budget_queues_messages_and_continues_when_the_api_raises_it() {
    let counter = Counter::new();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "work", json!({}))]).with_usage(usage()),
        ModelResponse::tool_calls([("c2", "work", json!({}))]).with_usage(usage()),
    ])
    .with_responder(|_| Ok(ModelResponse::text("done").with_usage(usage())));
    let budget = Budget::default().turn(Limits::default().tool_calls(1));
    let builder = Runtime::builder()
        .model(Arc::new(model.clone()))
        .tool(counter.tool("work", json!("ok")).unwrap())
        .budget(budget);
    let s = Running::start(builder, ServerConfig::default(), LONG).await;
    let mut events = s.events("b", 0, false).await;
    s.say("b", "go").await;
    let reached = events.until("budget_reached").await.pop().unwrap().data;
    assert_eq!((reached["scope"].clone(), reached["limit"].clone()), (json!("turn"), json!("tool_calls")));
    events.until("turn_failed").await;
    assert_eq!((model.calls(), counter.count()), (2, 1), "the second tool call did not run");

    let (status, session) = s.get("/api/sessions/b").await;
    assert_eq!(status, 200);
    assert_eq!(session["budget"]["paused"]["limit"], "tool_calls", "{session}");
    assert_eq!(session["budget"]["spent"]["tool_calls"], 1);
    let (status, queued) = s.say("b", "and now?").await;
    assert_eq!((status, queued["routed"].clone()), (202, json!("paused")), "{queued}");
    assert!(queued["message"].as_str().unwrap().contains("paused over its budget"), "{queued}");
    assert_eq!(model.calls(), 2, "nothing ran in the paused session");

    let (status, raised) =
        s.put("/api/sessions/b/budget", json!({ "turn": { "tool_calls": 5, "wall_time": "10m" } })).await;
    assert_eq!(status, 200, "{raised}");
    assert_eq!((raised["continued"].clone(), raised["paused"].clone()), (json!(true), json!(null)), "{raised}");
    assert_eq!(raised["budget"], json!({ "turn": { "tool_calls": 5, "wall_time": "10m" } }));
    events.until("turn_completed").await;
    let (_, session) = s.get("/api/sessions/b").await;
    let last = session["history"].as_array().unwrap().last().cloned().unwrap();
    assert!(last.to_string().contains("done"), "{last}");
    let (status, got) = s.get("/api/sessions/b/budget").await;
    assert_eq!((status, got["budget"]["turn"]["tool_calls"].clone()), (200, json!(5)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_budget_is_a_400_naming_the_limit_and_what_to_do() {
    let model = ScriptedModel::new([]);
    let s = Running::start(Runtime::builder().model(Arc::new(model)), ServerConfig::default(), LONG).await;
    for (body, says) in [
        (json!({ "session": { "cost": 0 } }), "session.cost = 0 must be a positive number"),
        (json!({ "turn": { "tool_calls": -3 } }), "turn.tool_calls = -3 must be a positive number"),
        (json!({ "turn": { "tokens": 5 } }), "'turn.tokens' is not a budget limit; use one of tokens_in"),
        (json!({ "turn": { "wall_time": "soon" } }), "turn.wall_time = soon is not a duration"),
        (json!({ "forever": {} }), "'forever' is not a part of a budget"),
        (json!({ "turn": 5 }), "the turn budget must be an object of limits"),
    ] {
        let (status, error) = s.put("/api/sessions/k/budget", body.clone()).await;
        assert_eq!((status, error["error"]["code"].clone()), (400, json!("invalid_budget")), "{body}: {error}");
        assert!(error["error"]["message"].as_str().unwrap().contains(says), "{body}: {error}");
    }
    let huge = json!({ "turn": { "tool_calls": 1 }, "padding": "x".repeat(300 * 1024) });
    let (status, _) = s.put("/api/sessions/k/budget", huge).await;
    assert_eq!(status, 413, "the body limit holds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setting_a_budget_needs_the_access_token() {
    let config = ServerConfig { token: Some("secret".to_owned()), ..ServerConfig::default() };
    let mut s = Running::start(Runtime::builder().model(Arc::new(ScriptedModel::new([]))), config, LONG).await;
    let token = s.token.take();
    let (status, error) = s.put("/api/sessions/k/budget", json!({ "turn": { "tool_calls": 1 } })).await;
    assert_eq!((status, error["error"]["code"].clone()), (401, json!("unauthorized")), "{error}");
    s.token = token;
    let (status, _) = s.put("/api/sessions/k/budget", json!({ "turn": { "tool_calls": 1 } })).await;
    assert_eq!(status, 200);
}
