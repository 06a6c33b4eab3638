//! `PATCH /api/sessions/{key}` `{"title"}` (#33): renaming a session through the API, also while its turn runs;
//! the title shows in the list and the session; a bad title is a typed 400, and the route keeps the token rule and
//! the body limit of the others.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use noetic::agent::Runtime;
use noetic::model::ModelResponse;
use noetic::testing::{Gate, ScriptedModel};
use noetic_server::ServerConfig;
use serde_json::json;
use support::Running;

const LONG: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_renamed_through_the_api_while_its_turn_runs_shows_its_title_and_the_turn_finishes() {
    let gate = Gate::new();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "slow", json!({}))]), ModelResponse::text("done")]);
    let builder = Runtime::builder().model(Arc::new(model)).tool(gate.tool("slow").unwrap());
    let s = Running::start(builder, ServerConfig::default(), LONG).await;
    let mut events = s.events("k", 0, false).await;
    s.say("k", "go").await;
    gate.started().await;
    let (status, renamed) = s.patch("/api/sessions/k", json!({ "title": "  Release notes <b>draft</b> " })).await;
    assert_eq!(status, 200, "{renamed}");
    assert_eq!(renamed, json!({ "key": "k", "title": "Release notes <b>draft</b>" }));
    gate.release();
    events.until("turn_completed").await;
    let (_, session) = s.get("/api/sessions/k").await;
    assert_eq!(session["title"], "Release notes <b>draft</b>");
    let (_, list) = s.get("/api/sessions").await;
    assert_eq!(list["sessions"][0]["title"], "Release notes <b>draft</b>", "{list}");
    assert_eq!(list["sessions"][0]["key"], "k");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_title_is_a_400_saying_what_to_send_and_an_unknown_session_is_a_404() {
    let model = ScriptedModel::new([ModelResponse::text("hi")]);
    let s = Running::start(Runtime::builder().model(Arc::new(model)), ServerConfig::default(), LONG).await;
    let mut events = s.events("k", 0, false).await;
    s.say("k", "hello").await;
    events.until("turn_completed").await;
    for (body, says) in [
        (json!({ "title": "" }), "the title is empty"),
        (json!({ "title": "a\u{7}b" }), "control character U+0007"),
        (json!({ "title": "x".repeat(121) }), "at most 120"),
        (json!({ "title": 5 }), "send the new title as a string"),
        (json!({ "name": "x" }), "send the new title as a string"),
    ] {
        let (status, error) = s.patch("/api/sessions/k", body.clone()).await;
        assert_eq!((status, error["error"]["code"].clone()), (400, json!("invalid_title")), "{body}: {error}");
        assert!(error["error"]["message"].as_str().unwrap().contains(says), "{body}: {error}");
    }
    let (_, session) = s.get("/api/sessions/k").await;
    assert_eq!(session["title"], json!(null), "nothing was renamed");
    let (status, error) = s.patch("/api/sessions/nobody", json!({ "title": "x" })).await;
    assert_eq!((status, error["error"]["code"].clone()), (404, json!("no_such_session")), "{error}");
    let (_, list) = s.get("/api/sessions").await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1, "a rename creates no session: {list}");
    let huge = json!({ "title": "x", "padding": "x".repeat(300 * 1024) });
    let (status, _) = s.patch("/api/sessions/k", huge).await;
    assert_eq!(status, 413, "the body limit holds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renaming_a_session_needs_the_access_token() {
    let config = ServerConfig { token: Some("secret".to_owned()), ..ServerConfig::default() };
    let mut s = Running::start(Runtime::builder().model(Arc::new(ScriptedModel::new([]))), config, LONG).await;
    let token = s.token.take();
    let (status, error) = s.patch("/api/sessions/k", json!({ "title": "x" })).await;
    assert_eq!((status, error["error"]["code"].clone()), (401, json!("unauthorized")), "{error}");
    s.token = token;
    let (status, _) = s.patch("/api/sessions/k", json!({ "title": "x" })).await;
    assert_eq!(status, 404, "past the token: no such session yet");
}
